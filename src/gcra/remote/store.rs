//! [`RemoteStore`]: the I/O of one GCRA decision against a store shared by every instance.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::circuit::Circuit;
use crate::clock::Clock;
use crate::gcra::check::CheckError;
use crate::gcra::{ConfigError, Decision, Gcra, Quota};

/// What [`RemoteStore::decide`] returns: the decision, and the time the store decided at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreDecision {
    /// The decision, never degraded.
    pub decision: Decision,
    /// When the store decided, by the clock it decides by (for Redis: since
    /// [`FLOWGUARD_EPOCH_UNIX_SECS`](crate::gcra::redis::FLOWGUARD_EPOCH_UNIX_SECS) by the
    /// server's clock, or the explicit clock's reading in explicit-time mode).
    pub at: Duration,
}

impl StoreDecision {
    /// The answer `decision`, reached at `at`.
    pub fn new(decision: Decision, at: Duration) -> StoreDecision {
        StoreDecision { decision, at }
    }
}

/// A store's key space held for the limiters of one rule ([`RemoteStore::claim`]); released
/// when the last limiter holding it is dropped.
#[derive(Clone)]
pub struct KeySpaceClaim(Option<Arc<dyn std::any::Any + Send + Sync>>);

impl KeySpaceClaim {
    /// A claim of nothing: the store does not check how its key space is shared.
    pub fn none() -> KeySpaceClaim {
        KeySpaceClaim(None)
    }

    /// A claim held by `token`: the store sees the key space as claimed while the token lives
    /// (keep a `Weak` of it).
    pub fn held_by(token: Arc<dyn std::any::Any + Send + Sync>) -> KeySpaceClaim {
        KeySpaceClaim(Some(token))
    }
}

impl fmt::Debug for KeySpaceClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "KeySpaceClaim(held)"
        } else {
            "KeySpaceClaim(none)"
        })
    }
}

/// One request of an all-or-nothing [`RemoteStore::decide_all`]: `cost` tokens (at most the
/// rule's burst; 0 peeks) for the store key `key` under `rule`.
#[derive(Clone, Copy, Debug)]
pub struct StoreItem<'a, K> {
    /// The store key.
    pub key: &'a K,
    /// The rule, at the store's resolution ([`RemoteStore::rule`]).
    pub rule: &'a Gcra,
    /// Tokens asked for.
    pub cost: u32,
}

/// Why [`RemoteStore::decide_all`] returned no decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecideAllError {
    /// The store cannot decide these keys in one atomic call
    /// ([`can_decide_all`](RemoteStore::can_decide_all) is false: for Redis Cluster, keys in
    /// several hash slots). Nothing was asked. Name one identity's keys so that they share a
    /// slot (for Redis: [`hash_tag_keys`](crate::gcra::redis::RedisStoreBuilder::hash_tag_keys)
    /// and one prefix per quota), or decide them one by one.
    Apart,
    /// What one decision could report (see [`RemoteStore::decide`]); nothing was spent.
    Check(CheckError),
}

impl fmt::Display for DecideAllError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecideAllError::Apart => f.write_str(
                "the store cannot decide these keys in one call (Redis Cluster: they are in several hash \
                 slots); give one identity's keys one hash tag (RedisStoreBuilder::hash_tag_keys, one \
                 prefix per quota) or decide them one by one",
            ),
            DecideAllError::Check(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for DecideAllError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecideAllError::Apart => None,
            DecideAllError::Check(e) => Some(e),
        }
    }
}

impl From<CheckError> for DecideAllError {
    fn from(e: CheckError) -> DecideAllError {
        DecideAllError::Check(e)
    }
}

