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
    /// A shared store (Redis) holds a value of another type at the limiter's key (`WRONGTYPE`):
    /// something else writes there. Delete the key or give the limiter its own key prefix.
    WrongType {
        /// The store key, lossily decoded as UTF-8.
        key: String,
    },
    /// A shared store holds a string at the limiter's key that is not a GCRA state (a TAT in
    /// decimal microseconds, `"<whole>"` or `"<whole>+<frac>/<den>"`, below 2^53): something else
    /// writes there. Nothing was changed. Delete the key (the key is then idle: a full burst) or give
    /// the limiter its own key prefix.
    CorruptState {
        /// The store key, lossily decoded as UTF-8.
        key: String,
    },
    /// A shared store refused the call for a reason that retrying will not fix, e.g. an ACL user
    /// without permission for a command the limiter needs. The reason says what the server answered.
    StoreRejected {
        /// The server's answer and what to change.
        reason: String,
    },
    /// A shared store did not answer within its timeout, or the connection failed. Only the raw
    /// store API returns this; limiters answer such calls by their failure policy instead.
    StoreUnavailable {
        /// What went wrong.
        reason: String,
    },
    /// [`Guard::admit`](crate::Guard::admit) was called on a guard without a rate limit:
    /// configure one with [`GuardBuilder::rate_limit`](crate::GuardBuilder::rate_limit).
    NoRateLimit,
}

impl fmt::Display for GcraError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GcraError::NoRateLimit => f.write_str(
                "this Guard has no rate limit: configure one with GuardBuilder::rate_limit",
            ),
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
            GcraError::WrongType { key } => write!(
                f,
                "store key {key:?} holds a value of another type (WRONGTYPE): something else writes there; \
                 delete the key or give the limiter its own key prefix"
            ),
            GcraError::CorruptState { key } => write!(
                f,
                "store key {key:?} holds a string that is not a GCRA state: something else writes there; \
                 delete the key or give the limiter its own key prefix"
            ),
            GcraError::StoreRejected { reason } => {
                write!(f, "the rate-limit store refused the call: {reason}")
            }
            GcraError::StoreUnavailable { reason } => {
                write!(
                    f,
                    "the rate-limit store did not answer: {reason} (limiters apply their failure policy to this)"
                )
            }
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
