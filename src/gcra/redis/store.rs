//! [`RedisStore`]: GCRA state shared by every instance through Redis or Redis Cluster.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ::redis::{Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, ServerErrorKind, Value};

use super::batch::{Answer, Caller};
use super::connection::{Connection, REPLY_TIMEOUTS, Target, Timeouts, is_auth_error};
use super::deadline::{while_answered, within};
use super::error::ConnectError;
use super::groups::Groups;
use super::key::{DEFAULT_PREFIX, KeySpace};
use super::lanes::Lanes;
use super::lone;
use super::script::{Keys, Mode, Outcome, Request, command, parse_all, parse_replies};
use super::slot::slot;
use crate::clock::Clock;
use crate::gcra::remote::{
    Circuit, DecideAllError, KeySpaceClaim, Rejection, RemoteStore, StoreDecision, StoreError,
    StoreItem, Unavailable,
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

/// Default bound on the decisions one script call carries: 32.
///
/// Decisions waiting for the same connection (standalone) or master (cluster) while a call is in
/// flight go together in the next call (see [`RedisStoreBuilder::max_batch`]). Past a few dozen,
/// a call's fixed cost is spread so thin that larger calls save little Redis CPU per decision,
/// while every decision of a call waits for the whole call.
pub const DEFAULT_MAX_BATCH: usize = 32;

/// Default extra key lifetime in explicit-time mode: 1 hour.
pub const DEFAULT_EXPLICIT_TTL_SLACK: Duration = Duration::from_secs(3600);

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
/// * Every call is bounded by [`timeout`](RedisStoreBuilder::timeout) ([`DEFAULT_TIMEOUT`]; a
///   check queued behind other calls, from the server's last answer to them), and
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
    keys: Arc<KeySpace>,
}

struct Inner {
    conn: Connection,
    timeout: Duration,
    time: TimeMode,
    groups: Arc<Groups>,
    lanes: Lanes,
    max_batch: usize,
    /// Script calls sent (`EVALSHA` and `EVAL`).
    calls: AtomicU64,
    /// Calls the server answered (if only with an error), for the timeout of calls that wait
    /// behind others on the connection (see [`RedisStoreBuilder::timeout`]).
    answers: AtomicU64,
    /// The key spaces (prefix, hash tags) limiters hold on this connection, with the rule they
    /// decide by and a token their limiters keep alive.
    claims: parking_lot::Mutex<HashMap<(Vec<u8>, bool), Claimed>>,
}

/// A key space held by the limiters of one quota: alive while any of them holds the token.
struct Claimed {
    rule: Gcra,
    quota: Quota,
    token: Weak<dyn Any + Send + Sync>,
}

