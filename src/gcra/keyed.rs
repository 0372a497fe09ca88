//! [`KeyedRateLimiter`]: one quota per key for many keys, in bounded memory.
//!
//! Each key's state is one atomic cell (its TAT) in a sharded, bounded [`Table`]: checking a
//! known key takes a shard read lock and one compare-and-swap. The cell type is chosen once from
//! the quota: a `u64` when the emission interval is a whole number of nanoseconds, a `u128` (whole
//! nanoseconds and a fraction) when it is not. Keys whose TAT is in the past carry
//! no information (an absent key and an expired key decide the same) and are reclaimed
//! incrementally as new keys arrive.

use std::borrow::Borrow;
use std::marker::PhantomData;

use super::algorithm::{Gcra, Ticks};
use super::cell::{ExactTat, TatCell, WholeTat};
use super::decision::{Decision, Degradation, DegradedReason};
use super::error::{ConfigError, GcraError};
use super::limit_key::stored::KeyDigester;
use super::limit_key::{FromKeyBytes, LimitKey};
use super::quota::Quota;
use super::table::Table;
use crate::clock::{Clock, MonotonicClock};

/// Default [`KeyedRateLimiterBuilder::max_keys`]: 2^20 (about one million) live keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// With byte-string keys of any length, a [`KeyedRateLimiter`]'s heap never exceeds
/// `MAX_HEAP_BYTES_PER_KEY * max_keys + MAX_HEAP_FIXED_BYTES` bytes (sizes requested from the
/// allocator), even while a shard's table grows.
///
/// The derivation: a shard grows its table by doubling, so at the peak of a resize it holds the
/// old and the new bucket arrays, at most 3.43 buckets per key of its capacity; a bucket holds the
/// stored key (a 24-byte `Vec`), the state word and one control byte, 33 bytes today; and each
/// live key owns at most `1 + MAX_VERBATIM_KEY_LEN` = 65 bytes of key data (see
/// [`LimitKey`]). That is 178 bytes per key; the bound leaves room for a larger state. Measured
/// under floods of 64-byte to 64 KiB keys: 90-160 bytes per key (`tests/gcra/keyed_memory.rs`).
/// Keys of a [`FixedSizeKey`](super::FixedSizeKey) type of up to 32 bytes stay within the same bound.
pub const MAX_HEAP_BYTES_PER_KEY: usize = 256;

/// The part of [`MAX_HEAP_BYTES_PER_KEY`]'s bound that does not grow with `max_keys`: the shard
/// array (up to 64 shards of 128 bytes) and the smallest tables of shards holding a few keys.
pub const MAX_HEAP_FIXED_BYTES: usize = 32 * 1024;

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
/// (per shard, `max_keys / shards`), and keys whose TAT has passed are reclaimed as new keys
/// arrive: each new key pays for a sweep of 16 buckets of one shard, the shards taken in turn, so
/// a key that has expired is gone once at most `2 × max_keys / 7 + 64` more new keys have arrived,
/// whatever the hash seed (for the default `max_keys`, under 300,000; usually far fewer, as the
/// bound assumes the largest shard). [`reclaim`](Self::reclaim) sweeps everything at once (e.g.
/// from a periodic task). When a shard is full of live keys, [`Overflow`] decides.
///
/// Memory is bounded in bytes too, whatever the keys' length: byte-string keys (`Vec<u8>`,
/// `String`, looked up as `[u8]` or `str`) are kept verbatim up to
/// [`MAX_VERBATIM_KEY_LEN`](super::MAX_VERBATIM_KEY_LEN) bytes and as a keyed 160-bit digest
/// beyond (see [`LimitKey`]), so a flood of 64 KiB keys costs what short keys cost: at most
/// [`MAX_HEAP_BYTES_PER_KEY`] per key of `max_keys`. Other key types are kept as they are and
/// must be of a fixed size ([`FixedSizeKey`](super::FixedSizeKey)).
pub struct KeyedRateLimiter<K: LimitKey, C: Clock = MonotonicClock> {
    gcra: Gcra,
    quota: Quota,
    clock: C,
    table: Tables<K::Stored>,
    digester: KeyDigester,
    max_keys: usize,
    overflow: Overflow,
}

