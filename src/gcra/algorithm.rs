//! [`Gcra`]: the Generic Cell Rate Algorithm as a pure function of (stored TAT, now, cost).
//!
//! Nothing here reads a clock or touches storage; every store (in memory, Redis, two-tier)
//! feeds it the stored Theoretical Arrival Time and the current time, and stores what it returns.

use std::time::Duration;

use super::decision::Decision;
use super::error::GcraError;
use super::quota::{Quota, QuotaError};

/// The GCRA rule for one quota, in integer ticks of a fixed resolution (nanoseconds by default).
///
/// With emission interval `T`, burst `B` and a request of cost `n` at `now` against stored `tat`
/// (a stored value below `now`, including 0 for an absent key, means "idle: `tat = now`"):
///
/// * `n > B` is [`GcraError::InsufficientCapacity`]: it can never be allowed.
/// * `n == 0` is a peek: nothing changes.
/// * `tat' = max(tat, now) + n*T`; allowed iff `tat' - now <= B*T`, and then `tat'` is stored.
///   A denied request changes nothing.
///
/// ```
/// use flowguard::gcra::{Gcra, Quota};
/// use std::time::Duration;
///
/// let gcra = Gcra::new(&Quota::per_second(10)?);      // T = 100 ms, B = 10, ticks are ns
/// let step = gcra.decide(0, 0, 1)?;                     // empty key at t = 0
/// assert!(step.decision.allowed);
/// assert_eq!(step.decision.remaining, 9);
/// assert_eq!(step.new_tat, Some(100_000_000));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    interval: u64,
    window: u64,
    burst: u32,
    tick_ns: u64,
    /// `floor((2^64 - 1) / interval)`: divides by the interval with one widening multiplication.
    reciprocal: u64,
}

/// Whether a request fits, before the decision is spelled out (see [`Gcra::verdict`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verdict {
    /// The request fits in the burst window.
    pub(crate) allowed: bool,
    /// `max(tat, now)`: the TAT before the request.
    pub(crate) base: u64,
    /// `base + cost * T`: the TAT if the request is granted.
    pub(crate) candidate: u64,
}

/// What [`Gcra::decide`] returns: the decision, and the TAT to store if anything changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The decision to report.
    pub decision: Decision,
    /// `Some(tat')` when tokens were spent and the new TAT must be stored; `None` when nothing changes.
    pub new_tat: Option<u64>,
}

impl Gcra {
    /// The rule for `quota` with nanosecond ticks (the in-memory stores' resolution).
    pub fn new(quota: &Quota) -> Gcra {
        Gcra::from_ticks(quota.interval_nanos(), quota.burst(), 1)
    }

    /// The rule for `quota` with ticks of `tick` (e.g. one microsecond for the Redis store, whose
    /// server clock has microsecond resolution). The emission interval is rounded down to whole ticks;
    /// an interval shorter than one tick is [`QuotaError::IntervalTooShort`].
    pub fn with_resolution(quota: &Quota, tick: Duration) -> Result<Gcra, QuotaError> {
        let tick_ns = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        let interval = quota.interval_nanos() / tick_ns;
        if interval == 0 {
            return Err(QuotaError::IntervalTooShort {
                rate: quota.rate(),
                period: quota.period(),
                resolution: tick,
            });
        }
        Ok(Gcra::from_ticks(interval, quota.burst(), tick_ns))
    }

    fn from_ticks(interval: u64, burst: u32, tick_ns: u64) -> Gcra {
        // A valid Quota guarantees interval >= 1 and interval * burst <= MAX_WINDOW.
        let window = interval.saturating_mul(u64::from(burst));
        Gcra {
            interval,
            window,
            burst,
            tick_ns,
            reciprocal: u64::MAX / interval,
        }
    }

    /// The emission interval `T` in ticks.
    pub fn interval_ticks(&self) -> u64 {
        self.interval
    }

    /// The burst window `B*T` in ticks.
    pub fn window_ticks(&self) -> u64 {
        self.window
    }

