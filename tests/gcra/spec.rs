//! The GCRA contract (see the `Gcra` docs and docs/quotas.md), as tables of requests and the decisions they must get.

use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::gcra::{GcraError, KeyedRateLimiter, Quota, RateLimiter};

const MS: Duration = Duration::from_millis(1);

/// One request in a table: advance the clock, ask for `cost`, expect a decision.
struct Row {
    advance: Duration,
    cost: u32,
    allowed: bool,
    remaining: u32,
    reset_after: Duration,
    retry_after: Option<Duration>,
}

fn row(
    advance_ms: u64,
    cost: u32,
    allowed: bool,
    remaining: u32,
    reset_ms: u64,
    retry_ms: Option<u64>,
) -> Row {
    Row {
        advance: MS * advance_ms as u32,
        cost,
        allowed,
        remaining,
        reset_after: MS * reset_ms as u32,
        retry_after: retry_ms.map(|r| MS * r as u32),
    }
}

fn run_table(quota: Quota, rows: &[Row]) {
    // The same table must hold for the single-key and the keyed limiter.
    let clock = ManualClock::new();
    let single = RateLimiter::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let keyed = KeyedRateLimiter::<String>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    for (i, r) in rows.iter().enumerate() {
        clock.advance(r.advance);
        for (name, d) in [
            ("single", single.check_n(r.cost).unwrap()),
            ("keyed", keyed.check_key_n("k", r.cost).unwrap()),
        ] {
            assert_eq!(d.allowed, r.allowed, "{name} row {i}: allowed");
            assert_eq!(d.limit, quota.burst(), "{name} row {i}: limit");
            assert_eq!(
                d.remaining(),
                Some(r.remaining),
                "{name} row {i}: remaining"
            );
            assert_eq!(
                d.reset_after(),
                Some(r.reset_after),
                "{name} row {i}: reset_after"
            );
            assert_eq!(d.retry_after, r.retry_after, "{name} row {i}: retry_after");
            assert_eq!(d.degraded, None);
        }
    }
}

#[test]
fn ten_per_second_burst_ten_spends_costs_exactly() {
    run_table(
        Quota::per_second(10).unwrap().with_burst(10).unwrap(),
        &[
            row(0, 1, true, 9, 100, None),
            row(0, 2, true, 7, 300, None),
            row(0, 7, true, 0, 1000, None),
            // Empty: one more token is 100 ms away.
            row(0, 1, false, 0, 1000, Some(100)),
        ],
    );
}

#[test]
fn five_per_second_refills_after_two_seconds() {
    let mut rows = vec![];
    for i in 0..5 {
        rows.push(row(0, 1, true, 4 - i, 200 * (i as u64 + 1), None));
    }
    rows.push(row(0, 1, false, 0, 1000, Some(200)));
    // Two seconds later the whole burst is back: exactly five more, then denied.
    for i in 0..5 {
        rows.push(row(
            if i == 0 { 2000 } else { 0 },
            1,
            true,
            4 - i,
            200 * (i as u64 + 1),
            None,
        ));
    }
    rows.push(row(0, 1, false, 0, 1000, Some(200)));
    run_table(Quota::per_second(5).unwrap(), &rows);
}

#[test]
fn a_batch_needs_all_its_tokens() {
    // With one token left, a cost-2 request is denied (and told when 2 will be there); cost 1 passes.
    run_table(
        Quota::per_second(10).unwrap(),
        &[
            row(0, 9, true, 1, 900, None),
            row(0, 2, false, 1, 900, Some(100)),
            row(0, 1, true, 0, 1000, None),
        ],
    );
}

#[test]
fn cost_zero_peeks_without_spending() {
    run_table(
        Quota::per_second(10).unwrap(),
        &[
            row(0, 0, true, 10, 0, None),
            row(0, 4, true, 6, 400, None),
            row(0, 0, true, 6, 400, None),
            row(0, 0, true, 6, 400, None),
        ],
    );
}

#[test]
fn cost_above_burst_is_insufficient_capacity_not_retry_later() {
    let limiter = RateLimiter::builder(Quota::per_second(5).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(
        limiter.check_n(6),
        Err(GcraError::InsufficientCapacity { cost: 6, burst: 5 })
    );
    // Nothing was spent.
    assert_eq!(limiter.check_n(5).unwrap().remaining(), Some(0));
    let keyed = KeyedRateLimiter::<u32>::builder(Quota::per_second(5).unwrap())
        .build()
        .unwrap();
    assert_eq!(
        keyed.check_key_n(&1, 6),
        Err(GcraError::InsufficientCapacity { cost: 6, burst: 5 })
    );
    assert!(
        keyed.is_empty(),
        "an impossible request must not create a key"
    );
}

#[test]
fn retry_after_rounds_up_and_waiting_that_long_is_enough() {
    // 7 per minute: T = 8.571428571 s. After the burst, the wait is not a whole number of seconds.
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder(Quota::per_minute(7).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    for _ in 0..7 {
        assert!(limiter.check().unwrap().allowed);
    }
    clock.advance(Duration::from_millis(1234));
    let denied = limiter.check().unwrap();
    assert!(!denied.allowed);
    let secs = denied.retry_after_secs().unwrap();
    assert_eq!(secs, 8, "ceil(8.571428571 - 1.234) = 8");
    clock.advance(Duration::from_secs(secs));
    assert!(
        limiter.check().unwrap().allowed,
        "a client that waits Retry-After seconds must be allowed"
    );
}

#[test]
fn denied_requests_change_nothing() {
    let clock = ManualClock::new();
    let limiter = RateLimiter::builder(Quota::per_second(2).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let _ = limiter.check_n(2).unwrap();
    for _ in 0..100 {
        assert!(!limiter.check().unwrap().allowed);
    }
    clock.advance(Duration::from_millis(500));
    assert!(
        limiter.check().unwrap().allowed,
        "hammering while denied must not push the TAT"
    );
}
