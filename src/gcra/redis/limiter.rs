//! [`RedisRateLimiter`]: one quota for many keys, shared by every instance through a [`RedisStore`],
//! with a failure policy for when Redis does not answer.

use std::sync::Arc;

use super::error::RedisStoreError;
use super::policy::FailurePolicy;
use super::quota::RedisQuota;
use super::store::RedisStore;
use crate::gcra::{
    Clock, ConfigError, DEFAULT_MAX_KEYS, Decision, Degradation, GcraError, KeyedRateLimiter,
    Overflow, Quota, Ticks,
};

/// A GCRA limiter whose state lives in Redis: every instance using the same store, prefix and
/// quota enforces one global quota per key. Same semantics as
/// [`KeyedRateLimiter`]: exact cost-n, denied requests change nothing, `cost > burst` is an error.
///
/// When Redis does not answer within the store's timeout, the store's [`FailurePolicy`] decides,
/// and the decision says so in [`Decision::degraded`]. Cheap to clone.
///
/// ```no_run
/// use flowguard::gcra::Quota;
/// use flowguard::gcra::redis::{RedisRateLimiter, RedisStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
/// let limiter = RedisRateLimiter::new(store, Quota::per_second(10)?)?;
/// let d = limiter.check_key_n(b"tenant-7", 3).await?;
/// assert!(d.allowed && d.degraded.is_none());
/// assert_eq!(d.remaining, 7);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisRateLimiter {
    store: RedisStore,
    quota: RedisQuota,
    fallback: Option<Arc<LocalLimiter>>,
}

/// The in-memory limiter of [`FailurePolicy::LocalFallback`], keyed by store key.
type LocalLimiter = KeyedRateLimiter<Vec<u8>, Arc<dyn Clock>>;

/// Configures a [`RedisRateLimiter`]; [`RedisRateLimiter::new`] takes the defaults.
#[derive(Clone, Debug)]
pub struct RedisRateLimiterBuilder {
    store: RedisStore,
    quota: Quota,
    local_max_keys: usize,
}

impl RedisRateLimiterBuilder {
    /// The most keys the local fallback of [`FailurePolicy::LocalFallback`] tracks at once
    /// (default [`DEFAULT_MAX_KEYS`]); must be at least 1. It bounds the fallback's memory during
    /// an outage; what happens to further keys is said in [`FailurePolicy::LocalFallback`].
    pub fn local_max_keys(mut self, max_keys: usize) -> Self {
        self.local_max_keys = max_keys;
        self
    }

    /// Builds the limiter.
    ///
    /// Errors when the quota cannot be enforced at the store's microsecond resolution, when
    /// `local_max_keys` is 0, or when the store's policy is [`FailurePolicy::LocalFallback`] and
    /// this instance's share of the quota is not a valid quota (e.g. a burst that rounds down to
    /// zero).
    pub fn build(self) -> Result<RedisRateLimiter, RedisStoreError> {
        let RedisRateLimiterBuilder {
            store,
            quota,
            local_max_keys,
        } = self;
        let quota = RedisQuota::new(quota)?;
        if local_max_keys == 0 {
            return Err(RedisStoreError::LocalFallback(ConfigError::ZeroMaxKeys));
        }
        let fallback = match store.failure_policy() {
            FailurePolicy::LocalFallback(share) => {
                let local = share.local_quota(quota.quota())?;
                let limiter = KeyedRateLimiter::builder(local)
                    .clock(store.local_clock())
                    .max_keys(local_max_keys)
                    .overflow(Overflow::Reject)
                    .build::<Vec<u8>>()
                    .map_err(RedisStoreError::LocalFallback)?;
                Some(Arc::new(limiter))
            }
            _ => None,
        };
        Ok(RedisRateLimiter {
            store,
            quota,
            fallback,
        })
    }
}

