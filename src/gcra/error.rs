//! [`GcraError`]: what the GCRA core can report about a check, and what to do about it.

use std::fmt;
use std::time::Duration;

use super::quota::QuotaError;

/// What the GCRA core and the in-memory limiters can report instead of a [`Decision`](super::Decision).
/// Each variant says what to change. (A check through a shared store can fail in more ways: see
/// [`CheckError`](super::CheckError).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// A key given as bytes (to [`KeyedLimit::check`](super::KeyedLimit::check), by the quota
    /// layer or [`Guard::admit`](crate::Guard::admit)) that is no key of the in-memory limiter's
    /// key type (see [`FromKeyBytes`](super::FromKeyBytes)): give keys as that type's bytes (for
    /// addresses, the layer's `PeerIpKey`, `XForwardedForKey` or `ForwardedKey`), or key the
    /// limiter by bytes (`KeyedRateLimiter<Vec<u8>>`).
    UnreadableKey {
        /// How many bytes the key had.
        len: usize,
        /// The limiter's key type.
        key_type: &'static str,
        /// What the bytes of a key of that type are ([`FromKeyBytes::KEY_BYTES`](super::FromKeyBytes::KEY_BYTES)).
        expected: &'static str,
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
            GcraError::UnreadableKey {
                len,
                key_type,
                expected,
            } => write!(
                f,
                "a key of {len} bytes is no {key_type}, the in-memory limiter's key type (whose keys are {expected}): \
                 give keys as that type's bytes (for addresses: PeerIpKey, XForwardedForKey, ForwardedKey), \
                 or key the limiter by bytes (KeyedRateLimiter<Vec<u8>>)"
            ),
        }
    }
}

impl std::error::Error for GcraError {}

