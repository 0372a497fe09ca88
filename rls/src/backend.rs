//! The one adapter between `flowguard-rls` and flowguard's GCRA: every rate of the
//! configuration is a limit of one [`LimitSet`], and a request's descriptors are decided through
//! it, all or nothing. The service has no engine of its own: the library's sets lock, peek and
//! spend.
//!
//! * Memory: a [`MemoryLimitSet`], atomic under its striped locks. A reload that brings new rates
//!   [extends](MemoryLimitSet::extended) it: the rates that stay keep their state.
//! * Redis / Redis Cluster: a [`RemoteLimitSet`] of one [`RemoteRateLimiter`] per rate over one
//!   [`RedisStore`], deciding a request's keys in one script call when they can go together (one
//!   server, or one hash slot of a cluster), peeked then spent otherwise; the limiters' failure
//!   policy answers when Redis does not. With [`OnFailure::Unavailable`] that policy is fail
//!   closed, and a decision it made becomes [`BackendError::Unavailable`] (gRPC `UNAVAILABLE`,
//!   so that Envoy's `failure_mode_deny` decides).
//! * Two-tier: [`SeparateLimits`] over one [`TwoTierLimiter`] per rate (reservoirs are local:
//!   a request's descriptors are peeked, then spent).
//!
//! [`Backend::decide`] adds what the service needs on top: shadow-mode descriptors never deny and
//! are spent only when the request is allowed, and a cost above a burst is a denial with no
//! retry time rather than an error.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flowguard::gcra::redis::{ConnectError, RedisStore};
use flowguard::gcra::remote::{FailurePolicy, RemoteLimitSet, RemoteRateLimiter, StoreError};
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{
    CheckError, Decision, Degradation, Demand, GcraError, KeyedLimit, LimitSet, MemoryLimitSet,
    Quota, SeparateLimits, SetError,
};
use parking_lot::Mutex;

use crate::config::Rate;

/// Where quotas live.
#[derive(Clone, Debug)]
pub enum StoreConfig {
    /// In this process only.
    Memory {
        /// The most keys tracked per distinct rate.
        max_keys: usize,
    },
    /// In Redis, shared by every instance using the same prefix.
    Redis(RedisConfig),
}

/// How to reach Redis and what to do when it does not answer.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// One URL (standalone) or the URLs of some cluster nodes.
    pub urls: Vec<String>,
    /// Whether the URLs are Redis Cluster nodes.
    pub cluster: bool,
    /// Key prefix (must not open a `{` hash tag it does not close).
    pub prefix: String,
    /// Per-call timeout; `None` is the store's default.
    pub timeout: Option<Duration>,
    /// What to answer when Redis does not.
    pub on_failure: OnFailure,
    /// Two-tier mode: reserve this many tokens at a time and spend them locally.
    pub two_tier_batch: Option<u32>,
    /// How long to wait at start for a Redis that does not answer; `None` fails at once.
    pub wait_at_start: Option<Duration>,
}

/// What the service answers when the shared store does not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OnFailure {
    /// gRPC `UNAVAILABLE`: Envoy's `failure_mode_deny` decides.
    Unavailable,
    /// Allow (OK).
    FailOpen,
    /// Deny (OVER_LIMIT).
    FailClosed,
    /// Decide locally with this fraction of each quota.
    LocalShare(f64),
    /// Decide locally with one of this many equal shares of each quota.
    LocalInstances(u32),
}

/// As the `--on-redis-failure` value that selects it (`local-share=0.5`).
impl std::fmt::Display for OnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnFailure::Unavailable => f.write_str("unavailable"),
            OnFailure::FailOpen => f.write_str("fail-open"),
            OnFailure::FailClosed => f.write_str("fail-closed"),
            OnFailure::LocalShare(share) => write!(f, "local-share={share}"),
            OnFailure::LocalInstances(n) => write!(f, "local-instances={n}"),
        }
    }
}

