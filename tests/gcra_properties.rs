//! Property tests: the limiters against a plain reference model, and the guarantees GCRA makes.

use std::time::Duration;

use flowguard::gcra::{GcraError, KeyedRateLimiter, ManualClock, Quota, RateLimiter};
use proptest::prelude::*;

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

fn quotas() -> impl Strategy<Value = Quota> {
    (
        1u32..50,
        prop_oneof![Just(1u64), Just(60), Just(3600), 1u64..10],
        1u32..20,
    )
        .prop_map(|(rate, secs, burst)| {
            Quota::new(rate, Duration::from_secs(secs))
                .unwrap()
                .with_burst(burst)
                .unwrap()
        })
}

/// (time step in ms, cost) pairs; costs sometimes exceed the burst on purpose.
fn traces() -> impl Strategy<Value = Vec<(u64, u32)>> {
    prop::collection::vec(
        (prop_oneof![Just(0u64), 0u64..50, 0u64..5000], 0u32..25),
        1..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn limiters_decide_like_the_reference_model(quota in quotas(), trace in traces()) {
        let clock = ManualClock::new();
        let single = RateLimiter::with_clock(quota, clock.clone());
        let keyed = KeyedRateLimiter::builder(quota).clock(clock.clone()).build::<u8>().unwrap();
        let mut model = Model::new(&quota);
        let mut now = 0u128;
        for (step, cost) in trace {
            clock.advance(Duration::from_millis(step));
            now += u128::from(step) * 1_000_000;
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
                            remaining: u128::from(d.remaining),
                            retry_after: d.retry_after.map(|r| r.as_nanos()),
                            reset_after: d.reset_after.as_nanos(),
                        };
                        prop_assert_eq!(e, &got);
                    }
                    (e, g) => prop_assert!(false, "model {:?} vs limiter {:?}", e, g),
                }
            }
        }
    }

    #[test]
    fn no_window_admits_more_than_burst_plus_elapsed_over_interval(quota in quotas(), trace in traces()) {
        let clock = ManualClock::new();
        let limiter = RateLimiter::with_clock(quota, clock.clone());
        let mut admitted: Vec<(u128, u128)> = vec![];
        for (step, cost) in trace {
            clock.advance(Duration::from_millis(step));
            if let Ok(d) = limiter.check_n(cost)
                && d.allowed
                && cost > 0
            {
                admitted.push((clock.elapsed().as_nanos(), u128::from(cost)));
            }
        }
        // Bound against the *nominal* interval period/rate (exact rational arithmetic, no slack).
        let (rate, period, b) = (u128::from(quota.rate()), quota.period().as_nanos(), u128::from(quota.burst()));
        for i in 0..admitted.len() {
            let mut tokens = 0;
            for j in i..admitted.len() {
                tokens += admitted[j].1;
                let span = admitted[j].0 - admitted[i].0;
                // tokens <= B + span / (period / rate)  <=>  tokens * period <= B * period + span * rate
                prop_assert!(
                    tokens * period <= b * period + span * rate,
                    "{} tokens in {} ns with quota {:?}", tokens, span, quota
                );
            }
        }
    }

    #[test]
    fn a_client_at_exactly_the_rate_is_never_denied(quota in quotas(), offset_ms in 0u64..10_000, n in 1usize..500) {
        let clock = ManualClock::new();
        // The smallest burst that can keep up (see `tolerance_for_a_clock_of_whole_nanoseconds`).
        let burst = if quota.emission_interval_exact().1 == 1 { 1 } else { 2 };
        let limiter = RateLimiter::with_clock(quota.with_burst(burst).unwrap(), clock.clone());
        clock.advance(Duration::from_millis(offset_ms));
        let start = clock.elapsed().as_nanos();
        let (rate, period) = (u128::from(quota.rate()), quota.period().as_nanos());
        for k in 0..n as u128 {
            // The k-th request at start + k * period / rate: the first nanosecond not before it.
            clock.set(Duration::from_nanos((start + (k * period).div_ceil(rate)) as u64));
            prop_assert!(limiter.check().unwrap().allowed, "request {} denied", k);
        }
    }
}

/// A greedy client over a simulated day admits exactly `B + floor(t / T)` with the nominal `T`:
/// `T` is carried exactly, so nothing accumulates into a drift.
fn greedy_day(quota: Quota) -> (u128, u128) {
    let clock = ManualClock::new();
    let limiter = RateLimiter::with_clock(quota, clock.clone());
    let day = Duration::from_secs(86_400);
    let mut admitted = 0u128;
    let mut steady_denials = 0u32;
    while clock.elapsed() <= day {
        let d = limiter.check().unwrap();
        if d.allowed {
            admitted += 1;
        } else {
            // Come back exactly when told: never earlier, so every retry is allowed.
            clock.advance(d.retry_after.unwrap());
            steady_denials += 1;
        }
    }
    assert!(steady_denials > 0);
    let nominal = u128::from(quota.burst())
        + day.as_nanos() * u128::from(quota.rate()) / quota.period().as_nanos();
    (admitted, nominal)
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
        let limiter = RateLimiter::with_clock(quota.with_burst(2).unwrap(), clock.clone());
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
    let strict = RateLimiter::with_clock(quota.with_burst(1).unwrap(), clock.clone());
    let tolerant = RateLimiter::with_clock(quota.with_burst(2).unwrap(), clock.clone());
    let mut strict_denied = 0;
    for k in 0..300 {
        clock.set(at(k));
        assert!(tolerant.check().unwrap().allowed, "burst 2: request {k}");
        strict_denied += u32::from(!strict.check().unwrap().allowed);
    }
    assert!(strict_denied > 0);
    // A burst-1 client that waits ceil(T) between requests is never denied.
    let clock = ManualClock::new();
    let strict = RateLimiter::with_clock(quota.with_burst(1).unwrap(), clock.clone());
    for k in 0..300 {
        assert!(strict.check().unwrap().allowed, "spaced request {k}");
        clock.advance(quota.emission_interval());
    }
}