/// Configures and connects a [`RedisStore`]: [`RedisStore::builder`] (one server) or
/// [`RedisStore::cluster_builder`] (a Redis Cluster), then [`connect`](Self::connect).
#[must_use = "a builder does nothing until `connect` is called"]
#[derive(Clone)]
pub struct RedisStoreBuilder {
    target: Target,
    prefix: Vec<u8>,
    hash_tag_keys: bool,
    max_batch: usize,
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
            hash_tag_keys: false,
            max_batch: DEFAULT_MAX_BATCH,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            node_connect_timeout: DEFAULT_NODE_CONNECT_TIMEOUT,
            probe_interval: DEFAULT_PROBE_INTERVAL,
            time: TimeMode::Server,
        }
    }

    /// The prefix of every key (default `"flowguard:"`); binary-safe. See [the Keys section](super#keys)
    /// for hash-tag rules in Redis Cluster.
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// Store each key with a Redis Cluster hash tag around the user's key: `prefix={key}` instead
    /// of `prefix=key` (default off, the earlier format). Then a key's slot depends only on the
    /// user's key, not on the prefix, so one identity's quotas kept under several prefixes
    /// ([`RedisStore::with_prefix`]) share a slot and can be decided all or nothing in one call
    /// ([`RemoteStore::decide_all`]). A user key containing `{` or `}`, or longer than
    /// [`MAX_KEY_LEN`](super::MAX_KEY_LEN), is stored as `prefix#{digest}`, so clients cannot
    /// pin several identities to one slot. Turning this on for a running deployment moves every
    /// key: each starts again with a full burst.
    pub fn hash_tag_keys(mut self, on: bool) -> Self {
        self.hash_tag_keys = on;
        self
    }

    /// The most decisions one script call carries (default [`DEFAULT_MAX_BATCH`]); `1` turns
    /// coalescing off, so that every decision is a call of its own. Must be at least 1.
    ///
    /// Coalescing is group commit, not a timer: a decision never waits for company. It is sent at
    /// once when no call is in flight on its connection (standalone) or to its master (cluster);
    /// otherwise it waits for that call and goes in the next one, with every decision that queued
    /// meanwhile (up to this bound). Each decision of a call is decided exactly as it would be
    /// alone, in queue order, and reported on its own: a key of another type or a foreign value
    /// fails only its own decision. Timeouts, the circuit and the failure policy apply per
    /// decision as without coalescing. On Redis Cluster, a call goes to one master and names keys
    /// of several of its slots, which needs Redis 7.0 or later (the script's
    /// `allow-cross-slot-keys` flag); on older servers, and for a key whose slot moved, decisions
    /// are calls of their own.
    ///
    /// A queue that fills a call does not wait: it is sent at once beside the call in flight, so
    /// up to two calls are in flight per connection (master), and Redis runs one while the
    /// client builds or reads the other; they are sent, and run, in queue order. Coalesced
    /// decisions then flow at most `2 × max_batch` per round trip. A decision queued behind
    /// calls the server answers in time waits for its turn however long the queue (a
    /// [two-tier](crate::gcra::two_tier) limiter's refills on a client thread busy with local
    /// decisions), see [`timeout`](Self::timeout); a larger bound drains it in fewer calls.
    pub fn max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// The most one check may wait for the server, including a `NOSCRIPT` retry (default
    /// [`DEFAULT_TIMEOUT`]): what the client's own backlog costs is not the server's failure.
    ///
    /// * A check gives up when this long passes without the server answering any call it
    ///   waits behind: the calls queued before it on its connection (master), see
    ///   [`max_batch`](Self::max_batch), or without coalescing the store's calls in flight. Each
    ///   answer starts the timeout again, up to twenty timeouts in all
    ///   (1 s by default). So it waits its turn while
    ///   the server answers, however many calls a busy client has to send and read before its
    ///   own, and gives up within one timeout when the server stops answering. The price: a
    ///   server that keeps answering, but slowly (overloaded), is waited for up to twenty
    ///   timeouts before the failure policy answers.
    /// * When the timer fires, the check looks once more, after one turn of the client's
    ///   scheduler, for a reply that arrived in time but was not read yet; that turn is the only
    ///   wait it adds.
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
    ///
    /// It also loads the scripts into every node's script cache, within the connect timeout, so
    /// the first decisions of a newly started service are made by Redis, not answered by the
    /// failure policy because their call timeout ran out while the server compiled the script.
    pub async fn connect(self) -> Result<RedisStore, ConnectError> {
        let keys = self.validate()?;
        let conn = Connection::open(&self.target, self.timeouts()).await?;
        let store = self.with_connection(keys, conn);
        store.load_scripts().await;
        Ok(store)
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
        let loading = store.clone();
        tokio::spawn(async move { loading.load_scripts().await });
        Ok(store)
    }

    fn validate(&self) -> Result<KeySpace, ConfigError> {
        if self.max_batch == 0 {
            return Err(ConfigError::ZeroMaxBatch);
        }
        if self.timeout.is_zero()
            || self.connect_timeout.is_zero()
            || self.node_connect_timeout.is_zero()
            || self.probe_interval.is_zero()
        {
            return Err(ConfigError::ZeroTimeout);
        }
        KeySpace::new(self.prefix.clone(), self.hash_tag_keys)
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
        let lanes = Lanes::new(self.max_batch, conn.is_cluster());
        RedisStore {
            inner: Arc::new(Inner {
                conn,
                timeout: self.timeout,
                time: self.time,
                groups: Arc::new(groups),
                lanes,
                max_batch: self.max_batch,
                calls: AtomicU64::new(0),
                answers: AtomicU64::new(0),
                claims: parking_lot::Mutex::default(),
            }),
            keys: Arc::new(keys),
        }
    }
}

impl RedisStore {
    /// Loads the scripts every call may run into every node's script cache (best effort,
    /// within the connect timeout; see `Connection::load_scripts`).
    async fn load_scripts(&self) -> bool {
        let sources = [
            super::lone::SOURCE,
            super::script::SOURCE,
            super::script::CROSS_SLOT_SOURCE.as_str(),
        ];
        self.inner.conn.load_scripts(&sources).await
    }

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