/// Why the backend could not decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendError {
    /// The store did not answer in time or the connection failed.
    Unavailable(String),
    /// The in-memory store is full of live keys.
    Full(String),
    /// The store refused the call or holds foreign data at a key.
    Rejected(String),
}

impl BackendError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendError::Unavailable(_) => "unavailable",
            BackendError::Full(_) => "full",
            BackendError::Rejected(_) => "rejected",
        }
    }
}

impl std::fmt::Display for BackendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendError::Unavailable(r) | BackendError::Full(r) | BackendError::Rejected(r) => {
                f.write_str(r)
            }
        }
    }
}

impl std::error::Error for BackendError {}

impl From<GcraError> for BackendError {
    fn from(e: GcraError) -> Self {
        match e {
            GcraError::KeyLimitReached { .. } => BackendError::Full(e.to_string()),
            _ => BackendError::Rejected(e.to_string()),
        }
    }
}

impl From<CheckError> for BackendError {
    fn from(e: CheckError) -> Self {
        match e {
            CheckError::Gcra(e) => e.into(),
            CheckError::Store(StoreError::Unavailable(why)) => {
                BackendError::Unavailable(format!("Redis did not answer: {why}"))
            }
            _ => BackendError::Rejected(e.to_string()),
        }
    }
}

/// Why the store could not be opened at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The options cannot work (URLs, prefix, timeout): fix them.
    Invalid(String),
    /// Redis did not answer (or refused the credentials) in time.
    Unreachable(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Invalid(why) | OpenError::Unreachable(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for OpenError {}

/// How often an unreachable Redis is tried again while [`RedisConfig::wait_at_start`] allows.
const RETRY_AT_START: Duration = Duration::from_millis(500);

/// Connects to Redis, trying again until `wait_at_start` has passed.
async fn connect(redis: &RedisConfig) -> Result<RedisStore, OpenError> {
    let started = std::time::Instant::now();
    let wait = redis.wait_at_start.unwrap_or_default();
    let mut told = false;
    loop {
        let mut builder = if redis.cluster {
            RedisStore::cluster_builder(redis.urls.iter().cloned())
        } else {
            RedisStore::builder(redis.urls[0].clone())
        };
        builder = builder.prefix(redis.prefix.as_bytes());
        if let Some(timeout) = redis.timeout {
            builder = builder.timeout(timeout);
        }
        let error = match builder.connect().await {
            Ok(store) => {
                if told {
                    tracing::info!(urls = ?redis.urls, "Redis answers");
                }
                return Ok(store);
            }
            Err(ConnectError::Config(e)) => {
                return Err(OpenError::Invalid(format!(
                    "the Redis options cannot work: {e}; fix --redis or --redis-prefix"
                )));
            }
            Err(e) => e,
        };
        let waited = started.elapsed();
        if waited >= wait {
            let hint = if redis.wait_at_start.is_some() {
                format!("waited {} s (--wait-for-redis)", wait.as_secs())
            } else {
                "pass --wait-for-redis SECONDS to wait for it at start".into()
            };
            return Err(OpenError::Unreachable(format!(
                "Redis at {} cannot be used: {error}. Start it or fix --redis, or {hint}; \
                 once running, --on-redis-failure decides what is answered while it is down",
                redis.urls.join(", ")
            )));
        }
        if !told {
            tracing::warn!(urls = ?redis.urls, %error,
                "Redis does not answer yet; waiting up to {} s for it (--wait-for-redis)", wait.as_secs());
            told = true;
        }
        tokio::time::sleep(RETRY_AT_START.min(wait - waited)).await;
    }
}

/// The limits of every rate seen so far, and the set that decides them.
struct Registry {
    /// The limit number of each rate (its place in the sets; numbers are never reused).
    numbers: HashMap<Rate, usize>,
    /// The set over every limit so far.
    set: Limits,
    /// The in-memory set, extended when a rate is added.
    memory: Option<Arc<MemoryLimitSet>>,
    /// The limiters the Redis set is rebuilt from when a rate is added.
    remote: Vec<RemoteRateLimiter<RedisStore>>,
    /// The limiters the two-tier set is rebuilt from when a rate is added.
    two_tier: Vec<Arc<dyn KeyedLimit>>,
}

/// A set of limits, cheap to clone: what a request is decided through.
#[derive(Clone)]
pub struct Limits(Arc<dyn LimitSet>);

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits")
            .field("limits", &self.0.limits())
            .finish()
    }
}

