//! [`RedisStore`]: GCRA state shared by every instance through Redis or Redis Cluster.

use std::sync::Arc;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use super::circuit::{Circuit, Gate};
use super::connection::{Connection, Target, Timeouts, is_auth_error};
use super::error::RedisStoreError;
use super::key::{DEFAULT_PREFIX, KeySpace};
use super::outage_log::OutageLog;
use super::policy::FailurePolicy;
use super::quota::RedisQuota;
use super::script::{Call, parse_reply};
use crate::gcra::{Clock, Decision, GcraError, MonotonicClock};

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
/// * Standalone: [`RedisStore::standalone`] (an auto-reconnecting multiplexed connection).
///   Redis Cluster: [`RedisStore::cluster`]. AUTH and ACL users come from the URL
///   (`redis://user:password@host:6379`); `rediss://` needs the `redis-tls` feature.
/// * Time comes from the Redis server's `TIME` by default, so every instance decides against one
///   clock whatever its own clock's skew. [`explicit_time`](RedisStoreBuilder::explicit_time) passes
///   the caller's clock instead, for deterministic tests and simulations.
/// * Every call is bounded by [`timeout`](RedisStoreBuilder::timeout) ([`DEFAULT_TIMEOUT`]), and
///   so is every step inside the Redis client; a connection that keeps failing while Redis
///   answers is rebuilt (see [the module docs](super#redis-cluster-failover-and-isolation)).
///
/// [`RedisStore::check`] is the raw call (it reports an unavailable store as
/// [`GcraError::StoreUnavailable`]); [`RedisRateLimiter`](super::RedisRateLimiter) adds a quota and
/// the [`FailurePolicy`].
///
/// ```no_run
/// use flowguard::gcra::Quota;
/// use flowguard::gcra::redis::{FailurePolicy, RedisRateLimiter, RedisStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::standalone("redis://127.0.0.1:6379")
///     .prefix("api:")
///     .failure_policy(FailurePolicy::local_instances(4))
///     .connect()
///     .await?;
/// let limiter = RedisRateLimiter::new(store, Quota::per_second(100)?)?;
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
    policy: FailurePolicy,
    time: TimeMode,
    circuit: Arc<Circuit>,
    log: OutageLog,
}

/// What [`RedisStore::check`] returns: the decision, and the time the script decided at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreDecision {
    /// The decision, never degraded.
    pub decision: Decision,
    /// When the script decided: since [`FLOWGUARD_EPOCH_UNIX_SECS`] by the server's clock, or
    /// the explicit clock's reading in explicit-time mode.
    pub at: Duration,
}

/// Configures and connects a [`RedisStore`].
#[derive(Clone)]
pub struct RedisStoreBuilder {
    target: Target,
    prefix: Vec<u8>,
    timeout: Duration,
    connect_timeout: Duration,
    node_connect_timeout: Duration,
    probe_interval: Duration,
    policy: FailurePolicy,
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
            policy: FailurePolicy::default(),
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

    /// How often a failed store is probed (default [`DEFAULT_PROBE_INTERVAL`]).
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// What limiters over this store answer when it does not (default [`FailurePolicy::FailOpen`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
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

    /// Validates the configuration and connects. Fails with a typed error on a bad URL, refused
    /// credentials ([`RedisStoreError::AuthFailed`]), or an unreachable server.
    pub async fn connect(self) -> Result<RedisStore, RedisStoreError> {
        let keys = self.validate()?;
        let conn = Connection::open(&self.target, self.timeouts()).await?;
        Ok(self.with_connection(keys, conn))
    }

    /// Validates the configuration and returns at once; the connection is established in the
    /// background on first use. Until Redis answers, checks are decided by the failure policy,
    /// so a service can start while Redis is down. An unreachable server or refused credentials
    /// show up in the first checks (degraded, or [`GcraError::StoreRejected`]), not here.
    pub async fn connect_lazy(self) -> Result<RedisStore, RedisStoreError> {
        let keys = self.validate()?;
        let conn = Connection::open_lazy(&self.target, self.timeouts())?;
        let store = self.with_connection(keys, conn);
        // A lazy cluster store groups its circuits by master once it can read the slot map.
        store.inner.conn.read_map_soon(&store.inner.circuit);
        Ok(store)
    }