impl RedisRateLimiter {
    /// A limiter enforcing `quota` per key through `store`, with the defaults of
    /// [`RedisRateLimiterBuilder`]. Errors as [`RedisRateLimiterBuilder::build`] does.
    pub fn new(store: RedisStore, quota: Quota) -> Result<RedisRateLimiter, RedisStoreError> {
        RedisRateLimiter::builder(store, quota).build()
    }

    /// Starts configuring a limiter enforcing `quota` per key through `store`.
    pub fn builder(store: RedisStore, quota: Quota) -> RedisRateLimiterBuilder {
        RedisRateLimiterBuilder {
            store,
            quota,
            local_max_keys: DEFAULT_MAX_KEYS,
        }
    }

    /// Checks (and on success spends) one token for `key`.
    pub async fn check_key(&self, key: &[u8]) -> Result<Decision, GcraError> {
        self.check_key_n(key, 1).await
    }

    /// Checks (and on success spends) `cost` tokens for `key`; `cost == 0` peeks.
    ///
    /// `cost > burst` is [`GcraError::InsufficientCapacity`] without a round trip. A key holding
    /// something else is [`GcraError::WrongType`] / [`GcraError::CorruptState`]; a refused command
    /// [`GcraError::StoreRejected`]. An unavailable store is answered by the failure policy.
    pub async fn check_key_n(&self, key: &[u8], cost: u32) -> Result<Decision, GcraError> {
        match self.store.check(key, &self.quota, cost).await {
            Ok(answer) => Ok(answer.decision),
            Err(GcraError::StoreUnavailable { reason }) => Ok(self.degrade(key, cost, &reason)),
            Err(e) => Err(e),
        }
    }

    /// The decision of the failure policy for a check the store could not answer (`reason`),
    /// counted and logged. Crate-visible so the two-tier reservoir can apply the same policy.
    pub(crate) fn degrade(&self, key: &[u8], cost: u32, reason: &str) -> Decision {
        let policy = self.store.failure_policy();
        self.store.report_degraded(policy.label(), reason);
        let gcra = self.quota.gcra();
        let denied = || {
            Decision::new(
                false,
                gcra.burst(),
                0,
                Some(self.store.probe_interval()),
                self.quota.quota().burst_window(),
            )
        };
        match (&policy, &self.fallback) {
            (FailurePolicy::LocalFallback(_), Some(local)) => {
                match local.check_key_n(&self.store.key_for(key)[..], cost) {
                    Ok(d) => d.degraded(Degradation::LocalFallback),
                    // Full of live keys: a key it cannot track is denied, never left unlimited.
                    Err(GcraError::KeyLimitReached { .. }) => {
                        denied().degraded(Degradation::LocalFallbackFull)
                    }
                    // The request fits the global burst but not this instance's share of it.
                    Err(_) => denied().degraded(Degradation::LocalFallback),
                }
            }
            (FailurePolicy::FailClosed, _) => denied().degraded(Degradation::FailClosed),
            _ => match gcra.decide(Ticks::ZERO, 0, cost) {
                Ok(step) => step.decision.degraded(Degradation::FailOpen),
                Err(_) => denied().degraded(Degradation::FailOpen),
            },
        }
    }

    /// The quota, as configured.
    pub fn quota(&self) -> &Quota {
        self.quota.quota()
    }

    /// The quota as the store enforces it (microsecond rule).
    pub fn redis_quota(&self) -> &RedisQuota {
        &self.quota
    }

    /// The local fallback's quota, when the policy is [`FailurePolicy::LocalFallback`].
    pub fn local_quota(&self) -> Option<&Quota> {
        self.fallback.as_ref().map(|f| f.quota())
    }

    /// The store.
    pub fn store(&self) -> &RedisStore {
        &self.store
    }
}

impl std::fmt::Debug for RedisRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRateLimiter")
            .field("store", &self.store)
            .field("quota", self.quota.quota())
            .field("local_quota", &self.local_quota())
            .finish()
    }
}