/// The keys' TATs, in the cell type the quota needs (chosen once, at build time), and the TAT
/// of the empty key given as bytes to a limiter of fixed-size keys (see [`FromKeyBytes`]), which
/// is no key of its type.
enum Tables<S> {
    /// The emission interval is a whole number of nanoseconds: 8-byte cells.
    Whole(Table<S, WholeTat>, WholeTat),
    /// It is not: 16-byte cells holding a fraction of a nanosecond too.
    Exact(Table<S, ExactTat>, ExactTat),
}

/// Runs `$body` with `$t` bound to whichever table `$tables` holds (and `$empty` to the empty
/// key's cell).
macro_rules! with_table {
    ($tables:expr, $t:ident => $body:expr) => {
        match $tables {
            Tables::Whole($t, _) => $body,
            Tables::Exact($t, _) => $body,
        }
    };
    ($tables:expr, _, $empty:ident => $body:expr) => {
        match $tables {
            Tables::Whole(_, $empty) => $body,
            Tables::Exact(_, $empty) => $body,
        }
    };
}

/// Configures a [`KeyedRateLimiter`]: [`KeyedRateLimiter::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct KeyedRateLimiterBuilder<K, C = MonotonicClock> {
    quota: Quota,
    clock: C,
    max_keys: usize,
    overflow: Overflow,
    key: PhantomData<fn() -> K>,
}

impl<K: LimitKey, C: Clock> KeyedRateLimiterBuilder<K, C> {
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
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedRateLimiterBuilder<K, C2> {
        KeyedRateLimiterBuilder {
            quota: self.quota,
            clock,
            max_keys: self.max_keys,
            overflow: self.overflow,
            key: PhantomData,
        }
    }

    /// Builds the limiter; `max_keys == 0` is [`ConfigError::ZeroMaxKeys`].
    pub fn build(self) -> Result<KeyedRateLimiter<K, C>, ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::ZeroMaxKeys);
        }
        let gcra = Gcra::new(&self.quota);
        let table = if gcra.is_whole() {
            Tables::Whole(Table::new(self.max_keys), WholeTat::holding(Ticks::ZERO))
        } else {
            Tables::Exact(Table::new(self.max_keys), ExactTat::holding(Ticks::ZERO))
        };
        Ok(KeyedRateLimiter {
            gcra,
            quota: self.quota,
            clock: self.clock,
            table,
            digester: KeyDigester::new(),
            max_keys: self.max_keys,
            overflow: self.overflow,
        })
    }
}

impl<K: LimitKey> KeyedRateLimiter<K, MonotonicClock> {
    /// A limiter on the real clock with the default bounds: the builder with its defaults, which
    /// cannot fail.
    pub fn new(quota: Quota) -> Self {
        KeyedRateLimiter::builder(quota)
            .build()
            .unwrap_or_else(|_| unreachable!("the default max_keys is not zero"))
    }

    /// Starts configuring a limiter for `quota` with the defaults: real clock,
    /// [`DEFAULT_MAX_KEYS`], [`Overflow::Reject`]. The key type is the limiter's
    /// (`KeyedRateLimiter::<String>::builder(quota)`), or inferred from its use.
    pub fn builder(quota: Quota) -> KeyedRateLimiterBuilder<K> {
        KeyedRateLimiterBuilder {
            quota,
            clock: MonotonicClock::new(),
            max_keys: DEFAULT_MAX_KEYS,
            overflow: Overflow::Reject,
            key: PhantomData,
        }
    }
}

impl<K, C: std::fmt::Debug> std::fmt::Debug for KeyedRateLimiterBuilder<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedRateLimiterBuilder")
            .field("quota", &self.quota)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow)
            .finish()
    }
}

impl<K: LimitKey, C: Clock> KeyedRateLimiter<K, C> {
    /// Checks (and on success spends) one token for `key`.
    #[inline]
    pub fn check_key<Q>(&self, key: &Q) -> Result<Decision, GcraError>
    where
        K: Borrow<Q>,
        Q: LimitKey<Stored = K::Stored, Probe = K::Probe> + ?Sized,
    {
        self.check_key_n(key, 1)
    }

