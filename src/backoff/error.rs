//! Typed errors of the backoff module: configuration mistakes and the reasons a retry loop
//! gives up.

use std::fmt;
use std::time::Duration;

/// A backoff, budget or retry-policy configuration that cannot work.
///
/// Every variant says which value to change; nothing is silently clamped.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The base delay of a backoff sequence is zero; use at least one nanosecond.
    ZeroBase,
    /// The cap of a backoff sequence is below its base; raise the cap or lower the base.
    CapBelowBase {
        /// The configured base delay.
        base: Duration,
        /// The configured cap.
        cap: Duration,
    },
    /// The cap does not fit the sequence arithmetic (nanoseconds in a `u64`, about 584 years).
    CapTooLarge {
        /// The configured cap.
        cap: Duration,
        /// The largest cap accepted.
        max: Duration,
    },
    /// `max_attempts` is zero: a call needs at least one attempt.
    ZeroAttempts,
    /// The overall deadline is zero: no attempt could ever start.
    ZeroDeadline,
    /// The retry ratio of a budget is not a finite number in `0.0..=1000.0`.
    InvalidRetryRatio(f64),
    /// The budget window is outside `1s..=60s` or not a whole number of milliseconds.
    InvalidBudgetWindow(Duration),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroBase => write!(f, "backoff base delay is zero; use a positive base"),
            Self::CapBelowBase { base, cap } => write!(
                f,
                "backoff cap {cap:?} is below the base {base:?}; raise the cap or lower the base"
            ),
            Self::CapTooLarge { cap, max } => {
                write!(f, "backoff cap {cap:?} is too large; use at most {max:?}")
            }
            Self::ZeroAttempts => write!(f, "max_attempts is zero; allow at least one attempt"),
            Self::ZeroDeadline => write!(f, "the retry deadline is zero; use a positive deadline"),
            Self::InvalidRetryRatio(r) => write!(
                f,
                "retry ratio {r} is invalid; use a finite number in 0.0..=1000.0 (0.2 = 20% extra load)"
            ),
            Self::InvalidBudgetWindow(w) => write!(
                f,
                "retry budget window {w:?} is invalid; use a whole number of milliseconds in 1s..=60s"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why a retry policy stopped retrying.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUp {
    /// All `max` attempts were made.
    AttemptsExhausted {
        /// The configured maximum number of attempts (first call included).
        max: u32,
    },
    /// The shared [`RetryBudget`](crate::backoff::RetryBudget) has no retry left in its window.
    BudgetExhausted,
    /// Waiting `wait` before the next attempt would pass the overall deadline,
    /// of which only `remaining` is left. Reported at once, without sleeping.
    DeadlineExceeded {
        /// The wait the next attempt needs (at least the server's `Retry-After`).
        wait: Duration,
        /// Time left before the deadline.
        remaining: Duration,
    },
    /// The server asked for a wait beyond [`MAX_RETRY_AFTER`](crate::headers::MAX_RETRY_AFTER).
    RetryAfterTooLarge,
}

impl fmt::Display for GiveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AttemptsExhausted { max } => write!(f, "all {max} attempts failed"),
            Self::BudgetExhausted => write!(f, "the retry budget is exhausted"),
            Self::DeadlineExceeded { wait, remaining } => write!(
                f,
                "the next attempt needs a wait of {wait:?} but only {remaining:?} is left before the deadline"
            ),
            Self::RetryAfterTooLarge => {
                write!(
                    f,
                    "the server asked to wait longer than the Retry-After bound"
                )
            }
        }
    }
}

