//! [`RemoteRateLimiter`]: one quota for many keys, shared by every instance through a
//! [`RemoteStore`], with a failure policy for when the store does not answer.

use std::sync::Arc;

use super::circuit::Gate;
use super::outage_log::OutageLog;
use super::policy::FailurePolicy;
use super::store::{KeySpaceClaim, RemoteStore};
use crate::clock::{Clock, MonotonicClock};
use crate::gcra::check::{CheckError, CheckFuture, KeyedLimit, StoreError, Unavailable};
use crate::gcra::{
    ConfigError, DEFAULT_MAX_KEYS, Decision, Degradation, Gcra, GcraError, KeyedRateLimiter,
    Overflow, Quota, Ticks,
};

/// A GCRA limiter whose state lives in a shared store (Redis): every instance using the same
/// store, key prefix and quota enforces one global quota per key. Same semantics as
/// [`KeyedRateLimiter`]: exact cost-n, denied requests change nothing, `cost > burst` is an error
/// (without a round trip).
///
/// When the store does not answer (within its timeout, or a group of its keys failed within the
/// last probe interval), the [`FailurePolicy`] decides, and the decision says so in
/// [`Decision::degraded`]; failing open or closed, it reports no numbers
/// ([`Decision::remaining`] is `None`), and a local fallback reports its share's. Cheap to clone
/// (clones share the store and the local fallback).
///
/// ```no_run
/// # #[cfg(feature = "redis")]
/// # mod example {
/// use flowguard::gcra::Quota;
/// use flowguard::gcra::redis::RedisStore;
/// use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::builder("redis://127.0.0.1:6379").connect().await?;
/// let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10)?)
///     .failure_policy(FailurePolicy::local_instances(4))
///     .build()?;
/// let d = limiter.check_key_n(b"tenant-7", 3).await?;
/// assert!(d.allowed && d.degraded.is_none());
/// assert_eq!(d.remaining(), Some(7));
/// # Ok(()) }
/// # }
/// ```
pub struct RemoteRateLimiter<S> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    store: S,
    quota: Quota,
    /// The rule at the store's resolution.
    rule: Gcra,
    policy: FailurePolicy,
    fallback: Option<LocalLimiter>,
    log: OutageLog,
    /// The store's key space, held for this limiter's quota while it lives.
    _claim: KeySpaceClaim,
}

/// The in-memory limiter of [`FailurePolicy::LocalFallback`], keyed by the user's key.
type LocalLimiter = KeyedRateLimiter<Vec<u8>, Arc<dyn Clock>>;

/// Configures a [`RemoteRateLimiter`].
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Debug)]
pub struct RemoteRateLimiterBuilder<S> {
    store: S,
    quota: Quota,
    policy: FailurePolicy,
    local_max_keys: usize,
    namespaced_keys: bool,
}

impl<S: RemoteStore> RemoteRateLimiterBuilder<S> {
    /// What the limiter answers when the store does not (default [`FailurePolicy::FailOpen`]).
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Declares that every key this limiter is asked about names its quota already (for
    /// example, keys built as `"{limit}:{client}"`), so limiters of other quotas over the same
    /// store prefix never meet its keys. The store then does not hold its key space for this
    /// quota ([`RemoteStore::claim`]), and [`build`](Self::build) does not refuse a prefix that
    /// limiters of another quota use. Without it, give each quota a prefix of its own.
    pub fn namespaced_keys(mut self) -> Self {
        self.namespaced_keys = true;
        self
    }

    /// The most keys the local fallback of [`FailurePolicy::LocalFallback`] tracks at once
    /// (default [`DEFAULT_MAX_KEYS`]); must be at least 1. It bounds the fallback's memory during
    /// an outage; what happens to further keys is said in [`FailurePolicy::LocalFallback`].
    pub fn local_max_keys(mut self, max_keys: usize) -> Self {
        self.local_max_keys = max_keys;
        self
    }

    /// Builds the limiter.
    ///
    /// Errors when the store cannot keep the quota exactly
    /// ([`ConfigError::StoreWindowTooLong`]), when `local_max_keys` is 0, or when the policy is
    /// [`FailurePolicy::LocalFallback`] and this instance's share of the quota is not a valid
    /// quota (e.g. a burst that rounds down to zero).
    pub fn build(self) -> Result<RemoteRateLimiter<S>, ConfigError> {
        let RemoteRateLimiterBuilder {
            store,
            quota,
            policy,
            local_max_keys,
            namespaced_keys,
        } = self;
        policy.validate()?;
        let rule = store.rule(&quota)?;
        if local_max_keys == 0 {
            return Err(ConfigError::ZeroMaxKeys);
        }
        let fallback = match policy {
            FailurePolicy::LocalFallback(share) => {
                let clock = store
                    .explicit_clock()
                    .unwrap_or_else(|| Arc::new(MonotonicClock::new()));
                let limiter = KeyedRateLimiter::<Vec<u8>>::builder(share.local_quota(&quota)?)
                    .clock(clock)
                    .max_keys(local_max_keys)
                    .overflow(Overflow::Reject)
                    .build()?;
                Some(limiter)
            }
            _ => None,
        };
        let claim = if namespaced_keys {
            KeySpaceClaim::none()
        } else {
            store.claim(&quota)?
        };
        let log = OutageLog::new(store.topology());
        Ok(RemoteRateLimiter {
            inner: Arc::new(Inner {
                store,
                quota,
                rule,
                policy,
                fallback,
                log,
                _claim: claim,
            }),
        })
    }
}

impl<S: RemoteStore> RemoteRateLimiter<S> {
    /// Starts configuring a limiter enforcing `quota` per key through `store`.
    pub fn builder(store: S, quota: Quota) -> RemoteRateLimiterBuilder<S> {
        RemoteRateLimiterBuilder {
            store,
            quota,
            policy: FailurePolicy::default(),
            namespaced_keys: false,
            local_max_keys: DEFAULT_MAX_KEYS,
        }
    }

