//! [`Decision`]: the answer to one rate-limit check, with everything a caller needs for HTTP headers.

use std::time::Duration;

use crate::headers::ceil_secs;

/// The outcome of checking `cost` tokens against a key's quota.
///
/// ```
/// use flowguard::gcra::{Quota, RateLimiter};
/// use flowguard::clock::ManualClock;
/// use std::time::Duration;
///
/// let limiter = RateLimiter::builder(Quota::per_second(10)?).clock(ManualClock::new()).build()?;
/// let d = limiter.check_n(3)?;
/// assert!(d.allowed);
/// assert_eq!(d.limit, 10);
/// assert_eq!(d.remaining, 7);
/// assert_eq!(d.reset_after, Duration::from_millis(300));
/// assert_eq!(d.retry_after, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[must_use = "a decision says whether the request may proceed"]
pub struct Decision {
    /// Whether the tokens were granted (and spent). Denied requests change nothing.
    pub allowed: bool,
    /// The burst `B`: the most tokens the key can ever hold.
    pub limit: u32,
    /// Tokens that could be spent right now after this decision: `floor((now + B*T - tat) / T)`.
    pub remaining: u32,
    /// For a denied request: how long until the same request would be allowed. `None` when allowed.
    pub retry_after: Option<Duration>,
    /// How long until the key is back to a full burst (`tat - now`, zero for an idle key).
    pub reset_after: Duration,
    /// `Some` when the store could not reach its authoritative state and answered by its failure policy.
    pub degraded: Option<Degradation>,
}

/// How a degraded [`Decision`] was made when the shared store could not answer in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Degradation {
    /// The request was allowed without consulting the shared state.
    FailOpen,
    /// The request was denied without consulting the shared state.
    FailClosed,
    /// A local in-memory GCRA with this instance's share of the quota decided.
    LocalFallback,
    /// The request was denied because the local fallback held its maximum number of live keys
    /// and could not track this one. It is never allowed untracked, so a flood of new keys
    /// during an outage cannot make any key unlimited; keys the fallback tracks keep their share.
    LocalFallbackFull,
}

impl Decision {
    pub(crate) fn new(
        allowed: bool,
        limit: u32,
        remaining: u32,
        retry_after: Option<Duration>,
        reset_after: Duration,
    ) -> Decision {
        Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after,
            degraded: None,
        }
    }

    /// The same decision marked as made by a failure policy.
    pub fn degraded(self, how: Degradation) -> Decision {
        Decision {
            degraded: Some(how),
            ..self
        }
    }

    /// `retry_after` in whole seconds, rounded **up**, as HTTP `Retry-After` needs:
    /// a client that waits exactly this long is allowed.
    ///
    /// ```
    /// # use flowguard::clock::ManualClock;
    /// # use flowguard::gcra::{Quota, RateLimiter};
    /// let limiter = RateLimiter::builder(Quota::per_minute(1)?).clock(ManualClock::new()).build()?;
    /// assert!(limiter.check()?.allowed);
    /// let denied = limiter.check()?;
    /// assert_eq!(denied.retry_after_secs(), Some(60));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(ceil_secs)
    }

    /// `reset_after` in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        ceil_secs(self.reset_after)
    }
}