impl Limits {
    /// How many limits the set has (numbered from 0).
    pub fn len(&self) -> usize {
        self.0.limits()
    }

    /// Whether the set has no limit.
    pub fn is_empty(&self) -> bool {
        self.0.limits() == 0
    }

    /// The quota of limit `limit`.
    pub fn quota(&self, limit: usize) -> Option<Quota> {
        self.0.quota(limit)
    }
}

enum Kind {
    Memory {
        max_keys: usize,
    },
    Redis {
        store: RedisStore,
        policy: FailurePolicy,
        two_tier_batch: Option<u32>,
    },
}

/// Builds the limits of the configured rates and decides requests against them.
pub struct Backend {
    kind: Kind,
    /// `OnFailure::Unavailable`: a decision of the (fail-closed) policy is an error.
    unavailable_is_error: bool,
    registry: Mutex<Registry>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
}

/// One descriptor to decide: `cost` tokens of limit `limit` for `key`; shadow-mode descriptors
/// are not `enforce`d.
#[derive(Clone, Copy, Debug)]
pub struct Check<'a> {
    /// The rate's limit number ([`Backend::limit`]).
    pub limit: usize,
    /// The limiter key (domain and descriptor path).
    pub key: &'a [u8],
    /// Tokens asked for.
    pub cost: u64,
    /// `false` in shadow mode: never denies the request.
    pub enforce: bool,
}

/// The quota of a configured rate; the error says what to change.
pub fn quota(rate: &Rate) -> Result<Quota, String> {
    Quota::new(rate.requests_per_unit, rate.unit.period())
        .and_then(|q| match rate.burst {
            Some(burst) => q.with_burst(burst),
            None => Ok(q),
        })
        .map_err(|e| e.to_string())
}

impl Backend {
    /// Opens the store. Redis must answer now: an unreachable server or refused credentials are
    /// an [`OpenError::Unreachable`] that names the flags to change, unless
    /// [`RedisConfig::wait_at_start`] allows waiting for it. Once open, a Redis that stops
    /// answering is what [`RedisConfig::on_failure`] is for.
    pub async fn open(config: &StoreConfig) -> Result<Backend, OpenError> {
        let kind = match config {
            StoreConfig::Memory { max_keys } => Kind::Memory {
                max_keys: *max_keys,
            },
            StoreConfig::Redis(redis) => {
                if !redis.cluster && redis.urls.len() != 1 {
                    return Err(OpenError::Invalid(
                        "give exactly one --redis URL, or --redis-cluster with node URLs".into(),
                    ));
                }
                let policy = match redis.on_failure {
                    OnFailure::Unavailable | OnFailure::FailClosed => FailurePolicy::FailClosed,
                    OnFailure::FailOpen => FailurePolicy::FailOpen,
                    OnFailure::LocalShare(share) => FailurePolicy::local_share(share),
                    OnFailure::LocalInstances(n) => FailurePolicy::local_instances(n),
                };
                let store = connect(redis).await?;
                Kind::Redis {
                    store,
                    policy,
                    two_tier_batch: redis.two_tier_batch,
                }
            }
        };
        let memory = match &kind {
            Kind::Memory { max_keys } => Some(Arc::new(
                MemoryLimitSet::builder([])
                    .max_keys(*max_keys)
                    .build()
                    .map_err(|e| OpenError::Invalid(format!("--max-keys: {e}")))?,
            )),
            Kind::Redis { .. } => None,
        };
        let set = match &kind {
            Kind::Memory { .. } => Limits(memory.clone().map_or_else(
                || Arc::new(SeparateLimits::shared([])) as Arc<dyn LimitSet>,
                |m| m as Arc<dyn LimitSet>,
            )),
            Kind::Redis {
                two_tier_batch: None,
                ..
            } => Limits(Arc::new(RemoteLimitSet::<RedisStore>::new([]))),
            Kind::Redis { .. } => Limits(Arc::new(SeparateLimits::shared([]))),
        };
        let unavailable_is_error = matches!(
            config,
            StoreConfig::Redis(RedisConfig {
                on_failure: OnFailure::Unavailable,
                ..
            })
        );
        Ok(Backend {
            kind,
            unavailable_is_error,
            registry: Mutex::new(Registry {
                numbers: HashMap::new(),
                set,
                memory,
                remote: Vec::new(),
                two_tier: Vec::new(),
            }),
        })
    }

