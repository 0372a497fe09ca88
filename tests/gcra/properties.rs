//! Property tests: the limiters against a plain reference model, and the guarantees GCRA makes.

use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::gcra::{GcraError, KeyedRateLimiter, Quota, RateLimiter};
use proptest::prelude::*;

use crate::support::window;

/// The textbook GCRA, written for clarity: u128 time scaled by the rate (so `T = period` exactly,
/// whatever `period / rate` is in nanoseconds), the TAT as an option, no shortcuts.
struct Model {
    tat: Option<u128>,
    /// Scaled time units per nanosecond: the rate.
    rate: u128,
    t: u128,
    b: u128,
}

#[derive(Debug, PartialEq)]
struct Expect {
    allowed: bool,
    remaining: u128,
    /// In nanoseconds, rounded up.
    retry_after: Option<u128>,
    /// In nanoseconds, rounded up.
    reset_after: u128,
}

impl Model {
    fn new(q: &Quota) -> Model {
        Model {
            tat: None,
            rate: u128::from(q.rate()),
            t: q.period().as_nanos(),
            b: u128::from(q.burst()),
        }
    }

    /// Decides `cost` at `now_ns`.
    fn check(&mut self, now_ns: u128, cost: u128) -> Result<Expect, ()> {
        if cost > self.b {
            return Err(());
        }
        let now = now_ns * self.rate;
        let tat = match self.tat {
            Some(tat) if tat > now => tat,
            _ => now,
        };
        let horizon = now + self.b * self.t; // the latest TAT the burst allows
        let wanted = tat + cost * self.t;
        let ns = |scaled: u128| scaled.div_ceil(self.rate);
        if wanted <= horizon {
            if cost > 0 {
                self.tat = Some(wanted);
            }
            Ok(Expect {
                allowed: true,
                remaining: (horizon - wanted) / self.t,
                retry_after: None,
                reset_after: ns(wanted - now),
            })
        } else {
            Ok(Expect {
                allowed: false,
                remaining: (horizon - tat) / self.t,
                retry_after: Some(ns(wanted - horizon)),
                reset_after: ns(tat - now),
            })
        }
    }
}

/// Quotas of every shape: the usual (a few per second, minute, hour), rates up to 10^6 per second,
/// and periods of arbitrary nanoseconds, so that `period / rate` is rarely a whole number of ns.
fn quotas() -> impl Strategy<Value = Quota> {
    let rate = prop_oneof![1u32..50, 1u32..=1_000_000, Just(999_999), Just(3), Just(7)];
    let period = prop_oneof![
        prop_oneof![Just(1u64), Just(60), Just(3600), 1u64..10].prop_map(Duration::from_secs),
        (1u64..=10_000_000_000).prop_map(Duration::from_nanos),
        (1u64..=100_000).prop_map(Duration::from_micros),
    ];
    let burst = prop_oneof![1u32..20, 1u32..=10_000];
    (rate, period, burst).prop_filter_map("a valid quota", |(rate, period, burst)| {
        Quota::new(rate, period)
            .and_then(|q| q.with_burst(burst))
            .ok()
    })
}

/// A quota and (time step in ns, cost) pairs scaled to it: steps from nothing to two burst
/// windows, costs sometimes above the burst on purpose.
fn cases() -> impl Strategy<Value = (Quota, Vec<(u64, u32)>)> {
    quotas().prop_flat_map(|quota| {
        let t = quota.emission_interval().as_nanos() as u64;
        let window = quota.burst_window().as_nanos() as u64;
        let burst = quota.burst();
        let step = prop_oneof![
            Just(0u64),
            0..=t,
            0..=t.saturating_mul(3),
            0..=window.saturating_mul(2)
        ];
        let cost = prop_oneof![0u32..=2, 0..=burst.saturating_add(1)];
        (Just(quota), prop::collection::vec((step, cost), 1..200))
    })
}

