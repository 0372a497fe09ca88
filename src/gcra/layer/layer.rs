//! [`RateLimitLayer`]: holds the store and the key extractor; wraps services in [`RateLimitService`].

use std::sync::Arc;

use tower::Layer;

use super::service::RateLimitService;
use crate::gcra::RateLimitStore;

/// Applies a keyed quota to inbound `http` requests. See the [module docs](super) for an example.
pub struct RateLimitLayer<St: ?Sized, K> {
    store: Arc<St>,
    key: K,
}

impl<St: RateLimitStore + ?Sized, K> RateLimitLayer<St, K> {
    /// Limits requests by `key` (see [`KeyExtractor`](super::KeyExtractor)) against `store`.
    pub fn new(store: Arc<St>, key: K) -> Self {
        RateLimitLayer { store, key }
    }
}

impl<S, St: ?Sized, K: Clone> Layer<S> for RateLimitLayer<St, K> {
    type Service = RateLimitService<S, St, K>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService::new(inner, self.store.clone(), self.key.clone())
    }
}

impl<St: ?Sized, K: Clone> Clone for RateLimitLayer<St, K> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            store: self.store.clone(),
            key: self.key.clone(),
        }
    }
}
