//! The one adapter between `flowguard-rls` and flowguard's GCRA stores: every call into
//! `flowguard::gcra` lives here; the rest of the service speaks [`Verdict`]s.
//!
//! * Memory: one [`KeyedRateLimiter`] per distinct rate. A request's descriptors are decided under
//!   locks of every key involved (striped), so the [`plan`] is atomic: a denied request
//!   spends nothing, whatever other requests run at the same time.
//! * Redis / Redis Cluster: one [`RemoteRateLimiter`] per distinct rate over one [`RedisStore`].
//!   With [`OnFailure::Unavailable`] the raw store is called and an unreachable store is an error
//!   (the service answers gRPC `UNAVAILABLE`); otherwise the limiter's [`FailurePolicy`] answers.
//!   A request's enforced descriptors are decided all or nothing in one script call when their
//!   keys can go together (one server, or one slot of a cluster), so a denied request spends
//!   nothing whatever other instances do; otherwise they are peeked, then spent (see [`plan`]).
//! * Two-tier: a [`TwoTierLimiter`] over the Redis limiter; its reservoir is not a global view,
//!   so descriptors are spent independently (no peek).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::config::Rate;
use super::plan::{self, AfterPeek, Item, Start, Verdict};
use flowguard::gcra::redis::{ConnectError, RedisStore};
use flowguard::gcra::remote::{
    DecideAllError, FailurePolicy, QuotaCheck, RemoteRateLimiter, RemoteStore, StoreError,
    StoreItem,
};
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{
    CheckError, CheckFuture, Decision, Gcra, GcraError, KeyedLimit, KeyedRateLimiter, Quota,
};

/// Lock stripes of the in-memory backend.
const STRIPES: usize = 1024;

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

/// A quota's limiter, shared by every rule with the same rate. Cheap to clone.
#[derive(Clone)]
pub struct Limiter(Arc<LimiterInner>);

struct LimiterInner {
    id: usize,
    burst: u32,
    interval: Duration,
    engine: Engine,
}

enum Engine {
    /// Boxed: the in-memory limiter is several cache lines, the others a handle.
    Memory(Box<KeyedRateLimiter<Vec<u8>>>),
    /// The raw store: an unavailable store is an error.
    Raw(RawStore),
    /// The limiter with the configured failure policy.
    Policy(RemoteRateLimiter<RedisStore>),
    TwoTier(TwoTierLimiter<Arc<dyn KeyedLimit>>),
}

impl Limiter {
    /// The burst `B`.
    pub fn burst(&self) -> u32 {
        self.0.burst
    }
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("burst", &self.0.burst)
            .field("interval", &self.0.interval)
            .finish_non_exhaustive()
    }
}

/// One descriptor to decide: its limiter, its key, its cost, and whether it is enforced.
#[derive(Clone, Copy, Debug)]
pub struct Check<'a> {
    /// The rule's limiter.
    pub limiter: &'a Limiter,
    /// The limiter key (domain and descriptor path).
    pub key: &'a [u8],
    /// Tokens asked for.
    pub cost: u64,
    /// `false` in shadow mode.
    pub enforce: bool,
}

/// The Redis store with no failure policy: an unavailable store is an error (for
/// [`OnFailure::Unavailable`] mode, and two-tier reservations in that mode). Cheap to clone.
#[derive(Clone)]
struct RawStore {
    store: RedisStore,
    quota: Quota,
    rule: Gcra,
}

impl RawStore {
    fn new(store: RedisStore, quota: Quota) -> Result<RawStore, String> {
        let rule = store.rule(&quota).map_err(|e| e.to_string())?;
        Ok(RawStore { store, quota, rule })
    }

    async fn decide(&self, key: &[u8], cost: u32) -> Result<Decision, CheckError> {
        let key = self.store.key(key);
        Ok(self.store.decide(&key, &self.rule, cost).await?.decision)
    }
}

impl KeyedLimit for RawStore {
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture {
        let (raw, key) = (self.clone(), key.to_vec());
        CheckFuture::new(async move { raw.decide(&key, cost).await })
    }

    fn quota(&self) -> Quota {
        self.quota
    }
}

enum Kind {
    Memory {
        max_keys: usize,
    },
    Redis {
        store: RedisStore,
        raw: bool,
        policy: FailurePolicy,
        two_tier_batch: Option<u32>,
    },
}

