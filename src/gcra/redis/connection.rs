//! The connection to Redis: one auto-reconnecting multiplexed connection (standalone) or the
//! cluster client (slot routing, `MOVED`/`ASK`, failover), shared by every task, and replaced by a
//! new one when it keeps failing while Redis answers (see [`rebuild`](super::rebuild)).
//!
//! Every operation of the client is bounded by redis-rs's own timeouts, not only by the caller
//! giving up: each reply (including the cluster client's `CLUSTER SLOTS` and `PING` checks) by
//! the call timeout, each request with its redirects and retries by the call timeout, and each
//! connection attempt to a node by the node connect timeout. So no internal step of the client can
//! hang, and a slot refresh holds requests for at most about one node connection attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use ::redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use ::redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue,
    IntoConnectionInfo, RedisError, RedisResult, ServerErrorKind, Value,
};
use parking_lot::RwLock;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::error::ConnectError;
use super::groups::Groups;
use super::rebuild::{MapAnswer, NodeAnswer, RebuildSchedule, Verdict, verdict};
use super::slot::{Node, SlotMap, slot};
use crate::gcra::ConfigError;

/// At most this many nodes are asked for the slot map at once during a check.
const MAP_SOURCES: usize = 4;

/// Where the store connects.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
}

/// How long each step may take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// One reply, and one request with its redirects and retries.
    pub(crate) call: Duration,
    /// Establishing the store's connection as a whole (startup, rebuild).
    pub(crate) connect: Duration,
    /// One connection attempt to one node.
    pub(crate) node_connect: Duration,
}

