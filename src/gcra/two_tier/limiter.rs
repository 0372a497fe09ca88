//! [`TwoTierLimiter`]: spend tokens locally, reserve them from a shared store in batches.

use std::pin::pin;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::config::{TwoTierConfig, TwoTierConfigError, ValidConfig};
use super::reservoir::{Reservoir, Take};
use crate::gcra::limit_key::stored::KeyDigester;
use crate::gcra::table::{Expiring, Table};
use crate::gcra::{
    BoxFuture, Clock, DEFAULT_MAX_KEYS, Decision, GcraError, MonotonicClock, Quota, RateLimitStore,
};

/// Rounds of "wait for the refill, then take" before a request is denied for want of tokens.
const MAX_ROUNDS: usize = 8;

/// A keyed limiter that reserves tokens from a shared [`RateLimitStore`] (typically Redis) in
/// batches and spends them locally. See the [module docs](super) for the guarantees.
///
/// ```
/// use flowguard::gcra::two_tier::{TwoTierConfig, TwoTierLimiter};
/// use flowguard::gcra::{KeyedRateLimiter, Quota};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The shared store would be Redis; any RateLimitStore works.
/// let global = KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(100)?);
/// let limiter = TwoTierLimiter::new(global, TwoTierConfig::new(10))?;
/// let d = limiter.check(b"tenant-1", 1).await?; // reserves 10, spends 1
/// assert!(d.allowed);
/// assert_eq!(d.remaining, 9); // tokens left in this instance's reservoir
/// # Ok(())
/// # }
/// ```
pub struct TwoTierLimiter<S, C: Clock = MonotonicClock> {
    shared: Arc<Shared<S, C>>,
}

struct Shared<S, C> {
    store: S,
    cfg: ValidConfig,
    quota: Quota,
    clock: C,
    /// Reservoirs by stored key form: long keys as a digest, so memory is bounded in bytes.
    table: Table<Vec<u8>, Arc<Slot>>,
    digester: KeyDigester,
    max_keys: usize,
}

/// One key's reservoir and the signal that its reservation has been answered.
#[derive(Default)]
struct Slot {
    reservoir: Mutex<Reservoir>,
    refilled: Notify,
}

impl Expiring for Arc<Slot> {
    fn is_expired(&self, now: u64) -> bool {
        // A slot someone is using right now is not idle.
        self.reservoir.try_lock().is_some_and(|r| r.is_idle(now))
    }
}

impl<S: RateLimitStore + 'static> TwoTierLimiter<S, MonotonicClock> {
    /// A two-tier limiter over `store` on the real clock, for at most [`DEFAULT_MAX_KEYS`] keys.
    pub fn new(store: S, config: TwoTierConfig) -> Result<Self, TwoTierConfigError> {
        TwoTierLimiter::with_clock(store, config, MonotonicClock::new(), DEFAULT_MAX_KEYS)
    }
}

impl<S: RateLimitStore + 'static, C: Clock + 'static> TwoTierLimiter<S, C> {
    /// A two-tier limiter reading local time from `clock`, holding at most `max_keys` (>= 1) reservoirs.
    pub fn with_clock(
        store: S,
        config: TwoTierConfig,
        clock: C,
        max_keys: usize,
    ) -> Result<Self, TwoTierConfigError> {
        let quota = store.quota();
        let cfg = config.validate(&quota)?;
        if max_keys == 0 {
            return Err(TwoTierConfigError::ZeroMaxKeys);
        }
        Ok(TwoTierLimiter {
            shared: Arc::new(Shared {
                store,
                cfg,
                quota,
                clock,
                table: Table::new(max_keys),
                digester: KeyDigester::new(),
                max_keys,
            }),
        })
    }

