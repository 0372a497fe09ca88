//! [`QuotaLayer`]: holds the store and the key extractor; wraps services in [`QuotaService`].

use std::sync::Arc;

use tower::Layer;

use super::service::QuotaService;
use crate::gcra::KeyedLimit;
use crate::headers::{HeaderStyle, PolicyName, QuotaPolicy};

/// Applies a keyed quota to inbound `http` requests. See the [module docs](super) for an example.
pub struct QuotaLayer<St: ?Sized, K> {
    store: Arc<St>,
    key: K,
    policy: Arc<QuotaPolicy>,
    style: HeaderStyle,
}

impl<St: KeyedLimit + ?Sized, K> QuotaLayer<St, K> {
    /// Limits requests by `key` (see [`KeyExtractor`](super::KeyExtractor)) against `store`,
    /// advertising the store's quota as the policy `"default"` in the IETF fields.
    pub fn new(store: Arc<St>, key: K) -> Self {
        let policy = Arc::new(store.quota().rate_limit_policy(PolicyName::default()));
        QuotaLayer {
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

impl<S, St: ?Sized, K: Clone> Layer<S> for QuotaLayer<St, K> {
    type Service = QuotaService<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        QuotaService::new(
            inner,
            self.store.clone(),
            self.key.clone(),
            self.policy.clone(),
            self.style,
        )
    }
}

impl<St: ?Sized, K: Clone> Clone for QuotaLayer<St, K> {
    fn clone(&self) -> Self {
        QuotaLayer {
            store: self.store.clone(),
            key: self.key.clone(),
            policy: self.policy.clone(),
            style: self.style,
        }
    }
}