#[derive(Clone)]
enum Live {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

/// The store's connection; rebuilt in place when a check finds it failing while Redis answers.
pub(crate) struct Connection {
    shared: Arc<Shared>,
}

struct Shared {
    /// The configured URLs, parsed: where to start from, and the credentials and TLS settings
    /// for every node.
    seeds: Vec<ConnectionInfo>,
    cluster: bool,
    timeouts: Timeouts,
    live: RwLock<Live>,
    /// The slot map the live cluster client was built with (`None`: not read yet, or standalone).
    map: RwLock<Option<Arc<SlotMap>>>,
    /// Whether `map` holds a map (read without the lock on every call).
    mapped: AtomicBool,
    schedule: RebuildSchedule,
    origin: Instant,
}

impl Connection {
    /// Connects, waiting at most `timeouts.connect`, and checks the credentials.
    pub(crate) async fn open(
        target: &Target,
        timeouts: Timeouts,
    ) -> Result<Connection, ConnectError> {
        let seeds = seeds(target)?;
        let cluster = matches!(target, Target::Cluster(_));
        let connecting = async {
            let live = build(cluster, &seeds, timeouts)
                .await
                .map_err(connect_error)?;
            verify_auth(&live).await?;
            let map = match &live {
                Live::Cluster(c) => read_map(c, &seeds[0]).await,
                Live::Standalone(_) => None,
            };
            Ok::<_, ConnectError>((live, map))
        };
        let (live, map) = match tokio::time::timeout(timeouts.connect, connecting).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(ConnectError::Unreachable {
                    reason: format!("no connection within {:?}", timeouts.connect),
                });
            }
        };
        Ok(Connection::with(seeds, cluster, timeouts, live, map))
    }

    /// Loads `sources` into the script cache of every node (`SCRIPT LOAD`, which a cluster client
    /// sends to every node, replicas included), so that the first calls on a server that never
    /// ran them (new, restarted, flushed) do not each pay a `NOSCRIPT` round trip and an `EVAL`
    /// of the source within their call timeout. It uses a connection of its own, whose replies
    /// may take the connect timeout (a loaded server or client answers the first calls slowly),
    /// and the whole of it is bounded by the connect timeout. Best effort: a user without the
    /// `SCRIPT` permission, or a server that does not answer in time, leaves the `NOSCRIPT`
    /// fallback to load them. Returns whether every node loaded every source.
    pub(crate) async fn load_scripts(&self, sources: &[&str]) -> bool {
        let shared = &*self.shared;
        let patient = Timeouts {
            call: shared.timeouts.connect,
            ..shared.timeouts
        };
        let loading = async {
            let live = build(shared.cluster, &shared.seeds, patient).await?;
            for source in sources {
                let mut load = ::redis::cmd("SCRIPT");
                load.arg("LOAD").arg(*source);
                match live.clone() {
                    Live::Standalone(mut c) => load.query_async::<::redis::Value>(&mut c).await?,
                    Live::Cluster(mut c) => load.query_async::<::redis::Value>(&mut c).await?,
                };
            }
            Ok::<(), RedisError>(())
        };
        let loaded = tokio::time::timeout(shared.timeouts.connect, loading).await;
        if let Ok(Err(e)) = &loaded {
            tracing::debug!(error = %e, "scripts not loaded ahead; NOSCRIPT will load them");
        }
        matches!(loaded, Ok(Ok(())))
    }

    /// A connection that is established on first use: configuration errors are reported now,
    /// an unreachable server or refused credentials by the first checks.
    pub(crate) fn open_lazy(
        target: &Target,
        timeouts: Timeouts,
    ) -> Result<Connection, ConnectError> {
        let seeds = seeds(target)?;
        let live = match target {
            Target::Standalone(_) => {
                let client = ::redis::Client::open(seeds[0].clone()).map_err(invalid_url)?;
                Live::Standalone(
                    ConnectionManager::new_lazy_with_config(client, manager_config(timeouts))
                        .map_err(connect_error)?,
                )
            }
            Target::Cluster(_) => Live::Cluster(
                cluster_client(seeds.clone(), timeouts)
                    .map_err(invalid_url)?
                    .get_pending_async_connection_with_config(
                        ClusterConfig::new()
                            .set_connection_timeout(timeouts.node_connect)
                            .set_response_timeout(timeouts.call),
                    ),
            ),
        };
        let cluster = matches!(target, Target::Cluster(_));
        Ok(Connection::with(seeds, cluster, timeouts, live, None))
    }

    fn with(
        seeds: Vec<ConnectionInfo>,
        cluster: bool,
        timeouts: Timeouts,
        live: Live,
        map: Option<SlotMap>,
    ) -> Connection {
        Connection {
            shared: Arc::new(Shared {
                seeds,
                cluster,
                timeouts,
                live: RwLock::new(live),
                mapped: AtomicBool::new(map.is_some()),
                map: RwLock::new(map.map(Arc::new)),
                schedule: RebuildSchedule::new(),
                origin: Instant::now(),
            }),
        }
    }

    /// Sends one command and reads its reply.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &::redis::Cmd) -> RedisResult<T> {
        let live = self.shared.live.read().clone();
        match live {
            Live::Standalone(mut c) => cmd.query_async(&mut c).await,
            Live::Cluster(mut c) => cmd.query_async(&mut c).await,
        }
    }

    /// Sends one command to the master serving `slot` (as the cluster client knows it), whatever
    /// keys it names; a standalone connection sends it to its server.
    pub(crate) async fn query_at<T: FromRedisValue>(
        &self,
        cmd: &::redis::Cmd,
        slot: u16,
    ) -> RedisResult<T> {
        let live = self.shared.live.read().clone();
        match live {
            Live::Standalone(mut c) => cmd.query_async(&mut c).await,
            Live::Cluster(mut c) => {
                let route = Route::new(slot, SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                // A routed command's error reply comes back as a value.
                let reply = c
                    .route_command(cmd.clone(), routing)
                    .await?
                    .extract_error()?;
                T::from_redis_value(reply).map_err(RedisError::from)
            }
        }
    }

    pub(crate) fn topology(&self) -> &'static str {
        if self.shared.cluster {
            "cluster"
        } else {
            "standalone"
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        self.shared.cluster
    }

    /// The slot map the connection was built with, if read.
    pub(crate) fn slot_map(&self) -> Option<Arc<SlotMap>> {
        self.shared.map.read().clone()
    }

    /// A call for `key` (a store key) failed again after a failure: unless a check is running or
    /// the wait after the last one lasts, checks in the background whether the connection is what
    /// fails, and if so replaces it and lets the circuit of `groups` probe at once.
    pub(crate) fn check_after_failure(&self, groups: &Arc<Groups>, key: &[u8]) {
        let shared = &self.shared;
        if !shared.schedule.try_start(shared.now()) {
            return;
        }
        let (shared, groups, key) = (shared.clone(), groups.clone(), key.to_vec());
        tokio::spawn(async move {
            let (verdict, fresh) = shared.check(&key).await;
            if verdict == Verdict::Rebuild {
                shared.rebuild(&groups, fresh).await;
            }
            shared.schedule.finished(shared.now());
        });
    }

    /// The store answered after failing: the next failure is checked without waiting.
    pub(crate) fn recovered(&self) {
        self.shared.schedule.reset();
    }

    /// Whether this is a cluster connection without a slot map yet (made lazily, or the map
    /// could not be read): the store's circuits cannot be grouped by master until it has one.
    pub(crate) fn needs_map(&self) -> bool {
        self.shared.cluster && !self.shared.mapped.load(Ordering::Relaxed)
    }

    /// Reads the slot map in the background (unless a check runs or is due later) and groups
    /// `groups` by it.
    pub(crate) fn read_map_soon(&self, groups: &Arc<Groups>) {
        if !self.shared.schedule.try_start(self.shared.now()) {
            return;
        }
        let (shared, groups) = (self.shared.clone(), groups.clone());
        tokio::spawn(async move {
            let live = shared.live.read().clone();
            if let Live::Cluster(c) = live
                && let Some(map) = read_map(&c, &shared.seeds[0]).await
            {
                shared.install_map(&groups, map);
            }
            shared.schedule.finished(shared.now());
        });
    }
}

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn install_map(&self, groups: &Groups, map: SlotMap) {
        groups.regroup(&map);
        *self.map.write() = Some(Arc::new(map));
        self.mapped.store(true, Ordering::Relaxed);
    }

    /// Asks the node that should serve `key`, and (cluster) other nodes for the slot map, on fresh
    /// connections; returns the verdict and the fresh map, if any.
    async fn check(&self, key: &[u8]) -> (Verdict, Option<SlotMap>) {
        let current = self.map.read().clone();
        let owner = match (&current, self.cluster) {
            (_, false) => Some(self.seeds[0].clone()),
            (Some(map), true) => map.master_of(slot(key)).map(|n| at(&self.seeds[0], n)),
            (None, true) => None,
        };
        let node = async {
            match owner.clone() {
                Some(info) => ask_node(info, key.to_vec(), self.timeouts).await,
                None => NodeAnswer::Silent,
            }
        };
        let map = async {
            if !self.cluster {
                return (MapAnswer::NotCluster, None);
            }
            let sources = self.map_sources(current.as_deref(), owner.as_ref());
            match fetch_map(sources, self.timeouts).await {
                None => (MapAnswer::Unavailable, None),
                Some(fresh) => {
                    let same = current.as_deref().is_some_and(|c| c.same_masters(&fresh));
                    let answer = if same {
                        MapAnswer::Unchanged
                    } else {
                        MapAnswer::Changed
                    };
                    (answer, Some(fresh))
                }
            }
        };
        // A map naming another master settles it: do not wait for a silent node's timeout.
        tokio::pin!(node, map);
        let (mut node_answer, mut map_answer) = (None, None);
        loop {
            tokio::select! {
                n = &mut node, if node_answer.is_none() => node_answer = Some(n),
                m = &mut map, if map_answer.is_none() => map_answer = Some(m),
            }
            if let Some((MapAnswer::Changed, _)) = &map_answer {
                return (Verdict::Rebuild, map_answer.and_then(|(_, fresh)| fresh));
            }
            if let (Some(node), Some((map, fresh))) = (node_answer, &map_answer) {
                let (map, fresh) = (*map, fresh.clone());
                let verdict = verdict(node, map);
                tracing::debug!(?node, ?map, ?verdict, "checked a failing Redis connection");
                return (verdict, fresh);
            }
        }
    }

    /// Nodes to ask for the slot map: the known ones other than the failing master, then the
    /// configured ones.
    fn map_sources(
        &self,
        current: Option<&SlotMap>,
        failing: Option<&ConnectionInfo>,
    ) -> Vec<ConnectionInfo> {
        let known = current
            .map(SlotMap::nodes)
            .unwrap_or_default()
            .into_iter()
            .map(|n| at(&self.seeds[0], &n));
        let mut sources: Vec<ConnectionInfo> = Vec::new();
        for info in known.chain(self.seeds.iter().cloned()) {
            let failing = failing.is_some_and(|f| f.addr() == info.addr());
            if !failing && !sources.iter().any(|s| s.addr() == info.addr()) {
                sources.push(info);
            }
        }
        sources.truncate(MAP_SOURCES);
        sources
    }

    /// Builds a new client (from the nodes of `fresh`, if given) and puts it in place of the live
    /// one; the old one ends when its last call does.
    async fn rebuild(&self, groups: &Groups, fresh: Option<SlotMap>) {
        let nodes = match &fresh {
            Some(map) => map.nodes().iter().map(|n| at(&self.seeds[0], n)).collect(),
            None => self.seeds.clone(),
        };
        let building = async {
            let live = build(self.cluster, &nodes, self.timeouts).await?;
            let map = match (&live, fresh) {
                (Live::Cluster(_), Some(map)) => Some(map),
                (Live::Cluster(c), None) => read_map(c, &self.seeds[0]).await,
                (Live::Standalone(_), _) => None,
            };
            Ok::<_, RedisError>((live, map))
        };
        match tokio::time::timeout(self.timeouts.connect, building).await {
            Ok(Ok((live, map))) => {
                *self.live.write() = live;
                if let Some(map) = map {
                    self.install_map(groups, map);
                }
                groups.circuit().probe_now();
                tracing::info!(
                    topology = if self.cluster {
                        "cluster"
                    } else {
                        "standalone"
                    },
                    "Redis connection rebuilt: it failed while Redis answered or its master changed"
                );
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "Redis connection rebuild failed"),
            Err(_) => tracing::debug!("Redis connection rebuild timed out"),
        }
    }
}

