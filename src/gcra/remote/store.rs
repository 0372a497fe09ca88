//! [`RemoteStore`]: the I/O of one GCRA decision against a store shared by every instance.

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
}
