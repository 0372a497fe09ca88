//! [`TwoTierLimiter`]: spend tokens locally, reserve them from a shared store in batches.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::config::Config;
use super::reservoir::{Reservoir, Take};
use crate::clock::{Clock, MonotonicClock};
use crate::gcra::limit_key::stored::KeyDigester;
use crate::gcra::table::{Expiring, Table};
use crate::gcra::{
    CheckError, CheckFuture, ConfigError, DEFAULT_MAX_KEYS, Decision, GcraError, KeyedLimit, Quota,
};

/// Rounds of "wait for the refill, then take" before a request is denied for want of tokens.
const MAX_ROUNDS: usize = 8;

/// A keyed limiter that reserves tokens from a shared [`KeyedLimit`] (typically the Redis-backed
/// [remote](crate::gcra::remote) limiter) in batches and spends them locally. See the
/// [module docs](super) for the guarantees.
///
/// ```
/// use flowguard::gcra::two_tier::TwoTierLimiter;
/// use flowguard::gcra::{KeyedRateLimiter, Quota};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The shared limiter would be Redis-backed; any KeyedLimit works.
/// let global = KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(100)?);
/// let limiter = TwoTierLimiter::builder(global, 10).build()?;
/// let d = limiter.check_key_n(b"tenant-1", 1).await?; // reserves 10, spends 1
/// assert!(d.allowed);
/// assert_eq!(d.remaining(), Some(9)); // tokens left in this instance's reservoir
/// # Ok(())
/// # }
/// ```
pub struct TwoTierLimiter<S, C: Clock = MonotonicClock> {
    shared: Arc<Shared<S, C>>,
}

struct Shared<S, C> {
    store: S,
    cfg: Config,
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

/// Configures a [`TwoTierLimiter`]: [`TwoTierLimiter::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct TwoTierLimiterBuilder<S, C = MonotonicClock> {
    store: S,
    batch: u32,
    refill_below: Option<u32>,
    max_token_age: Option<Duration>,
    max_keys: usize,
    clock: C,
}

impl<S: KeyedLimit + 'static> TwoTierLimiter<S, MonotonicClock> {
    /// Starts configuring a two-tier limiter that reserves `batch` tokens per round trip from
    /// `store`, with the defaults: refill below 20% of the batch, tokens live one burst window of
    /// the store's quota, at most [`DEFAULT_MAX_KEYS`] reservoirs, the real clock.
    pub fn builder(store: S, batch: u32) -> TwoTierLimiterBuilder<S> {
        TwoTierLimiterBuilder {
            store,
            batch,
            refill_below: None,
            max_token_age: None,
            max_keys: DEFAULT_MAX_KEYS,
            clock: MonotonicClock::new(),
        }
    }
}

impl<S: KeyedLimit + 'static, C: Clock + 'static> TwoTierLimiterBuilder<S, C> {
    /// Start a background refill when fewer than `tokens` are left locally (default: 20% of the
    /// batch, rounded up). Must be below the batch.
    pub fn refill_below(mut self, tokens: u32) -> Self {
        self.refill_below = Some(tokens);
        self
    }

    /// Drop reserved tokens this long after they arrived (default: the quota's burst window
    /// `B*T`). Must be positive.
    pub fn max_token_age(mut self, age: Duration) -> Self {
        self.max_token_age = Some(age);
        self
    }

    /// The most reservoirs (keys) held at once (default [`DEFAULT_MAX_KEYS`]); at least 1.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Reads local time (token lifetimes, denials in force) from `clock` instead of the real
    /// monotonic clock.
    pub fn clock<C2: Clock + 'static>(self, clock: C2) -> TwoTierLimiterBuilder<S, C2> {
        TwoTierLimiterBuilder {
            store: self.store,
            batch: self.batch,
            refill_below: self.refill_below,
            max_token_age: self.max_token_age,
            max_keys: self.max_keys,
            clock,
        }
    }

    /// Builds the limiter. Errors ([`ConfigError`]) for a batch of 0 or above the store's burst,
    /// a refill threshold not below the batch, a token age of zero, or `max_keys` of 0.
    pub fn build(self) -> Result<TwoTierLimiter<S, C>, ConfigError> {
        let quota = self.store.quota();
        let cfg = Config::new(&quota, self.batch, self.refill_below, self.max_token_age)?;
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroMaxKeys);
        }
        Ok(TwoTierLimiter {
            shared: Arc::new(Shared {
                store: self.store,
                cfg,
                quota,
                clock: self.clock,
                table: Table::new(self.max_keys),
                digester: KeyDigester::new(),
                max_keys: self.max_keys,
            }),
        })
    }
}

impl<S: KeyedLimit + 'static, C: Clock + 'static> TwoTierLimiter<S, C> {
    /// Checks (and on success spends) one token for `key`.
    pub async fn check_key(&self, key: &[u8]) -> Result<Decision, CheckError> {
        self.check_key_n(key, 1).await
    }

    /// Checks (and on success spends) `cost` tokens for `key`.
    ///
    /// * `cost <= batch`: decided locally while the reservoir holds tokens; when it runs dry, one
    ///   caller reserves a batch and the others wait for that reservation.
    /// * `batch < cost <= burst`: asked of the shared store directly (a batch could never cover it).
    /// * `cost > burst`: [`GcraError::InsufficientCapacity`].
    pub async fn check_key_n(&self, key: &[u8], cost: u32) -> Result<Decision, CheckError> {
        let shared = &self.shared;
        if cost > shared.cfg.limit() {
            return Err(GcraError::InsufficientCapacity {
                cost,
                burst: shared.cfg.limit(),
            }
            .into());
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

    /// Tokens reserved per round trip.
    pub fn batch(&self) -> u32 {
        self.shared.cfg.batch()
    }

    /// A background refill starts when fewer tokens than this are left locally.
    pub fn refill_below(&self) -> u32 {
        self.shared.cfg.refill_below()
    }

    /// Reserved tokens are dropped this long after they arrived.
    pub fn max_token_age(&self) -> Duration {
        self.shared.cfg.max_token_age()
    }

    /// The shared store.
    pub fn store(&self) -> &S {
        &self.shared.store
    }
}

impl<S: KeyedLimit, C: Clock> Shared<S, C> {
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
    async fn reserve(&self, key: &[u8], slot: &Slot) -> Result<(), CheckError> {
        metrics::counter!("flowguard_two_tier_reservations_total").increment(1);
        let answer = self.store.check(key, self.cfg.batch()).await;
        let now = self.clock.now_nanos();
        {
            let mut reservoir = slot.reservoir.lock();
            match &answer {
                Ok(decision) => {
                    if !reservoir.reserved(&self.cfg, now, decision) {
                        metrics::counter!("flowguard_two_tier_late_refills_total").increment(1);
                    }
                }
                Err(_) => reservoir.failed(),
            }
        }
        slot.refilled.notify_waiters();
        answer.map(|_| ())
    }
}

/// Decided locally while the key's reservoir holds tokens; a future that owns what it needs.
impl<S: KeyedLimit + 'static, C: Clock + 'static> KeyedLimit for TwoTierLimiter<S, C> {
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture {
        let (limiter, key) = (self.clone(), key.to_vec());
        CheckFuture::new(async move { limiter.check_key_n(&key, cost).await })
    }

    fn quota(&self) -> Quota {
        self.shared.quota
    }
}

impl<S, C: Clock> Clone for TwoTierLimiter<S, C> {
    fn clone(&self) -> Self {
        TwoTierLimiter {
            shared: self.shared.clone(),
        }
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