    /// Checks (and on success spends) `cost` tokens for `key`. `cost == 0` peeks and never stores
    /// a key; `cost > burst` is [`GcraError::InsufficientCapacity`].
    #[inline]
    pub fn check_key_n<Q>(&self, key: &Q, cost: u32) -> Result<Decision, GcraError>
    where
        K: Borrow<Q>,
        Q: LimitKey<Stored = K::Stored, Probe = K::Probe> + ?Sized,
    {
        key.with_probe(&self.digester, |stored| self.check_stored(stored, cost))
    }

    /// [`check_key_n`](Self::check_key_n) for the bytes of a byte-string key, whatever its type
    /// (`String` keys are looked up by their UTF-8 bytes, as the same key).
    #[inline]
    pub(crate) fn check_bytes(&self, key: &[u8], cost: u32) -> Result<Decision, GcraError>
    where
        K: LimitKey<Stored = Vec<u8>, Probe = [u8]>,
    {
        self.digester
            .with_probe(key, |stored| self.check_stored(stored, cost))
    }

    /// [`check_key_n`](Self::check_key_n) for a key given as bytes, of any [`BytesKey`] type:
    /// what [`KeyedLimit::check`](super::KeyedLimit::check) decides.
    #[inline]
    pub(crate) fn check_given_bytes(&self, key: &[u8], cost: u32) -> Result<Decision, GcraError>
    where
        K: BytesKey,
    {
        K::check_given(self, key, cost)
    }

    /// [`check_key_n`](Self::check_key_n) for a fixed-size key given as its bytes: the key they
    /// read as, or the empty key's own cell, or [`GcraError::UnreadableKey`].
    fn check_read_bytes(&self, key: &[u8], cost: u32) -> Result<Decision, GcraError>
    where
        K: FromKeyBytes,
    {
        if key.is_empty() {
            let now = self.clock.now_nanos();
            return with_table!(&self.table, _, empty => empty.spend(&self.gcra, now, cost));
        }
        match K::from_key_bytes(key) {
            Some(key) => self.check_key_n(&key, cost),
            None => Err(GcraError::UnreadableKey {
                len: key.len(),
                key_type: std::any::type_name::<K>(),
                expected: K::KEY_BYTES,
            }),
        }
    }

    /// Gives back `cost` tokens that [`check_bytes`](Self::check_bytes) granted to `key` (see
    /// [`TatCell::refund`]): exact when no other spend on the key came in between, which the
    /// caller ensures by a lock every spender of the key holds. Nothing happens for a key that is
    /// not stored (a grant [`Overflow::AllowUntracked`] decided untracked).
    pub(crate) fn refund_bytes(&self, key: &[u8], cost: u32)
    where
        K: LimitKey<Stored = Vec<u8>, Probe = [u8]>,
    {
        self.digester.with_probe(key, |stored| {
            with_table!(&self.table, table => {
                table.with(table.hash(stored), stored, |tat| tat.refund(&self.gcra, cost));
            })
        });
    }

    /// [`check_key_n`](Self::check_key_n) for a key in its stored form.
    #[inline]
    fn check_stored(&self, key: &K::Probe, cost: u32) -> Result<Decision, GcraError> {
        with_table!(&self.table, table => self.check_in(table, key, cost))
    }