    fn validate(&self) -> Result<KeySpace, RedisStoreError> {
        if self.timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.node_connect_timeout.is_zero()
            || self.probe_interval.is_zero()
        {
            return Err(RedisStoreError::ZeroTimeout);
        }
        self.policy.validate()?;
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
        let log = OutageLog::new(conn.topology());
        let circuit = if conn.is_cluster() {
            let circuit = Circuit::per_master(self.probe_interval);
            if let Some(map) = conn.slot_map() {
                circuit.regroup(&map);
            }
            circuit
        } else {
            Circuit::single(self.probe_interval)
        };
        RedisStore {
            inner: Arc::new(Inner {
                conn,
                keys,
                timeout: self.timeout,
                policy: self.policy,
                time: self.time,
                circuit: Arc::new(circuit),
                log,
            }),
        }
    }
}

impl RedisStore {
    /// Starts configuring a store on one Redis server, e.g. `redis://user:pass@127.0.0.1:6379/0`.
    pub fn standalone(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder::new(Target::Standalone(url.into()))
    }

    /// Starts configuring a store on a Redis Cluster, given the URLs of one or more of its nodes
    /// (the rest are discovered).
    pub fn cluster<I, S>(urls: I) -> RedisStoreBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedisStoreBuilder::new(Target::Cluster(urls.into_iter().map(Into::into).collect()))
    }

    /// Connects to one Redis server with the default configuration.
    pub async fn connect(url: &str) -> Result<RedisStore, RedisStoreError> {
        RedisStore::standalone(url).connect().await
    }

    /// Decides `cost` tokens for `key` under `quota` in Redis, without a failure policy.
    ///
    /// `cost > burst` is [`GcraError::InsufficientCapacity`] without a round trip. A timeout, a
    /// connection failure, or a store that failed within the last probe interval is
    /// [`GcraError::StoreUnavailable`]; a key of another type is [`GcraError::WrongType`], a string
    /// that is not a GCRA state [`GcraError::CorruptState`] (see the [module](super) on foreign
    /// values), a refused command (e.g. ACL) [`GcraError::StoreRejected`].
    pub async fn check(
        &self,
        key: &[u8],
        quota: &RedisQuota,
        cost: u32,
    ) -> Result<StoreDecision, GcraError> {
        let gcra = quota.gcra();
        if cost > gcra.burst() {
            return Err(GcraError::InsufficientCapacity {
                cost,
                burst: gcra.burst(),
            });
        }
        let inner = &*self.inner;
        let store_key = inner.keys.key(key);
        let group = inner.circuit.group(&store_key);
        let gate = inner.circuit.gate(group);
        if gate == Gate::Open {
            // Answered without I/O: spend cooperative budget so a caller looping on checks still
            // yields, and the task awaiting the probe's reply gets to run.
            tokio::task::coop::consume_budget().await;
            return Err(GcraError::StoreUnavailable {
                reason: format!(
                    "Redis failed to answer recently; it is probed again every {:?}",
                    inner.circuit.probe_interval()
                ),
            });
        }
        let (now_us, extra_ttl_ms) = match &inner.time {
            TimeMode::Server => (None, 0),
            TimeMode::Explicit { clock, slack } => {
                let now = clock.now_nanos() / 1000;
                if now > MAX_EXPLICIT_NOW_US {
                    return Err(GcraError::StoreRejected {
                        reason: format!(
                            "the explicit clock reads {now} µs, beyond 2^52 µs where Lua loses precision; \
                             start the clock nearer zero"
                        ),
                    });
                }
                (
                    Some(now),
                    u64::try_from(slack.as_millis()).unwrap_or(u64::MAX),
                )
            }
        };
        let call = Call::new(&store_key, gcra, cost, now_us, extra_ttl_ms)?;
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
                return Err(self.failed(group, gate, &store_key, classify(&e, &store_key)));
            }
            Err(_) => {
                let reason = format!("no answer within {:?}", inner.timeout);
                let error = GcraError::StoreUnavailable { reason };
                return Err(self.failed(group, gate, &store_key, error));
            }
        };
        self.answered(group);
        let (decision, at) = parse_reply(&reply, gcra, cost, &store_key)?;
        Ok(StoreDecision {
            decision,
            at: Duration::from_micros(at),
        })
    }

    /// Opens the circuit when the store is unavailable; passes the error on. A probe that fails
    /// (the second failure in a row) has the connection checked, and rebuilt if it is what fails.
    fn failed(&self, group: usize, gate: Gate, key: &[u8], error: GcraError) -> GcraError {
        let inner = &*self.inner;
        if matches!(error, GcraError::StoreUnavailable { .. }) {
            inner.circuit.failed(group);
            if gate == Gate::Probe {
                inner.conn.check_after_failure(&inner.circuit, key);
            }
        } else {
            // The server answered, if only with an error: it is reachable again.
            self.answered(group);
        }
        error
    }

    /// Records an answer of the store for `group`.
    fn answered(&self, group: usize) {
        let inner = &*self.inner;
        if inner.circuit.answered(group) {
            inner.log.recovered();
            inner.conn.recovered();
        }
        if inner.conn.needs_map() {
            inner.conn.read_map_soon(&inner.circuit);
        }
    }

    /// The Redis key that holds `key`'s state: prefix, a marker byte, and the key itself (or its
    /// SHA-1 when longer than [`MAX_KEY_LEN`](super::MAX_KEY_LEN) bytes or containing `{`).
    pub fn key_for(&self, key: &[u8]) -> Vec<u8> {
        self.inner.keys.key(key)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &[u8] {
        self.inner.keys.prefix()
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The interval at which a failed store is probed.
    pub fn probe_interval(&self) -> Duration {
        self.inner.circuit.probe_interval()
    }

    /// The failure policy limiters over this store apply.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.policy
    }

    /// Whether decisions use the server's clock (the default) rather than an explicit one.
    pub fn uses_server_time(&self) -> bool {
        matches!(self.inner.time, TimeMode::Server)
    }

    /// The clock a local fallback should read: the explicit clock, or a fresh monotonic one.
    pub(crate) fn local_clock(&self) -> Arc<dyn Clock> {
        match &self.inner.time {
            TimeMode::Server => Arc::new(MonotonicClock::new()),
            TimeMode::Explicit { clock, .. } => clock.clone(),
        }
    }

    /// Counts and (rate-limited) logs one decision made by `policy`.
    pub(crate) fn report_degraded(&self, policy: &'static str, reason: &str) {
        self.inner.log.degraded(policy, reason);
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("topology", &self.inner.conn.topology())
            .field("prefix", &String::from_utf8_lossy(self.inner.keys.prefix()))
            .field("timeout", &self.inner.timeout)
            .field("policy", &self.inner.policy)
            .field("server_time", &self.uses_server_time())
            .finish_non_exhaustive()
    }
}

