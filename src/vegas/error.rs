//! Typed errors: invalid configuration and failed acquisitions.

use std::fmt;
use std::time::Duration;

/// A limiter or algorithm configuration that cannot work, with what to change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A limit (`min`, `max` or `initial`, or a fixed limit) is zero; every limit must be at least 1.
    ZeroLimit {
        /// Which setting was zero.
        field: &'static str,
    },
    /// `min` is larger than `max`.
    MinAboveMax {
        /// The configured minimum.
        min: usize,
        /// The configured maximum.
        max: usize,
    },
    /// The initial limit lies outside `[min, max]`.
    InitialOutOfRange {
        /// The configured initial limit.
        initial: usize,
        /// The configured minimum.
        min: usize,
        /// The configured maximum.
        max: usize,
    },
    /// Vegas needs `0 <= alpha < beta`.
    AlphaNotBelowBeta {
        /// The configured alpha.
        alpha: f64,
        /// The configured beta.
        beta: f64,
    },
    /// A numeric setting is outside its allowed range (or not finite).
    OutOfRange {
        /// Which setting.
        field: &'static str,
        /// The rejected value.
        value: f64,
        /// The allowed range, in words.
        allowed: &'static str,
    },
    /// A count (window length, sample count) is zero.
    ZeroCount {
        /// Which setting was zero.
        field: &'static str,
    },
    /// A duration setting is zero.
    ZeroDuration {
        /// Which setting was zero.
        field: &'static str,
    },
    /// Two partitions share a name.
    DuplicatePartition {
        /// The repeated name.
        name: String,
    },
    /// The guaranteed shares of all partitions add up to more than 1.
    SharesExceedOne {
        /// The sum of all shares.
        total: f64,
    },
    /// A middleware was told to take its permits from a partition its limiter does not
    /// declare.
    UnknownPartition {
        /// The name given.
        name: String,
    },
    /// A limit is above [`MAX_LIMIT`](crate::vegas::MAX_LIMIT) (2^31 - 1), the most permits a
    /// limiter can track.
    LimitTooLarge {
        /// Which setting.
        field: &'static str,
        /// The value given.
        value: usize,
        /// The largest limit allowed: [`MAX_LIMIT`](crate::vegas::MAX_LIMIT).
        max: usize,
    },
    /// A `Server-Timing` metric name (for
    /// [`QueueTiming::server_timing`](crate::vegas::QueueTiming::server_timing)) is not an HTTP
    /// token.
    InvalidMetricName {
        /// The name given.
        name: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLimit { field } => {
                write!(f, "`{field}` is 0; every limit must be at least 1")
            }
            Self::LimitTooLarge { field, value, max } => write!(
                f,
                "`{field}` is {value}, above the largest limit a limiter tracks ({max}); use a smaller limit"
            ),
            Self::MinAboveMax { min, max } => {
                write!(
                    f,
                    "min limit {min} is above max limit {max}; lower `min` or raise `max`"
                )
            }
            Self::InitialOutOfRange { initial, min, max } => write!(
                f,
                "initial limit {initial} is outside [{min}, {max}]; choose an initial limit inside the range"
            ),
            Self::AlphaNotBelowBeta { alpha, beta } => write!(
                f,
                "vegas alpha {alpha} must be >= 0 and below beta {beta}; lower `alpha` or raise `beta`"
            ),
            Self::OutOfRange {
                field,
                value,
                allowed,
            } => write!(f, "`{field}` = {value} is invalid; it must be {allowed}"),
            Self::ZeroCount { field } => write!(f, "`{field}` is 0; it must be at least 1"),
            Self::ZeroDuration { field } => {
                write!(f, "`{field}` is zero; give a positive duration")
            }
            Self::DuplicatePartition { name } => {
                write!(
                    f,
                    "partition `{name}` is declared twice; give each partition a unique name"
                )
            }
            Self::UnknownPartition { name } => write!(
                f,
                "the limiter declares no partition `{name}`; declare it with `LimiterBuilder::partition` or name a declared one"
            ),
            Self::InvalidMetricName { name } => write!(
                f,
                "`{name}` is not a Server-Timing metric name; use letters, digits and !#$%&'*+-.^_`|~ only, at least one (e.g. `queue`)"
            ),
            Self::SharesExceedOne { total } => write!(
                f,
                "partition shares add up to {total}, above 1.0; lower the shares so they sum to at most 1"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Why a permit was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// `try_acquire`: the limit is reached (or earlier callers are waiting); nothing was taken.
    Full {
        /// The limit at the time of the attempt.
        limit: usize,
        /// Permits in flight at the time of the attempt.
        in_flight: usize,
    },
    /// `acquire`: no permit became free within the timeout; the caller left the queue.
    Timeout {
        /// How long the caller waited.
        waited: Duration,
    },
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full { limit, in_flight } => write!(
                f,
                "concurrency limit reached ({in_flight} in flight, limit {limit}); shed the call or retry later"
            ),
            Self::Timeout { waited } => {
                write!(
                    f,
                    "no permit became free within {waited:?}; shed the call or retry later"
                )
            }
        }
    }
}