proptest! {
    // A fixed seed: the same 256 cases on every run.
    #![proptest_config(ProptestConfig {
        cases: 256,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x6c72_6167),
        ..ProptestConfig::default()
    })]

    #[test]
    fn limiters_decide_like_the_reference_model((quota, trace) in cases()) {
        let clock = ManualClock::new();
        let single = RateLimiter::builder(quota).clock(clock.clone()).build().unwrap();
        let keyed = KeyedRateLimiter::<u8>::builder(quota).clock(clock.clone()).build().unwrap();
        let mut model = Model::new(&quota);
        let mut now = 0u128;
        for (step, cost) in trace {
            clock.advance(Duration::from_nanos(step));
            now += u128::from(step);
            let expected = model.check(now, u128::from(cost));
            for got in [single.check_n(cost), keyed.check_key_n(&7, cost)] {
                match (&expected, got) {
                    (Err(()), Err(GcraError::InsufficientCapacity { cost: c, burst })) => {
                        prop_assert_eq!(c, cost);
                        prop_assert_eq!(burst, quota.burst());
                    }
                    (Ok(e), Ok(d)) => {
                        let got = Expect {
                            allowed: d.allowed,
                            remaining: u128::from(d.remaining().unwrap()),
                            retry_after: d.retry_after.map(|r| r.as_nanos()),
                            reset_after: d.reset_after().unwrap().as_nanos(),
                        };
                        prop_assert_eq!(e, &got);
                    }
                    (e, g) => prop_assert!(false, "model {:?} vs limiter {:?}", e, g),
                }
            }
        }
    }

    #[test]
    fn no_window_admits_more_than_burst_plus_elapsed_over_interval((quota, trace) in cases()) {
        let clock = ManualClock::new();
        let single = RateLimiter::builder(quota).clock(clock.clone()).build().unwrap();
        let keyed = KeyedRateLimiter::<u8>::builder(quota).clock(clock.clone()).build().unwrap();
        let mut admitted: Vec<(u128, u128)> = vec![];
        for (step, cost) in trace {
            clock.advance(Duration::from_nanos(step));
            let (a, b) = (single.check_n(cost), keyed.check_key_n(&1, cost));
            prop_assert_eq!(&a, &b);
            if let Ok(d) = a
                && d.allowed
                && cost > 0
            {
                admitted.push((clock.elapsed().as_nanos(), u128::from(cost)));
            }
        }
        // Bound against the *nominal* interval period/rate (exact rational arithmetic, no slack).
        window::check_windows(&quota, &admitted).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn a_client_at_exactly_the_rate_is_never_denied(quota in quotas(), offset_ms in 0u64..10_000, n in 1usize..500) {
        let clock = ManualClock::new();
        // The smallest burst that can keep up (see `tolerance_for_a_clock_of_whole_nanoseconds`).
        let burst = if quota.emission_interval_exact().1 == 1 { 1 } else { 2 };
        let quota = quota.with_burst(burst).unwrap();
        let single = RateLimiter::builder(quota).clock(clock.clone()).build().unwrap();
        let keyed = KeyedRateLimiter::<u8>::builder(quota).clock(clock.clone()).build().unwrap();
        clock.advance(Duration::from_millis(offset_ms));
        let start = clock.elapsed().as_nanos();
        let (rate, period) = (u128::from(quota.rate()), quota.period().as_nanos());
        for k in 0..n as u128 {
            // The k-th request at start + k * period / rate: the first nanosecond not before it.
            clock.set(Duration::from_nanos((start + (k * period).div_ceil(rate)) as u64));
            prop_assert!(single.check().unwrap().allowed, "request {} denied", k);
            prop_assert!(keyed.check_key(&3).unwrap().allowed, "keyed: request {} denied", k);
        }
    }
}

/// A greedy client over a simulated day admits exactly `B + floor(t / T)` with the nominal `T`:
/// `T` is carried exactly, so nothing accumulates into a drift.
fn greedy_day(quota: Quota) -> (u128, u128) {
    greedy(quota, Duration::from_secs(86_400), false)
}

#[test]
fn no_drift_over_a_day_at_three_per_second() {
    let (admitted, nominal) = greedy_day(Quota::per_second(3).unwrap());
    assert_eq!(nominal, 3 + 3 * 86_400);
    assert_eq!(admitted, nominal);
}

#[test]
fn no_drift_over_a_day_at_seven_per_minute() {
    let (admitted, nominal) = greedy_day(Quota::per_minute(7).unwrap());
    assert_eq!(nominal, 7 + 7 * 1440);
    assert_eq!(admitted, nominal);
}

