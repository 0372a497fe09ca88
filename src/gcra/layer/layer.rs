//! [`RateLimitLayer`]: holds the store and the key extractor; wraps services in [`RateLimitService`].

use std::sync::Arc;

use tower::Layer;

use super::service::RateLimitService;
use crate::gcra::KeyedLimit;
use crate::headers::{HeaderStyle, PolicyName, QuotaPolicy};

/// Applies a keyed quota to inbound `http` requests. See the [module docs](super) for an example.
pub struct RateLimitLayer<St: ?Sized, K> {
    store: Arc<St>,
    key: K,
    policy: Arc<QuotaPolicy>,
    style: HeaderStyle,
}

impl<St: KeyedLimit + ?Sized, K> RateLimitLayer<St, K> {
    /// Limits requests by `key` (see [`KeyExtractor`](super::KeyExtractor)) against `store`,
    /// advertising the store's quota as the policy `"default"` in the IETF fields.
    pub fn new(store: Arc<St>, key: K) -> Self {
        let policy = Arc::new(store.quota().rate_limit_policy(PolicyName::default()));
        RateLimitLayer {
            store,
            key,
            policy,
            style: HeaderStyle::default(),
        }
    }

    /// Names the policy in the rate-limit fields (default `"default"`). Stacked layers need
    /// distinct names so that a client can tell their `RateLimit` members apart.
    pub fn policy_name(mut self, name: PolicyName) -> Self {
        self.policy = Arc::new(self.store.quota().rate_limit_policy(name));
        self
    }

    /// Which rate-limit fields responses carry (default [`HeaderStyle::Ietf`]:
    /// `RateLimit-Policy` and `RateLimit`; [`HeaderStyle::Legacy`] for `X-RateLimit-*`).
    pub fn header_style(mut self, style: HeaderStyle) -> Self {
        self.style = style;
        self
    }
}

impl<S, St: ?Sized, K: Clone> Layer<S> for RateLimitLayer<St, K> {
    type Service = RateLimitService<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(
            inner,
            self.store.clone(),
            self.key.clone(),
            self.policy.clone(),
            self.style,
        )
    }
}

impl<St: ?Sized, K: Clone> Clone for RateLimitLayer<St, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            store: self.store.clone(),
            key: self.key.clone(),
            policy: self.policy.clone(),
            style: self.style,
        }
    }
}