    /// The burst `B`.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The length of one tick.
    pub fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_ns)
    }

    /// Decides a request of `cost` tokens at `now` against the stored `tat` (both in ticks).
    #[inline]
    pub fn decide(&self, tat: u64, now: u64, cost: u32) -> Result<Step, GcraError> {
        let verdict = self.verdict(tat, now, cost)?;
        let new_tat = (verdict.allowed && cost > 0).then_some(verdict.candidate);
        Ok(Step {
            decision: self.report(verdict, now),
            new_tat,
        })
    }

    /// The decision alone: whether the request fits, and the TATs involved. Cheap, so a
    /// compare-and-swap loop can retry it without building a [`Decision`] each time.
    #[inline]
    pub(crate) fn verdict(&self, tat: u64, now: u64, cost: u32) -> Result<Verdict, GcraError> {
        if cost > self.burst {
            return Err(GcraError::InsufficientCapacity {
                cost,
                burst: self.burst,
            });
        }
        let base = tat.max(now);
        let candidate = base.saturating_add(u64::from(cost) * self.interval);
        Ok(Verdict {
            allowed: candidate - now <= self.window,
            base,
            candidate,
        })
    }

    /// The full [`Decision`] for a verdict reached at `now`.
    #[inline]
    pub(crate) fn report(&self, v: Verdict, now: u64) -> Decision {
        let (tat_after, retry_after) = if v.allowed {
            (v.candidate, None)
        } else {
            (v.base, Some(self.ticks(v.candidate - self.window - now)))
        };
        let reset = tat_after - now;
        let remaining = self.whole_intervals(self.window.saturating_sub(reset));
        Decision::new(
            v.allowed,
            self.burst,
            remaining,
            retry_after,
            self.ticks(reset),
        )
    }

    /// `floor(x / interval)` for `x <= window`, exact, without a hardware division on the hot path.
    ///
    /// With `m = floor((2^64 - 1) / T)`, `(x * m) >> 64` lies in `[x/T - x/2^64 - 1, x/T]`; as
    /// `x <= window <= 2^62`, that is `floor(x/T)` or one less, and one comparison corrects it.
    #[inline]
    fn whole_intervals(&self, x: u64) -> u32 {
        let x = x.min(self.window);
        let mut q = ((u128::from(x) * u128::from(self.reciprocal)) >> 64) as u64;
        if (q + 1) * self.interval <= x {
            q += 1;
        }
        q as u32
    }

    #[inline]
    fn ticks(&self, t: u64) -> Duration {
        if self.tick_ns == 1 {
            Duration::from_nanos(t)
        } else {
            Duration::from_nanos(t.saturating_mul(self.tick_ns))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn denied_requests_report_when_to_come_back() {
        let g = Gcra::new(&Quota::per_second(5).unwrap());
        let full = g.decide(0, 0, 5).unwrap();
        assert_eq!(full.new_tat, Some(1000 * MS));
        let denied = g.decide(1000 * MS, 0, 2).unwrap();
        assert!(!denied.decision.allowed);
        assert_eq!(denied.new_tat, None);
        assert_eq!(
            denied.decision.retry_after,
            Some(Duration::from_millis(400))
        );
        assert_eq!(denied.decision.remaining, 0);
        assert_eq!(denied.decision.reset_after, Duration::from_secs(1));
        // Waiting exactly retry_after is enough.
        assert!(g.decide(1000 * MS, 400 * MS, 2).unwrap().decision.allowed);
        assert!(
            !g.decide(1000 * MS, 400 * MS - 1, 2)
                .unwrap()
                .decision
                .allowed
        );
    }

    #[test]
    fn cost_is_checked_against_the_whole_request() {
        // One token left: a cost-2 request is denied even though "now >= tat - tau" holds.
        let g = Gcra::new(&Quota::per_second(10).unwrap());
        let tat = 900 * MS; // 9 spent at t=0
        assert!(!g.decide(tat, 0, 2).unwrap().decision.allowed);
        assert!(g.decide(tat, 0, 1).unwrap().decision.allowed);
        assert_eq!(
            g.decide(tat, 0, 11),
            Err(GcraError::InsufficientCapacity {
                cost: 11,
                burst: 10
            })
        );
    }

    #[test]
    fn peek_changes_nothing() {
        let g = Gcra::new(&Quota::per_second(10).unwrap());
        let s = g.decide(300 * MS, 0, 0).unwrap();
        assert!(s.decision.allowed);
        assert_eq!(s.new_tat, None);
        assert_eq!(s.decision.remaining, 7);
    }

    #[test]
    fn microsecond_resolution_rounds_the_interval_down() {
        let g = Gcra::with_resolution(&Quota::per_second(3).unwrap(), Duration::from_micros(1))
            .unwrap();
        assert_eq!(g.interval_ticks(), 333_333);
        let s = g.decide(0, 0, 1).unwrap();
        assert_eq!(s.decision.reset_after, Duration::from_micros(333_333));
        assert!(
            Gcra::with_resolution(
                &Quota::per_second(2_000_000).unwrap(),
                Duration::from_micros(1)
            )
            .is_err()
        );
    }

    #[test]
    fn whole_intervals_is_exact_division() {
        for (rate, period, burst) in [
            (3u32, 1u64, 7u32),
            (7, 60, 1000),
            (1, 3600, 1),
            (1000, 1, 4_000_000),
            (997, 1, u32::MAX / 2),
        ] {
            let q = Quota::new(rate, Duration::from_secs(period)).unwrap();
            let Ok(q) = q.with_burst(burst) else { continue };
            let g = Gcra::new(&q);
            let t = g.interval_ticks();
            for k in [
                0u64,
                1,
                2,
                u64::from(burst) / 2,
                u64::from(burst) - 1,
                u64::from(burst),
            ] {
                for delta in [0i64, 1, -1, (t / 2) as i64] {
                    let x = (k * t).saturating_add_signed(delta).min(g.window_ticks());
                    assert_eq!(u64::from(g.whole_intervals(x)), x / t, "x={x} t={t}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn whole_intervals_matches_division(interval in 1u64..(1 << 40), burst in 1u32..(1 << 22), frac in 0.0f64..=1.0) {
            let window = interval.saturating_mul(u64::from(burst)).min(1 << 62);
            let g = Gcra { interval, window, burst, tick_ns: 1, reciprocal: u64::MAX / interval };
            let x = (window as f64 * frac) as u64;
            for x in [x, x.saturating_sub(1), (x + 1).min(window), window] {
                proptest::prop_assert_eq!(u64::from(g.whole_intervals(x)), x / interval);
            }
        }
    }
}
