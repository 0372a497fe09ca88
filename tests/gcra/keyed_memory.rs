//! The keyed limiter's memory is bounded in bytes, not only in keys: a flood of 64 KiB keys (a
//! client-controlled header, say) costs no more than short keys do.
//!
//! A counting global allocator measures the heap the limiter holds at its peak, on the measuring
//! thread only, so tests running in parallel do not disturb each other. With one shard
//! (`max_keys` below 2048) a table's growth depends only on its length and the numbers are the
//! same on every run; with several, how keys spread over shards depends on the hash seed, and the
//! bound holds for every spread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{
    GcraError, KeyedRateLimiter, MAX_HEAP_BYTES_PER_KEY, MAX_HEAP_FIXED_BYTES,
    MAX_VERBATIM_KEY_LEN, Quota,
};

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn record(delta: isize) {
    // `try_with`: the allocator may run while the thread's locals are being torn down.
    let _ = TRACKING.try_with(|tracking| {
        if tracking.get() {
            let live = LIVE.get() + delta;
            LIVE.set(live);
            PEAK.set(PEAK.get().max(live));
        }
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; only sizes are recorded.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            record(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            record(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        record(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // The old block may live until the copy is done: count both at the peak.
            record(new_size as isize);
            record(-(layout.size() as isize));
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most heap bytes live at once on this thread while `f` runs (requested sizes), and the
/// bytes `f` left allocated.
fn peak_bytes(f: impl FnOnce()) -> (usize, isize) {
    LIVE.set(0);
    PEAK.set(0);
    TRACKING.set(true);
    f();
    TRACKING.set(false);
    (PEAK.get() as usize, LIVE.get())
}

/// Floods a limiter of `max_keys` with `keys` distinct keys of `len` bytes; returns its peak heap.
fn flood(max_keys: usize, keys: usize, len: usize) -> usize {
    // One buffer, made before measuring: each key differs in its first 8 bytes.
    let mut key = vec![b'k'; len.max(8)];
    let key = &mut key[..];
    let (peak, left) = peak_bytes(|| {
        let limiter = KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_minute(1).unwrap())
            .clock(ManualClock::new())
            .max_keys(max_keys)
            .build()
            .unwrap();
        let mut stored = 0;
        for i in 0..keys as u64 {
            key[..8].copy_from_slice(&i.to_le_bytes());
            match limiter.check_key(&key[..len.max(8)]) {
                Ok(d) => {
                    assert!(d.allowed);
                    stored += 1;
                }
                Err(GcraError::KeyLimitReached { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(limiter.len(), stored);
        assert!(stored <= max_keys);
        if max_keys < 2048 {
            // One shard: exactly max_keys fit. (With several shards each holds max_keys/shards,
            // and how many of the flood's keys land in each depends on the per-limiter hash seed,
            // so a shard may stay short of full: only the bound above is certain.)
            assert_eq!(stored, keys.min(max_keys));
        }
        // The first key is still known (and spent): digests do not lose keys.
        key[..8].copy_from_slice(&0u64.to_le_bytes());
        let again = limiter.check_key(&key[..len.max(8)]).unwrap();
        assert!(!again.allowed);
        assert_eq!(again.retry_after, Some(Duration::from_secs(60)));
    });
    assert_eq!(left, 0, "the limiter freed everything it allocated");
    peak
}

#[test]
fn peak_memory_under_a_flood_of_long_keys_stays_within_the_documented_bound() {
    let bound = |max_keys: usize| MAX_HEAP_BYTES_PER_KEY * max_keys + MAX_HEAP_FIXED_BYTES;
    for (max_keys, keys, len) in [
        // The case: 64 KiB keys, past the limit so the full store is exercised too.
        (1_000, 1_200, 64 * 1024),
        // The longest key kept verbatim, and the shortest digested one.
        (1_000, 1_500, 64),
        (1_000, 1_500, 65),
        // Several shards.
        (8_192, 9_000, 256),
    ] {
        let peak = flood(max_keys, keys, len);
        println!(
            "max_keys {max_keys}, {keys} keys of {len} B: peak {peak} B = {:.1} B per key",
            peak as f64 / max_keys as f64
        );
        assert!(
            peak <= bound(max_keys),
            "max_keys {max_keys}, {len}-byte keys: peak {peak} B exceeds the bound {} B",
            bound(max_keys)
        );
    }
}

/// Floods a two-tier limiter (over an in-memory shared store) holding at most `max_keys`
/// reservoirs with `max_keys` distinct keys of `len` bytes; returns the peak heap of the flood.
fn flood_two_tier(max_keys: usize, len: usize) -> usize {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let clock = ManualClock::new();
    // One shard in both tiers: the same keys allocate the same way on every run.
    let shared = KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_second(100).unwrap())
        .clock(clock.clone())
        .max_keys(2 * max_keys)
        .build()
        .unwrap();
    let limiter = TwoTierLimiter::builder(shared, 10)
        .clock(clock)
        .max_keys(max_keys)
        .build()
        .unwrap();
    let mut key = vec![b'k'; len];
    runtime.block_on(async {
        // Warm up whatever the runtime allocates once.
        let _ = limiter.check_key_n(b"warm-up", 1).await.unwrap();
    });
    let (peak, _) = peak_bytes(|| {
        runtime.block_on(async {
            for i in 0..max_keys as u64 - 1 {
                key[..8].copy_from_slice(&i.to_le_bytes());
                assert!(limiter.check_key_n(&key, 1).await.unwrap().allowed);
            }
        });
    });
    assert_eq!(limiter.len(), max_keys);
    peak
}

#[test]
fn two_tier_reservoirs_cost_the_same_for_long_keys() {
    let short = flood_two_tier(1_000, 65);
    let long = flood_two_tier(1_000, 8 * 1024);
    println!("two-tier, 1000 keys: peak {short} B with 65-byte keys, {long} B with 8 KiB keys");
    assert_eq!(long, short, "a key's length must not change what is stored");
}

/// Digesting long keys keeps every key its own: keys that differ only past the verbatim length,
/// or only in length, have separate quotas; the same bytes as `str` or `[u8]` are one key.
#[test]
fn long_keys_keep_their_own_quota() {
    let limiter = KeyedRateLimiter::<String>::builder(Quota::per_minute(1).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let long = "x".repeat(10_000);
    let mut keys = vec![long.clone(), format!("{long}y"), format!("{long}z")];
    keys.push(long[..MAX_VERBATIM_KEY_LEN].to_string());
    keys.push(long[..MAX_VERBATIM_KEY_LEN + 1].to_string());
    for key in &keys {
        assert!(
            limiter.check_key(key.as_str()).unwrap().allowed,
            "{}",
            key.len()
        );
    }
    for key in &keys {
        assert!(!limiter.check_key(key).unwrap().allowed, "{}", key.len());
    }
    assert_eq!(limiter.len(), keys.len());

    let bytes = KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_minute(1).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert!(bytes.check_key(long.as_bytes()).unwrap().allowed);
    assert!(!bytes.check_key(&long.clone().into_bytes()).unwrap().allowed);
}
