//! [`RemoteLimitSet`]: several quotas over one shared store as a [`LimitSet`], so that the inbound
//! layer decides a request's quotas in Redis all or nothing.

use std::sync::Arc;

use super::all::QuotaCheck;
use super::limiter::RemoteRateLimiter;
use super::store::RemoteStore;
use crate::gcra::check::answer_alone;
use crate::gcra::{
    CheckError, Decisions, Demand, KeyedLimit, LimitSet, Quota, SetError, SetFuture,
};

/// Remote limiters (one per quota, usually over one store) deciding a request's demands all or
/// nothing with [`RemoteRateLimiter::check_all`]: **atomic in one round trip** when the limiters
/// share one store that can decide the keys together (Redis: one server always; a cluster when
/// the keys share a hash slot, which [`hash_tag_keys`](crate::gcra::redis::RedisStoreBuilder::hash_tag_keys)
/// and a prefix per quota give one identity's per-key quotas), and peeked then spent otherwise (a
/// global quota's key is in another slot than a client's). When the store fails, each quota's
/// failure policy answers, still all or nothing, and the decisions are marked degraded.
///
/// Built from an iterator of limiters, in the order of the limits they serve. With the inbound
/// layer (feature `tower`), one limiter per [`LimitSpec`](crate::gcra::LimitSpec), each under
/// its own prefix:
///
/// ```no_run
/// # #[cfg(all(feature = "redis", feature = "tower"))]
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
/// use flowguard::gcra::redis::RedisStore;
/// use flowguard::gcra::remote::{RemoteLimitSet, RemoteRateLimiter};
/// use flowguard::gcra::Quota;
///
/// let store = RedisStore::builder("redis://127.0.0.1:6379").hash_tag_keys(true).connect().await?;
/// let layer = QuotaLayer::builder(HeaderKey::new("x-api-key"))
///     .policy(Policy::per_key("second", Quota::per_second(10)?))
///     .policy(Policy::per_key("hour", Quota::per_hour(1_000)?))
///     .build_with(|limits| {
///         limits
///             .iter()
///             .map(|limit| {
///                 let store = store.with_prefix(format!("api:{}:", limit.name()))?;
///                 RemoteRateLimiter::builder(store, limit.quota()).build()
///             })
///             .collect::<Result<RemoteLimitSet<_>, _>>()
///     })?;
/// # let _ = layer; Ok(()) }
/// ```
pub struct RemoteLimitSet<S> {
    limits: Arc<[RemoteRateLimiter<S>]>,
}

impl<S: RemoteStore> RemoteLimitSet<S> {
    /// A set of `limiters`, limit `i` being the `i`-th.
    pub fn new(limiters: impl IntoIterator<Item = RemoteRateLimiter<S>>) -> RemoteLimitSet<S> {
        RemoteLimitSet {
            limits: limiters.into_iter().collect(),
        }
    }

    /// The limiter of limit `limit`.
    pub fn limiter(&self, limit: usize) -> Option<&RemoteRateLimiter<S>> {
        self.limits.get(limit)
    }
}

impl<S: RemoteStore> FromIterator<RemoteRateLimiter<S>> for RemoteLimitSet<S> {
    fn from_iter<I: IntoIterator<Item = RemoteRateLimiter<S>>>(limiters: I) -> Self {
        RemoteLimitSet::new(limiters)
    }
}

impl<S> Clone for RemoteLimitSet<S> {
    fn clone(&self) -> Self {
        RemoteLimitSet {
            limits: Arc::clone(&self.limits),
        }
    }
}

impl<S: RemoteStore> std::fmt::Debug for RemoteLimitSet<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteLimitSet")
            .field(
                "quotas",
                &self
                    .limits
                    .iter()
                    .map(KeyedLimit::quota)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<S: RemoteStore> LimitSet for RemoteLimitSet<S> {
    fn limits(&self) -> usize {
        self.limits.len()
    }

    fn quota(&self, limit: usize) -> Option<Quota> {
        self.limits.get(limit).map(KeyedLimit::quota)
    }

    /// Errors of the call as a whole (a key holding something else, a refused call) are reported
    /// against the first demand: the store does not say which key it was.
    fn check_all(&self, demands: &[Demand<'_>]) -> SetFuture {
        if let Some(answer) = answer_alone(&self.limits, demands) {
            return answer;
        }
        let limits = Arc::clone(&self.limits);
        let owned: Vec<(usize, Vec<u8>, u32)> = demands
            .iter()
            .map(|d| (d.limit, d.key.to_vec(), d.cost))
            .collect();
        SetFuture::new(async move {
            let checks: Vec<QuotaCheck<'_, S>> = owned
                .iter()
                .map(|(limit, key, cost)| QuotaCheck {
                    limiter: &limits[*limit],
                    key,
                    cost: *cost,
                })
                .collect();
            let decisions = RemoteRateLimiter::check_all(&checks).await.map_err(first)?;
            Ok(Decisions::from_slice(&decisions))
        })
    }
}

/// An error of the whole call, reported against the first demand.
fn first(error: CheckError) -> SetError {
    SetError::Check { demand: 0, error }
}
