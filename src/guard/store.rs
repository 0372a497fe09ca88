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
            ];
            given
                .into_iter()
                .find(|(_, set)| *set)
                .map(|(name, _)| name)
        }
        #[cfg(not(feature = "redis"))]
        None
    }

    /// The limiter keeping `quota`: in memory, or (with a Redis URL) connected to Redis now.
    pub(super) async fn open(self, quota: Quota) -> Result<Arc<dyn KeyedLimit>, BuildError> {
        #[cfg(feature = "redis")]
        if let Some(url) = self.url {
            return redis(
                url,
                self.prefix,
                self.failure_policy,
                self.two_tier_batch,
                quota,
            )
            .await;
        }
        if let Some(setting) = self.first_setting() {
            return Err(BuildError::NeedsRedis { setting });
        }
        Ok(Arc::new(KeyedRateLimiter::<Vec<u8>>::new(quota)))
    }
}

/// A [`RemoteRateLimiter`](crate::gcra::remote::RemoteRateLimiter) over a Redis store at `url`,
/// wrapped in a [`TwoTierLimiter`](crate::gcra::two_tier::TwoTierLimiter) when a batch is given.
#[cfg(feature = "redis")]
async fn redis(
    url: String,
    prefix: Option<Vec<u8>>,
    failure_policy: Option<crate::gcra::remote::FailurePolicy>,
    two_tier_batch: Option<u32>,
    quota: Quota,
) -> Result<Arc<dyn KeyedLimit>, BuildError> {
    use super::redis_url::RedisTarget;
    use crate::gcra::redis::RedisStore;
    use crate::gcra::remote::RemoteRateLimiter;
    use crate::gcra::two_tier::TwoTierLimiter;

    let builder = match RedisTarget::parse(&url).map_err(BuildError::RedisUrl)? {
        RedisTarget::Standalone { url } => RedisStore::builder(url),
        RedisTarget::Cluster { nodes } => RedisStore::cluster_builder(nodes),
    };
    let builder = match prefix {
        Some(prefix) => builder.prefix(prefix),
        None => builder,
    };
    let store = builder.connect().await.map_err(BuildError::Redis)?;
    let remote = RemoteRateLimiter::builder(store, quota)
        .failure_policy(failure_policy.unwrap_or_default())
        .build()
        .map_err(BuildError::Store)?;
    Ok(match two_tier_batch {
        None => Arc::new(remote),
        Some(batch) => Arc::new(
            TwoTierLimiter::builder(remote, batch)
                .build()
                .map_err(BuildError::Store)?,
        ),
    })
}
