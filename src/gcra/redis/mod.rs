//! The Redis store: one GCRA quota per key shared by every instance, through Redis or Redis Cluster.
//! Only the Redis I/O lives here (connection, script, keys, slots); the limiter over it, with its
//! failure policy, is the [remote](crate::gcra::remote) one.
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
//! integer of 2^53 or more, …) is [`StoreError::CorruptState`](crate::gcra::remote::StoreError::CorruptState)
//! and is left alone: delete the key (it is then idle) or give the limiter its own prefix. A TAT
//! beyond `now + B*T` (written under a quota with a longer window, by a server clock that was
//! ahead before a failover, or by hand) is read as `now + B*T`, a fully spent key, and stored as
//! such by the next spend: no value locks a key out for longer than one window. A fraction over
//! another denominator (the quota changed) is rounded up to the next microsecond.
//!
//! * [`RedisStore`]: the connection (standalone or cluster), key prefix, timeout, probe interval,
//!   time source; a [`RemoteStore`](crate::gcra::remote::RemoteStore), whose
//!   [`decide`](crate::gcra::remote::RemoteStore::decide) is the raw call and
//!   [`rule`](crate::gcra::remote::RemoteStore::rule) the quota at the store's resolution.
//! * [`RemoteRateLimiter`](crate::gcra::remote::RemoteRateLimiter): a quota over a store,
//!   applying the [`FailurePolicy`](crate::gcra::remote::FailurePolicy).
//! * Keys: see [Keys](#keys) for prefixing, length bounds and Redis Cluster hash tags.
//!
//! ```no_run
//! use flowguard::gcra::redis::RedisStore;
//! use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};
//! use flowguard::gcra::Quota;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::builder("redis://127.0.0.1:6379").connect().await?;
//! let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10)?)
//!     .failure_policy(FailurePolicy::FailClosed)
//!     .build()?;
//! assert!(limiter.check_key(b"tenant-7").await?.allowed);
//! # Ok(()) }
//! ```
//!
//! Every call is bounded by the store's timeout ([`DEFAULT_TIMEOUT`], 50 ms; a check queued behind
//! other calls counts it from the server's last answer to them, so a busy client's own backlog is
//! not taken for a failed server: see [`RedisStoreBuilder::timeout`]). Degraded decisions
//! (Redis slow, down, failing over) are counted in the
//! [`DEGRADED_METRIC`](crate::gcra::remote::DEGRADED_METRIC) counter
//! (`flowguard_redis_degraded_total{policy,topology,reason}`) and logged with `tracing::warn!` at most once
//! per second per limiter. After a failure the store (a cluster's failed master) is skipped (the
//! policy answers at once) and probed every [`DEFAULT_PROBE_INTERVAL`]; the first answer ends the
//! degradation. [`RedisStoreBuilder::connect_lazy`] lets a service start while Redis is down.
//!
//! # Redis Cluster: failover and isolation
//!
//! * Every step inside the Redis client is bounded by the client's own timeouts, not only the
//!   caller's wait: each reply (including the client's own `CLUSTER SLOTS` and `PING`) and each
//!   request with its redirects and retries by the store's timeout, each connection attempt to a
//!   node by [`node_connect_timeout`](RedisStoreBuilder::node_connect_timeout)
//!   ([`DEFAULT_NODE_CONNECT_TIMEOUT`]). No step can hang, so the client cannot wedge on one.
//! * A cluster store keeps one circuit per master, from the slot map (`CLUSTER SLOTS`): a master
//!   that stops answering opens only the circuit of the slots it serves.
//! * When a probe fails again, the store checks beside its connection, on fresh connections: it
//!   asks the key's master for the key (`GET`) and other nodes for the slot map. If the master
//!   answers (the connection is what fails) or another master now serves the slots (a replica was
//!   promoted while the old master is silent, which the client never notices by itself: a request
//!   that never fails never triggers a slot refresh), the connection is rebuilt: a new client with
//!   a fresh slot map replaces the old one, and the circuits probe at once. Otherwise (the master
//!   is silent and still in charge, or the cluster refuses keys) it waits. Checks run one at a
//!   time, 50 ms apart at first, up to 250 ms while the failure lasts. A standalone store does the
//!   same with its one server.
//!
//! What isolation there is, and what there is not:
//!
//! * Between a master being marked failed and its replica taking over (the node timeout plus an
//!   election), a cluster with `cluster-require-full-coverage yes` (the default) is in
//!   `cluster_state:fail` and refuses every key on every node: every key degrades, not only the
//!   failed master's. With `cluster-require-full-coverage no`, the other masters keep serving and
//!   their keys are not degraded.
//! * All keys share one cluster client. While it refreshes its slot map (after a `MOVED`, e.g. in
//!   a graceful failover) it holds every request; the refresh is bounded (one reply timeout per
//!   query, one node connect timeout per node it reconnects to), and calls that exceed the store's
//!   timeout meanwhile are degraded whatever master they belong to.
//! * Circuits follow the slot map read at the last (re)connection; after slots move between
//!   masters (resharding), they follow the old owners until the next rebuild.
//!
//! An ACL user needs exactly `+evalsha +eval +get +set +time` (the last three are called by the
//! script) and the prefix's keys, e.g.
//! `ACL SETUSER limiter on >secret resetkeys ~flowguard:* resetchannels -@all +evalsha +eval +get +set +time +mget`.
//! `+mget` is optional: a coalesced call reads its keys with one `MGET` (Redis 7.0+), or, when
//! that is refused, with a `GET` each, which costs Redis more.
//!
//! # Keys
//!
//! Store keys are a prefix and the limited identity, binary-safe, bounded in length, and routed
//! evenly in Redis Cluster.
//!
//! A user key `k` becomes `prefix ‖ "=" ‖ k` when it is at most [`MAX_KEY_LEN`] bytes and contains
//! no `{`, and `prefix ‖ "#" ‖ hex(SHA-1(k))` otherwise. The marker byte keeps the two forms apart,
//! so the mapping is injective up to SHA-1 collisions.
//!
//! * Length: a client cannot make Redis store megabyte keys; every key is at most
//!   `prefix + 1 + 128` bytes.
//! * Hash tags: Redis Cluster routes a key by the first `{...}` in it. A user key containing `{`
//!   (e.g. an attacker-chosen header `"{x}1"`, `"{x}2"`, ...) would pin many identities to one slot
//!   and one node, so such keys are digested: the digest has no braces and the whole key is hashed.
//!   To co-locate all of a limiter's keys on purpose, put a complete tag in the prefix
//!   (`"rl:{api}:"`); a prefix with a `{` that is not closed within the prefix is rejected, since the
//!   tag would then end inside user data.
//! * Hash-tagged keys ([`hash_tag_keys`](RedisStoreBuilder::hash_tag_keys)): `k` becomes
//!   `prefix ‖ "={" ‖ k ‖ "}"`, and a key containing `{` or `}` (or too long)
//!   `prefix ‖ "#{" ‖ hex(SHA-1(k)) ‖ "}"`. The slot then depends on the user key alone, so the
//!   same identity under several prefixes (one per quota) lives in one slot and its quotas can be
//!   decided all or nothing in one call; a client still cannot pin two identities to one slot.
//!   The prefix must then hold no hash tag of its own (it would come first and win).

mod batch;
mod connection;
mod deadline;
mod error;
mod groups;
mod key;
mod lanes;
mod lone;
mod quota;
mod rebuild;
mod script;
mod slot;
mod store;

pub use error::ConnectError;
pub use key::{DEFAULT_PREFIX, MAX_KEY_LEN, MAX_PREFIX_LEN};
pub use quota::{FLOWGUARD_EPOCH_UNIX_SECS, MAX_REDIS_WINDOW, RESOLUTION};
pub use store::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPLICIT_TTL_SLACK, DEFAULT_MAX_BATCH,
    DEFAULT_NODE_CONNECT_TIMEOUT, DEFAULT_PROBE_INTERVAL, DEFAULT_TIMEOUT, RedisStore,
    RedisStoreBuilder,
};
