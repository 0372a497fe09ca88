//! [`Decision`]: the answer to one rate-limit check, with everything a caller needs for HTTP headers.

use std::hash::{Hash, Hasher};
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
/// assert_eq!(d.remaining(), Some(7));
/// assert_eq!(d.reset_after(), Some(Duration::from_millis(300)));
/// assert_eq!(d.retry_after, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The key's numbers, [`remaining`](Self::remaining) and [`reset_after`](Self::reset_after),
/// are `Option`s: a decision made without reading any quota state (a store that failed open or
/// closed, a full local fallback, see [`Degradation`]) has none, and says so rather than
/// reporting the numbers of an idle key:
///
/// ```
/// use flowguard::gcra::{Degradation, KeyedRateLimiter, Overflow, Quota};
///
/// // A full store deciding new keys untracked: it fails open, knowing nothing of the key.
/// let limiter = KeyedRateLimiter::<String>::builder(Quota::per_second(10)?)
///     .max_keys(1)
///     .overflow(Overflow::AllowUntracked)
///     .build()?;
/// assert_eq!(limiter.check_key("alice")?.remaining(), Some(9));
/// let untracked = limiter.check_key("bob")?;
/// assert!(untracked.allowed);
/// assert_eq!(untracked.degraded, Some(Degradation::FailOpen));
/// assert_eq!((untracked.remaining(), untracked.reset_after()), (None, None));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// `Debug`, equality and hashing see the numbers as these accessors report them.
#[derive(Clone, Copy)]
#[non_exhaustive]
#[must_use = "a decision says whether the request may proceed"]
pub struct Decision {
    /// Whether the tokens were granted (and spent). Denied requests change nothing.
    pub allowed: bool,
    /// The burst `B`: the most tokens the key can ever hold. Configuration, so known for every
    /// decision; for a [`LocalFallback`](Degradation::LocalFallback) decision it is the burst of
    /// this instance's share of the quota.
    pub limit: u32,
    /// The raw count behind [`remaining`](Self::remaining): made up (an idle key's) when no state
    /// was read, so kept inside the crate, whose algorithms decide with it.
    pub(crate) remaining: u32,
    /// For a denied request: how long until the same request would be allowed. `None` when
    /// allowed. A denial by a failure policy carries that policy's wait (the time until the store
    /// is asked again, or the local fallback's answer).
    pub retry_after: Option<Duration>,
    /// The raw time behind [`reset_after`](Self::reset_after), as `remaining`.
    pub(crate) reset_after: Duration,
    /// `Some` when the store could not reach its authoritative state and answered by its failure policy.
    pub degraded: Option<Degradation>,
    /// Why, for a degraded decision; read with [`degraded_reason`](Self::degraded_reason).
    pub(crate) reason: Option<DegradedReason>,
}

/// Why a degraded [`Decision`] was not made by the shared store: what an operator looks at
/// first, and the `reason` label of the degraded-decision metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DegradedReason {
    /// The store did not answer within its timeout (a slow or paused server, a saturated
    /// client or network).
    Timeout,
    /// The connection failed: refused, reset, closed, or not established yet.
    Connection,
    /// The store answered that it cannot serve the key now: loading its data, a cluster that is
    /// down or failing over (a slot without a master), a read-only replica, a busy script.
    Server,
    /// Not asked: the store failed to answer recently, and it is probed once per interval until
    /// it answers again (an outage in progress).
    Outage,
    /// An in-memory store held its maximum number of keys and decided a new key untracked.
    StoreFull,
}

impl DegradedReason {
    /// The reason as a metric label value: `timeout`, `connection`, `server`, `outage`,
    /// `store_full`.
    pub fn as_str(&self) -> &'static str {
        match self {
            DegradedReason::Timeout => "timeout",
            DegradedReason::Connection => "connection",
            DegradedReason::Server => "server",
            DegradedReason::Outage => "outage",
            DegradedReason::StoreFull => "store_full",
        }
    }
}