    /// Checks (and on success spends) one token for `key`.
    pub async fn check_key(&self, key: &[u8]) -> Result<Decision, CheckError> {
        self.check_key_n(key, 1).await
    }

    /// Checks (and on success spends) `cost` tokens for `key`; `cost == 0` peeks.
    ///
    /// `cost > burst` is [`GcraError::InsufficientCapacity`] without a round trip. A key holding
    /// something else is [`StoreError::WrongType`] / [`StoreError::CorruptState`]; a refused
    /// call [`StoreError::Rejected`]. An unavailable store is answered by the failure policy.
    pub async fn check_key_n(&self, key: &[u8], cost: u32) -> Result<Decision, CheckError> {
        let inner = &*self.inner;
        self.fits_burst(cost)?;
        let store_key = inner.store.key(key);
        let group = inner.store.group(&store_key);
        let circuit = inner.store.circuit();
        let gate = circuit.gate(group);
        if gate == Gate::Open {
            // Answered without I/O: spend cooperative budget so a caller looping on checks still
            // yields, and the task awaiting the probe's reply gets to run.
            tokio::task::coop::consume_budget().await;
            let why = Unavailable::Skipped {
                probe_interval: circuit.probe_interval(),
            };
            return Ok(self.degrade(key, cost, why));
        }
        match inner.store.decide(&store_key, &inner.rule, cost).await {
            Ok(answer) => {
                self.answered(group);
                Ok(answer.decision)
            }
            Err(CheckError::Store(StoreError::Unavailable(why))) => {
                circuit.failed(group);
                if gate == Gate::Probe {
                    inner.store.probe_failed(&store_key);
                }
                Ok(self.degrade(key, cost, why))
            }
            Err(error) => {
                // The store answered, if only with an error: it is reachable again.
                self.answered(group);
                Err(error)
            }
        }
    }

    /// `cost > burst` is [`GcraError::InsufficientCapacity`]: it can never be allowed.
    pub(super) fn fits_burst(&self, cost: u32) -> Result<(), CheckError> {
        let burst = self.inner.rule.burst();
        if cost > burst {
            return Err(GcraError::InsufficientCapacity { cost, burst }.into());
        }
        Ok(())
    }

    /// What the failure policy would answer for a request of `key` (the store unavailable),
    /// spending nothing and logging nothing: fail open allows, fail closed denies, the local
    /// fallback allows when `total` tokens (this request's and those of the same key's other
    /// requests) fit its share now.
    pub(super) fn degraded_peek(&self, key: &[u8], total: u32) -> Decision {
        let inner = &*self.inner;
        match (&inner.policy, &inner.fallback) {
            (FailurePolicy::LocalFallback(_), Some(local)) => match local.check_key_n(key, 0) {
                Ok(peek) if peek.allowed && total <= peek.remaining => {
                    peek.degraded(Degradation::LocalFallback)
                }
                Ok(peek) => self.local_denial(peek),
                Err(_) => self
                    .policy_denial()
                    .degraded(Degradation::LocalFallbackFull),
            },
            (FailurePolicy::FailClosed, _) => {
                self.policy_denial().degraded(Degradation::FailClosed)
            }
            _ => match inner.rule.decide(Ticks::ZERO, 0, 0) {
                Ok(step) => step.decision.degraded(Degradation::FailOpen),
                Err(_) => self.policy_denial().degraded(Degradation::FailOpen),
            },
        }
    }

