//! [`KeyedLimit`]: the one async face of every keyed limiter (in memory, through a shared store
//! such as Redis, two-tier), so that middleware and [`Guard`](crate::Guard) take any of them.
//!
//! * [`KeyedLimit`]: checks `cost` tokens for a byte key.
//! * [`CheckFuture`]: what a check returns, `Send + 'static`.
//! * [`CheckError`]: the core's [`GcraError`](crate::gcra::GcraError) or a store's
//!   [`StoreError`](crate::gcra::remote::StoreError).
//! * [`LimitSet`]: several limits deciding a request's [`Demand`]s all or nothing (several quotas
//!   per request), answering [`Decisions`] through a [`SetFuture`]; [`MemoryLimitSet`] in memory
//!   (atomic, striped locks), [`SeparateLimits`] over any `KeyedLimit`s (peek then spend).

mod decisions;
mod error;
mod future;
mod memory_set;
mod separate;
mod set;
mod set_error;

pub use decisions::Decisions;
pub use error::{CheckError, Rejection, StoreError, Unavailable};
pub use future::{CheckFuture, SetFuture};
pub use memory_set::{MemoryLimitSet, MemoryLimitSetBuilder};
pub use separate::SeparateLimits;
pub use set::{Demand, LimitSet, LimitSpec};
#[allow(unused_imports)] // for the sets of shared stores
pub(crate) use set::{answer_alone, unspent};
pub use set_error::SetError;

use crate::clock::Clock;
use crate::gcra::{BytesKey, KeyedRateLimiter, Quota};

/// Something that decides, for a key, whether `cost` tokens of its quota may be spent: the
/// in-memory [`KeyedRateLimiter`] (keyed by bytes, or by a fixed-size type such as `IpAddr` that
/// reads them: [`BytesKey`]), the
/// [remote](crate::gcra::remote) limiter (Redis, feature `redis`), or a
/// [two-tier](crate::gcra::two_tier) limiter. Keys are bytes (binary-safe).
///
/// The future owns what it needs (it borrows neither the limiter nor the key), so it can be
/// awaited inside `tokio::spawn`, hyper's `serve_connection` and middleware futures, with the
/// limiter behind an `Arc<dyn KeyedLimit>`.
///
/// ```
/// use flowguard::gcra::{KeyedLimit, KeyedRateLimiter, Quota};
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limit: Arc<dyn KeyedLimit> = Arc::new(KeyedRateLimiter::<String>::new(Quota::per_second(1)?));
/// assert!(limit.check(b"client-1", 1).await?.allowed);
/// assert!(!limit.check(b"client-1", 1).await?.allowed);
/// // The future is 'static: it can run on another task.
/// let later = limit.check(b"client-2", 1);
/// assert!(tokio::spawn(later).await??.allowed);
/// # Ok(())
/// # }
/// ```
pub trait KeyedLimit: Send + Sync {
    /// Checks (and on success spends) `cost` tokens for `key`. `cost == 0` peeks; a cost above
    /// the burst is [`GcraError::InsufficientCapacity`](crate::gcra::GcraError::InsufficientCapacity).
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture;

    /// The quota every key gets.
    fn quota(&self) -> Quota;
}

/// The in-memory keyed limiter decides without I/O: the future is ready at once. Byte-string
/// key types look up the bytes themselves (a `String`-keyed limiter as the same key as the
/// `str`); fixed-size key types such as `IpAddr` or `u64` read the bytes as a key of the type
/// ([`FromKeyBytes`](crate::gcra::FromKeyBytes); see [`BytesKey`]).
impl<K, C> KeyedLimit for KeyedRateLimiter<K, C>
where
    K: BytesKey,
    C: Clock,
{
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture {
        CheckFuture::ready(self.check_given_bytes(key, cost).map_err(CheckError::Gcra))
    }

    fn quota(&self) -> Quota {
        *KeyedRateLimiter::quota(self)
    }
}

impl<L: KeyedLimit + ?Sized> KeyedLimit for std::sync::Arc<L> {
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture {
        (**self).check(key, cost)
    }

    fn quota(&self) -> Quota {
        (**self).quota()
    }
}
