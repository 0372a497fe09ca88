//! [`StoreSettings`]: where a [`Guard`](super::Guard)'s quota is kept — in memory by default, or
//! in Redis / Redis Cluster, optionally two-tier (feature `redis`) — and the limiter opened
//! from them.

use std::sync::Arc;

use super::error::BuildError;
use crate::gcra::{KeyedLimit, KeyedRateLimiter, Quota};

/// The store settings collected by the [`GuardBuilder`](super::GuardBuilder).
#[derive(Debug, Default)]
pub(super) struct StoreSettings {
    #[cfg(feature = "redis")]
    pub(super) url: Option<String>,
    #[cfg(feature = "redis")]
    pub(super) prefix: Option<Vec<u8>>,
    #[cfg(feature = "redis")]
    pub(super) failure_policy: Option<crate::gcra::remote::FailurePolicy>,
    #[cfg(feature = "redis")]
    pub(super) two_tier_batch: Option<u32>,
    #[cfg(feature = "redis")]
    pub(super) timeout: Option<std::time::Duration>,
}

impl StoreSettings {
    /// The first setting given, by the name of its builder method: a store setting given where
    /// the guard builds no store is an error naming it.
    pub(super) fn first_setting(&self) -> Option<&'static str> {
        #[cfg(feature = "redis")]
        {
            let given = [
                ("redis", self.url.is_some()),
                ("redis_prefix", self.prefix.is_some()),
                ("failure_policy", self.failure_policy.is_some()),
                ("two_tier", self.two_tier_batch.is_some()),
                ("redis_timeout", self.timeout.is_some()),
            ];
            given
                .into_iter()
                .find(|(_, set)| *set)
                .map(|(name, _)| name)
        }
        #[cfg(not(feature = "redis"))]
        None
    }

    /// The limiter keeping `quota`, if any: in memory, or (with a Redis URL) connected to Redis
    /// now; and where the guard keeps quotas, for its quota layers. A Redis URL without a quota
    /// opens the store for the quota layers alone; two-tier needs a quota, and is refused before
    /// connecting.
    pub(super) async fn open(
        self,
        quota: Option<Quota>,
    ) -> Result<(Option<Arc<dyn KeyedLimit>>, Kept), BuildError> {
        #[cfg(feature = "redis")]
        if let Some(url) = self.url {
            if quota.is_none() && self.two_tier_batch.is_some() {
                return Err(BuildError::NeedsQuota {
                    setting: "two_tier",
                });
            }
            return redis(
                url,
                self.prefix,
                self.failure_policy,
                self.timeout,
                self.two_tier_batch,
                quota,
            )
            .await;
        }
        if let Some(setting) = self.first_setting() {
            return Err(BuildError::NeedsRedis { setting });
        }
        let limit = quota
            .map(|quota| Arc::new(KeyedRateLimiter::<Vec<u8>>::new(quota)) as Arc<dyn KeyedLimit>);
        Ok((limit, Kept::Memory))
    }
}

/// Where a [`Guard`](super::Guard)'s quota is kept, for the layers with several quotas it
/// builds on the same store ([`Guard::quota_layer`](super::Guard::quota_layer)).
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(super) enum Kept {
    /// In memory, or no quota and no Redis: layers keep theirs in memory.
    Memory,
    /// A limiter of the user's own ([`rate_limit`](super::GuardBuilder::rate_limit)), whose
    /// store the guard does not know.
    Own,
    /// In Redis, under the store's prefix, answered by `failure_policy` while Redis does not.
    #[cfg(feature = "redis")]
    Redis {
        /// The guard's store (its connection and prefix).
        store: crate::gcra::redis::RedisStore,
        /// The guard's failure policy.
        failure_policy: crate::gcra::remote::FailurePolicy,
    },
    /// In Redis, two-tier.
    #[cfg(feature = "redis")]
    TwoTier,
}