    /// What the backend is, for logs.
    pub fn describe(&self) -> &'static str {
        match &self.kind {
            Kind::Memory { .. } => "memory",
            Kind::Redis {
                two_tier_batch: Some(_),
                ..
            } => "redis (two-tier)",
            Kind::Redis { .. } => "redis",
        }
    }

    /// The limit number of `rate`, added to the set on first use and kept for the life of the
    /// backend, so that a reloaded configuration keeps the state of the rates it keeps. The
    /// error says what to change (a rate the store cannot serve).
    pub fn limit(&self, rate: &Rate) -> Result<usize, String> {
        let mut registry = self.registry.lock();
        if let Some(&number) = registry.numbers.get(rate) {
            return Ok(number);
        }
        let quota = quota(rate)?;
        let number = registry.numbers.len();
        let set = match &self.kind {
            Kind::Memory { .. } => {
                let Some(memory) = &registry.memory else {
                    return Err("the in-memory backend has no in-memory set".into());
                };
                let memory = Arc::new(memory.extended([quota]).map_err(|e| e.to_string())?);
                registry.memory = Some(memory.clone());
                Limits(memory)
            }
            Kind::Redis {
                store,
                policy,
                two_tier_batch,
            } => {
                // Every key names its domain and descriptor path, so the rates over one prefix
                // never meet.
                let limiter = RemoteRateLimiter::builder(store.clone(), quota)
                    .failure_policy(*policy)
                    .namespaced_keys()
                    .build()
                    .map_err(|e| e.to_string())?;
                match two_tier_batch {
                    None => {
                        registry.remote.push(limiter);
                        Limits(Arc::new(RemoteLimitSet::new(
                            registry.remote.iter().cloned(),
                        )))
                    }
                    Some(batch) => {
                        let shared: Arc<dyn KeyedLimit> = Arc::new(limiter);
                        let two_tier = TwoTierLimiter::builder(shared, *batch)
                            .build()
                            .map_err(|e| format!("two-tier batch: {e}"))?;
                        registry.two_tier.push(Arc::new(two_tier));
                        Limits(Arc::new(SeparateLimits::shared(
                            registry.two_tier.iter().cloned(),
                        )))
                    }
                }
            }
        };
        registry.numbers.insert(*rate, number);
        registry.set = set;
        Ok(number)
    }

    /// How many distinct rates have a limit.
    pub fn rate_count(&self) -> usize {
        self.registry.lock().numbers.len()
    }

    /// Whether `rate` has a limit.
    pub fn has_rate(&self, rate: &Rate) -> bool {
        self.registry.lock().numbers.contains_key(rate)
    }

    /// The set over every limit so far: a configuration compiled before this call finds all of
    /// its rates in it.
    pub fn limits(&self) -> Limits {
        self.registry.lock().set.clone()
    }

    /// Decides a request's descriptors through `limits`; one decision per check, in order.
    ///
    /// * The enforced checks are decided together, all or nothing
    ///   ([`LimitSet::check_all`]); when one of them (or several naming one key) costs more
    ///   than its burst, the request is denied, nothing is spent, and that check's decision
    ///   has no `retry_after` (it never fits).
    /// * Shadow-mode checks never deny: when the request is allowed, each is spent alone if it
    ///   fits; otherwise each is peeked, and said allowed when its cost would fit.
    /// * A denied check's decision says whether it alone would fit now (`allowed`) and when it
    ///   will (`retry_after`), as [`LimitSet::check_all`] reports it.
    pub async fn decide(
        &self,
        limits: &Limits,
        checks: &[Check<'_>],
    ) -> Result<Vec<Decision>, BackendError> {
        let set = &*limits.0;
        let mut out: Vec<Option<Decision>> = vec![None; checks.len()];
        let enforced: Vec<usize> = (0..checks.len()).filter(|&i| checks[i].enforce).collect();
        let demands: Vec<Demand<'_>> = enforced
            .iter()
            .map(|&i| demand(&checks[i], checks[i].cost))
            .collect();
        let allowed = if demands.is_empty() {
            true
        } else {
            match set.check_all(&demands).await {
                Ok(decisions) => {
                    for (&i, d) in enforced.iter().zip(decisions.as_slice()) {
                        out[i] = Some(*d);
                    }
                    decisions.allowed()
                }
                Err(SetError::Check {
                    error: CheckError::Gcra(GcraError::InsufficientCapacity { .. }),
                    ..
                }) => {
                    // Denied whatever the store holds: each is answered from a peek.
                    for &i in &enforced {
                        out[i] = Some(peek_answer(set, &checks[i]).await?);
                    }
                    false
                }
                Err(e) => return Err(set_error(e)),
            }
        };
        for (i, check) in checks.iter().enumerate().filter(|(_, c)| !c.enforce) {
            out[i] = Some(if allowed {
                spend_alone(set, check).await?
            } else {
                peek_answer(set, check).await?
            });
        }
        let decisions: Vec<Decision> = out.into_iter().flatten().collect();
        if self.unavailable_is_error
            && decisions
                .iter()
                .any(|d| d.degraded == Some(Degradation::FailClosed))
        {
            return Err(BackendError::Unavailable(
                "Redis did not answer in time (the warning logged by flowguard::gcra::remote \
                 says how)"
                    .into(),
            ));
        }
        Ok(decisions)
    }
}

