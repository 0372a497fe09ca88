//! The remote-store boundary: GCRA state shared by every instance through a store (Redis, Redis
//! Cluster), and the one limiter that handles the store's failures.
//!
//! * [`RemoteStore`]: the I/O of one decision (a key, a rule, a cost → a [`StoreDecision`] or a
//!   typed [`StoreError`]). The [Redis store](crate::gcra::redis::RedisStore) implements it.
//! * [`RemoteRateLimiter`]: a quota over a store. It validates the cost, derives the store key
//!   once, skips a group of keys whose store part failed within the last probe interval
//!   ([`Circuit`]), and answers an unavailable store by its [`FailurePolicy`]: fail open, fail
//!   closed, or a local in-memory GCRA with this instance's [share](crate::gcra::LocalShare) of
//!   the quota. Every degraded decision is counted in [`DEGRADED_METRIC`] and logged with
//!   `tracing::warn!` at most once per second per limiter; the first answer ends the degradation.
//! * [`RemoteRateLimiter::check_all`]: several quotas of one request ([`QuotaCheck`]s), all or
//!   nothing: atomic in one round trip when the store can decide the keys together
//!   ([`RemoteStore::decide_all`]), peeked then spent otherwise; each quota's failure policy
//!   answers when the store does not.
//! * [`RemoteLimitSet`]: remote limiters as a [`LimitSet`](crate::gcra::LimitSet), so that the
//!   inbound layer decides a request's quotas in Redis with `check_all`.
//! * [`StoreError`] with its reasons [`Unavailable`] (temporary: the failure policy answers) and
//!   [`Rejection`] (a fault of the deployment), plus a key holding something else
//!   ([`StoreError::WrongType`], [`StoreError::CorruptState`]).

mod all;
mod circuit;
mod limit_set;
mod limiter;
mod outage_log;
mod policy;
mod store;

pub use super::check::{Rejection, StoreError, Unavailable};
pub use all::QuotaCheck;
pub use circuit::Circuit;
pub use limit_set::RemoteLimitSet;
pub use limiter::{RemoteRateLimiter, RemoteRateLimiterBuilder};
pub use outage_log::DEGRADED_METRIC;
pub use policy::FailurePolicy;
pub use store::{DecideAllError, KeySpaceClaim, RemoteStore, StoreDecision, StoreItem};
