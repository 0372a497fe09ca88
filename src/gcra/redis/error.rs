//! [`RedisStoreError`]: why a Redis store or limiter could not be set up, and what to change.

use std::fmt;
use std::time::Duration;

use super::policy::LocalShare;
use crate::gcra::{ConfigError, QuotaError};

/// A Redis store or limiter configuration that cannot work, or a server that refused to connect.
/// Each variant says what to change. (Errors of individual checks are [`GcraError`](crate::gcra::GcraError)s.)
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The URL could not be parsed. Use `redis://[user:password@]host:port[/db]` (or `rediss://` for TLS).
    InvalidUrl {
        /// What the parser said.
        reason: String,
    },
    /// A `rediss://` URL was given but the crate was built without the `redis-tls` feature.
    TlsNotEnabled,
    /// The server rejected the credentials (wrong password, unknown or disabled ACL user).
    AuthFailed {
        /// What the server said.
        reason: String,
    },
    /// The server could not be reached (refused, unreachable, or no answer within the connect timeout).
    Connect {
        /// What went wrong.
        reason: String,
    },
    /// A cluster store was configured with no node URL.
    NoClusterNodes,
    /// The per-call timeout (or connect timeout, or probe interval) was zero.
    ZeroTimeout,
    /// The key prefix cannot be used.
    InvalidPrefix {
        /// Why, and what to change.
        reason: String,
    },
    /// A local-fallback share that is not a fraction in `(0, 1]`.
    InvalidShare {
        /// The share given.
        share: f64,
    },
    /// The local-fallback quota derived from the global quota and this instance's share is invalid
    /// (typically: the share of the burst rounds down to zero tokens).
    LocalQuota {
        /// The share that was applied.
        share: LocalShare,
        /// Why the derived quota is invalid.
        source: QuotaError,
    },
    /// The local fallback limiter could not be built.
    LocalFallback(ConfigError),
    /// The quota cannot be kept exactly at the Redis store's microsecond resolution. Every valid
    /// [`Quota`](crate::gcra::Quota) can (intervals are kept as a whole number of microseconds and
    /// an exact fraction), so this is reported only if the store's resolution changes.
    Quota(QuotaError),
    /// The quota's burst window is longer than the Redis script can represent exactly.
    WindowTooLong {
        /// The quota's burst window.
        window: Duration,
        /// The longest supported window.
        max: Duration,
    },
}

impl fmt::Display for RedisStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisStoreError::InvalidUrl { reason } => write!(
                f,
                "invalid Redis URL ({reason}): use redis://[user:password@]host:port[/db] or rediss:// for TLS"
            ),
            RedisStoreError::TlsNotEnabled => {
                f.write_str("a rediss:// (TLS) URL needs flowguard's `redis-tls` feature: enable it or use redis://")
            }
            RedisStoreError::AuthFailed { reason } => write!(
                f,
                "Redis rejected the credentials ({reason}): check the user name and password in the URL \
                 (redis://user:password@host:port) and that the ACL user is enabled"
            ),
            RedisStoreError::Connect { reason } => {
                write!(f, "could not connect to Redis ({reason}): check the host, port and that the server is up")
            }
            RedisStoreError::NoClusterNodes => f.write_str("a Redis Cluster store needs at least one node URL"),
            RedisStoreError::ZeroTimeout => {
                f.write_str("a Redis store timeout is zero: every call would fail; use a positive duration")
            }
            RedisStoreError::InvalidPrefix { reason } => write!(f, "invalid key prefix: {reason}"),
            RedisStoreError::InvalidShare { share } => write!(
                f,
                "local-fallback share {share} is not a fraction in (0, 1]: use this instance's part of the \
                 quota, e.g. 0.25 for one of four instances"
            ),
            RedisStoreError::LocalQuota { share, source } => write!(
                f,
                "the local-fallback quota ({share:?} of the global quota) is invalid: {source}; use a larger \
                 share, a larger burst, or FailurePolicy::FailOpen / FailClosed"
            ),
            RedisStoreError::LocalFallback(source) => write!(f, "the local fallback limiter: {source}"),
            RedisStoreError::Quota(source) => write!(f, "quota unusable with the Redis store: {source}"),
            RedisStoreError::WindowTooLong { window, max } => write!(
                f,
                "quota burst window {window:?} exceeds the Redis store's maximum of {max:?} \
                 (timestamps must stay exact in Lua's doubles): lower the burst or shorten the period"
            ),
        }
    }
}

impl std::error::Error for RedisStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedisStoreError::LocalQuota { source, .. } | RedisStoreError::Quota(source) => {
                Some(source)
            }
            RedisStoreError::LocalFallback(source) => Some(source),
            _ => None,
        }
    }
}
