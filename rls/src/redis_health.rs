//! [`RedisHealth`]: whether the configured Redis answers, for `/healthcheck`, learnt by a task of
//! its own on connections of its own, so that deciding a request costs nothing more.
//!
//! * Standalone: every [`PROBE_EVERY`] the server is sent `PING`; it is healthy when it answers
//!   `PONG` within [`PROBE_TIMEOUT`].
//! * Redis Cluster: the `--redis` nodes are asked `CLUSTER INFO` in turn; the cluster is healthy
//!   as soon as one of them reports `cluster_state:ok` (every slot served).
//!
//! A probe's connection is kept while it works and opened again after a failure. The state is
//! the last probe's; until the first probe (which runs at once) has answered, it is a problem
//! too, so that a healthy state always means that Redis answered a probe. Problems name the
//! Redis host (never the URL, which may hold a password) and the `--on-redis-failure` policy
//! that answers meanwhile.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use crate::backend::{OnFailure, RedisConfig};

/// How often Redis is probed.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// How long a probe (connecting included) may take before Redis counts as not answering: long
/// next to a healthy server's answer (well under a millisecond), so that a busy machine does not
/// read as an outage.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the configured Redis answers, as its probe task last saw it. Cheap to clone; every
/// clone shares the state.
#[derive(Clone, Debug)]
pub struct RedisHealth(Arc<Mutex<Option<String>>>);

impl RedisHealth {
    /// Starts probing `redis` (every [`PROBE_EVERY`], on a task of the current tokio runtime)
    /// and returns its state. The task stops when every clone of the state is dropped.
    pub fn spawn(redis: &RedisConfig) -> RedisHealth {
        let health = RedisHealth(Arc::new(Mutex::new(Some(
            "Redis has not been probed yet (the first probe runs at start)".to_string(),
        ))));
        let weak = Arc::downgrade(&health.0);
        let mut probe = Probe::new(redis);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(PROBE_EVERY);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut probed = false;
            loop {
                ticks.tick().await;
                let problem = probe.run().await;
                let Some(state) = weak.upgrade() else { return };
                let mut current = state.lock();
                // Logged when the state changes, and when the first probe finds a problem.
                let failed_before = probed && current.is_some();
                match &problem {
                    Some(problem) if !failed_before => {
                        tracing::warn!("/healthcheck fails: {problem}");
                    }
                    None if failed_before => {
                        tracing::info!("/healthcheck passes: Redis answers again");
                    }
                    _ => {}
                }
                *current = problem;
                probed = true;
            }
        });
        health
    }

    /// `None` while Redis answers; otherwise what is wrong, in one line for an operator.
    pub fn problem(&self) -> Option<String> {
        self.0.lock().clone()
    }
}

/// One node to probe: its client (from its URL), its host for messages, and the connection kept
/// between probes.
struct Node {
    client: Result<redis::Client, String>,
    host: String,
    connection: Option<MultiplexedConnection>,
}

struct Probe {
    nodes: Vec<Node>,
    cluster: bool,
    on_failure: OnFailure,
}

impl Probe {
    fn new(redis: &RedisConfig) -> Probe {
        let nodes = redis
            .urls
            .iter()
            .map(|url| {
                let client = redis::Client::open(url.as_str());
                let host = match &client {
                    Ok(client) => client.get_connection_info().addr().to_string(),
                    Err(_) => "(an invalid --redis URL)".to_string(),
                };
                Node {
                    client: client.map_err(|e| e.to_string()),
                    host,
                    connection: None,
                }
            })
            .collect();
        Probe {
            nodes,
            cluster: redis.cluster,
            on_failure: redis.on_failure,
        }
    }

    /// One probe: `None` if healthy, else the problem.
    async fn run(&mut self) -> Option<String> {
        let mut failures = Vec::new();
        for node in &mut self.nodes {
            let answer = tokio::time::timeout(PROBE_TIMEOUT, node.ask(self.cluster))
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} s", PROBE_TIMEOUT.as_secs())));
            let problem = match answer {
                Ok(None) => return None,
                Ok(Some(problem)) => problem,
                Err(error) => {
                    node.connection = None;
                    format!("Redis at {} does not answer: {error}", node.host)
                }
            };
            failures.push(problem);
        }
        Some(format!(
            "{}; requests are answered by --on-redis-failure {}",
            failures.join("; "),
            self.on_failure
        ))
    }
}

impl Node {
    /// Asks the node: `Ok(None)` healthy, `Ok(Some(problem))` answered but unhealthy (a cluster
    /// without every slot served), `Err` no answer.
    async fn ask(&mut self, cluster: bool) -> Result<Option<String>, String> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => {
                let client = self.client.as_ref().map_err(Clone::clone)?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(PROBE_TIMEOUT))
                    .set_response_timeout(Some(PROBE_TIMEOUT));
                let connection = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|e| e.to_string())?;
                self.connection.insert(connection)
            }
        };
        if cluster {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(connection)
                .await
                .map_err(|e| e.to_string())?;
            if info.lines().any(|l| l.trim() == "cluster_state:ok") {
                Ok(None)
            } else {
                Ok(Some(format!(
                    "the Redis Cluster node at {} does not report cluster_state:ok (some slots \
                     are not served)",
                    self.host
                )))
            }
        } else {
            let pong: String = redis::cmd("PING")
                .query_async(connection)
                .await
                .map_err(|e| e.to_string())?;
            if pong == "PONG" {
                Ok(None)
            } else {
                Err(format!("PING answered {pong:?}"))
            }
        }
    }
}
