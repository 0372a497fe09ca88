//! [`RateLimiter`]: one quota for one key (a whole service, a single upstream), lock-free.

use super::algorithm::Gcra;
use super::cell::TatState;
use super::decision::Decision;
use super::error::{ConfigError, GcraError};
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

/// Configures a [`RateLimiter`]: [`RateLimiter::builder`].
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Debug)]
pub struct RateLimiterBuilder<C = MonotonicClock> {
    quota: Quota,
    clock: C,
}

impl<C: Clock> RateLimiterBuilder<C> {
    /// Reads time from `clock` instead of the real monotonic clock (e.g. a
    /// [`ManualClock`](crate::clock::ManualClock) in tests and simulations).
    pub fn clock<C2: Clock>(self, clock: C2) -> RateLimiterBuilder<C2> {
        RateLimiterBuilder {
            quota: self.quota,
            clock,
        }
    }

    /// Builds the limiter. A single-key limiter has nothing that can be misconfigured (every
    /// [`Quota`] works in memory), so this never fails; it returns a `Result` like every builder
    /// of the crate.
    pub fn build(self) -> Result<RateLimiter<C>, ConfigError> {
        let gcra = Gcra::new(&self.quota);
        Ok(RateLimiter {
            gcra,
            quota: self.quota,
            tat: OwnLine(TatState::idle(&gcra)),
            clock: self.clock,
        })
    }
}

impl RateLimiter<MonotonicClock> {
    /// A limiter on the real monotonic clock: the builder with its defaults.
    pub fn new(quota: Quota) -> Self {
        let gcra = Gcra::new(&quota);
        RateLimiter {
            gcra,
            quota,
            tat: OwnLine(TatState::idle(&gcra)),
            clock: MonotonicClock::new(),
        }
    }

    /// Starts configuring a limiter for `quota`, on the real monotonic clock by default.
    ///
    /// ```
    /// use flowguard::clock::ManualClock;
    /// use flowguard::gcra::{Quota, RateLimiter};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = RateLimiter::builder(Quota::per_second(2)?).clock(clock.clone()).build()?;
    /// assert!(limiter.check_n(2)?.allowed);
    /// assert!(!limiter.check()?.allowed);
    /// clock.advance(Duration::from_millis(500));
    /// assert!(limiter.check()?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(quota: Quota) -> RateLimiterBuilder {
        RateLimiterBuilder {
            quota,
            clock: MonotonicClock::new(),
        }
    }
}

impl<C: Clock> RateLimiter<C> {
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
