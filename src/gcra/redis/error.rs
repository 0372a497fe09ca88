//! [`ConnectError`]: why a Redis store could not be set up, and what to change.

use std::fmt;

use crate::gcra::ConfigError;

/// Why [`RedisStoreBuilder::connect`](super::RedisStoreBuilder::connect) returned no store: a
/// configuration that cannot work, or a server that refused or could not be reached. Each variant
/// says what to change. (Errors of individual checks are
/// [`CheckError`](crate::gcra::CheckError)s.)
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConnectError {
    /// The configuration cannot work (a bad URL, a zero timeout, an unusable prefix, …).
    Config(ConfigError),
    /// The server rejected the credentials (wrong password, unknown or disabled ACL user).
    AuthFailed {
        /// What the server said.
        reason: String,
    },
    /// The server could not be reached (refused, unreachable, or no answer within the connect
    /// timeout).
    Unreachable {
        /// What went wrong.
        reason: String,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Config(e) => e.fmt(f),
            ConnectError::AuthFailed { reason } => write!(
                f,
                "Redis rejected the credentials ({reason}): check the user name and password in the URL \
                 (redis://user:password@host:port) and that the ACL user is enabled"
            ),
            ConnectError::Unreachable { reason } => write!(
                f,
                "could not connect to Redis ({reason}): check the host, port and that the server is up"
            ),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for ConnectError {
    fn from(e: ConfigError) -> ConnectError {
        ConnectError::Config(e)
    }
}