/// A check as a demand of `cost` tokens (`u32::MAX` stands for any larger cost: above every
/// burst either way).
fn demand<'a>(check: &Check<'a>, cost: u64) -> Demand<'a> {
    Demand {
        limit: check.limit,
        key: check.key,
        cost: u32::try_from(cost).unwrap_or(u32::MAX),
    }
}

/// One check decided alone (spent if it fits); a cost above the burst is [`never`].
async fn spend_alone(set: &dyn LimitSet, check: &Check<'_>) -> Result<Decision, BackendError> {
    match set.check_all(&[demand(check, check.cost)]).await {
        Ok(decisions) => Ok(decisions[0]),
        Err(SetError::Check {
            error: CheckError::Gcra(GcraError::InsufficientCapacity { .. }),
            ..
        }) => peek_answer(set, check).await,
        Err(e) => Err(set_error(e)),
    }
}

/// A check's answer from a peek, spending nothing: allowed when its cost fits now, otherwise
/// denied with no retry time.
async fn peek_answer(set: &dyn LimitSet, check: &Check<'_>) -> Result<Decision, BackendError> {
    let mut peek = set
        .check_all(&[demand(check, 0)])
        .await
        .map_err(set_error)?[0];
    let fits = peek.allowed && peek.remaining().is_some_and(|r| u64::from(r) >= check.cost);
    if !fits {
        peek.allowed = false;
        peek.retry_after = None;
    }
    Ok(peek)
}

