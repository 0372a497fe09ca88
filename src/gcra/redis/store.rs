//! [`RedisStore`]: GCRA state shared by every instance through Redis or Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use super::connection::{Connection, Target, Timeouts, is_auth_error};
use super::error::ConnectError;
use super::groups::Groups;
use super::key::{DEFAULT_PREFIX, KeySpace};

use super::script::{Call, parse_reply};
use crate::clock::Clock;
use crate::gcra::remote::{
    Circuit, Rejection, RemoteStore, StoreDecision, StoreError, Unavailable,
};
use crate::gcra::{CheckError, ConfigError, Gcra, Quota};

/// Default per-call timeout: 50 ms.
///
/// A healthy Redis answers the script in well under a millisecond on a LAN (p99 of a few ms under
/// load), so 50 ms never cuts off a working server, even through a GC pause of a client or a
/// cluster redirect. It is also small next to typical request budgets (hundreds of ms): when Redis
/// stalls, the requests it gates are delayed by at most this much before the failure policy
/// answers, instead of piling up behind a dead connection.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

/// Default timeout for establishing a connection: 2 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Default timeout for one connection attempt to one node: 250 ms.
///
/// TCP and the Redis handshake take a few milliseconds on a LAN. The cluster client holds every
/// request while it refreshes its slot map, and a refresh connects to nodes it lost; a node that
/// accepts connections but does not answer (a stopped process, a black-holed host) costs this much
/// per refresh, so it must stay short. Raise it for TLS over long distances.
pub const DEFAULT_NODE_CONNECT_TIMEOUT: Duration = Duration::from_millis(250);

/// Default interval between probes of a store that failed: 100 ms. While it fails, one call per
/// interval goes to Redis and the others are answered by the failure policy at once; the first
/// answer ends the degradation, so recovery takes at most about this long after Redis is back.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Default extra key lifetime in explicit-time mode: 1 hour.
pub const DEFAULT_EXPLICIT_TTL_SLACK: Duration = Duration::from_secs(3600);

/// The epoch of the store's timestamps: unix time 1,700,000,000 s (2023-11-14T22:13:20Z).
/// Microseconds since then stay below 2^53 (exact in Lua) for about 280 years.
pub const FLOWGUARD_EPOCH_UNIX_SECS: u64 = 1_700_000_000;

/// Timestamps above this (µs) could lose precision in Lua once a window is added.
const MAX_EXPLICIT_NOW_US: u64 = 1 << 52;

#[derive(Clone)]
enum TimeMode {
    Server,
    Explicit {
        clock: Arc<dyn Clock>,
        slack: Duration,
    },
}

/// A store of GCRA states in Redis: one string key per limited identity, decided by one O(1) Lua
/// script per call. Cheap to clone (clones share the connection).
///
/// * Standalone: [`RedisStore::builder`] (an auto-reconnecting multiplexed connection).
///   Redis Cluster: [`RedisStore::cluster_builder`]. AUTH and ACL users come from the URL
///   (`redis://user:password@host:6379`); `rediss://` needs the `redis-tls` feature.
/// * Time comes from the Redis server's `TIME` by default, so every instance decides against one
///   clock whatever its own clock's skew. [`explicit_time`](RedisStoreBuilder::explicit_time) passes
///   the caller's clock instead, for deterministic tests and simulations.
/// * Every call is bounded by [`timeout`](RedisStoreBuilder::timeout) ([`DEFAULT_TIMEOUT`]), and
///   so is every step inside the Redis client; a connection that keeps failing while Redis
///   answers is rebuilt (see [the module docs](super#redis-cluster-failover-and-isolation)).
///
/// The store is a [`RemoteStore`]: [`RemoteStore::decide`] is the raw call (it reports an
/// unavailable store as [`StoreError::Unavailable`]); a
/// [`RemoteRateLimiter`](crate::gcra::remote::RemoteRateLimiter) over it adds a quota and a
/// [`FailurePolicy`](crate::gcra::remote::FailurePolicy).
///
/// ```no_run
/// use flowguard::gcra::Quota;
/// use flowguard::gcra::redis::RedisStore;
/// use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379")
///     .prefix("api:")
///     .connect()
///     .await?;
/// let limiter = RemoteRateLimiter::builder(store, Quota::per_second(100)?)
///     .failure_policy(FailurePolicy::local_instances(4))
///     .build()?;
/// let decision = limiter.check_key(b"client-42").await?;
/// if !decision.allowed {
///     println!("429, Retry-After: {:?}", decision.retry_after_secs());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Connection,
    keys: KeySpace,
    timeout: Duration,
    time: TimeMode,
    groups: Arc<Groups>,
}

