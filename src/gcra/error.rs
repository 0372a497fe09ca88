//! [`GcraError`]: what can go wrong when checking a quota, and what to do about it.

use std::fmt;

/// An error from a rate-limit check. Each variant says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum GcraError {
    /// The request costs more tokens than the burst: it can never be allowed, so it is not
    /// reported as "retry later". Split the request or raise the burst.
    InsufficientCapacity {
        /// Tokens asked for.
        cost: u32,
        /// The quota's burst, the most that can ever be granted at once.
        burst: u32,
    },
    /// A keyed in-memory store holds its maximum number of live keys and none has expired,
    /// and its overflow policy is to reject new keys.
    KeyLimitReached {
        /// The configured maximum.
        max_keys: usize,
    },
}

impl fmt::Display for GcraError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GcraError::InsufficientCapacity { cost, burst } => write!(
                f,
                "request costs {cost} tokens but the quota's burst is {burst}: it can never be allowed; \
                 split it into requests of at most {burst} or raise the burst"
            ),
            GcraError::KeyLimitReached { max_keys } => write!(
                f,
                "keyed rate limiter is full: {max_keys} keys are live and none has expired; \
                 raise max_keys or choose Overflow::AllowUntracked"
            ),
        }
    }
}

impl std::error::Error for GcraError {}

/// A limiter configuration that cannot work, and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_keys` was 0: a keyed limiter needs room for at least one key.
    ZeroMaxKeys,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroMaxKeys => {
                f.write_str("max_keys is 0: a keyed limiter needs room for at least one key")
            }
        }
    }
}

impl std::error::Error for ConfigError {}
