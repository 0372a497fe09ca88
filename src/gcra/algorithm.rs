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
        let interval = quota.interval_nanos();
        Gcra { interval, window: interval * u64::from(quota.burst()), burst: quota.burst(), tick_ns: 1 }
    }

    /// The rule for `quota` with ticks of `tick` (e.g. one microsecond for the Redis store, whose
    /// server clock has microsecond resolution). The emission interval is rounded down to whole ticks;
    /// an interval shorter than one tick is [`QuotaError::IntervalTooShort`].
    pub fn with_resolution(quota: &Quota, tick: Duration) -> Result<Gcra, QuotaError> {
        let tick_ns = u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX).max(1);
        let interval = quota.interval_nanos() / tick_ns;
        if interval == 0 {
            return Err(QuotaError::IntervalTooShort { rate: quota.rate(), period: quota.period(), resolution: tick });
        }
        Ok(Gcra { interval, window: interval * u64::from(quota.burst()), burst: quota.burst(), tick_ns })
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
        if cost > self.burst {
            return Err(GcraError::InsufficientCapacity { cost, burst: self.burst });
        }
        let base = tat.max(now);
        let candidate = base.saturating_add(u64::from(cost) * self.interval);
        let allowed = candidate - now <= self.window;
        let (tat_after, new_tat, retry_after) = if allowed {
            (candidate, (cost > 0).then_some(candidate), None)
        } else {
            (base, None, Some(self.ticks(candidate - self.window - now)))
        };
        let remaining = (now + self.window).saturating_sub(tat_after) / self.interval;
        let decision = Decision::new(
            allowed,
            self.burst,
            u32::try_from(remaining).unwrap_or(self.burst),
            retry_after,
            self.ticks(tat_after - now),
        );
        Ok(Step { decision, new_tat })
    }

    #[inline]
    fn ticks(&self, t: u64) -> Duration {
        Duration::from_nanos(t.saturating_mul(self.tick_ns))
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
        assert_eq!(denied.decision.retry_after, Some(Duration::from_millis(400)));
        assert_eq!(denied.decision.remaining, 0);
        assert_eq!(denied.decision.reset_after, Duration::from_secs(1));
        // Waiting exactly retry_after is enough.
        assert!(g.decide(1000 * MS, 400 * MS, 2).unwrap().decision.allowed);
        assert!(!g.decide(1000 * MS, 400 * MS - 1, 2).unwrap().decision.allowed);
    }

    #[test]
    fn cost_is_checked_against_the_whole_request() {
        // One token left: a cost-2 request is denied even though "now >= tat - tau" holds.
        let g = Gcra::new(&Quota::per_second(10).unwrap());
        let tat = 900 * MS; // 9 spent at t=0
        assert!(!g.decide(tat, 0, 2).unwrap().decision.allowed);
        assert!(g.decide(tat, 0, 1).unwrap().decision.allowed);
        assert_eq!(g.decide(tat, 0, 11), Err(GcraError::InsufficientCapacity { cost: 11, burst: 10 }));
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
        let g = Gcra::with_resolution(&Quota::per_second(3).unwrap(), Duration::from_micros(1)).unwrap();
        assert_eq!(g.interval_ticks(), 333_333);
        let s = g.decide(0, 0, 1).unwrap();
        assert_eq!(s.decision.reset_after, Duration::from_micros(333_333));
        assert!(Gcra::with_resolution(&Quota::per_second(2_000_000).unwrap(), Duration::from_micros(1)).is_err());
    }
}
