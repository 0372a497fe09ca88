//! flowguard's in-memory GCRA side by side with the `governor` crate, in one process.
//!
//! `cargo bench -p flowguard-harness --bench gcra -- --output-format bencher` prints both per group, then the ratios
//! (flowguard / governor, lower is better) and the heap bytes per live key of each keyed store.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};

mod support;

/// Counts live heap bytes, to report the memory each keyed store spends per key.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const KEYS: u64 = 100_000;

fn fg_quota() -> flowguard::gcra::Quota {
    // Keys stay live for the whole run (TAT ahead of now), as in a busy service.
    flowguard::gcra::Quota::per_second(1)
        .unwrap()
        .with_burst(1_000_000)
        .unwrap()
}

fn gov_quota() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::new(1).unwrap())
        .allow_burst(NonZeroU32::new(1_000_000).unwrap())
}

fn single_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_key");
    let fg = flowguard::gcra::RateLimiter::new(fg_quota());
    g.bench_function("flowguard", |b| {
        b.iter(|| black_box(fg.check().unwrap().allowed))
    });
    let gov = governor::RateLimiter::direct(gov_quota());
    g.bench_function("governor", |b| b.iter(|| black_box(gov.check().is_ok())));
    g.finish();
}

fn keyed_100k(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed_100k");
    let fg = flowguard::gcra::KeyedRateLimiter::<u64>::new(fg_quota());
    let mut k = 0u64;
    g.bench_function("flowguard", |b| {
        b.iter(|| {
            k = (k + 1) % KEYS;
            black_box(fg.check_key(&k).unwrap().allowed)
        })
    });
    let gov = governor::RateLimiter::<u64, _, _>::keyed(gov_quota());
    let mut k = 0u64;
    g.bench_function("governor", |b| {
        b.iter(|| {
            k = (k + 1) % KEYS;
            black_box(gov.check_key(&k).is_ok())
        })
    });
    g.finish();
}

/// Both cores on one key: `iters` checks split over two threads, wall time over `iters`.
fn on_two_threads(iters: u64, check: &(dyn Fn() -> bool + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..iters / 2 {
                    black_box(check());
                }
            });
        }
    });
    start.elapsed()
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("contended");
    let fg = flowguard::gcra::RateLimiter::new(fg_quota());
    g.bench_function("flowguard", |b| {
        b.iter_custom(|iters| on_two_threads(iters, &|| fg.check().unwrap().allowed))
    });
    let gov = governor::RateLimiter::direct(gov_quota());
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| on_two_threads(iters, &|| gov.check().is_ok()))
    });
    g.finish();
}

/// Heap bytes per key after inserting `KEYS` distinct live keys, for each keyed store.
fn bytes_per_key() -> (f64, f64) {
    let before = LIVE.load(Ordering::Relaxed);
    let fg = flowguard::gcra::KeyedRateLimiter::<u64>::new(fg_quota());
    for k in 0..KEYS {
        let _ = fg.check_key(&k).unwrap();
    }
    let fg_bytes = (LIVE.load(Ordering::Relaxed) - before) as f64 / KEYS as f64;
    drop(fg);
    let before = LIVE.load(Ordering::Relaxed);
    let gov = governor::RateLimiter::<u64, _, _>::keyed(gov_quota());
    for k in 0..KEYS {
        let _ = gov.check_key(&k);
    }
    let gov_bytes = (LIVE.load(Ordering::Relaxed) - before) as f64 / KEYS as f64;
    (fg_bytes, gov_bytes)
}

criterion_group!(benches, single_key, keyed_100k, contended);

fn main() {
    let Some(started) = support::run(benches) else {
        return;
    };
    println!();
    println!("ratios (flowguard / governor, lower is better):");
    for group in ["single_key", "keyed_100k", "contended"] {
        if let (Some(f), Some(g)) = (
            support::mean_ns(started, group, "flowguard"),
            support::mean_ns(started, group, "governor"),
        ) {
            println!(
                "  {group:<11} flowguard {f:>8.1} ns  governor {g:>8.1} ns  ratio {:.2}x",
                f / g
            );
        }
    }
    let (fg, gov) = bytes_per_key();
    println!("heap bytes per live key ({KEYS} u64 keys): flowguard {fg:.1}  governor {gov:.1}");
}