/// Configures and connects a [`RedisStore`]: [`RedisStore::builder`] (one server) or
/// [`RedisStore::cluster_builder`] (a Redis Cluster), then [`connect`](Self::connect).
#[must_use = "a builder does nothing until `connect` is called"]
#[derive(Clone)]
pub struct RedisStoreBuilder {
    target: Target,
    prefix: Vec<u8>,
    timeout: Duration,
    connect_timeout: Duration,
    node_connect_timeout: Duration,
    probe_interval: Duration,
    time: TimeMode,
}

impl RedisStoreBuilder {
    fn new(target: Target) -> RedisStoreBuilder {
        RedisStoreBuilder {
            target,
            prefix: DEFAULT_PREFIX.as_bytes().to_vec(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            node_connect_timeout: DEFAULT_NODE_CONNECT_TIMEOUT,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            time: TimeMode::Server,
        }
    }

    /// The prefix of every key (default `"flowguard:"`); binary-safe. See [`key`](super::key) for
    /// hash-tag rules in Redis Cluster.
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// The most one check may take, including a `NOSCRIPT` retry (default [`DEFAULT_TIMEOUT`]).
    ///
    /// The Redis client is configured with it too: it bounds every reply the client waits for
    /// (including its own slot-map and health queries) and every request with its redirects and
    /// retries, so no step inside the client can hang.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most establishing the store's connection may take as a whole: at
    /// [`connect`](Self::connect), and when a failing connection is rebuilt
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The most one connection attempt to one node may take, TCP and handshake (default
    /// [`DEFAULT_NODE_CONNECT_TIMEOUT`]): reconnects, the cluster client's connections to nodes,
    /// and the checks made when calls keep failing.
    pub fn node_connect_timeout(mut self, timeout: Duration) -> Self {
        self.node_connect_timeout = timeout;
        self
    }

    /// How often a failed store (a failed master of a cluster) is probed (default
    /// [`DEFAULT_PROBE_INTERVAL`]): the store's [`Circuit`].
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// Decide at the times `clock` reads (as microseconds) instead of the server's `TIME`.
    ///
    /// For deterministic tests and simulations only: in production, instances' clocks differ (and
    /// a monotonic clock's zero is per process), so instances would disagree about every key's
    /// state; the server's clock is the one clock they all share. Keys then live
    /// [`explicit_time_ttl_slack`](Self::explicit_time_ttl_slack) of real time beyond their
    /// simulated expiry, since Redis expires keys by its own clock. The local fallback (if any)
    /// reads the same clock.
    pub fn explicit_time(mut self, clock: impl Clock + 'static) -> Self {
        let slack = match &self.time {
            TimeMode::Explicit { slack, .. } => *slack,
            TimeMode::Server => DEFAULT_EXPLICIT_TTL_SLACK,
        };
        self.time = TimeMode::Explicit {
            clock: Arc::new(clock),
            slack,
        };
        self
    }

    /// In explicit-time mode, how much longer than their simulated lifetime keys live
    /// (default [`DEFAULT_EXPLICIT_TTL_SLACK`]). Ignored in server-time mode.
    pub fn explicit_time_ttl_slack(mut self, slack: Duration) -> Self {
        if let TimeMode::Explicit { slack: s, .. } = &mut self.time {
            *s = slack;
        }
        self
    }

    /// Validates the configuration and connects. Fails with a typed error on a bad configuration
    /// ([`ConnectError::Config`]), refused credentials ([`ConnectError::AuthFailed`]), or an
    /// unreachable server.
    pub async fn connect(self) -> Result<RedisStore, ConnectError> {
        let keys = self.validate()?;
        let conn = Connection::open(&self.target, self.timeouts()).await?;
        Ok(self.with_connection(keys, conn))
    }

    /// Validates the configuration and returns at once; the connection is established in the
    /// background on first use. Until Redis answers, checks are decided by the failure policy,
    /// so a service can start while Redis is down. An unreachable server or refused credentials
    /// show up in the first checks (degraded, or [`StoreError::Rejected`]), not here.
    pub async fn connect_lazy(self) -> Result<RedisStore, ConnectError> {
        let keys = self.validate()?;
        let conn = Connection::open_lazy(&self.target, self.timeouts())?;
        let store = self.with_connection(keys, conn);
        // A lazy cluster store groups its circuits by master once it can read the slot map.
        store.inner.conn.read_map_soon(&store.inner.groups);
        Ok(store)
    }

    fn validate(&self) -> Result<KeySpace, ConfigError> {
        if self.timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.node_connect_timeout.is_zero()
            || self.probe_interval.is_zero()
        {
            return Err(ConfigError::ZeroTimeout);
        }
        KeySpace::new(self.prefix.clone())
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            call: self.timeout,
            connect: self.connect_timeout,
            node_connect: self.node_connect_timeout,
        }
    }

    fn with_connection(self, keys: KeySpace, conn: Connection) -> RedisStore {
        let groups = if conn.is_cluster() {
            let groups = Groups::per_master(self.probe_interval);
            if let Some(map) = conn.slot_map() {
                groups.regroup(&map);
            }
            groups
        } else {
            Groups::single(self.probe_interval)
        };
        RedisStore {
            inner: Arc::new(Inner {
                conn,
                keys,
                timeout: self.timeout,
                time: self.time,
                groups: Arc::new(groups),
            }),
        }
    }
}

impl RedisStore {
    /// Starts configuring a store on one Redis server, e.g. `redis://user:pass@127.0.0.1:6379/0`.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Target::Standalone(url.into()))
    }

