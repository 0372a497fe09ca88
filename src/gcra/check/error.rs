//! [`CheckError`]: why a keyed check returned no decision: the core's [`GcraError`], or a shared
//! store's [`StoreError`] (with its typed [`Unavailable`] and [`Rejection`] reasons).

use std::fmt;
use std::time::Duration;

use crate::gcra::GcraError;

/// Why [`KeyedLimit::check`](super::KeyedLimit::check) returned no decision. Each variant says
/// what to change.
///
/// ```
/// use flowguard::gcra::{CheckError, GcraError, KeyedLimit, KeyedRateLimiter, Quota};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(5)?);
/// let too_big = limiter.check(b"k", 6).await;
/// assert_eq!(
///     too_big,
///     Err(CheckError::Gcra(GcraError::InsufficientCapacity { cost: 6, burst: 5 }))
/// );
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckError {
    /// What the rule itself reports: a cost above the burst, a full in-memory store.
    Gcra(GcraError),
    /// What a shared store reports: see [`StoreError`]. Limiters with a failure policy (the
    /// [remote](crate::gcra::remote) limiter) answer an [unavailable](StoreError::Unavailable)
    /// store by their policy, so only the other variants reach their callers.
    Store(StoreError),
}

impl fmt::Display for CheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckError::Gcra(e) => e.fmt(f),
            CheckError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CheckError::Gcra(e) => Some(e),
            CheckError::Store(e) => Some(e),
        }
    }
}

impl From<GcraError> for CheckError {
    fn from(e: GcraError) -> CheckError {
        CheckError::Gcra(e)
    }
}

impl From<StoreError> for CheckError {
    fn from(e: StoreError) -> CheckError {
        CheckError::Store(e)
    }
}

/// What a shared store (Redis) can report instead of a decision.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer; see [`Unavailable`] for how. Temporary: limiters answer it by
    /// their [`FailurePolicy`](crate::gcra::remote::FailurePolicy).
    Unavailable(Unavailable),
    /// The store refused the call for a reason that retrying will not fix; see [`Rejection`].
    Rejected(Rejection),
    /// The store holds a value of another type at the limiter's key (Redis `WRONGTYPE`):
    /// something else writes there. Delete the key or give the limiter its own key prefix.
    WrongType {
        /// The store key, lossily decoded as UTF-8.
        key: String,
    },
    /// The store holds a string at the limiter's key that is not a GCRA state (a TAT in decimal
    /// microseconds, `"<whole>"` or `"<whole>+<frac>/<den>"`, below 2^53): something else writes
    /// there. Nothing was changed. Delete the key (the key is then idle: a full burst) or give the
    /// limiter its own key prefix.
    CorruptState {
        /// The store key, lossily decoded as UTF-8.
        key: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable(why) => write!(
                f,
                "the rate-limit store did not answer: {why} (limiters apply their failure policy to this)"
            ),
            StoreError::Rejected(why) => write!(f, "the rate-limit store refused the call: {why}"),
            StoreError::WrongType { key } => write!(
                f,
                "store key {key:?} holds a value of another type (WRONGTYPE): something else writes there; \
                 delete the key or give the limiter its own key prefix"
            ),
            StoreError::CorruptState { key } => write!(
                f,
                "store key {key:?} holds a string that is not a GCRA state: something else writes there; \
                 delete the key or give the limiter its own key prefix"
            ),
        }
    }
}

impl std::error::Error for StoreError {}

/// How a shared store failed to answer: a temporary condition, answered by a failure policy.
/// Plain data (no text is built for it), since during an outage every call may carry one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unavailable {
    /// No answer within the store's timeout.
    Timeout {
        /// The timeout.
        after: Duration,
    },
    /// The connection failed: refused, reset, closed, or not established yet.
    Connection,
    /// The store answered that it cannot serve the key now (Redis: loading its data, a cluster
    /// that is down or failing over, a read-only replica, a busy script, or another server error).
    Server,
    /// Not asked: the store failed to answer recently, and one call per probe interval goes to
    /// it until it answers again.
    Skipped {
        /// How often the store is probed while it fails.
        probe_interval: Duration,
    },
}

impl From<Unavailable> for crate::gcra::DegradedReason {
    fn from(why: Unavailable) -> Self {
        use crate::gcra::DegradedReason;
        match why {
            Unavailable::Timeout { .. } => DegradedReason::Timeout,
            Unavailable::Connection => DegradedReason::Connection,
            Unavailable::Server => DegradedReason::Server,
            Unavailable::Skipped { .. } => DegradedReason::Outage,
        }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::Timeout { after } => write!(f, "no answer within {after:?}"),
            Unavailable::Connection => f.write_str("the connection failed"),
            Unavailable::Server => f.write_str("the server cannot serve the key now"),
            Unavailable::Skipped { probe_interval } => write!(
                f,
                "it failed to answer recently; it is probed again every {probe_interval:?}"
            ),
        }
    }
}

/// Why a shared store refused a call: a fault of the deployment that waiting does not repair.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The store's user may not run what the limiter needs. A Redis ACL user needs exactly
    /// `+evalsha +eval +get +set +time` and the prefix's keys (e.g. `~flowguard:*`).
    Permission {
        /// What the server answered.
        answer: String,
    },
    /// The store refused the credentials: check the user name and password in the URL.
    Credentials {
        /// What the server answered.
        answer: String,
    },
    /// The store's answer is not one the limiter's script gives: is the server a
    /// Redis-compatible store with Lua scripting?
    UnexpectedReply {
        /// What the server answered.
        answer: String,
    },
    /// The store's script refused the call's arguments: every argument must be a decimal
    /// integer below 2^53 (an explicit clock, or its TTL slack, beyond 2^52?).
    InvalidArguments,
    /// The explicit clock of a store in explicit-time mode reads beyond 2^52 µs, where the
    /// store's arithmetic loses precision: start the clock nearer zero.
    ClockOutOfRange {
        /// The clock's reading, in microseconds.
        now_us: u64,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Permission { answer } => write!(
                f,
                "{answer}: the ACL user needs +evalsha +eval +get +set +time and access to the prefix's keys \
                 (e.g. ~flowguard:*)"
            ),
            Rejection::Credentials { answer } => {
                write!(f, "{answer}: check the user name and password in the URL")
            }
            Rejection::UnexpectedReply { answer } => write!(
                f,
                "the GCRA script returned {answer}, not {{0, allowed, tat, tat_frac, now}}, {{1}} or {{2}}: \
                 is the server a Redis-compatible store with Lua scripting?"
            ),
            Rejection::InvalidArguments => f.write_str(
                "the GCRA script rejected the arguments: every argument must be a decimal integer below 2^53 \
                 (is the explicit clock or the explicit-time TTL slack beyond 2^52?)",
            ),
            Rejection::ClockOutOfRange { now_us } => write!(
                f,
                "the explicit clock reads {now_us} µs, beyond 2^52 µs where Lua loses precision; \
                 start the clock nearer zero"
            ),
        }
    }
}
