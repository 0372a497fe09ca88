//! [`Table`]: a sharded, bounded, concurrent map whose values know when they have expired.
//!
//! Each shard is an open-addressing hash table behind a read-write lock. Lookups take the read
//! lock. Expired values are reclaimed incrementally, paid by the insertion of new keys, never by a
//! stop-the-world scan on the hot path. The table never holds more than `max_keys` values.
//!
//! # The reclamation bound
//!
//! Every attempt to insert a new key sweeps [`SWEEP_PER_INSERT`] buckets of one shard, chosen
//! round-robin over all shards by a table-wide counter (not the shard the key hashes to), from that
//! shard's own rolling cursor. So every shard is swept once every `shards` insertions, whatever the
//! hash seed and however keys spread over shards. Before an insertion that may rehash a shard
//! (its table has no free slot left, so hashbrown would move the values and the cursor would lose
//! its place), that shard is swept whole first.
//!
//! Hence: a value that has expired at time `t` is gone once `shards × ⌈buckets / 16⌉` new keys
//! have been offered to the table at times at or after `t`, where `buckets` is the largest bucket
//! count of a shard meanwhile. A shard holds at most `max_keys / shards` values and never grows
//! past `32/7` buckets per value, so the bound is at most `2 × max_keys / 7 + 64` new keys
//! ([`Table::reclaim_bound`] computes the exact figure for the table as it is now).

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicUsize, Ordering};

use hashbrown::{DefaultHashBuilder, HashTable};
use parking_lot::RwLock;

/// A value that can tell whether it still carries information at time `now` (nanoseconds).
pub(crate) trait Expiring {
    /// True when removing the value would change no future decision.
    fn is_expired(&self, now: u64) -> bool;
}

/// Buckets of one shard (round-robin) examined on every attempt to insert a new key.
pub(crate) const SWEEP_PER_INSERT: usize = 16;
/// Extra buckets of the key's own shard examined when it is full, before the caller's overflow
/// policy applies.
const SWEEP_WHEN_FULL: usize = 256;
/// Fewest keys a shard is sized for; small tables get fewer shards so `max_keys` stays exact.
const MIN_KEYS_PER_SHARD: usize = 1024;
/// Most shards a table uses.
const MAX_SHARDS: usize = 64;

/// The shard is full of live values; nothing was inserted.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Full;

pub(crate) struct Table<K, V, S = DefaultHashBuilder> {
    hasher: S,
    shards: Box<[LockedShard<K, V>]>,
    shard_shift: u32,
    shard_capacity: usize,
    /// Counts attempts to insert a new key; picks the shard the next incremental sweep visits.
    sweeps: AtomicUsize,
}

/// A shard on its own cache lines, so locking one does not slow its neighbours.
#[repr(align(128))]
struct Padded<T>(T);

type LockedShard<K, V> = Padded<RwLock<Shard<K, V>>>;

struct Shard<K, V> {
    table: HashTable<(K, V)>,
    /// The next bucket the incremental sweep examines.
    cursor: usize,
}

impl<K, V> Table<K, V> {
    /// A table for at most `max_keys` (>= 1) values, with a randomly seeded hasher.
    pub(crate) fn new(max_keys: usize) -> Table<K, V> {
        Table::with_hasher(max_keys, DefaultHashBuilder::default())
    }
}

impl<K, V, S> Table<K, V, S> {
    /// A table for at most `max_keys` (>= 1) values, hashing with `hasher`.
    pub(crate) fn with_hasher(max_keys: usize, hasher: S) -> Table<K, V, S> {
        let shards = (max_keys / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS);
        // A power of two at most `shards`, so every shard gets at least MIN_KEYS_PER_SHARD.
        let shards = 1usize << shards.ilog2();
        // Rounded down, so the shards together never hold more than max_keys.
        let shard_capacity = (max_keys / shards).max(1);
        Table {
            hasher,
            shards: (0..shards)
                .map(|_| {
                    Padded(RwLock::new(Shard {
                        table: HashTable::new(),
                        cursor: 0,
                    }))
                })
                .collect(),
            shard_shift: 64 - shards.trailing_zeros(),
            shard_capacity,
            sweeps: AtomicUsize::new(0),
        }
    }

    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }
}

impl<K, V, S> Table<K, V, S> {
    /// How many new keys, offered at or after the time a value expired, are enough to have swept
    /// it, for the table as it is now: `shards × ⌈largest shard's buckets / SWEEP_PER_INSERT⌉`.
    /// Never more than `2 × max_keys / 7 + 64` (see the module docs).
    #[cfg(test)]
    pub(crate) fn reclaim_bound(&self) -> usize {
        let buckets = self
            .shards
            .iter()
            .map(|s| s.0.read().table.num_buckets())
            .max()
            .unwrap_or(0);
        self.shards.len() * buckets.div_ceil(SWEEP_PER_INSERT).max(1)
    }
}

impl<K: Hash + Eq, V: Expiring, S: BuildHasher> Table<K, V, S> {
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard<K, V>> {
        &self.shards[self.shard_index(hash)].0
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // The hash table uses the low bits and the top 7; the shard takes bits just below the top.
        if self.shards.len() == 1 {
            0
        } else {
            ((hash << 7) >> self.shard_shift) as usize
        }
    }