    /// Starts configuring a store on a Redis Cluster, given the URLs of one or more of its nodes
    /// (the rest are discovered).
    pub fn cluster_builder<I, S>(urls: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder::new(Target::Cluster(urls.into_iter().map(Into::into).collect()))
    }

    /// The script's call for `key`: one round trip, bounded by the timeout (including a
    /// `NOSCRIPT` retry).
    async fn call(&self, key: &[u8], rule: &Gcra, cost: u32) -> Result<StoreDecision, CheckError> {
        let inner = &*self.inner;
        let (now_us, extra_ttl_ms) = match &inner.time {
            TimeMode::Server => (None, 0),
            TimeMode::Explicit { clock, slack } => {
                let now = clock.now_nanos() / 1000;
                if now > MAX_EXPLICIT_NOW_US {
                    let why = Rejection::ClockOutOfRange { now_us: now };
                    return Err(StoreError::Rejected(why).into());
                }
                (
                    Some(now),
                    u64::try_from(slack.as_millis()).unwrap_or(u64::MAX),
                )
            }
        };
        let call = Call::new(key, rule, cost, now_us, extra_ttl_ms)?;
        let answer = tokio::time::timeout(inner.timeout, async {
            match inner.conn.query::<Vec<i64>>(&call.command(false)).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    inner.conn.query::<Vec<i64>>(&call.command(true)).await
                }
                other => other,
            }
        })
        .await;
        let reply = match answer {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                let error = classify(&e, key);
                if !matches!(error, StoreError::Unavailable(_)) {
                    // The server answered, if only with an error.
                    self.answered();
                }
                return Err(error.into());
            }
            Err(_) => {
                let why = Unavailable::Timeout {
                    after: inner.timeout,
                };
                return Err(StoreError::Unavailable(why).into());
            }
        };
        self.answered();
        let (decision, at) = parse_reply(&reply, rule, cost, key)?;
        Ok(StoreDecision::new(decision, Duration::from_micros(at)))
    }

    /// The server answered: a cluster store without a slot map reads one now.
    fn answered(&self) {
        let inner = &*self.inner;
        if inner.conn.needs_map() {
            inner.conn.read_map_soon(&inner.groups);
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &[u8] {
        self.inner.keys.prefix()
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The interval at which a failed store (a failed master of a cluster) is probed.
    pub fn probe_interval(&self) -> Duration {
        self.inner.groups.circuit().probe_interval()
    }

    /// Whether decisions use the server's clock (the default) rather than an explicit one.
    pub fn uses_server_time(&self) -> bool {
        matches!(self.inner.time, TimeMode::Server)
    }
}

/// Redis as the shared store of a [`RemoteRateLimiter`](crate::gcra::remote::RemoteRateLimiter):
/// keys are `prefix ‖ "=" ‖ key` (or a digest, see [`key`](super::key)), the rule is the quota in
/// microseconds ([`MAX_REDIS_WINDOW`](super::MAX_REDIS_WINDOW) at most), a cluster's circuit has a
/// group per master.
impl RemoteStore for RedisStore {
    type Key = Vec<u8>;

    /// The quota in the store's microsecond ticks, exact (the emission interval is a whole number
    /// of microseconds and a fraction, carried exactly by the script): `Gcra::with_resolution(quota,
    /// 1 µs)`. A burst window beyond [`MAX_REDIS_WINDOW`](super::MAX_REDIS_WINDOW) is
    /// [`ConfigError::StoreWindowTooLong`].
    fn rule(&self, quota: &Quota) -> Result<Gcra, ConfigError> {
        super::quota::rule(quota)
    }

    /// The Redis key that holds `key`'s state: prefix, a marker byte, and the key itself (or its
    /// SHA-1 when longer than [`MAX_KEY_LEN`](super::MAX_KEY_LEN) bytes or containing `{`).
    fn key(&self, key: &[u8]) -> Vec<u8> {
        self.inner.keys.key(key)
    }

    fn circuit(&self) -> &Circuit {
        self.inner.groups.circuit()
    }

    /// The key's master, as the slot map last read says (0 for a standalone store).
    fn group(&self, key: &Vec<u8>) -> usize {
        self.inner.groups.group(key)
    }

    /// One script call. `cost > burst` is
    /// [`GcraError::InsufficientCapacity`](crate::gcra::GcraError::InsufficientCapacity) without
    /// a round trip. A timeout or a connection failure is [`StoreError::Unavailable`]; a key of
    /// another type is [`StoreError::WrongType`], a string that is not a GCRA state
    /// [`StoreError::CorruptState`] (see the [module](super) on foreign values), a refused command
    /// (e.g. ACL) [`StoreError::Rejected`].
    async fn decide(
        &self,
        key: &Vec<u8>,
        rule: &Gcra,
        cost: u32,
    ) -> Result<StoreDecision, CheckError> {
        self.call(key, rule, cost).await
    }

    /// A probe failed again: check beside the connection whether it is what fails, and rebuild it.
    fn probe_failed(&self, key: &Vec<u8>) {
        self.inner.conn.check_after_failure(&self.inner.groups, key);
    }

    fn recovered(&self) {
        self.inner.conn.recovered();
    }

    fn explicit_clock(&self) -> Option<Arc<dyn Clock>> {
        match &self.inner.time {
            TimeMode::Server => None,
            TimeMode::Explicit { clock, .. } => Some(clock.clone()),
        }
    }

    fn topology(&self) -> &'static str {
        self.inner.conn.topology()
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("topology", &self.inner.conn.topology())
            .field("prefix", &String::from_utf8_lossy(self.inner.keys.prefix()))
            .field("timeout", &self.inner.timeout)
            .field("server_time", &self.uses_server_time())
            .finish_non_exhaustive()
    }
}

/// Sorts a Redis error into what the caller should do about it.
fn classify(e: &RedisError, key: &[u8]) -> StoreError {
    let answer = || e.to_string();
    if e.code() == Some("WRONGTYPE") {
        StoreError::WrongType {
            key: String::from_utf8_lossy(key).into_owned(),
        }
    } else if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || e.detail()
            .is_some_and(|d| d.contains("user executing the script"))
    {
        // ACL: NOPERM for EVALSHA/EVAL or the key; a plain ERR for commands the script calls.
        StoreError::Rejected(Rejection::Permission { answer: answer() })
    } else if is_auth_error(e) {
        StoreError::Rejected(Rejection::Credentials { answer: answer() })
    } else if matches!(
        e.kind(),
        ErrorKind::UnexpectedReturnType | ErrorKind::Parse | ErrorKind::InvalidClientConfig
    ) {
        StoreError::Rejected(Rejection::UnexpectedReply { answer: answer() })
    } else {
        tracing::debug!(error = %e, "Redis call failed; the failure policy answers");
        let why = if matches!(e.kind(), ErrorKind::Server(_)) {
            Unavailable::Server
        } else {
            Unavailable::Connection
        };
        StoreError::Unavailable(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified_by_kind_not_by_the_key_in_their_text() {
        // A connection failure whose message happens to name a key under the default prefix is
        // still a store that did not answer (the failure policy applies), not a refusal.
        let key = b"flowguard:=k";
        let reset = std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset while sending flowguard:=k",
        );
        assert_eq!(
            classify(&RedisError::from(reset), key),
            StoreError::Unavailable(Unavailable::Connection)
        );
        let unknown = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "flowguard: something".to_string(),
        ));
        assert_eq!(
            classify(&unknown, key),
            StoreError::Unavailable(Unavailable::Server)
        );
    }
}