    /// Another store on the same connection, with another key prefix: its calls share this
    /// store's connection, coalescing, circuits, timeouts and clock, and one
    /// [`decide_all`](RemoteStore::decide_all) call may name keys of both (see
    /// [`RemoteStore::same_store`]). For several quotas of one identity: one prefix per quota,
    /// with [`hash_tag_keys`](RedisStoreBuilder::hash_tag_keys) so that they share a slot in a
    /// cluster. The prefix is checked as [`RedisStoreBuilder::prefix`]'s.
    pub fn with_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<RedisStore, ConfigError> {
        self.with_keys(prefix.as_ref().to_vec(), self.keys.hash_tags())
    }

    /// [`with_prefix`](Self::with_prefix), with or without a hash tag around each user key.
    /// A store over the same connection whose keys are a space of their own for the limit
    /// `name` under this store's prefix (`prefix ‖ escaped name ‖ ":"`, see the module's Keys
    /// section), hash-tagged unless this prefix holds a tag of its own: one identity's keys under
    /// several limits then share a slot. The guard keeps each policy of a quota layer so.
    #[cfg(feature = "tower")]
    pub(crate) fn for_limit(&self, name: &str) -> Result<RedisStore, ConfigError> {
        let tagged_prefix = self.keys.prefix().contains(&b'{');
        self.with_keys(self.keys.limit_prefix(name), !tagged_prefix)
    }

    pub(crate) fn with_keys(
        &self,
        prefix: Vec<u8>,
        hash_tags: bool,
    ) -> Result<RedisStore, ConfigError> {
        let keys = KeySpace::new(prefix, hash_tags)?;
        Ok(RedisStore {
            inner: self.inner.clone(),
            keys: Arc::new(keys),
        })
    }

    /// The explicit time to decide at (µs) and the extra TTL (ms); `None`: the server's.
    fn clock(&self) -> Result<(Option<u64>, u64), CheckError> {
        match &self.inner.time {
            TimeMode::Server => Ok((None, 0)),
            TimeMode::Explicit { clock, slack } => {
                let now = clock.now_nanos() / 1000;
                if now > MAX_EXPLICIT_NOW_US {
                    let why = Rejection::ClockOutOfRange { now_us: now };
                    return Err(StoreError::Rejected(why).into());
                }
                let slack = u64::try_from(slack.as_millis()).unwrap_or(u64::MAX);
                Ok((Some(now), slack))
            }
        }
    }

    /// Decides `cost` tokens for the store key `key`: in its lane's next call (or alone), bounded
    /// by the timeout: alone, from now on; in a lane, from now or from the server's last answer to
    /// one of the lane's calls, whichever is later, twenty timeouts at most (see
    /// [`while_answered`]).
    async fn call(&self, key: &[u8], rule: &Gcra, cost: u32) -> Answer {
        let inner = &*self.inner;
        let (now_us, extra_ttl_ms) = self.clock()?;
        let request = Request::new(key.to_vec(), rule, cost, now_us, extra_ttl_ms)?;
        let cap = inner.timeout.saturating_mul(REPLY_TIMEOUTS);
        let deciding = async {
            let map = if inner.conn.is_cluster() {
                inner.conn.slot_map()
            } else {
                None
            };
            match inner.lanes.lane(key, map.as_deref()) {
                // Queued behind the lane's calls: late only when the server answers none of
                // them for a whole timeout, not when a busy client sends them late.
                Some(lane) => {
                    let answered = || lane.answered();
                    while_answered(inner.timeout, cap, answered, lane.decide(self, request)).await
                }
                // A call of its own, on a connection other calls may be waiting on too: late
                // only when the server answers none of them for a whole timeout.
                None => {
                    let answered = || inner.answers.load(Ordering::Acquire);
                    while_answered(inner.timeout, cap, answered, self.alone(&request)).await
                }
            }
        };
        deciding.await.unwrap_or_else(|| Err(self.timed_out()))
    }

    fn timed_out(&self) -> CheckError {
        let why = Unavailable::Timeout {
            after: self.inner.timeout,
        };
        StoreError::Unavailable(why).into()
    }

    /// One call of the general script (and `EVAL` on `NOSCRIPT`), counted. Undeclared keys go to
    /// the master of the first one's slot.
    async fn send(&self, requests: &[&Request], mode: Mode, keys: Keys) -> RedisResult<Vec<i64>> {
        let at = match keys {
            Keys::Declared => None,
            Keys::Undeclared => Some(slot(&requests[0].key)),
        };
        self.script_call(
            |by_source| command(requests.iter().copied(), mode, keys, by_source),
            at,
        )
        .await
    }