    /// Runs `f` on the value of `key` under the shard's read lock, if present.
    #[inline]
    pub(crate) fn with<Q, R>(&self, hash: u64, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let shard = self.shard(hash).read();
        shard
            .table
            .find(hash, |(k, _)| k.borrow() == key)
            .map(|(_, v)| f(v))
    }

    /// Runs `f(value, inserted)` on the value of `key`, inserting `make()` first if absent.
    /// Fails with [`Full`] when the shard holds its share of `max_keys` live values.
    pub(crate) fn with_or_insert<Q, R>(
        &self,
        hash: u64,
        key: &Q,
        now: u64,
        make: impl FnOnce() -> V,
        f: impl FnOnce(&V, bool) -> R,
    ) -> Result<R, Full>
    where
        K: Borrow<Q>,
        Q: Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The round-robin sweep first, under its own shard's lock alone (never two locks at once).
        // A key it removes lends its memory to the new one (a key that comes back after being
        // reclaimed costs no allocation).
        let mut spare = self.sweep_next(now);
        let mut shard = self.shard(hash).write();
        if let Some((_, v)) = shard.table.find(hash, |(k, _)| k.borrow() == key) {
            return Ok(f(v, false));
        }
        if shard.table.len() >= self.shard_capacity {
            spare = shard.sweep(now, SWEEP_WHEN_FULL).or(spare);
            if shard.table.len() >= self.shard_capacity {
                return Err(Full);
            }
        }
        if shard.table.len() == shard.table.capacity() {
            // No free slot: this insertion may rehash, moving values behind the cursor. Sweep the
            // whole shard first and rehash now, so the next pass starts from a clean table.
            spare = shard.sweep_all(now).or(spare);
            if shard.table.len() == shard.table.capacity() {
                shard.table.reserve(1, |(k, _)| self.hasher.hash_one(k));
            }
        }
        let owned = match spare {
            Some(mut spare) => {
                key.clone_into(&mut spare);
                spare
            }
            None => key.to_owned(),
        };
        let entry = shard
            .table
            .insert_unique(hash, (owned, make()), |(k, _)| self.hasher.hash_one(k));
        let (_, v) = entry.get();
        Ok(f(v, true))
    }

    /// The incremental sweep paid by one attempt to insert a new key: [`SWEEP_PER_INSERT`]
    /// buckets of the next shard in round-robin order. Returns a key it removed, if any.
    fn sweep_next(&self, now: u64) -> Option<K> {
        let i = self.sweeps.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        self.shards[i].0.write().sweep(now, SWEEP_PER_INSERT)
    }

    /// Removes every expired value, shard by shard; returns how many. Frees memory of shards that shrank a lot.
    pub(crate) fn reclaim(&self, now: u64) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut s = shard.0.write();
            let before = s.table.len();
            s.sweep_all(now);
            removed += before - s.table.len();
            if s.table.num_buckets() > 64 && s.table.len() < s.table.num_buckets() / 4 {
                s.table.shrink_to_fit(|(k, _)| self.hasher.hash_one(k));
            }
        }
        removed
    }

    /// Values stored (live or not yet reclaimed).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().table.len()).sum()
    }
}

impl<K, V: Expiring> Shard<K, V> {
    /// Examines up to `budget` buckets from the cursor, removing expired values; returns the
    /// last key removed, for reuse.
    fn sweep(&mut self, now: u64, budget: usize) -> Option<K> {
        let buckets = self.table.num_buckets();
        let mut removed = None;
        for _ in 0..budget {
            if self.table.is_empty() {
                break;
            }
            if self.cursor >= buckets {
                self.cursor = 0;
            }
            if let Ok(entry) = self.table.get_bucket_entry(self.cursor)
                && entry.get().1.is_expired(now)
            {
                let ((key, _), _) = entry.remove();
                removed = Some(key);
            }
            self.cursor += 1;
        }
        removed
    }