/// The error of the retry engine ([`RetryPolicy::retry`](crate::backoff::RetryPolicy::retry),
/// [`RetryPolicy::run`](crate::backoff::RetryPolicy::run), and so of
/// [`Guard::call`](crate::Guard::call)), carrying the last outcome so the caller can still
/// inspect the final response or error.
///
/// `R` is why an attempt hook refused to start an attempt: [`Infallible`](std::convert::Infallible)
/// for plain retries (no hook), [`AcquireError`](crate::vegas::AcquireError) for `Guard::call`,
/// whose hook takes a concurrency permit per attempt.
#[derive(Debug)]
#[non_exhaustive]
pub enum RetryError<T, E, R = std::convert::Infallible> {
    /// The classifier said the error must not be retried.
    NotRetryable {
        /// Attempts made, the failing one included.
        attempts: u32,
        /// The error of the last attempt.
        error: E,
    },
    /// The overall deadline passed while an attempt was running; the attempt was cancelled.
    DeadlineElapsed {
        /// Attempts made, the cancelled one included.
        attempts: u32,
    },
    /// The outcome was retryable but the policy stopped (see [`GiveUp`]).
    GaveUp {
        /// Why no further attempt was made.
        reason: GiveUp,
        /// Attempts made.
        attempts: u32,
        /// The last outcome: a retryable response (`Ok`, e.g. a 429) or error (`Err`).
        last: Result<T, E>,
    },
    /// The attempt hook refused to start an attempt, so the call was not (or no longer) made:
    /// for `Guard::call`, no concurrency permit was free within the acquire timeout. Shed the
    /// request: answer 503, or degrade.
    Shed {
        /// Attempts made before the refused one.
        attempts: u32,
        /// The hook's reason.
        error: R,
    },
}

impl<T, E, R> RetryError<T, E, R> {
    /// The reason the policy stopped, or `None` for a non-retryable error, a cancelled attempt
    /// or a shed call.
    pub fn give_up_reason(&self) -> Option<&GiveUp> {
        match self {
            Self::GaveUp { reason, .. } => Some(reason),
            Self::NotRetryable { .. } | Self::DeadlineElapsed { .. } | Self::Shed { .. } => None,
        }
    }

    /// Number of attempts made.
    pub fn attempts(&self) -> u32 {
        match self {
            Self::NotRetryable { attempts, .. }
            | Self::DeadlineElapsed { attempts }
            | Self::GaveUp { attempts, .. }
            | Self::Shed { attempts, .. } => *attempts,
        }
    }

    /// The last outcome (response or error); `None` when the last attempt was cancelled at
    /// the deadline or never started (shed).
    pub fn into_last(self) -> Option<Result<T, E>> {
        match self {
            Self::NotRetryable { error, .. } => Some(Err(error)),
            Self::DeadlineElapsed { .. } | Self::Shed { .. } => None,
            Self::GaveUp { last, .. } => Some(last),
        }
    }
}

impl<T, E: fmt::Display, R: fmt::Display> fmt::Display for RetryError<T, E, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRetryable { attempts, error } => {
                write!(f, "not retryable after {attempts} attempt(s): {error}")
            }
            Self::DeadlineElapsed { attempts } => write!(
                f,
                "the deadline passed during attempt {attempts}, which was cancelled"
            ),
            Self::GaveUp {
                reason,
                attempts,
                last,
            } => {
                write!(f, "gave up after {attempts} attempt(s): {reason}")?;
                match last {
                    Ok(_) => write!(f, " (last attempt returned a retryable response)"),
                    Err(e) => write!(f, " (last error: {e})"),
                }
            }
            Self::Shed { attempts, error } => {
                write!(f, "call shed after {attempts} attempt(s): {error}")
            }
        }
    }
}

impl<T, E, R> std::error::Error for RetryError<T, E, R>
where
    T: fmt::Debug,
    E: std::error::Error + 'static,
    R: std::error::Error + 'static,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotRetryable { error, .. } => Some(error),
            Self::GaveUp { last: Err(e), .. } => Some(e),
            Self::Shed { error, .. } => Some(error),
            Self::GaveUp { .. } | Self::DeadlineElapsed { .. } => None,
        }
    }
}