/// The Redis store at `url` and, for a quota, a
/// [`RemoteRateLimiter`](crate::gcra::remote::RemoteRateLimiter) over it, wrapped in a
/// [`TwoTierLimiter`](crate::gcra::two_tier::TwoTierLimiter) when a batch is given.
#[cfg(feature = "redis")]
async fn redis(
    url: String,
    prefix: Option<Vec<u8>>,
    failure_policy: Option<crate::gcra::remote::FailurePolicy>,
    timeout: Option<std::time::Duration>,
    two_tier_batch: Option<u32>,
    quota: Option<Quota>,
) -> Result<(Option<Arc<dyn KeyedLimit>>, Kept), BuildError> {
    use super::redis_url::RedisTarget;
    use crate::gcra::redis::RedisStore;
    use crate::gcra::remote::RemoteRateLimiter;
    use crate::gcra::two_tier::TwoTierLimiter;

    let mut builder = match RedisTarget::parse(&url).map_err(BuildError::RedisUrl)? {
        RedisTarget::Standalone { url } => RedisStore::builder(url),
        RedisTarget::Cluster { nodes } => RedisStore::cluster_builder(nodes),
    };
    if let Some(prefix) = prefix {
        builder = builder.prefix(prefix);
    }
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    let store = builder.connect().await.map_err(BuildError::Redis)?;
    let failure_policy = failure_policy.unwrap_or_default();
    let Some(quota) = quota else {
        return Ok((
            None,
            Kept::Redis {
                store,
                failure_policy,
            },
        ));
    };
    let remote = RemoteRateLimiter::builder(store.clone(), quota)
        .failure_policy(failure_policy)
        .build()
        .map_err(BuildError::Store)?;
    Ok(match two_tier_batch {
        None => (
            Some(Arc::new(remote)),
            Kept::Redis {
                store,
                failure_policy,
            },
        ),
        Some(batch) => (
            Some(Arc::new(
                TwoTierLimiter::builder(remote, batch)
                    .build()
                    .map_err(BuildError::Store)?,
            )),
            Kept::TwoTier,
        ),
    })
}

#[cfg(feature = "tower")]
impl Kept {
    /// The set keeping a quota layer's `limits` where the guard keeps its quota: in memory, or
    /// in Redis with one limiter per limit over the guard's connection, each under its own
    /// prefix (`RedisStore::for_limit`), all with the guard's failure policy.
    pub(super) fn limit_set(
        &self,
        limits: &[crate::gcra::LimitSpec],
    ) -> Result<Arc<dyn crate::gcra::LimitSet>, super::QuotaLayerError> {
        use super::QuotaLayerError;
        use crate::gcra::{LimitSpec, MemoryLimitSet};
        match self {
            Kept::Memory => Ok(Arc::new(MemoryLimitSet::new(
                limits.iter().map(LimitSpec::quota),
            ))),
            Kept::Own => Err(QuotaLayerError::OwnRateLimit),
            #[cfg(feature = "redis")]
            Kept::TwoTier => Err(QuotaLayerError::TwoTier),
            #[cfg(feature = "redis")]
            Kept::Redis {
                store,
                failure_policy,
            } => remote_set(store, *failure_policy, limits),
        }
    }
}

/// One [`RemoteRateLimiter`](crate::gcra::remote::RemoteRateLimiter) per limit over `store`'s
/// connection. Each identity's keys carry a hash tag around the user key, so that one identity's
/// quotas share a slot of a cluster and are decided in one call; a guard prefix with a hash tag
/// of its own keeps every key in that one slot instead.
#[cfg(all(feature = "tower", feature = "redis"))]
fn remote_set(
    store: &crate::gcra::redis::RedisStore,
    failure_policy: crate::gcra::remote::FailurePolicy,
    limits: &[crate::gcra::LimitSpec],
) -> Result<Arc<dyn crate::gcra::LimitSet>, super::QuotaLayerError> {
    use super::QuotaLayerError;
    use crate::gcra::remote::{RemoteLimitSet, RemoteRateLimiter};

    let mut limiters = Vec::with_capacity(limits.len());
    for (i, limit) in limits.iter().enumerate() {
        if limits[..i].iter().any(|other| other.name() == limit.name()) {
            return Err(QuotaLayerError::SharedKeys {
                limit: limit.name().to_owned(),
            });
        }
        let refused = |source| QuotaLayerError::Store {
            limit: limit.name().to_owned(),
            source,
        };
        let own = store.for_limit(limit.name()).map_err(refused)?;
        limiters.push(
            RemoteRateLimiter::builder(own, limit.quota())
                .failure_policy(failure_policy)
                .build()
                .map_err(refused)?,
        );
    }
    Ok(Arc::new(RemoteLimitSet::new(limiters)))
}