    /// One script call as `build` makes it (by digest, or by source once a server answered
    /// `NOSCRIPT`), counted; to the master serving `at` when given, else routed by its keys.
    async fn script_call<T: FromRedisValue>(
        &self,
        build: impl Fn(bool) -> Cmd,
        at: Option<u16>,
    ) -> RedisResult<T> {
        let inner = &*self.inner;
        let query = |by_source| {
            let cmd = build(by_source);
            inner.calls.fetch_add(1, Ordering::Relaxed);
            async move {
                match at {
                    None => inner.conn.query::<T>(&cmd).await,
                    Some(at) => inner.conn.query_at::<T>(&cmd, at).await,
                }
            }
        };
        match query(false).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => query(true).await,
            other => other,
        }
    }

    /// What a failed call means for a decision about `key`.
    fn failure(&self, e: &RedisError, key: &[u8]) -> CheckError {
        let error = classify(e, key);
        if !matches!(error, StoreError::Unavailable(_)) {
            // The server answered, if only with an error.
            self.answered();
        }
        error.into()
    }

    /// Script calls sent so far by this store and every store sharing its connection
    /// ([`with_prefix`](Self::with_prefix), clones): one per call of its own and per coalesced
    /// call, plus the `EVAL` retries after `NOSCRIPT`. Decisions per call is the coalescing
    /// factor.
    pub fn script_calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// The most decisions one script call carries ([`RedisStoreBuilder::max_batch`]).
    pub fn max_batch(&self) -> usize {
        self.inner.max_batch
    }

    /// The server answered: counted, and a cluster store without a slot map reads one now.
    fn answered(&self) {
        let inner = &*self.inner;
        inner.answers.fetch_add(1, Ordering::AcqRel);
        if inner.conn.needs_map() {
            inner.conn.read_map_soon(&inner.groups);
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &[u8] {
        self.keys.prefix()
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

/// The store seen from its [lanes](super::lanes): single calls and coalesced ones.
impl Caller for RedisStore {
    /// A call of its own: the [lone](super::lone) script, the key declared (routed, and
    /// redirected by a cluster). Bounded by the caller's timeout.
    async fn alone(&self, request: &Request) -> Answer {
        let reply = self
            .script_call::<Value>(|by_source| lone::command(request, by_source), None)
            .await;
        match reply {
            Ok(reply) => {
                self.answered();
                lone::parse(&reply, request)
            }
            Err(e) => Err(self.failure(&e, &request.key)),
        }
    }

    /// A coalesced call: the script in tolerant mode, each request decided as if alone. A request
    /// the call left undecided (its key is of another type, or not this node's) and every request
    /// of a call the server refused before running it (the script could not run, a redirect) is
    /// decided by a call of its own, in order, after the coalesced call; a call that got no answer
    /// fails each of its requests.
    async fn together(&self, requests: &[Request]) -> Vec<Answer> {
        let inner = &*self.inner;
        let keys = if inner.conn.is_cluster() {
            Keys::Undeclared
        } else {
            Keys::Declared
        };
        let refs: Vec<&Request> = requests.iter().collect();
        let sent = within(inner.timeout, self.send(&refs, Mode::Tolerant, keys)).await;
        let outcomes = match sent.ok_or(()) {
            Err(()) => return requests.iter().map(|_| Err(self.timed_out())).collect(),
            Ok(Ok(reply)) => {
                self.answered();
                match parse_replies(&reply, &refs) {
                    Ok(outcomes) => outcomes,
                    Err(e) => return requests.iter().map(|_| Err(e.clone())).collect(),
                }
            }
            // An error reply: the script never ran, or stopped before deciding anything (it
            // changes nothing before its arguments are checked, and tolerates failing commands
            // after that), so deciding each request again decides it once.
            Ok(Err(e)) if e.code().is_some() => {
                if keys == Keys::Undeclared
                    && e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError)
                    && inner.lanes.without_cross_slot()
                {
                    tracing::info!(
                        error = %e,
                        "a Redis Cluster node cannot run the cross-slot script (Redis before 7.0?): \
                         decisions are no longer coalesced"
                    );
                }
                vec![Outcome::Alone; requests.len()]
            }
            Ok(Err(e)) => {
                return requests
                    .iter()
                    .map(|r| Err(self.failure(&e, &r.key)))
                    .collect();
            }
        };
        let mut answers = Vec::with_capacity(requests.len());
        let mut moved = false;
        for (outcome, request) in outcomes.into_iter().zip(requests) {
            answers.push(match outcome {
                Outcome::Done(answer) => answer,
                Outcome::Alone => {
                    moved = true;
                    within(inner.timeout, self.alone(request))
                        .await
                        .unwrap_or_else(|| Err(self.timed_out()))
                }
            });
        }
        if moved && inner.conn.is_cluster() {
            // A key may have moved to another master: group the next calls by a fresh map.
            inner.conn.read_map_soon(&inner.groups);
        }
        answers
    }
}

/// Redis as the shared store of a [`RemoteRateLimiter`](crate::gcra::remote::RemoteRateLimiter):
/// keys are `prefix ‖ "=" ‖ key` (or a digest, see [Keys](super#keys)), the rule is the quota in
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
        self.keys.key(key)
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

    /// Standalone: always. Cluster: when every key is in one hash slot (one call may only
    /// declare keys of one slot); see [`RedisStoreBuilder::hash_tag_keys`] for naming one
    /// identity's keys so.
    fn can_decide_all(&self, keys: &[&Vec<u8>]) -> bool {
        if !self.inner.conn.is_cluster() {
            return true;
        }
        let mut slots = keys.iter().map(|k| slot(k));
        let first = slots.next();
        slots.all(|s| Some(s) == first)
    }

    /// Stores on one connection: clones and [`with_prefix`](RedisStore::with_prefix) stores.
    fn same_store(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// One script call in all-or-nothing mode, its keys declared: a cluster routes it to the
    /// keys' slot (and follows `MOVED`/`ASK`). Keys in several slots of a cluster are
    /// [`DecideAllError::Apart`], without a call. Errors as [`decide`](RemoteStore::decide)'s;
    /// a key of another type or a foreign value fails the whole call, and nothing is spent.
    async fn decide_all(
        &self,
        items: &[StoreItem<'_, Vec<u8>>],
    ) -> Result<Vec<StoreDecision>, DecideAllError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&Vec<u8>> = items.iter().map(|i| i.key).collect();
        if !self.can_decide_all(&keys) {
            return Err(DecideAllError::Apart);
        }
        let (now_us, extra_ttl_ms) = self.clock()?;
        let requests = items
            .iter()
            .map(|i| Request::new(i.key.clone(), i.rule, i.cost, now_us, extra_ttl_ms))
            .collect::<Result<Vec<_>, _>>()
            .map_err(CheckError::from)?;
        let refs: Vec<&Request> = requests.iter().collect();
        let inner = &*self.inner;
        match within(inner.timeout, self.send(&refs, Mode::All, Keys::Declared))
            .await
            .ok_or(())
        {
            Err(()) => Err(self.timed_out().into()),
            Ok(Err(e)) => Err(self.failure(&e, &requests[0].key).into()),
            Ok(Ok(reply)) => {
                self.answered();
                Ok(parse_all(&reply, &refs)?)
            }
        }
    }

    /// A probe failed again: check beside the connection whether it is what fails, and rebuild it.
    fn probe_failed(&self, key: &Vec<u8>) {
        self.inner.conn.check_after_failure(&self.inner.groups, key);
    }

    /// Holds this store's prefix (with its hash-tag setting) on its connection for `quota`'s
    /// rule; a quota of another rule is [`ConfigError::KeySpaceShared`] while a limiter holds
    /// it. Stores connected separately (other instances) are not seen: they share keys by design.
    fn claim(&self, quota: &Quota) -> Result<KeySpaceClaim, ConfigError> {
        let rule = self.rule(quota)?;
        let space = (self.keys.prefix().to_vec(), self.keys.hash_tags());
        let mut claims = self.inner.claims.lock();
        if let Some(held) = claims.get(&space)
            && let Some(token) = held.token.upgrade()
        {
            if held.rule == rule {
                return Ok(KeySpaceClaim::held_by(token));
            }
            return Err(ConfigError::KeySpaceShared {
                key_space: format!("{:?}", String::from_utf8_lossy(&space.0)),
                held_by: Box::new(held.quota),
                refused: Box::new(*quota),
            });
        }
        let token: Arc<dyn Any + Send + Sync> = Arc::new(());
        let claimed = Claimed {
            rule,
            quota: *quota,
            token: Arc::downgrade(&token),
        };
        claims.insert(space, claimed);
        Ok(KeySpaceClaim::held_by(token))
    }

    fn recovered(&self) {
        self.inner.conn.recovered();
        // The server may be a new one (a restart, a failover to a replica that never ran the
        // scripts): load them ahead of the next decisions.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let loading = self.clone();
            runtime.spawn(async move { loading.load_scripts().await });
        }
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
            .field("prefix", &String::from_utf8_lossy(self.keys.prefix()))
            .field("max_batch", &self.inner.max_batch)
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