/// A configuration of a `gcra` limiter or store that cannot work, and what to change: of the
/// in-memory keyed limiter, the [remote](super::remote) limiter and its failure policy, the Redis
/// store (feature `redis`) and the [two-tier](super::two_tier) limiter. Every builder of the
/// module reports this type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_keys` (or `local_max_keys`) was 0: a keyed limiter needs room for at least one key.
    ZeroMaxKeys,
    /// A two-tier batch of 0: reserve at least 1 token per batch.
    ZeroBatch,
    /// A two-tier batch above the quota's burst: such a reservation could never be granted.
    BatchAboveBurst {
        /// The configured batch.
        batch: u32,
        /// The quota's burst.
        burst: u32,
    },
    /// A two-tier refill threshold that is not below the batch, so every local decision would
    /// start a refill.
    ThresholdNotBelowBatch {
        /// The configured threshold.
        refill_below: u32,
        /// The configured batch.
        batch: u32,
    },
    /// A two-tier maximum token age of zero: reserved tokens would be stale on arrival.
    ZeroTokenAge,
    /// A local-fallback [share](super::LocalShare) that is not a fraction in `(0, 1]` (or zero
    /// instances).
    InvalidShare {
        /// The share given.
        share: f64,
    },
    /// The local-fallback quota derived from the global quota and this instance's share is
    /// invalid (typically: the share of the burst rounds down to zero tokens).
    LocalQuota {
        /// The share that was applied, as a fraction (one of `n` instances is `1 / n`).
        share: f64,
        /// Why the derived quota is invalid.
        source: QuotaError,
    },
    /// The quota cannot be kept exactly at a store's time resolution. Every valid [`Quota`] can
    /// at the Redis store's microsecond (intervals are kept as whole ticks and an exact fraction),
    /// so this is reported only for a store of another resolution.
    ///
    /// [`Quota`]: super::Quota
    StoreResolution(QuotaError),
    /// The quota's burst window is longer than a store can represent exactly (the Redis
    /// script's timestamps must stay exact in Lua's doubles).
    StoreWindowTooLong {
        /// The quota's burst window.
        window: Duration,
        /// The longest window the store supports.
        max: Duration,
    },
    /// Two limiters of different rules over one store key space: they would keep one state per
    /// key for both quotas and spend each other's tokens. Give each quota a prefix of its own
    /// (for Redis: [`RedisStore::with_prefix`](crate::gcra::redis::RedisStore::with_prefix)).
    KeySpaceShared {
        /// The key space, as the store names it (for Redis: the prefix).
        key_space: String,
        /// The quota of the limiters that hold it.
        held_by: Box<super::Quota>,
        /// The quota of the limiter that was refused.
        refused: Box<super::Quota>,
    },
    /// A store URL that cannot be parsed. Use `redis://[user:password@]host:port[/db]` (or
    /// `rediss://` for TLS).
    InvalidUrl {
        /// What the parser said.
        reason: String,
    },
    /// A `rediss://` URL, but the crate was built without the `redis-tls` feature.
    TlsNotEnabled,
    /// A Redis Cluster store with no node URL.
    NoClusterNodes,
    /// A store timeout (per call, connect, node connect) or probe interval of zero.
    ZeroTimeout,
    /// A Redis store's `max_batch` of 0: a script call carries at least one decision (1 turns
    /// coalescing off).
    ZeroMaxBatch,
    /// A store key prefix that cannot be used.
    InvalidPrefix {
        /// Why, and what to change.
        reason: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroMaxKeys => {
                f.write_str("max_keys is 0: a keyed limiter needs room for at least one key (a two-tier limiter for at least one reservoir)")
            }
            ConfigError::ZeroBatch => {
                f.write_str("two-tier batch is 0: reserve at least 1 token per batch")
            }
            ConfigError::BatchAboveBurst { batch, burst } => write!(
                f,
                "two-tier batch of {batch} exceeds the quota's burst of {burst}: such a reservation is never \
                 granted; use a batch of at most {burst} (or raise the burst)"
            ),
            ConfigError::ThresholdNotBelowBatch {
                refill_below,
                batch,
            } => write!(
                f,
                "two-tier refill threshold {refill_below} is not below the batch {batch}: use a threshold \
                 below the batch"
            ),
            ConfigError::ZeroTokenAge => f.write_str(
                "two-tier max_token_age is zero: tokens would be stale on arrival; use a positive age",
            ),
            ConfigError::InvalidShare { share } => write!(
                f,
                "local-fallback share {share} is not a fraction in (0, 1]: use this instance's part of the \
                 quota, e.g. 0.25 for one of four instances"
            ),
            ConfigError::LocalQuota { share, source } => write!(
                f,
                "the local-fallback quota (a share of {share} of the global quota) is invalid: {source}; use a larger \
                 share, a larger burst, or FailurePolicy::FailOpen / FailClosed"
            ),
            ConfigError::StoreResolution(source) => {
                write!(f, "quota unusable at the store's resolution: {source}")
            }
            ConfigError::StoreWindowTooLong { window, max } => write!(
                f,
                "quota burst window {window:?} exceeds the store's maximum of {max:?} \
                 (timestamps must stay exact in Lua's doubles): lower the burst or shorten the period"
            ),
            ConfigError::KeySpaceShared {
                key_space,
                held_by,
                refused,
            } => write!(
                f,
                "the store's key space {key_space} already holds the state of limiters of \
                 another quota ({held_by:?}); a limiter of {refused:?} over it would spend the \
                 same keys: give each quota a prefix of its own (RedisStore::with_prefix, e.g. \
                 \"api:hour:\")"
            ),
            ConfigError::InvalidUrl { reason } => write!(
                f,
                "invalid Redis URL ({reason}): use redis://[user:password@]host:port[/db] or rediss:// for TLS"
            ),
            ConfigError::TlsNotEnabled => f.write_str(
                "a rediss:// (TLS) URL needs flowguard's `redis-tls` feature: enable it or use redis://",
            ),
            ConfigError::NoClusterNodes => {
                f.write_str("a Redis Cluster store needs at least one node URL")
            }
            ConfigError::ZeroTimeout => f.write_str(
                "a store timeout or probe interval is zero: every call would fail; use a positive duration",
            ),
            ConfigError::ZeroMaxBatch => f.write_str(
                "max_batch is 0: a script call carries at least one decision; use 1 to turn coalescing off",
            ),
            ConfigError::InvalidPrefix { reason } => write!(f, "invalid key prefix: {reason}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::LocalQuota { source, .. } | ConfigError::StoreResolution(source) => {
                Some(source)
            }
            _ => None,
        }
    }
}
