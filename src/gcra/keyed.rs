//! [`KeyedRateLimiter`]: one quota per key for many keys, in bounded memory.
//!
//! Keys live in shards, each an open-addressing hash table of `(key, TAT)` slots (16 bytes for a
//! `u64` key). Checking a known key takes a shard read lock and one compare-and-swap on the key's
//! TAT. Inserting a new key takes the shard's write lock and first sweeps a few buckets from a
//! rolling cursor, removing keys whose TAT is in the past (they carry no information: an absent
//! key and an expired key decide the same). Reclamation is thus incremental and paid by inserts,
//! never a stop-the-world scan on the hot path, and memory is bounded by `max_keys`.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::{DefaultHashBuilder, HashTable};
use parking_lot::RwLock;

use super::algorithm::Gcra;
use super::cell;
use super::clock::{Clock, MonotonicClock};
use super::decision::{Decision, Degradation};
use super::error::{ConfigError, GcraError};
use super::quota::Quota;

/// Default [`KeyedRateLimiterBuilder::max_keys`]: 2^20 (about one million) live keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// Slots examined from the sweep cursor on every insertion of a new key.
const SWEEP_PER_INSERT: usize = 4;
/// Extra slots examined when a shard is full before its overflow policy applies.
const SWEEP_WHEN_FULL: usize = 64;
/// Fewest keys a shard is sized for; small stores get fewer shards so `max_keys` stays exact.
const MIN_KEYS_PER_SHARD: usize = 1024;
/// Most shards a store uses.
const MAX_SHARDS: usize = 64;

/// What a full [`KeyedRateLimiter`] does with a key it is not tracking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overflow {
    /// Return [`GcraError::KeyLimitReached`] for new keys until some key expires (fail closed).
    /// Keys already tracked keep being limited exactly. The default: an attacker who floods the
    /// store with distinct keys cannot make any key unlimited.
    #[default]
    Reject,
    /// Decide new keys as if idle, without storing them, and mark the decision
    /// [`Degradation::FailOpen`] (fail open). Tracked keys keep being limited exactly.
    AllowUntracked,
}

/// A GCRA limiter with one quota and independent state per key.
///
/// ```
/// use flowguard::gcra::{KeyedRateLimiter, Quota};
///
/// let limiter = KeyedRateLimiter::<String>::new(Quota::per_second(2)?);
/// assert!(limiter.check_key("alice")?.allowed);
/// assert!(limiter.check_key("alice")?.allowed);
/// assert!(!limiter.check_key("alice")?.allowed);
/// assert!(limiter.check_key("bob")?.allowed); // bob has his own quota
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Memory is bounded: at most [`max_keys`](KeyedRateLimiterBuilder::max_keys) keys are stored
/// (per shard, `max_keys / shards`), keys whose TAT has passed are reclaimed as new keys arrive,
/// and [`reclaim`](Self::reclaim) sweeps everything at once (e.g. from a periodic task).
/// When a shard is full of live keys, [`Overflow`] decides.
pub struct KeyedRateLimiter<K, C: Clock = MonotonicClock> {
    gcra: Gcra,
    quota: Quota,
    clock: C,
    hasher: DefaultHashBuilder,
    shards: Box<[Padded<RwLock<Shard<K>>>]>,
    shard_shift: u32,
    shard_capacity: usize,
    max_keys: usize,
    overflow: Overflow,
}

#[repr(align(128))]
struct Padded<T>(T);

struct Shard<K> {
    table: HashTable<Slot<K>>,
    /// The next bucket the incremental sweep examines.
    cursor: usize,
}

struct Slot<K> {
    key: K,
    tat: AtomicU64,
}

/// Configures a [`KeyedRateLimiter`].
#[derive(Debug)]
pub struct KeyedRateLimiterBuilder<C = MonotonicClock> {
    quota: Quota,
    clock: C,
    max_keys: usize,
    overflow: Overflow,
}

impl<C: Clock> KeyedRateLimiterBuilder<C> {
    /// The most keys stored at once (default [`DEFAULT_MAX_KEYS`]). Must be at least 1.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// What to do with new keys when full (default [`Overflow::Reject`]).
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// Reads time from `clock` instead of the real monotonic clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedRateLimiterBuilder<C2> {
        KeyedRateLimiterBuilder { quota: self.quota, clock, max_keys: self.max_keys, overflow: self.overflow }
    }

    /// Builds the limiter; `max_keys == 0` is [`ConfigError::ZeroMaxKeys`].
    pub fn build<K>(self) -> Result<KeyedRateLimiter<K, C>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroMaxKeys);
        }
        let shards = (self.max_keys / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS).next_power_of_two();
        let shards = if shards > MAX_SHARDS { shards / 2 } else { shards };
        // Rounded down, so the shards together never hold more than max_keys.
        let shard_capacity = (self.max_keys / shards).min(u32::MAX as usize);
        Ok(KeyedRateLimiter {
            gcra: Gcra::new(&self.quota),
            quota: self.quota,
            clock: self.clock,
            hasher: DefaultHashBuilder::default(),
            shards: (0..shards).map(|_| Padded(RwLock::new(Shard { table: HashTable::new(), cursor: 0 }))).collect(),
            shard_shift: 64 - shards.trailing_zeros(),
            shard_capacity,
            max_keys: self.max_keys,
            overflow: self.overflow,
        })
    }
}