    /// Examines every bucket, removing expired values; the next pass starts from bucket 0.
    /// Returns the last key removed, for reuse.
    fn sweep_all(&mut self, now: u64) -> Option<K> {
        self.cursor = 0;
        let buckets = self.table.num_buckets();
        let removed = self.sweep(now, buckets);
        self.cursor = 0;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct ExpiresAt(u64);

    impl Expiring for ExpiresAt {
        fn is_expired(&self, now: u64) -> bool {
            self.0 <= now
        }
    }

    /// A deterministic hasher: SipHash with the seed written first, so each test table is reproducible.
    #[derive(Clone, Copy)]
    struct Seeded(u64);

    impl BuildHasher for Seeded {
        type Hasher = std::hash::DefaultHasher;
        fn build_hasher(&self) -> Self::Hasher {
            use std::hash::Hasher;
            let mut h = std::hash::DefaultHasher::new();
            h.write_u64(self.0);
            h
        }
    }

    /// Inserts `key` at `now`, expiring at `expires`; `Ok(true)` when it was new.
    fn insert<S: BuildHasher>(
        t: &Table<u64, ExpiresAt, S>,
        key: u64,
        now: u64,
        expires: u64,
    ) -> Result<bool, Full> {
        let h = t.hash(&key);
        t.with_or_insert(h, &key, now, || ExpiresAt(expires), |_, new| new)
    }

    /// The adversarial spread: every expired key in one shard and every new key in the others,
    /// so the new keys' own shards never contain what has to be reclaimed. Over hundreds of
    /// seeds and several sizes, the expired keys are all gone within `reclaim_bound()` inserts.
    #[test]
    fn expired_keys_go_within_the_bound_whatever_the_hash_seed() {
        for seed in 0..300u64 {
            let max_keys = [2048, 8192, 65_536][seed as usize % 3];
            let t: Table<u64, ExpiresAt, Seeded> = Table::with_hasher(max_keys, Seeded(seed));
            let shards = t.shard_count();
            let target = seed as usize % shards;
            let in_target = |k: &u64| t.shard_index(t.hash(k)) == target;
            let old: Vec<u64> = (0..).filter(in_target).take(300).collect();
            for &k in &old {
                assert_eq!(insert(&t, k, 0, 10), Ok(true));
            }
            assert_eq!(t.len(), old.len());
            // From t = 10 on, every old key has expired; new keys avoid the old keys' shard
            // (unless there is only one shard).
            let bound = t.reclaim_bound();
            let mut fresh = (1_000_000u64..).filter(|k| shards == 1 || !in_target(k));
            let mut inserted = 0;
            while t.len() > inserted {
                assert!(
                    inserted < bound,
                    "seed {seed}, max_keys {max_keys}: {} of {} expired keys left after {inserted} \
                     inserts (bound {bound})",
                    t.len() - inserted,
                    old.len(),
                );
                let k = fresh.next().unwrap();
                assert_eq!(insert(&t, k, 10, u64::MAX), Ok(true));
                inserted += 1;
            }
            assert!(
                bound <= 2 * max_keys / 7 + 64,
                "bound {bound} for {max_keys}"
            );
        }
    }

    /// Rehashing moves values behind the sweep cursor; the whole-shard sweep before a possible
    /// rehash keeps the bound while shards grow from empty.
    #[test]
    fn growing_shards_keep_the_bound() {
        for seed in 0..100u64 {
            let t: Table<u64, ExpiresAt, Seeded> = Table::with_hasher(1 << 16, Seeded(seed));
            // Interleave keys that expire at 1 with live ones, so shards grow while holding garbage.
            for k in 0..4000u64 {
                let expires = if k % 2 == 0 { 1 } else { u64::MAX };
                assert_eq!(insert(&t, k, 0, expires), Ok(true));
            }
            let live = 2000;
            let bound = t.reclaim_bound();
            for (inserted, k) in (10_000u64..).enumerate() {
                if t.len() == live + inserted {
                    break;
                }
                assert!(
                    inserted < bound,
                    "seed {seed}: garbage left after {inserted} inserts"
                );
                assert_eq!(insert(&t, k, 2, u64::MAX), Ok(true));
            }
        }
    }

    #[test]
    fn the_documented_bound_holds_for_full_tables() {
        for max_keys in [1, 7, 1000, 1024, 5000, 1 << 16] {
            let t: Table<u64, ExpiresAt, Seeded> = Table::with_hasher(max_keys, Seeded(7));
            for k in 0..(max_keys as u64 * 2) {
                let _ = insert(&t, k, 0, u64::MAX);
            }
            let bound = t.reclaim_bound();
            assert!(
                bound <= 2 * max_keys / 7 + 64,
                "bound {bound} for {max_keys}"
            );
        }
    }

    #[test]
    fn never_holds_more_than_max_keys() {
        for max_keys in [1, 7, 1000, 5000, 100_000] {
            let t: Table<u64, ExpiresAt> = Table::new(max_keys);
            let mut inserted = 0;
            for k in 0..(max_keys as u64 * 2) {
                let h = t.hash(&k);
                if t.with_or_insert(h, &k, 0, || ExpiresAt(u64::MAX), |_, new| new)
                    .is_ok()
                {
                    inserted += 1;
                }
            }
            assert!(t.len() <= max_keys, "{} > {max_keys}", t.len());
            assert_eq!(t.len(), inserted);
        }
    }

    /// A new key stored in the memory of a reclaimed one is that key, whatever their lengths.
    #[test]
    fn keys_stored_in_reclaimed_memory_are_the_new_keys() {
        let t: Table<Vec<u8>, ExpiresAt, Seeded> = Table::with_hasher(1, Seeded(3));
        let keys: [&[u8]; 4] = [b"a-rather-long-key", b"k", b"", b"another key"];
        for (now, key) in (1..).zip(keys) {
            let h = t.hash(key);
            let new = t.with_or_insert(h, key, now, || ExpiresAt(now), |_, new| new);
            assert_eq!(new, Ok(true), "the expired key before it was reclaimed");
            assert_eq!(t.len(), 1);
            assert_eq!(t.with(h, key, |v| v.0), Some(now), "{key:?} is stored");
        }
    }
}