/// The configured URLs, validated and parsed.
fn seeds(target: &Target) -> Result<Vec<ConnectionInfo>, ConfigError> {
    let urls = match target {
        Target::Standalone(url) => std::slice::from_ref(url),
        Target::Cluster(urls) if urls.is_empty() => return Err(ConfigError::NoClusterNodes),
        Target::Cluster(urls) => urls.as_slice(),
    };
    urls.iter()
        .map(|url| {
            if url.starts_with("rediss://") && !cfg!(feature = "redis-tls") {
                return Err(ConfigError::TlsNotEnabled);
            }
            url.as_str().into_connection_info().map_err(invalid_url)
        })
        .collect()
}

/// The connection settings of `seed` (credentials, database, TLS) for `node`.
fn at(seed: &ConnectionInfo, node: &Node) -> ConnectionInfo {
    let addr = match seed.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: node.host.clone(),
            port: node.port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(node.host.clone(), node.port),
    };
    seed.clone().set_addr(addr)
}

/// How many store timeouts a check may wait in all, and a standalone connection for one reply.
/// The store bounds each check itself (from the server's last answer to the calls it waits
/// behind, see `RedisStoreBuilder::timeout`), and gives up within one timeout when the server
/// stops answering; the client's own bound matches the store's cap, so that a reply a busy client
/// reads late, while the server keeps answering, is not cut off before the store judged it.
pub(super) const REPLY_TIMEOUTS: u32 = 20;

