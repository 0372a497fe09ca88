//! [`RateLimitStore`]: the one async face of every keyed limiter (in memory, Redis, two-tier), so
//! middleware works with any of them.

use std::future::Future;
use std::pin::Pin;

use super::decision::Decision;
use super::error::GcraError;
use super::keyed::KeyedRateLimiter;
use super::quota::Quota;
use crate::clock::Clock;

/// A boxed, `Send` future, as returned by [`RateLimitStore::check`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A keyed GCRA limiter that may do I/O to decide. Keys are bytes (binary-safe).
///
/// ```
/// use flowguard::gcra::{KeyedRateLimiter, Quota, RateLimitStore};
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store: Arc<dyn RateLimitStore> = Arc::new(KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(1)?));
/// assert!(store.check(b"client-1", 1).await?.allowed);
/// assert!(!store.check(b"client-1", 1).await?.allowed);
/// # Ok(())
/// # }
/// ```
pub trait RateLimitStore: Send + Sync {
    /// Checks (and on success spends) `cost` tokens for `key`, with the store's quota.
    fn check<'a>(&'a self, key: &'a [u8], cost: u32) -> BoxFuture<'a, Result<Decision, GcraError>>;

    /// The quota every key of this store gets.
    fn quota(&self) -> Quota;
}

/// The in-memory keyed limiter with byte keys decides without I/O; the future is ready at once.
impl<C: Clock> RateLimitStore for KeyedRateLimiter<Vec<u8>, C> {
    fn check<'a>(&'a self, key: &'a [u8], cost: u32) -> BoxFuture<'a, Result<Decision, GcraError>> {
        Box::pin(std::future::ready(self.check_key_n(key, cost)))
    }

    fn quota(&self) -> Quota {
        *KeyedRateLimiter::quota(self)
    }
}

impl<S: RateLimitStore + ?Sized> RateLimitStore for std::sync::Arc<S> {
    fn check<'a>(&'a self, key: &'a [u8], cost: u32) -> BoxFuture<'a, Result<Decision, GcraError>> {
        (**self).check(key, cost)
    }

    fn quota(&self) -> Quota {
        (**self).quota()
    }
}

/// Redis: one round trip per decision (see [`RedisRateLimiter`](crate::gcra::redis::RedisRateLimiter)).
#[cfg(feature = "redis")]
impl RateLimitStore for crate::gcra::redis::RedisRateLimiter {
    fn check<'a>(&'a self, key: &'a [u8], cost: u32) -> BoxFuture<'a, Result<Decision, GcraError>> {
        Box::pin(self.check_key_n(key, cost))
    }

    fn quota(&self) -> Quota {
        *crate::gcra::redis::RedisRateLimiter::quota(self)
    }
}