    /// Checks (and on success spends) `cost` tokens for `key`.
    ///
    /// * `cost <= batch`: decided locally while the reservoir holds tokens; when it runs dry, one
    ///   caller reserves a batch and the others wait for that reservation.
    /// * `batch < cost <= burst`: asked of the shared store directly (a batch could never cover it).
    /// * `cost > burst`: [`GcraError::InsufficientCapacity`].
    pub async fn check(&self, key: &[u8], cost: u32) -> Result<Decision, GcraError> {
        let shared = &self.shared;
        if cost > shared.cfg.limit() {
            return Err(GcraError::InsufficientCapacity {
                cost,
                burst: shared.cfg.limit(),
            });
        }
        if cost > shared.cfg.batch() {
            return shared.store.check(key, cost).await;
        }
        let slot = shared.slot(key)?;
        for _ in 0..MAX_ROUNDS {
            let mut refilled = pin!(slot.refilled.notified());
            refilled.as_mut().enable();
            let now = shared.clock.now_nanos();
            let take = slot.reservoir.lock().take(&shared.cfg, now, cost);
            match take {
                Take::Granted { decision, refill } => {
                    if refill {
                        self.refill_in_background(key, &slot);
                    }
                    return Ok(decision);
                }
                Take::Denied(decision) => return Ok(decision),
                Take::Reserve => shared.reserve(key, &slot).await?,
                Take::Wait => refilled.await,
            }
        }
        // Other callers took every token of several refills in a row: deny for one interval.
        let interval = shared.cfg.interval();
        Ok(Decision::new(
            false,
            shared.cfg.limit(),
            0,
            Some(interval),
            interval,
        ))
    }

    fn refill_in_background(&self, key: &[u8], slot: &Arc<Slot>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Not on a tokio runtime: the caller that runs the reservoir dry reserves inline instead.
            slot.reservoir.lock().failed();
            return;
        };
        let (shared, slot, key) = (self.shared.clone(), slot.clone(), key.to_vec());
        runtime.spawn(async move {
            if let Err(error) = shared.reserve(&key, &slot).await {
                tracing::debug!(%error, "two-tier background reservation failed; tokens on hand stay usable");
            }
        });
    }

    /// Removes every idle reservoir (no fresh tokens, no denial in force, nothing in flight).
    pub fn reclaim(&self) -> usize {
        self.shared.table.reclaim(self.shared.clock.now_nanos())
    }

    /// Reservoirs held (live or not yet reclaimed).
    pub fn len(&self) -> usize {
        self.shared.table.len()
    }

    /// Whether no reservoir is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The validated configuration.
    pub fn config(&self) -> &ValidConfig {
        &self.shared.cfg
    }

    /// The shared store.
    pub fn store(&self) -> &S {
        &self.shared.store
    }
}

impl<S: RateLimitStore, C: Clock> Shared<S, C> {
    fn slot(&self, key: &[u8]) -> Result<Arc<Slot>, GcraError> {
        self.digester
            .with_probe(key, |stored| self.stored_slot(stored))
    }

    fn stored_slot(&self, key: &[u8]) -> Result<Arc<Slot>, GcraError> {
        let hash = self.table.hash(key);
        if let Some(slot) = self.table.with(hash, key, Arc::clone) {
            return Ok(slot);
        }
        self.table
            .with_or_insert(
                hash,
                key,
                self.clock.now_nanos(),
                Arc::default,
                |slot, _| slot.clone(),
            )
            .map_err(|_full| GcraError::KeyLimitReached {
                max_keys: self.max_keys,
            })
    }

    /// Reserves a batch for `key` and applies the answer; wakes everyone waiting on the slot.
    async fn reserve(&self, key: &[u8], slot: &Slot) -> Result<(), GcraError> {
        metrics::counter!("flowguard_two_tier_reservations_total").increment(1);
        let answer = self.store.check(key, self.cfg.batch()).await;
        let now = self.clock.now_nanos();
        {
            let mut reservoir = slot.reservoir.lock();
            match &answer {
                Ok(decision) => reservoir.reserved(&self.cfg, now, decision),
                Err(_) => reservoir.failed(),
            }
        }
        slot.refilled.notify_waiters();
        answer.map(|_| ())
    }
}

impl<S: RateLimitStore + 'static, C: Clock + 'static> RateLimitStore for TwoTierLimiter<S, C> {
    fn check<'a>(&'a self, key: &'a [u8], cost: u32) -> BoxFuture<'a, Result<Decision, GcraError>> {
        Box::pin(TwoTierLimiter::check(self, key, cost))
    }

    fn quota(&self) -> Quota {
        self.shared.quota
    }
}

impl<S, C: Clock> std::fmt::Debug for TwoTierLimiter<S, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoTierLimiter")
            .field("config", &self.shared.cfg)
            .field("max_keys", &self.shared.max_keys)
            .finish_non_exhaustive()
    }
}