/// Builds limiters for rates and decides requests against them.
pub struct Backend {
    kind: Kind,
    limiters: Mutex<HashMap<Rate, Limiter>>,
    stripes: Box<[Mutex<()>]>,
    hasher: hashbrown::DefaultHashBuilder,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.describe())
    }
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
                    raw: redis.on_failure == OnFailure::Unavailable,
                    policy,
                    two_tier_batch: redis.two_tier_batch,
                }
            }
        };
        Ok(Backend {
            kind,
            limiters: Mutex::new(HashMap::new()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: hashbrown::DefaultHashBuilder::default(),
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

    /// The limiter for `rate`, created on first use and kept for the life of the backend, so a
    /// reloaded configuration keeps the state of the rates it keeps. The error says what to change.
    pub fn limiter(&self, rate: &Rate) -> Result<Limiter, String> {
        let mut limiters = self.limiters.lock();
        if let Some(limiter) = limiters.get(rate) {
            return Ok(limiter.clone());
        }
        let quota = Quota::new(rate.requests_per_unit, rate.unit.period())
            .and_then(|q| match rate.burst {
                Some(burst) => q.with_burst(burst),
                None => Ok(q),
            })
            .map_err(|e| e.to_string())?;
        let engine = match &self.kind {
            Kind::Memory { max_keys } => Engine::Memory(Box::new(
                KeyedRateLimiter::builder(quota)
                    .max_keys(*max_keys)
                    .build()
                    .map_err(|e| e.to_string())?,
            )),
            Kind::Redis {
                store,
                raw,
                policy,
                two_tier_batch,
            } => {
                let shared: Arc<dyn KeyedLimit> = if *raw {
                    let raw = RawStore::new(store.clone(), quota)?;
                    if two_tier_batch.is_none() {
                        return Ok(self.remember(&mut limiters, rate, quota, Engine::Raw(raw)));
                    }
                    Arc::new(raw)
                } else {
                    let limiter = RemoteRateLimiter::builder(store.clone(), quota)
                        .failure_policy(*policy)
                        .build()
                        .map_err(|e| e.to_string())?;
                    if two_tier_batch.is_none() {
                        return Ok(self.remember(
                            &mut limiters,
                            rate,
                            quota,
                            Engine::Policy(limiter),
                        ));
                    }
                    Arc::new(limiter)
                };
                let batch = two_tier_batch.unwrap_or(1);
                Engine::TwoTier(
                    TwoTierLimiter::builder(shared, batch)
                        .build()
                        .map_err(|e| format!("two-tier batch: {e}"))?,
                )
            }
        };
        Ok(self.remember(&mut limiters, rate, quota, engine))
    }

    /// Keeps the limiter built for `rate`.
    fn remember(
        &self,
        limiters: &mut HashMap<Rate, Limiter>,
        rate: &Rate,
        quota: Quota,
        engine: Engine,
    ) -> Limiter {
        let limiter = Limiter(Arc::new(LimiterInner {
            id: limiters.len(),
            burst: quota.burst(),
            interval: quota.emission_interval(),
            engine,
        }));
        limiters.insert(*rate, limiter.clone());
        limiter
    }

    /// Decides a request's descriptors (see [`plan`]); one verdict per check.
    pub async fn decide(&self, checks: &[Check<'_>]) -> Result<Vec<Verdict>, BackendError> {
        let items = items(checks);
        let memory = matches!(self.kind, Kind::Memory { .. });
        if memory {
            return self.decide_in_memory(checks, &items);
        }
        let can_peek = !checks
            .iter()
            .any(|c| matches!(c.limiter.0.engine, Engine::TwoTier(_)));
        match plan::start(&items, can_peek) {
            Start::Spend => {
                let mut out = Vec::with_capacity(checks.len());
                for check in checks {
                    out.push(spend_shared(check, check.cost).await?);
                }
                Ok(out)
            }
            Start::Peek => {
                if let Some(answers) = self.decide_together(checks, &items).await? {
                    return Ok(answers);
                }
                let mut peeks = Vec::with_capacity(checks.len());
                for check in checks {
                    peeks.push(spend_shared(check, 0).await?);
                }
                match plan::after_peek(&items, &peeks) {
                    AfterPeek::Deny(answers) => Ok(answers),
                    AfterPeek::Spend { spend, mut answers } => {
                        for i in spend {
                            answers[i] = spend_shared(&checks[i], checks[i].cost).await?;
                        }
                        Ok(answers)
                    }
                }
            }
        }
    }

    /// Redis (not two-tier): the enforced descriptors all or nothing in one call, when the store
    /// can decide their keys together (one server, or one slot of a cluster); then the shadow-mode
    /// ones, spent if the request was allowed, answered from a peek if not. `None` when the
    /// request must be peeked instead: keys in several slots (raw store; the failure-policy
    /// limiter peeks and spends by itself then), or an enforced cost that can never fit.
    async fn decide_together(
        &self,
        checks: &[Check<'_>],
        items: &[Item],
    ) -> Result<Option<Vec<Verdict>>, BackendError> {
        let Kind::Redis { store, .. } = &self.kind else {
            return Ok(None);
        };
        let mut enforced = Vec::new();
        for (i, check) in checks.iter().enumerate().filter(|(_, c)| c.enforce) {
            match u32::try_from(check.cost) {
                Ok(cost) if cost <= check.limiter.burst() => enforced.push((i, cost)),
                // Denied whatever the store holds: the peeks answer it.
                _ => return Ok(None),
            }
        }
        let decisions = if enforced.is_empty() {
            Vec::new()
        } else {
            match together(store, checks, &enforced).await? {
                Some(decisions) => decisions,
                None => return Ok(None),
            }
        };
        let allowed = decisions.iter().all(|d| d.allowed);
        let mut answers: Vec<Option<Verdict>> = vec![None; checks.len()];
        for (&(i, _), d) in enforced.iter().zip(&decisions) {
            answers[i] = Some(verdict(&checks[i].limiter.0, d));
        }
        let mut out = Vec::with_capacity(checks.len());
        for (i, (check, answer)) in checks.iter().zip(answers).enumerate() {
            out.push(match answer {
                Some(answer) => answer,
                None if allowed => spend_shared(check, check.cost).await?,
                None => plan::from_peek(items, i, &spend_shared(check, 0).await?),
            });
        }
        Ok(Some(out))
    }

    fn decide_in_memory(
        &self,
        checks: &[Check<'_>],
        items: &[Item],
    ) -> Result<Vec<Verdict>, BackendError> {
        let mut stripes: Vec<usize> = checks
            .iter()
            .map(|c| (self.hasher.hash_one((c.limiter.0.id, c.key)) as usize) % STRIPES)
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        // Locks taken in stripe order: no two requests can wait on each other.
        let _guards: Vec<_> = stripes.iter().map(|&s| self.stripes[s].lock()).collect();
        match plan::start(items, true) {
            Start::Spend => checks.iter().map(|c| spend_memory(c, c.cost)).collect(),
            Start::Peek => {
                let peeks = checks
                    .iter()
                    .map(|c| spend_memory(c, 0))
                    .collect::<Result<Vec<_>, _>>()?;
                match plan::after_peek(items, &peeks) {
                    AfterPeek::Deny(answers) => Ok(answers),
                    AfterPeek::Spend { spend, mut answers } => {
                        for i in spend {
                            answers[i] = spend_memory(&checks[i], checks[i].cost)?;
                        }
                        Ok(answers)
                    }
                }
            }
        }
    }
}

/// The `enforced` checks (index, cost) decided all or nothing in one call of `store`; `None`
/// when their engines cannot (two-tier) or a raw store cannot decide their keys together.
async fn together(
    store: &RedisStore,
    checks: &[Check<'_>],
    enforced: &[(usize, u32)],
) -> Result<Option<Vec<Decision>>, BackendError> {
    let engine = |i: usize| &checks[i].limiter.0.engine;
    if enforced
        .iter()
        .all(|&(i, _)| matches!(engine(i), Engine::Policy(_)))
    {
        let quotas: Vec<QuotaCheck<'_, RedisStore>> = enforced
            .iter()
            .filter_map(|&(i, cost)| match engine(i) {
                Engine::Policy(limiter) => Some(QuotaCheck {
                    limiter,
                    key: checks[i].key,
                    cost,
                }),
                _ => None,
            })
            .collect();
        return Ok(Some(RemoteRateLimiter::check_all(&quotas).await?));
    }
    let mut raws = Vec::with_capacity(enforced.len());
    for &(i, cost) in enforced {
        let Engine::Raw(raw) = engine(i) else {
            return Ok(None);
        };
        raws.push((raw, store.key(checks[i].key), cost));
    }
    let keys: Vec<&Vec<u8>> = raws.iter().map(|(_, key, _)| key).collect();
    if !store.can_decide_all(&keys) {
        return Ok(None);
    }
    let items: Vec<StoreItem<'_, Vec<u8>>> = raws
        .iter()
        .map(|(raw, key, cost)| StoreItem {
            key,
            rule: &raw.rule,
            cost: *cost,
        })
        .collect();
    match store.decide_all(&items).await {
        Ok(answers) => Ok(Some(answers.into_iter().map(|a| a.decision).collect())),
        Err(DecideAllError::Apart) => Ok(None),
        Err(DecideAllError::Check(e)) => Err(e.into()),
        Err(e) => Err(BackendError::Rejected(e.to_string())),
    }
}

fn items(checks: &[Check<'_>]) -> Vec<Item> {
    checks
        .iter()
        .enumerate()
        .map(|(i, c)| Item {
            cost: c.cost,
            burst: c.limiter.burst(),
            enforce: c.enforce,
            same_key_as: checks[..i]
                .iter()
                .position(|o| Arc::ptr_eq(&o.limiter.0, &c.limiter.0) && o.key == c.key),
        })
        .collect()
}

fn verdict(limiter: &LimiterInner, d: &Decision) -> Verdict {
    Verdict {
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining().unwrap_or(0),
        reset_after: d.reset_after().unwrap_or_default(),
        retry_after: d.retry_after,
        interval: limiter.interval,
        degraded: d.degraded.is_some(),
    }
}

/// A cost no store can ever grant (above the burst): denied, with no retry time.
fn never(limiter: &LimiterInner) -> Verdict {
    Verdict {
        allowed: false,
        limit: limiter.burst,
        remaining: 0,
        reset_after: Duration::ZERO,
        retry_after: None,
        interval: limiter.interval,
        degraded: false,
    }
}

fn spend_memory(check: &Check<'_>, cost: u64) -> Result<Verdict, BackendError> {
    let limiter = &check.limiter.0;
    let Engine::Memory(keyed) = &limiter.engine else {
        return Err(BackendError::Rejected(
            "an in-memory decision reached a shared limiter".into(),
        ));
    };
    let Ok(cost) = u32::try_from(cost) else {
        return Ok(never(limiter));
    };
    match keyed.check_key_n(check.key, cost) {
        Ok(d) => Ok(verdict(limiter, &d)),
        Err(GcraError::InsufficientCapacity { .. }) => Ok(never(limiter)),
        Err(e) => Err(e.into()),
    }
}

async fn spend_shared(check: &Check<'_>, cost: u64) -> Result<Verdict, BackendError> {
    let limiter = &check.limiter.0;
    let Ok(cost) = u32::try_from(cost) else {
        return Ok(never(limiter));
    };
    let decided = match &limiter.engine {
        Engine::Memory(keyed) => keyed.check_key_n(check.key, cost).map_err(CheckError::Gcra),
        Engine::Raw(raw) => raw.decide(check.key, cost).await,
        Engine::Policy(redis) => redis.check_key_n(check.key, cost).await,
        Engine::TwoTier(two_tier) => two_tier.check_key_n(check.key, cost).await,
    };
    match decided {
        Ok(d) => Ok(verdict(limiter, &d)),
        Err(CheckError::Gcra(GcraError::InsufficientCapacity { .. })) => Ok(never(limiter)),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Unit;

    /// One token from the wide quota and one from the narrow one, as one request.
    fn pair<'a>(wide: &'a Limiter, narrow: &'a Limiter) -> [Check<'a>; 2] {
        [
            Check {
                limiter: wide,
                key: b"w",
                cost: 1,
                enforce: true,
            },
            Check {
                limiter: narrow,
                key: b"n",
                cost: 1,
                enforce: true,
            },
        ]
    }

    fn per_day(n: u32) -> Rate {
        Rate {
            requests_per_unit: n,
            unit: Unit::Day,
            burst: None,
        }
    }

    /// Many threads race requests naming {wide, narrow} against requests naming {narrow} alone.
    /// `wide` is spent exactly once per allowed pair: no pair ever spends `wide` and is then
    /// denied on `narrow` (which a peek-then-spend without the key locks would allow).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn in_memory_a_denied_request_never_spends_under_contention() {
        let backend = Arc::new(
            Backend::open(&StoreConfig::Memory { max_keys: 1024 })
                .await
                .unwrap(),
        );
        // One token back every 8,640 s: nothing comes back while the test runs.
        let wide = backend
            .limiter(&Rate {
                requests_per_unit: 10,
                unit: Unit::Day,
                burst: Some(5000),
            })
            .unwrap();
        let narrow = backend.limiter(&per_day(200)).unwrap();
        // One pair before the contention, so the test always exercises an allowed pair (which
        // task wins the narrow quota under contention is up to the scheduler).
        let verdicts = backend.decide(&pair(&wide, &narrow)).await.unwrap();
        assert!(verdicts.iter().all(|v| v.allowed));
        let mut tasks = Vec::new();
        for task in 0..8 {
            let (backend, wide, narrow) = (backend.clone(), wide.clone(), narrow.clone());
            tasks.push(tokio::spawn(async move {
                let mut pairs_allowed = 0u32;
                for _ in 0..200 {
                    let pair = pair(&wide, &narrow);
                    let checks = if task % 2 == 0 { &pair[..] } else { &pair[1..] };
                    let verdicts = backend.decide(checks).await.unwrap();
                    if task % 2 == 0 && verdicts.iter().all(|v| v.allowed) {
                        pairs_allowed += 1;
                    }
                }
                pairs_allowed
            }));
        }
        let mut pairs_allowed = 1;
        for t in tasks {
            pairs_allowed += t.await.unwrap();
        }
        let peek = [Check {
            limiter: &wide,
            key: b"w",
            cost: 0,
            enforce: true,
        }];
        let left = backend.decide(&peek).await.unwrap()[0].remaining;
        assert_eq!(5000 - left, pairs_allowed);
    }
}