impl std::fmt::Display for DegradedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a degraded [`Decision`] was made when the shared store could not answer in time.
///
/// Only a [`LocalFallback`](Self::LocalFallback) decision reads a quota state: its
/// [`remaining`](Decision::remaining) and [`reset_after`](Decision::reset_after) are real, but
/// they are this instance's local share's (its own state, its share's burst in
/// [`limit`](Decision::limit)), not the shared quota's. The others read none and report no
/// numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Degradation {
    /// The request was allowed without consulting the shared state: no numbers.
    FailOpen,
    /// The request was denied without consulting the shared state: no numbers;
    /// `retry_after` is the time until the store is asked again.
    FailClosed,
    /// A local in-memory GCRA with this instance's share of the quota decided: the numbers are
    /// that share's.
    LocalFallback,
    /// The request was denied because the local fallback held its maximum number of live keys
    /// and could not track this one. It is never allowed untracked, so a flood of new keys
    /// during an outage cannot make any key unlimited; keys the fallback tracks keep their share.
    /// No numbers: the key has no state.
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
            reason: None,
        }
    }

    /// The same decision marked as made by a failure policy.
    pub fn degraded(self, how: Degradation) -> Decision {
        Decision {
            degraded: Some(how),
            ..self
        }
    }

    /// The same decision, degraded because of `reason` (kept only on a degraded decision).
    pub(crate) fn because(self, reason: DegradedReason) -> Decision {
        Decision {
            reason: self.degraded.map(|_| reason),
            ..self
        }
    }

    /// Why the store did not decide: `Some` exactly when [`degraded`](Self::degraded) is, for
    /// the decisions of a remote limiter and of an in-memory store that was full.
    ///
    /// ```
    /// use flowguard::gcra::{DegradedReason, KeyedRateLimiter, Overflow, Quota};
    ///
    /// let limiter = KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_second(1)?)
    ///     .max_keys(1)
    ///     .overflow(Overflow::AllowUntracked)
    ///     .build()?;
    /// assert_eq!(limiter.check_key(&b"a"[..])?.degraded_reason(), None);
    /// let untracked = limiter.check_key(&b"b"[..])?;
    /// assert_eq!(untracked.degraded_reason(), Some(DegradedReason::StoreFull));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn degraded_reason(&self) -> Option<DegradedReason> {
        self.reason
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

    /// Tokens that could be spent right now after this decision,
    /// `floor((now + B*T - tat) / T)`; `None` when the decision read no quota state
    /// ([`FailOpen`](Degradation::FailOpen), [`FailClosed`](Degradation::FailClosed),
    /// [`LocalFallbackFull`](Degradation::LocalFallbackFull)), so that no number is made up. A
    /// [`LocalFallback`](Degradation::LocalFallback) decision counts this instance's share.
    #[inline]
    pub fn remaining(&self) -> Option<u32> {
        self.read_state().then_some(self.remaining)
    }

    /// How long until the key is back to a full burst (`tat - now`, zero for an idle key);
    /// `None` when the decision read no quota state, as for [`remaining`](Self::remaining).
    #[inline]
    pub fn reset_after(&self) -> Option<Duration> {
        self.read_state().then_some(self.reset_after)
    }

    /// [`reset_after`](Self::reset_after) in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> Option<u64> {
        self.reset_after().map(ceil_secs)
    }

    /// Whether the numbers come from a quota state: the store's, or a local fallback's share.
    #[inline]
    fn read_state(&self) -> bool {
        matches!(self.degraded, None | Some(Degradation::LocalFallback))
    }

    /// What the public API shows: the numbers only where they are known.
    #[allow(clippy::type_complexity)]
    fn seen(
        &self,
    ) -> (
        bool,
        u32,
        Option<u32>,
        Option<Duration>,
        Option<Duration>,
        Option<Degradation>,
    ) {
        (
            self.allowed,
            self.limit,
            self.remaining(),
            self.retry_after,
            self.reset_after(),
            self.degraded,
        )
    }
}

impl std::fmt::Debug for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after)
            .field("reset_after", &self.reset_after())
            .field("degraded", &self.degraded)
            .finish()
    }
}

/// Decisions are equal when everything they report is: two decisions without numbers are equal
/// whatever an idle key's numbers would have been.
impl PartialEq for Decision {
    fn eq(&self, other: &Decision) -> bool {
        self.seen() == other.seen()
    }
}

impl Eq for Decision {}

impl Hash for Decision {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.seen().hash(state);
    }
}