impl std::error::Error for AcquireError {}

/// An outbound call refused by its concurrency limit: no permit was free (at once, or within the
/// middleware's wait bound), so the call was **not sent**. Returned by the tower layer in
/// `vegas::layer` (as a `BoxError`) and the reqwest middleware in `vegas::reqwest` (as a
/// middleware error); tell it from a failed call with [`Shed::of`], whichever error carries it.
///
/// A shed call is not retried by flowguard's retry policies (its error is not transient):
/// retrying would add to the load the limit is shedding. Answer it at once (e.g. `503`), serve a
/// fallback, or classify it as retryable yourself.
///
/// ```
/// use flowguard::vegas::{AcquireError, Shed};
///
/// let error: Box<dyn std::error::Error + Send + Sync> =
///     Box::new(Shed::from(AcquireError::Full { limit: 8, in_flight: 8 }));
/// let shed = error.downcast_ref::<Shed>().expect("a shed call");
/// assert!(matches!(shed.cause(), AcquireError::Full { limit: 8, .. }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    cause: AcquireError,
}

impl Shed {
    /// The `Shed` in `error` (the error itself or one of its sources), if the call was shed
    /// rather than sent: `None` for a call that failed. Reads a `BoxError` (the tower layer's),
    /// a `reqwest_middleware::Error` (the reqwest middleware's, feature `reqwest`) and any
    /// `dyn Error`, so no downcast through `reqwest_middleware::Error::Middleware` is needed.
    ///
    /// ```
    /// use flowguard::backoff::BoxError;
    /// use flowguard::vegas::{AcquireError, Shed};
    ///
    /// let shed: BoxError = Box::new(Shed::from(AcquireError::Full { limit: 8, in_flight: 8 }));
    /// assert!(Shed::of(&shed).is_some());
    /// let failed: BoxError = Box::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    /// assert!(Shed::of(&failed).is_none());
    /// ```
    pub fn of<E: MaybeShed + ?Sized>(error: &E) -> Option<&Shed> {
        error.shed()
    }

    /// Why no permit was granted: the limit was full ([`AcquireError::Full`], when the
    /// middleware does not wait) or no permit became free within the wait bound
    /// ([`AcquireError::Timeout`]).
    pub fn cause(&self) -> AcquireError {
        self.cause
    }
}

impl From<AcquireError> for Shed {
    fn from(cause: AcquireError) -> Self {
        Self { cause }
    }
}

impl fmt::Display for Shed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call shed, not sent: {}", self.cause)
    }
}

impl std::error::Error for Shed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}

/// The `Shed` in `error` or one of its sources.
fn find_shed<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e Shed> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(shed) = error.downcast_ref::<Shed>() {
            return Some(shed);
        }
        current = error.source();
    }
    None
}

mod sealed {
    pub trait Sealed {}
}

/// An error that may carry a [`Shed`]: what [`Shed::of`] reads. Implemented for `dyn Error`
/// (with or without `Send + Sync`), `BoxError` and, with the feature `reqwest`,
/// `reqwest_middleware::Error`.
pub trait MaybeShed: sealed::Sealed {
    /// The `Shed` this error carries, if any (see [`Shed::of`]).
    fn shed(&self) -> Option<&Shed>;
}

impl sealed::Sealed for dyn std::error::Error + 'static {}
impl MaybeShed for dyn std::error::Error + 'static {
    fn shed(&self) -> Option<&Shed> {
        find_shed(self)
    }
}

impl sealed::Sealed for dyn std::error::Error + Send + Sync + 'static {}
impl MaybeShed for dyn std::error::Error + Send + Sync + 'static {
    fn shed(&self) -> Option<&Shed> {
        find_shed(self)
    }
}

impl sealed::Sealed for crate::backoff::BoxError {}
impl MaybeShed for crate::backoff::BoxError {
    fn shed(&self) -> Option<&Shed> {
        find_shed(self.as_ref())
    }
}

#[cfg(feature = "reqwest")]
impl sealed::Sealed for reqwest_middleware::Error {}
#[cfg(feature = "reqwest")]
impl MaybeShed for reqwest_middleware::Error {
    fn shed(&self) -> Option<&Shed> {
        match self {
            reqwest_middleware::Error::Middleware(error) => {
                let error: &(dyn std::error::Error + 'static) = error.as_ref();
                find_shed(error)
            }
            reqwest_middleware::Error::Reqwest(error) => find_shed(error),
        }
    }
}

/// Checks that `value` is finite and inside `[lo, hi]` (both inclusive).
pub(crate) fn check_range(
    field: &'static str,
    value: f64,
    lo: f64,
    hi: f64,
    allowed: &'static str,
) -> Result<(), ConfigError> {
    if value.is_finite() && value >= lo && value <= hi {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            value,
            allowed,
        })
    }
}