fn set_error(e: SetError) -> BackendError {
    match e {
        SetError::Check { error, .. } => error.into(),
        other => BackendError::Rejected(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Unit;

    fn per_minute(n: u32) -> Rate {
        Rate {
            requests_per_unit: n,
            unit: Unit::Minute,
            burst: None,
        }
    }

    fn check(limit: usize, key: &[u8], cost: u64, enforce: bool) -> Check<'_> {
        Check {
            limit,
            key,
            cost,
            enforce,
        }
    }

    async fn memory() -> Backend {
        Backend::open(&StoreConfig::Memory { max_keys: 64 })
            .await
            .unwrap()
    }

    async fn remaining(backend: &Backend, limit: usize, key: &[u8]) -> u32 {
        let peek = [check(limit, key, 0, true)];
        let d = backend.decide(&backend.limits(), &peek).await.unwrap();
        d[0].remaining().unwrap()
    }

    #[tokio::test]
    async fn a_cost_above_a_burst_denies_without_a_retry_time_and_spends_nothing() {
        let backend = memory().await;
        let (wide, narrow) = (
            backend.limit(&per_minute(10)).unwrap(),
            backend.limit(&per_minute(3)).unwrap(),
        );
        let limits = backend.limits();
        let request = [check(wide, b"w", 2, true), check(narrow, b"n", 4, true)];
        let d = backend.decide(&limits, &request).await.unwrap();
        assert!(d[0].allowed, "the wide one alone would fit");
        assert!(!d[1].allowed);
        assert_eq!(d[1].retry_after, None, "it never fits");
        assert_eq!(remaining(&backend, wide, b"w").await, 10);
        assert_eq!(remaining(&backend, narrow, b"n").await, 3);
    }

    #[tokio::test]
    async fn shadow_checks_never_deny_and_are_spent_only_with_an_allowed_request() {
        let backend = memory().await;
        let (enforced, shadow) = (
            backend.limit(&per_minute(1)).unwrap(),
            backend.limit(&per_minute(2)).unwrap(),
        );
        let limits = backend.limits();
        let request = [
            check(enforced, b"e", 1, true),
            check(shadow, b"s", 1, false),
        ];
        let first = backend.decide(&limits, &request).await.unwrap();
        assert!(first.iter().all(|d| d.allowed));
        assert_eq!(remaining(&backend, shadow, b"s").await, 1);
        // Denied by the enforced one: the shadow one is peeked, not spent.
        let second = backend.decide(&limits, &request).await.unwrap();
        assert!(!second[0].allowed);
        assert!(second[1].allowed, "it would fit");
        assert_eq!(remaining(&backend, shadow, b"s").await, 1);
        // A shadow check over its limit alone: answered denied, the request allowed.
        let alone = [check(shadow, b"s", 2, false)];
        let d = backend.decide(&limits, &alone).await.unwrap();
        assert!(!d[0].allowed);
        assert_eq!(remaining(&backend, shadow, b"s").await, 1);
    }

    #[tokio::test]
    async fn rates_keep_their_limit_and_state_as_rates_are_added() {
        let backend = memory().await;
        let a = backend.limit(&per_minute(5)).unwrap();
        let before = backend.limits();
        let spend = [check(a, b"k", 2, true)];
        assert!(backend.decide(&before, &spend).await.unwrap()[0].allowed);
        let b = backend.limit(&per_minute(7)).unwrap();
        assert_eq!((a, b), (0, 1));
        assert_eq!(backend.limit(&per_minute(5)).unwrap(), a);
        // The set taken before the new rate and the one after share limit 0's state.
        assert_eq!(remaining(&backend, a, b"k").await, 3);
        assert!(backend.decide(&before, &spend).await.unwrap()[0].allowed);
        assert_eq!(remaining(&backend, a, b"k").await, 1);
        assert_eq!(remaining(&backend, b, b"k").await, 7);
    }
}