fn manager_config(timeouts: Timeouts) -> ConnectionManagerConfig {
    // A failed attempt is retried once after 10-100 ms, then the next call starts a new attempt.
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeouts.node_connect))
        .set_response_timeout(Some(timeouts.call.saturating_mul(REPLY_TIMEOUTS)))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_millis(100))
}

fn cluster_client(nodes: Vec<ConnectionInfo>, timeouts: Timeouts) -> RedisResult<ClusterClient> {
    ClusterClientBuilder::new(nodes)
        .connection_timeout(timeouts.node_connect)
        // Per reply, and (the overall timeout follows it) per request with redirects and retries.
        .response_timeout(timeouts.call)
        .retries(3)
        .min_retry_wait(10)
        .max_retry_wait(200)
        .build()
}

/// Connects a new client to `nodes` (the first one for standalone).
async fn build(cluster: bool, nodes: &[ConnectionInfo], timeouts: Timeouts) -> RedisResult<Live> {
    if cluster {
        let client = cluster_client(nodes.to_vec(), timeouts)?;
        Ok(Live::Cluster(client.get_async_connection().await?))
    } else {
        let client = ::redis::Client::open(nodes[0].clone())?;
        Ok(Live::Standalone(
            ConnectionManager::new_with_config(client, manager_config(timeouts)).await?,
        ))
    }
}