/// Sorts a Redis error into what the caller should do about it.
fn classify(e: &RedisError, key: &[u8]) -> GcraError {
    let text = e.to_string();
    let key = || String::from_utf8_lossy(key).into_owned();
    if e.code() == Some("WRONGTYPE") || text.contains("WRONGTYPE") {
        GcraError::WrongType { key: key() }
    } else if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || text.contains("user executing the script")
    {
        // ACL: NOPERM for EVALSHA/EVAL or the key; a plain ERR for commands the script calls.
        GcraError::StoreRejected {
            reason: format!(
                "{text}: the ACL user needs +evalsha +eval +get +set +time and access to the prefix's keys \
                 (e.g. ~flowguard:*)"
            ),
        }
    } else if is_auth_error(e) {
        GcraError::StoreRejected {
            reason: format!("{text}: check the user name and password in the URL"),
        }
    } else if matches!(
        e.kind(),
        ErrorKind::UnexpectedReturnType | ErrorKind::Parse | ErrorKind::InvalidClientConfig
    ) {
        GcraError::StoreRejected { reason: text }
    } else {
        GcraError::StoreUnavailable { reason: text }
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
        assert!(matches!(
            classify(&RedisError::from(reset), key),
            GcraError::StoreUnavailable { .. }
        ));
        let unknown = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "flowguard: something".to_string(),
        ));
        assert!(matches!(
            classify(&unknown, key),
            GcraError::StoreUnavailable { .. }
        ));
    }
}