    /// [`check_stored`](Self::check_stored) against `table`, whose cells hold TATs of this quota.
    #[inline]
    fn check_in<V: TatCell>(
        &self,
        table: &Table<K::Stored, V>,
        key: &K::Probe,
        cost: u32,
    ) -> Result<Decision, GcraError> {
        let now = self.clock.now_nanos();
        let hash = table.hash(key);
        if let Some(decision) = table.with(hash, key, |tat| tat.spend(&self.gcra, now, cost)) {
            return decision;
        }
        // An unknown key decides as an idle one; only a spend needs storing.
        let step = self.gcra.decide(Ticks::ZERO, now, cost)?;
        let Some(new_tat) = step.new_tat else {
            return Ok(step.decision);
        };
        let stored = table.with_or_insert(
            hash,
            key,
            now,
            || V::holding(new_tat),
            // Inserted by another thread meanwhile: spend against its state instead.
            |tat, inserted| {
                if inserted {
                    Ok(step.decision)
                } else {
                    tat.spend(&self.gcra, now, cost)
                }
            },
        );
        match (stored, self.overflow) {
            (Ok(decision), _) => decision,
            (Err(_full), Overflow::Reject) => Err(GcraError::KeyLimitReached {
                max_keys: self.max_keys,
            }),
            (Err(_full), Overflow::AllowUntracked) => Ok(step
                .decision
                .degraded(Degradation::FailOpen)
                .because(DegradedReason::StoreFull)),
        }
    }

    /// Removes every key whose TAT has passed, shard by shard, and returns how many were removed.
    /// Releases memory of shards that shrank a lot.
    pub fn reclaim(&self) -> usize {
        let now = self.clock.now_nanos();
        with_table!(&self.table, table => table.reclaim(now))
    }

    /// The number of keys stored (live or not yet reclaimed).
    pub fn len(&self) -> usize {
        with_table!(&self.table, table => table.len())
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
}

impl<K: LimitKey, C: Clock> std::fmt::Debug for KeyedRateLimiter<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedRateLimiter")
            .field("quota", &self.quota)
            .field("max_keys", &self.max_keys)
            .field(
                "shards",
                &with_table!(&self.table, table => table.shard_count()),
            )
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}

/// A key type whose [`KeyedRateLimiter`] answers keys given as bytes, which makes it a
/// [`KeyedLimit`](super::KeyedLimit) (for the quota layer, the [`Guard`](crate::Guard), a
/// [two-tier](super::two_tier) limiter's shared store):
///
/// * byte strings (`Vec<u8>`, `String`, `Box<[u8]>`, `Box<str>`): the bytes are the key (a
///   `String` limiter reads them as the same key as the `str`, whether or not they are UTF-8);
/// * [`FixedSizeKey`](super::FixedSizeKey) types that implement [`FromKeyBytes`] (addresses,
///   integers, byte arrays, your own): the bytes are read as a key of the type, and bytes that
///   are none are [`GcraError::UnreadableKey`]. The empty key is a key of its own.
///
/// Implemented for exactly these (fixed-size types that are `Send + Sync`); it cannot be
/// implemented directly (implement [`FromKeyBytes`] for a key type of your own).
pub trait BytesKey: LimitKey<Stored: Send + Sync> + by_bytes::CheckGiven {}

impl<T: LimitKey<Stored: Send + Sync> + by_bytes::CheckGiven> BytesKey for T {}

/// The machinery behind [`BytesKey`], out of users' reach.
pub(crate) mod by_bytes {
    use super::*;

    /// How a limiter keyed by this type checks a key given as bytes.
    pub trait CheckGiven: LimitKey + Sized {
        /// [`KeyedRateLimiter::check_key_n`] for `key` given as bytes.
        fn check_given<C: Clock>(
            limiter: &KeyedRateLimiter<Self, C>,
            key: &[u8],
            cost: u32,
        ) -> Result<Decision, GcraError>;
    }

    impl<T: FromKeyBytes> CheckGiven for T {
        #[inline]
        fn check_given<C: Clock>(
            limiter: &KeyedRateLimiter<T, C>,
            key: &[u8],
            cost: u32,
        ) -> Result<Decision, GcraError> {
            limiter.check_read_bytes(key, cost)
        }
    }

    macro_rules! checked_as_bytes {
        ($($t:ty),*) => {$(
            impl CheckGiven for $t {
                #[inline]
                fn check_given<C: Clock>(
                    limiter: &KeyedRateLimiter<$t, C>,
                    key: &[u8],
                    cost: u32,
                ) -> Result<Decision, GcraError> {
                    limiter.check_bytes(key, cost)
                }
            }
        )*};
    }

    checked_as_bytes!(Vec<u8>, Box<[u8]>, String, Box<str>);
}