/// The slot map, as a node the cluster client picks reports it.
async fn read_map(client: &ClusterConnection, seed: &ConnectionInfo) -> Option<SlotMap> {
    let mut client = client.clone();
    let reply = client
        .route_command(
            ::redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await
        .ok()?;
    SlotMap::parse(&reply, &host(seed))
}

fn host(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
        _ => String::new(),
    }
}

/// A fresh connection to one node, bounded by the node connect and call timeouts.
async fn fresh(info: ConnectionInfo, timeouts: Timeouts) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeouts.node_connect))
        .set_response_timeout(Some(timeouts.call));
    ::redis::Client::open(info)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Asks a node for `key` (`GET`, read-only) on a fresh connection.
async fn ask_node(info: ConnectionInfo, key: Vec<u8>, timeouts: Timeouts) -> NodeAnswer {
    let asking = async {
        let mut conn = fresh(info, timeouts).await?;
        ::redis::cmd("GET")
            .arg(key)
            .query_async::<Value>(&mut conn)
            .await
    };
    let bound = timeouts.node_connect + timeouts.call;
    match tokio::time::timeout(bound, asking).await {
        Ok(Ok(_)) => NodeAnswer::Served,
        Ok(Err(e)) => match e.kind() {
            ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
                NodeAnswer::Redirected
            }
            ErrorKind::Server(
                ServerErrorKind::ClusterDown
                | ServerErrorKind::TryAgain
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading,
            ) => NodeAnswer::Refused,
            // Any other reply (e.g. NOPERM, or refused credentials) proves the node is listening.
            ErrorKind::Server(_) | ErrorKind::AuthenticationFailed => NodeAnswer::Served,
            _ => NodeAnswer::Silent,
        },
        Err(_) => NodeAnswer::Silent,
    }
}

/// The first slot map any of `sources` reports on a fresh connection.
async fn fetch_map(sources: Vec<ConnectionInfo>, timeouts: Timeouts) -> Option<SlotMap> {
    let mut asking = JoinSet::new();
    for info in sources {
        asking.spawn(async move {
            let host = host(&info);
            let mut conn = fresh(info, timeouts).await.ok()?;
            let reply = ::redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Value>(&mut conn)
                .await
                .ok()?;
            SlotMap::parse(&reply, &host)
        });
    }
    let bound = timeouts.node_connect + timeouts.call;
    tokio::time::timeout(bound, async {
        while let Some(answer) = asking.join_next().await {
            if let Ok(Some(map)) = answer {
                return Some(map);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
}

/// A server that requires a password accepts the connection of a client that sends none and
/// answers `NOAUTH` to every command: find out now, not at the first check. A restricted ACL user
/// may lack `PING` (`NOPERM`), which proves it is authenticated.
async fn verify_auth(live: &Live) -> Result<(), ConnectError> {
    let ping = ::redis::cmd("PING");
    let answer: RedisResult<()> = match live.clone() {
        Live::Standalone(mut c) => ping.query_async(&mut c).await,
        Live::Cluster(mut c) => ping.query_async(&mut c).await,
    };
    match answer {
        Err(e) if is_auth_error(&e) => Err(ConnectError::AuthFailed {
            reason: e.to_string(),
        }),
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => Ok(()),
        Err(e) => Err(ConnectError::Unreachable {
            reason: e.to_string(),
        }),
        Ok(()) => Ok(()),
    }
}

fn invalid_url(e: RedisError) -> ConfigError {
    ConfigError::InvalidUrl {
        reason: e.to_string(),
    }
}

fn connect_error(e: RedisError) -> ConnectError {
    if is_auth_error(&e) {
        ConnectError::AuthFailed {
            reason: e.to_string(),
        }
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        ConnectError::Config(invalid_url(e))
    } else {
        ConnectError::Unreachable {
            reason: e.to_string(),
        }
    }
}

/// Whether the server refused the credentials (`WRONGPASS`, `NOAUTH`, or a failed `AUTH`).
pub(crate) fn is_auth_error(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}