#[test]
fn a_steady_client_is_never_denied_for_a_day() {
    for quota in [Quota::per_second(3).unwrap(), Quota::per_minute(7).unwrap()] {
        let clock = ManualClock::new();
        let limiter = RateLimiter::builder(quota.with_burst(2).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
        let (rate, period) = (u128::from(quota.rate()), quota.period().as_nanos());
        let n = 86_400 * 1_000_000_000 * rate / period;
        for k in 0..n {
            // At k * period / rate, rounded up to the clock's nanosecond (never early).
            clock.set(Duration::from_nanos((k * period).div_ceil(rate) as u64));
            assert!(
                limiter.check().unwrap().allowed,
                "{quota:?}: request {k} of {n} denied"
            );
        }
    }
}

/// A clock of whole nanoseconds cannot send at exactly 3 per second: the k-th request's time
/// `k * 10^9 / 3` ns falls between two ticks. Sent at the first nanosecond not before it, two
/// consecutive requests can be 333,333,333 ns apart, less than `T`, so with burst 1 the second
/// must be denied (admitting it would put 2 tokens in a window where `B + t/T < 2`). Burst 2 gives
/// the tolerance `T` that absorbs this; a burst-1 client must space requests by `ceil(T)`.
#[test]
fn tolerance_for_a_clock_of_whole_nanoseconds() {
    let quota = Quota::per_second(3).unwrap();
    let at = |k: u64| Duration::from_nanos((k * 1_000_000_000).div_ceil(3));
    let clock = ManualClock::new();
    let strict = RateLimiter::builder(quota.with_burst(1).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let tolerant = RateLimiter::builder(quota.with_burst(2).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut strict_denied = 0;
    for k in 0..300 {
        clock.set(at(k));
        assert!(tolerant.check().unwrap().allowed, "burst 2: request {k}");
        strict_denied += u32::from(!strict.check().unwrap().allowed);
    }
    assert!(strict_denied > 0);
    // A burst-1 client that waits ceil(T) between requests is never denied.
    let clock = ManualClock::new();
    let strict = RateLimiter::builder(quota.with_burst(1).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    for k in 0..300 {
        assert!(strict.check().unwrap().allowed, "spaced request {k}");
        clock.advance(quota.emission_interval());
    }
}

/// Counts what a greedy client gets over `span`: it asks for one token, and when denied comes back
/// exactly when told. Returns (admitted, `B + floor(span / T)` with the nominal `T`).
fn greedy(quota: Quota, span: Duration, keyed: bool) -> (u128, u128) {
    let clock = ManualClock::new();
    let single = RateLimiter::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let many = KeyedRateLimiter::<u8>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut admitted = 0u128;
    while clock.elapsed() <= span {
        let d = if keyed {
            many.check_key(&0).unwrap()
        } else {
            single.check().unwrap()
        };
        if d.allowed {
            admitted += 1;
        } else {
            clock.advance(d.retry_after.unwrap());
        }
    }
    let nominal = u128::from(quota.burst())
        + span.as_nanos() * u128::from(quota.rate()) / quota.period().as_nanos();
    (admitted, nominal)
}

/// 9,999 per 10 ms is T = 1,000.1 ns. With T rounded down to 1,000 ns a greedy client got 10,000
/// tokens per 10 ms instead of 9,999: one too many every 10 ms.
#[test]
fn a_rate_that_does_not_divide_a_period_into_nanoseconds_is_not_exceeded() {
    let quota = Quota::new(9_999, Duration::from_millis(10))
        .unwrap()
        .with_burst(10)
        .unwrap();
    for keyed in [false, true] {
        let (admitted, nominal) = greedy(quota, Duration::from_millis(30), keyed);
        assert_eq!(nominal, 10 + 3 * 9_999);
        assert_eq!(admitted, nominal, "keyed: {keyed}");
    }
}

/// 3 per second with a burst of a million: the window is 333,333.33 s. Spending the whole burst at
/// 0 and again after 333,333.333 s (1 ns less than a million intervals) must be denied: it would
/// put 2,000,000 tokens in a window that allows 1,999,999. Rounding T down to 333,333,333 ns
/// (and the window with it) let it through.
#[test]
fn a_large_burst_gains_no_token_over_days() {
    let quota = Quota::per_second(3).unwrap().with_burst(1_000_000).unwrap();
    let clock = ManualClock::new();
    let single = RateLimiter::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    let keyed = KeyedRateLimiter::<u8>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(single.check_n(1_000_000).unwrap().allowed);
    assert!(keyed.check_key_n(&0, 1_000_000).unwrap().allowed);
    clock.set(Duration::from_nanos(333_333_333_000_000));
    for d in [single.check_n(1_000_000), keyed.check_key_n(&0, 1_000_000)] {
        let d = d.unwrap();
        assert!(!d.allowed, "{d:?}");
        // The last third of a nanosecond is rounded up.
        assert_eq!(d.retry_after, Some(Duration::from_nanos(333_334)));
        assert_eq!(d.remaining(), Some(999_999));
    }
    clock.advance(Duration::from_nanos(333_334));
    assert!(single.check_n(1_000_000).unwrap().allowed);
    assert!(keyed.check_key_n(&0, 1_000_000).unwrap().allowed);
}
