//! [`RedisTarget`]: where a [`Guard`](crate::Guard) keeps its quotas, read from one URL (feature
//! `redis`).

use std::fmt;

/// A Redis server or a Redis Cluster, read from one URL by [`RedisTarget::parse`]:
///
/// | URL | target |
/// |---|---|
/// | `redis://[user:password@]host:port[/db]` | one server |
/// | `rediss://…` | one server over TLS (feature `redis-tls`) |
/// | `redis+cluster://[user:password@]host1:port1,host2:port2,…` | a Redis Cluster, from one or more of its nodes (the rest are discovered) |
/// | `rediss+cluster://…` | a Redis Cluster over TLS |
///
/// A cluster URL is expanded into one `redis://` (or `rediss://`) URL per node, each with the
/// credentials given; the URLs themselves are checked when the store connects.
///
/// ```
/// use flowguard::RedisTarget;
///
/// let cluster = RedisTarget::parse("redis+cluster://app:secret@10.0.0.1:7000,10.0.0.2:7000")?;
/// assert_eq!(
///     cluster,
///     RedisTarget::Cluster {
///         nodes: vec![
///             "redis://app:secret@10.0.0.1:7000".to_owned(),
///             "redis://app:secret@10.0.0.2:7000".to_owned(),
///         ]
///     }
/// );
/// # Ok::<(), flowguard::RedisUrlError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One Redis server.
    Standalone {
        /// Its URL, `redis://` or `rediss://`.
        url: String,
    },
    /// A Redis Cluster.
    Cluster {
        /// The URLs of the nodes given, `redis://` or `rediss://`.
        nodes: Vec<String>,
    },
}

impl RedisTarget {
    /// Reads a `redis://`, `rediss://`, `redis+cluster://` or `rediss+cluster://` URL.
    ///
    /// # Errors
    /// [`RedisUrlError::UnknownScheme`] for any other scheme (or none),
    /// [`RedisUrlError::MissingNode`] for a cluster URL with no node or an empty entry in its
    /// list.
    pub fn parse(url: &str) -> Result<RedisTarget, RedisUrlError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(RedisUrlError::UnknownScheme {
                scheme: String::new(),
            });
        };
        let node_scheme = match scheme {
            "redis" | "rediss" => {
                return Ok(RedisTarget::Standalone {
                    url: url.to_owned(),
                });
            }
            "redis+cluster" => "redis",
            "rediss+cluster" => "rediss",
            other => {
                return Err(RedisUrlError::UnknownScheme {
                    scheme: other.to_owned(),
                });
            }
        };
        // Credentials are percent-encoded (RFC 3986), so the authority ends at the first `/`.
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (credentials, hosts) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let nodes: Vec<String> = hosts
            .split(',')
            .map(|host| match host.trim() {
                "" => Err(RedisUrlError::MissingNode),
                host => Ok(format!("{node_scheme}://{credentials}{host}{path}")),
            })
            .collect::<Result<_, _>>()?;
        Ok(RedisTarget::Cluster { nodes })
    }
}

/// Why a store URL could not be read; each variant says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisUrlError {
    /// The URL's scheme is none of `redis`, `rediss`, `redis+cluster`, `rediss+cluster`.
    UnknownScheme {
        /// The scheme given (empty when the URL has none).
        scheme: String,
    },
    /// A cluster URL without a node, or with an empty entry in its node list. (The URL is not
    /// repeated: it may hold a password.)
    MissingNode,
}

impl fmt::Display for RedisUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisUrlError::UnknownScheme { scheme } => write!(
                f,
                "unknown store URL scheme `{scheme}`: use redis://host:port, rediss://host:port (TLS), \
                 or redis+cluster://host1:port1,host2:port2 (rediss+cluster:// for TLS)"
            ),
            RedisUrlError::MissingNode => f.write_str(
                "the cluster URL lists no node, or an empty one: write \
                 redis+cluster://[user:password@]host1:port1,host2:port2",
            ),
        }
    }
}

impl std::error::Error for RedisUrlError {}
