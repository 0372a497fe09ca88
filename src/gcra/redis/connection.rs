//! The connection to Redis: one auto-reconnecting multiplexed connection (standalone) or the
//! cluster client (slot routing, `MOVED`/`ASK`, failover). Both are cheap to clone and shared by
//! every task.

use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::{ClusterClientBuilder, ClusterConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind};

use super::error::RedisStoreError;

/// Where the store connects.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
}

#[derive(Clone)]
pub(crate) enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Connects, waiting at most `connect_timeout`, and checks the credentials.
    pub(crate) async fn open(
        target: &Target,
        connect_timeout: Duration,
    ) -> Result<Connection, RedisStoreError> {
        let connecting = async {
            let conn = match Clients::new(target, connect_timeout)? {
                Clients::Standalone(client, config) => Connection::Standalone(
                    ConnectionManager::new_with_config(client, config)
                        .await
                        .map_err(connect_error)?,
                ),
                Clients::Cluster(client) => {
                    Connection::Cluster(client.get_async_connection().await.map_err(connect_error)?)
                }
            };
            conn.verify_auth().await?;
            Ok(conn)
        };
        match tokio::time::timeout(connect_timeout, connecting).await {
            Ok(result) => result,
            Err(_) => Err(RedisStoreError::Connect {
                reason: format!("no connection within {connect_timeout:?}"),
            }),
        }
    }

    /// A connection that is established on first use: configuration errors are reported now,
    /// an unreachable server or refused credentials by the first checks.
    pub(crate) fn open_lazy(
        target: &Target,
        connect_timeout: Duration,
    ) -> Result<Connection, RedisStoreError> {
        Ok(match Clients::new(target, connect_timeout)? {
            Clients::Standalone(client, config) => Connection::Standalone(
                ConnectionManager::new_lazy_with_config(client, config).map_err(connect_error)?,
            ),
            Clients::Cluster(client) => {
                Connection::Cluster(client.get_pending_async_connection_with_config(
                    ClusterConfig::new().set_connection_timeout(connect_timeout),
                ))
            }
        })
    }

    /// Sends one command and reads its reply.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &::redis::Cmd) -> RedisResult<T> {
        match self {
            Connection::Standalone(c) => cmd.query_async(&mut c.clone()).await,
            Connection::Cluster(c) => cmd.query_async(&mut c.clone()).await,
        }
    }

    pub(crate) fn topology(&self) -> &'static str {
        match self {
            Connection::Standalone(_) => "standalone",
            Connection::Cluster(_) => "cluster",
        }
    }

    /// A server that requires a password accepts the connection of a client that sends none and
    /// answers `NOAUTH` to every command: find out now, not at the first check. A restricted ACL user
    /// may lack `PING` (`NOPERM`), which proves it is authenticated.
    async fn verify_auth(&self) -> Result<(), RedisStoreError> {
        match self.query::<()>(&::redis::cmd("PING")).await {
            Err(e) if is_auth_error(&e) => Err(RedisStoreError::AuthFailed {
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => Ok(()),
            Err(e) => Err(RedisStoreError::Connect {
                reason: e.to_string(),
            }),
            Ok(()) => Ok(()),
        }
    }
}

/// Validated clients, not yet connected.
enum Clients {
    Standalone(::redis::Client, ConnectionManagerConfig),
    Cluster(::redis::cluster::ClusterClient),
}

impl Clients {
    fn new(target: &Target, connect_timeout: Duration) -> Result<Clients, RedisStoreError> {
        match target {
            Target::Standalone(url) => {
                check_scheme(url)?;
                let client = ::redis::Client::open(url.as_str()).map_err(invalid_url)?;
                // Reconnect quickly: a failed attempt is retried once after 10-100 ms, then the next
                // call starts a new attempt. Calls are bounded by the store's own timeout anyway.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(None)
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(Duration::from_millis(100));
                Ok(Clients::Standalone(client, config))
            }
            Target::Cluster(urls) => {
                if urls.is_empty() {
                    return Err(RedisStoreError::NoClusterNodes);
                }
                for url in urls {
                    check_scheme(url)?;
                }
                let client = ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .connection_timeout(connect_timeout)
                    .retries(3)
                    .min_retry_wait(10)
                    .max_retry_wait(200)
                    .build()
                    .map_err(invalid_url)?;
                Ok(Clients::Cluster(client))
            }
        }
    }
}

fn check_scheme(url: &str) -> Result<(), RedisStoreError> {
    if url.starts_with("rediss://") && !cfg!(feature = "redis-tls") {
        return Err(RedisStoreError::TlsNotEnabled);
    }
    Ok(())
}

fn invalid_url(e: RedisError) -> RedisStoreError {
    RedisStoreError::InvalidUrl {
        reason: e.to_string(),
    }
}

fn connect_error(e: RedisError) -> RedisStoreError {
    if is_auth_error(&e) {
        RedisStoreError::AuthFailed {
            reason: e.to_string(),
        }
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        RedisStoreError::InvalidUrl {
            reason: e.to_string(),
        }
    } else {
        RedisStoreError::Connect {
            reason: e.to_string(),
        }
    }
}

/// Whether the server refused the credentials (`WRONGPASS`, `NOAUTH`, or a failed `AUTH`).
pub(crate) fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}