impl<K: Hash + Eq> KeyedRateLimiter<K, MonotonicClock> {
    /// A limiter on the real clock with the default bounds.
    pub fn new(quota: Quota) -> Self {
        KeyedRateLimiterBuilder::new(quota).build().unwrap_or_else(|_| unreachable!("the default max_keys is not zero"))
    }
}

impl KeyedRateLimiter<(), MonotonicClock> {
    /// Starts configuring a limiter for `quota`; the key type is chosen at [`build`](KeyedRateLimiterBuilder::build).
    pub fn builder(quota: Quota) -> KeyedRateLimiterBuilder<MonotonicClock> {
        KeyedRateLimiterBuilder::new(quota)
    }
}

impl KeyedRateLimiterBuilder<MonotonicClock> {
    /// Starts configuring a limiter for `quota` with the defaults: real clock,
    /// [`DEFAULT_MAX_KEYS`], [`Overflow::Reject`].
    pub fn new(quota: Quota) -> Self {
        KeyedRateLimiterBuilder {
            quota,
            clock: MonotonicClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            overflow: Overflow::Reject,
        }
    }
}

impl<K: Hash + Eq, C: Clock> KeyedRateLimiter<K, C> {
    #[inline]
    fn rehash(&self) -> impl Fn(&Slot<K>) -> u64 + '_ {
        |slot| self.hasher.hash_one(&slot.key)
    }

    /// Checks (and on success spends) one token for `key`.
    #[inline]
    pub fn check_key<Q>(&self, key: &Q) -> Result<Decision, GcraError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_key_n(key, 1)
    }

    /// Checks (and on success spends) `cost` tokens for `key`. `cost == 0` peeks and never stores
    /// a key; `cost > burst` is [`GcraError::InsufficientCapacity`].
    pub fn check_key_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, GcraError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now_nanos();
        let hash = self.hasher.hash_one(key);
        let shard = &self.shards[self.shard_of(hash)].0;
        {
            let s = shard.read();
            if let Some(slot) = s.table.find(hash, |slot| slot.key.borrow() == key) {
                return cell::spend(&self.gcra, &slot.tat, now, cost);
            }
        }
        // An unknown key decides as an idle one; only a spend needs storing.
        let step = self.gcra.decide(0, now, cost)?;
        let Some(new_tat) = step.new_tat else {
            return Ok(step.decision);
        };
        let mut s = shard.write();
        if let Some(slot) = s.table.find(hash, |slot| slot.key.borrow() == key) {
            // Inserted by another thread meanwhile.
            return cell::spend(&self.gcra, &slot.tat, now, cost);
        }
        s.sweep(now, SWEEP_PER_INSERT);
        if s.table.len() >= self.shard_capacity {
            s.sweep(now, SWEEP_WHEN_FULL);
            if s.table.len() >= self.shard_capacity {
                return match self.overflow {
                    Overflow::Reject => Err(GcraError::KeyLimitReached { max_keys: self.max_keys }),
                    Overflow::AllowUntracked => Ok(step.decision.degraded(Degradation::FailOpen)),
                };
            }
        }
        s.table.insert_unique(hash, Slot { key: key.to_owned(), tat: AtomicU64::new(new_tat) }, self.rehash());
        Ok(step.decision)
    }

    /// Removes every key whose TAT has passed, shard by shard, and returns how many were removed.
    /// Releases memory of shards that shrank a lot.
    pub fn reclaim(&self) -> usize {
        let now = self.clock.now_nanos();
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut s = shard.0.write();
            let before = s.table.len();
            s.cursor = 0;
            let buckets = s.table.num_buckets();
            s.sweep(now, buckets);
            removed += before - s.table.len();
            if s.table.num_buckets() > 64 && s.table.len() < s.table.num_buckets() / 4 {
                s.table.shrink_to_fit(self.rehash());
            }
        }
        removed
    }

    /// The number of keys stored (live or not yet reclaimed).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().table.len()).sum()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The quota every key gets.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The configured maximum number of keys.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn shard_of(&self, hash: u64) -> usize {
        // The index uses the low bits and the top 7; the shard takes bits just below the top.
        if self.shards.len() == 1 { 0 } else { ((hash << 7) >> self.shard_shift) as usize }
    }
}

impl<K> Shard<K> {
    /// Examines up to `budget` buckets from the cursor, removing keys whose TAT is not after `now`.
    fn sweep(&mut self, now: u64, budget: usize) {
        let buckets = self.table.num_buckets();
        for _ in 0..budget {
            if self.table.is_empty() {
                return;
            }
            if self.cursor >= buckets {
                self.cursor = 0;
            }
            if let Ok(entry) = self.table.get_bucket_entry(self.cursor)
                && entry.get().tat.load(Ordering::Acquire) <= now
            {
                entry.remove();
            }
            self.cursor += 1;
        }
    }
}

impl<K, C: Clock> std::fmt::Debug for KeyedRateLimiter<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedRateLimiter")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards.len())
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}
