//! [`RateLimiter`]: one quota for one key (a whole service, a single upstream), lock-free.

use super::algorithm::Gcra;
use super::cell::TatState;
use super::decision::Decision;
use super::error::GcraError;
use super::quota::Quota;
use crate::clock::{Clock, MonotonicClock};

/// A GCRA rate limiter for a single key: one atomic cell of state, one compare-and-swap per decision.
///
/// The cell is one `u64` when the quota's emission interval is a whole number of nanoseconds, and
/// a `u128` (whole nanoseconds and a fraction) when it is not, so that the interval is enforced
/// exactly (see [`Gcra`]).
///
/// ```
/// use flowguard::gcra::{Quota, RateLimiter};
///
/// let limiter = RateLimiter::new(Quota::per_second(100)?.with_burst(10)?);
/// for _ in 0..10 {
///     assert!(limiter.check()?.allowed);
/// }
/// assert!(!limiter.check()?.allowed); // the burst is spent
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RateLimiter<C: Clock = MonotonicClock> {
    gcra: Gcra,
    quota: Quota,
    tat: OwnLine<TatState>,
    clock: C,
}

/// The state on cache lines of its own: a compare-and-swap by one core does not evict the rule
/// and the clock, which every check reads, from the other cores' caches.
#[derive(Debug)]
#[repr(align(128))]
struct OwnLine<T>(T);

impl RateLimiter<MonotonicClock> {
    /// A limiter on the real monotonic clock.
    pub fn new(quota: Quota) -> Self {
        RateLimiter::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> RateLimiter<C> {
    /// A limiter reading time from `clock` (e.g. a [`ManualClock`](super::ManualClock) in tests).
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        let gcra = Gcra::new(&quota);
        RateLimiter {
            gcra,
            quota,
            tat: OwnLine(TatState::idle(&gcra)),
            clock,
        }
    }

    /// Checks (and on success spends) one token.
    #[inline]
    pub fn check(&self) -> Result<Decision, GcraError> {
        self.check_n(1)
    }

    /// Checks (and on success spends) `cost` tokens. `cost == 0` peeks without changing anything;
    /// `cost > burst` is [`GcraError::InsufficientCapacity`].
    #[inline]
    pub fn check_n(&self, cost: u32) -> Result<Decision, GcraError> {
        self.tat.0.spend(&self.gcra, self.clock.now_nanos(), cost)
    }

    /// The quota this limiter enforces.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}
