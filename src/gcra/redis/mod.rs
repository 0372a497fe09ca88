//! The Redis store: one GCRA quota per key shared by every instance, through Redis or Redis Cluster.
//!
//! Feature `redis` (and `redis-tls` for `rediss://`). One O(1) Lua script per decision
//! (`gcra.lua`): one key per identity, one string value (the TAT in decimal microseconds), a `PX`
//! TTL so idle keys vanish, the full [`Decision`](crate::gcra::Decision) returned, cost-n exact,
//! and the server's `TIME` as the clock. Decisions match the in-memory rule
//! `Gcra::with_resolution(&quota, 1 µs)` exactly.
//!
//! **Exact intervals.** `T = period / rate` need not be a whole number of microseconds: the
//! client computes `n*T` and `B*T` exactly as whole microseconds plus a fraction `f / den`, and the
//! script only adds (with a carry) and compares, so every number in Lua is an integer below 2^53
//! (exact in its doubles) and nothing is rounded in the client's favour. The value is `"<whole>"`
//! when the TAT is a whole number of microseconds (the format of earlier versions, read as is) and
//! `"<whole>+<frac>/<den>"` otherwise. Rates above 10^6 per second work too (`T` below 1 µs). Only a
//! burst window beyond [`MAX_REDIS_WINDOW`] (about 71 years) is refused.
//!
//! **Foreign values.** A value the script never writes (exponents, `inf`, hex, signs, spaces, an
//! integer of 2^53 or more, …) is [`GcraError::CorruptState`](crate::gcra::GcraError::CorruptState)
//! and is left alone: delete the key (it is then idle) or give the limiter its own prefix. A TAT
//! beyond `now + B*T` (written under a quota with a longer window, by a server clock that was
//! ahead before a failover, or by hand) is read as `now + B*T`, a fully spent key, and stored as
//! such by the next spend: no value locks a key out for longer than one window. A fraction over
//! another denominator (the quota changed) is rounded up to the next microsecond.
//!
//! * [`RedisStore`]: the connection (standalone or cluster), key prefix, timeout, failure policy,
//!   time source; [`RedisStore::check`] is the raw call.
//! * [`RedisRateLimiter`]: a quota over a store, applying the [`FailurePolicy`].
//! * [`RedisQuota`]: a quota validated for the store's resolution and range.
//! * Keys: see [`key`] for prefixing, length bounds and Redis Cluster hash tags.
//!
//! Every call is bounded by the store's timeout ([`DEFAULT_TIMEOUT`], 50 ms). Degraded decisions
//! (Redis slow, down, failing over) are counted in the [`DEGRADED_METRIC`] counter
//! (`flowguard_redis_degraded_total{policy,topology}`) and logged with `tracing::warn!` at most once
//! per second per store. After a failure the store is skipped (policy answers at once) and probed
//! every [`DEFAULT_PROBE_INTERVAL`]; the first answer ends the degradation. A cluster store keeps
//! one such circuit per group of 256 slots, so a master failing over only degrades its own keys.
//! [`RedisStoreBuilder::connect_lazy`] lets a service start while Redis is down.
//!
//! An ACL user needs exactly `+evalsha +eval +get +set +time` (the last three are called by the
//! script) and the prefix's keys, e.g.
//! `ACL SETUSER limiter on >secret resetkeys ~flowguard:* resetchannels -@all +evalsha +eval +get +set +time`.

mod circuit;
mod connection;
mod error;
pub mod key;
mod limiter;
mod outage_log;
mod policy;
mod quota;
mod script;
mod slot;
mod store;

pub use error::RedisStoreError;
pub use key::{DEFAULT_PREFIX, MAX_KEY_LEN, MAX_PREFIX_LEN};
pub use limiter::RedisRateLimiter;
pub use outage_log::DEGRADED_METRIC;
pub use policy::{FailurePolicy, LocalShare};
pub use quota::{MAX_REDIS_WINDOW, RESOLUTION, RedisQuota};
pub use store::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPLICIT_TTL_SLACK, DEFAULT_PROBE_INTERVAL, DEFAULT_TIMEOUT,
    FLOWGUARD_EPOCH_UNIX_SECS, RedisStore, RedisStoreBuilder, StoreDecision,
};