/// A store of GCRA states shared by every instance (Redis, Redis Cluster): the I/O of one
/// decision, and nothing else. The [`RemoteRateLimiter`](super::RemoteRateLimiter) over it
/// validates the cost, derives the store key once, consults the store's [`Circuit`], and answers
/// an unavailable store by its [`FailurePolicy`](super::FailurePolicy) (fail open, fail closed,
/// or a local fallback), logged and counted; a store implements none of that.
///
/// A store must decide exactly as [`Gcra::decide`] does with the rule [`rule`](Self::rule)
/// returns, against the key's stored TAT and the store's time, and store the new TAT atomically.
pub trait RemoteStore: Send + Sync + 'static {
    /// The store's form of a user's key (for Redis: the prefixed key, or its digest), derived
    /// once per check by [`key`](Self::key).
    type Key: Send + Sync;

    /// The rule this store applies for `quota`, at its time resolution; an error when the store
    /// cannot keep the quota exactly (for Redis: a burst window beyond
    /// [`MAX_REDIS_WINDOW`](crate::gcra::redis::MAX_REDIS_WINDOW)).
    fn rule(&self, quota: &Quota) -> Result<Gcra, ConfigError>;

    /// The store key holding `key`'s state.
    fn key(&self, key: &[u8]) -> Self::Key;

    /// The store's health, per group of keys. Shared by every limiter over the store.
    fn circuit(&self) -> &Circuit;

    /// The [`Circuit`] group of `key`: keys whose calls fail together (for Redis Cluster: those
    /// of one master). The default puts every key in group 0.
    fn group(&self, _key: &Self::Key) -> usize {
        0
    }

    /// Decides `cost` tokens (at most `rule`'s burst) for `key` under `rule`: one round trip,
    /// bounded by the store's timeout. A store that does not answer is
    /// [`StoreError::Unavailable`](super::StoreError::Unavailable), with a typed reason; a store
    /// that answers with an error reports what it said. No failure policy here.
    fn decide(
        &self,
        key: &Self::Key,
        rule: &Gcra,
        cost: u32,
    ) -> impl Future<Output = Result<StoreDecision, CheckError>> + Send;

    /// Whether one [`decide_all`](Self::decide_all) call can decide these keys together,
    /// atomically (for Redis: always on one server; on a cluster, when they share a hash slot).
    /// The default is `false`: the store decides one key at a time.
    fn can_decide_all(&self, _keys: &[&Self::Key]) -> bool {
        false
    }

    /// Whether `other` reaches the same store through the same calls, so that one
    /// [`decide_all`](Self::decide_all) call of `self` may name keys that `other` derived (for
    /// Redis: clones and [`with_prefix`](crate::gcra::redis::RedisStore::with_prefix) stores).
    /// The default is `false`.
    fn same_store(&self, _other: &Self) -> bool {
        false
    }

    /// Decides `items` all or nothing, in one atomic round trip bounded by the store's timeout:
    /// every item is spent only if every item fits (a key named twice must fit the sum of its
    /// costs, and its second item is decided against the first), otherwise nothing is spent.
    ///
    /// The answers are in the order of `items`. When every item fits, each is the spend's
    /// decision. Otherwise each describes its key as it is, unspent: an item that fits is
    /// allowed (with the key's current `remaining` and `reset_after`), one that does not is
    /// denied, with the time until it would fit (the earlier costs on its key included).
    ///
    /// Keys the store cannot decide together ([`can_decide_all`](Self::can_decide_all)) are
    /// [`DecideAllError::Apart`], without a round trip; the default does that for every call. No
    /// failure policy here, as for [`decide`](Self::decide).
    fn decide_all(
        &self,
        _items: &[StoreItem<'_, Self::Key>],
    ) -> impl Future<Output = Result<Vec<StoreDecision>, DecideAllError>> + Send {
        std::future::ready(Err(DecideAllError::Apart))
    }

    /// A probe (the one call let through a failed group) failed again: the store may check
    /// whether its connection is what fails, and rebuild it. The default does nothing.
    fn probe_failed(&self, _key: &Self::Key) {}

    /// A failed group answered again. The default does nothing.
    fn recovered(&self) {}

    /// The caller's clock, when the store decides at its readings instead of by its own clock
    /// (deterministic tests and simulations); a local fallback then reads it too. The default is
    /// `None`: the store's own clock, and a monotonic clock for a local fallback.
    fn explicit_clock(&self) -> Option<Arc<dyn Clock>> {
        None
    }

    /// What the store is, for logs and metrics (for Redis: `standalone` or `cluster`).
    fn topology(&self) -> &'static str;

    /// Reserves the store's key space (for Redis: its prefix and hash-tag setting, on its
    /// connection) for limiters of `quota`, for as long as the returned claim lives.
    /// [`RemoteRateLimiterBuilder::build`](super::RemoteRateLimiterBuilder::build) claims it and
    /// its limiter keeps the claim.
    ///
    /// Limiters of quotas with different [rules](Self::rule) over one key space would keep one
    /// state per key for both, and spend each other's tokens: a store refuses the second with
    /// [`ConfigError::KeySpaceShared`], which says to give each quota a prefix of its own.
    /// Limiters of one rule share the key space freely (that is how instances share a quota).
    /// The default claims nothing.
    fn claim(&self, _quota: &Quota) -> Result<KeySpaceClaim, ConfigError> {
        Ok(KeySpaceClaim::none())
    }
}