    /// Counts and logs one degraded decision (`why`: how the store failed).
    pub(super) fn log_degraded(&self, why: Unavailable) {
        let inner = &*self.inner;
        inner.log.degraded(inner.policy.label(), why);
    }

    /// A denial by the failure policy: try again after one probe interval.
    fn policy_denial(&self) -> Decision {
        let inner = &*self.inner;
        Decision::new(
            false,
            inner.rule.burst(),
            0,
            Some(inner.store.circuit().probe_interval()),
            inner.quota.burst_window(),
        )
    }

    /// A denial by the local fallback of a request its share cannot take now: the share's
    /// numbers from `peek` (real, this instance's), and the failure policy's wait.
    fn local_denial(&self, peek: Decision) -> Decision {
        Decision::new(
            false,
            peek.limit,
            peek.remaining,
            self.policy_denial().retry_after,
            peek.reset_after,
        )
        .degraded(Degradation::LocalFallback)
    }

    /// Records an answer of the store for `group`.
    pub(super) fn answered(&self, group: usize) {
        let inner = &*self.inner;
        if inner.store.circuit().answered(group) {
            inner.log.recovered();
            inner.store.recovered();
        }
    }

    /// The decision of the failure policy for a check the store could not answer (`why`),
    /// counted and logged.
    pub(super) fn degrade(&self, key: &[u8], cost: u32, why: Unavailable) -> Decision {
        self.log_degraded(why);
        self.by_policy(key, cost).because(why.into())
    }

    /// The failure policy's decision for `key` (the store unavailable).
    fn by_policy(&self, key: &[u8], cost: u32) -> Decision {
        let inner = &*self.inner;
        let denied = || self.policy_denial();
        match (&inner.policy, &inner.fallback) {
            (FailurePolicy::LocalFallback(_), Some(local)) => {
                match local.check_key_n(key, cost) {
                    Ok(d) => d.degraded(Degradation::LocalFallback),
                    // Full of live keys: a key it cannot track is denied, never left unlimited.
                    Err(GcraError::KeyLimitReached { .. }) => {
                        denied().degraded(Degradation::LocalFallbackFull)
                    }
                    // The request fits the global burst but not this instance's share of it:
                    // denied with the share's numbers, as they are (a peek spends nothing).
                    Err(_) => match local.check_key_n(key, 0) {
                        Ok(peek) => self.local_denial(peek),
                        Err(_) => denied().degraded(Degradation::LocalFallbackFull),
                    },
                }
            }
            (FailurePolicy::FailClosed, _) => denied().degraded(Degradation::FailClosed),
            _ => match inner.rule.decide(Ticks::ZERO, 0, cost) {
                Ok(step) => step.decision.degraded(Degradation::FailOpen),
                Err(_) => denied().degraded(Degradation::FailOpen),
            },
        }
    }

    /// The quota, as configured.
    pub fn quota(&self) -> &Quota {
        &self.inner.quota
    }

    /// The rule the store applies: the quota at the store's resolution (microseconds for
    /// Redis). An in-memory limiter deciding with this rule at the same times reaches the same
    /// decisions.
    pub fn rule(&self) -> &Gcra {
        &self.inner.rule
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.policy
    }

    /// The local fallback's quota, when the policy is [`FailurePolicy::LocalFallback`].
    pub fn local_quota(&self) -> Option<&Quota> {
        self.inner.fallback.as_ref().map(|f| f.quota())
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }
}

/// One round trip per decision (none for a cost above the burst, or while the key's group of the
/// store is skipped after a failure).
impl<S: RemoteStore> KeyedLimit for RemoteRateLimiter<S> {
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture {
        let (limiter, key) = (self.clone(), key.to_vec());
        CheckFuture::new(async move { limiter.check_key_n(&key, cost).await })
    }

    fn quota(&self) -> Quota {
        self.inner.quota
    }
}

impl<S> RemoteRateLimiter<S> {
    /// Whether `self` and `other` are the same limiter (clones of one).
    pub(super) fn same_limiter(&self, other: &RemoteRateLimiter<S>) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl<S> Clone for RemoteRateLimiter<S> {
    fn clone(&self) -> Self {
        RemoteRateLimiter {
            inner: self.inner.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for RemoteRateLimiter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRateLimiter")
            .field("store", &self.inner.store)
            .field("quota", &self.inner.quota)
            .field("policy", &self.inner.policy)
            .field(
                "local_quota",
                &self.inner.fallback.as_ref().map(|f| f.quota()),
            )
            .finish()
    }
}
