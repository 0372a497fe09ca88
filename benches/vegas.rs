//! Uncontended acquire + release: flowguard's limiter (RTT measured, sample fed to Vegas) against
//! tokio's semaphore, side by side in one process.
//!
//! The headline pair is the async API on both sides: `flowguard` awaits `Limiter::acquire` and
//! finishes the permit with `success()`; `tokio_semaphore` awaits `Semaphore::acquire` and drops
//! the permit. The `_try` functions are the same round trip through the non-waiting calls;
//! `flowguard_try_manual_clock` isolates the limiter's own cost from the two clock reads that
//! measure each RTT; `tokio_semaphore_owned_try` is tokio's `Arc`-holding permit, the closer peer
//! of flowguard's. `tokio_semaphore_timed` is tokio's round trip plus the two clock reads that
//! time it (what measuring each call's RTT around a plain semaphore costs): the floor for any
//! limiter that measures every permit.
//!
//! At the end the bench prints the headline ratios from criterion's estimates, and from paired
//! rounds (each round times the async round trips back to back, so a burst of interference on a
//! shared machine cannot land on one side only; criterion's functions run seconds apart).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use flowguard::clock::{Clock, ManualClock, MonotonicClock};
use flowguard::vegas::{LimitBounds, Limiter, Vegas};
use tokio::sync::Semaphore;

mod support;

fn vegas() -> Vegas {
    Vegas::builder()
        .bounds(LimitBounds::new(1, 1000, 100).expect("valid bounds"))
        .build()
        .expect("valid config")
}

fn limiter() -> Limiter {
    Limiter::builder(vegas()).build().expect("valid limiter")
}

/// flowguard: await a permit, finish it with `success()` (RTT measured and fed to Vegas).
async fn flowguard_round_trip(limiter: &Limiter) {
    let permit = limiter
        .acquire(Duration::from_secs(1))
        .await
        .expect("uncontended");
    black_box(&permit);
    permit.success();
}

/// tokio: await a permit, drop it.
async fn tokio_round_trip(semaphore: &Semaphore) {
    let permit = semaphore.acquire().await.expect("open");
    black_box(&permit);
    drop(permit);
}

/// tokio, timed like a flowguard permit: a clock read once granted and once released.
async fn tokio_timed_round_trip(semaphore: &Semaphore, clock: &MonotonicClock) {
    let permit = semaphore.acquire().await.expect("open");
    let start = clock.now_nanos();
    black_box(&permit);
    drop(permit);
    black_box(clock.now_nanos().saturating_sub(start));
}

fn acquire_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("acquire_release");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");

    let flowguard = limiter();
    group.bench_function("flowguard", |b| {
        b.to_async(&runtime)
            .iter(|| flowguard_round_trip(&flowguard))
    });
    let semaphore = Semaphore::new(100);
    group.bench_function("tokio_semaphore", |b| {
        b.to_async(&runtime).iter(|| tokio_round_trip(&semaphore))
    });
    let clock = MonotonicClock::new();
    group.bench_function("tokio_semaphore_timed", |b| {
        b.to_async(&runtime)
            .iter(|| tokio_timed_round_trip(&semaphore, &clock))
    });

    let flowguard = limiter();
    group.bench_function("flowguard_try", |b| {
        b.iter(|| {
            let permit = flowguard.try_acquire().expect("uncontended");
            black_box(&permit);
            permit.success();
        })
    });
    let semaphore = Semaphore::new(100);
    group.bench_function("tokio_semaphore_try", |b| {
        b.iter(|| {
            let permit = semaphore.try_acquire().expect("uncontended");
            black_box(&permit);
            drop(permit);
        })
    });

    // The same with a clock that costs next to nothing (a `ManualClock`, read through the
    // builder's trait object): the limiter's own overhead, without the two clock reads that
    // measure each RTT.
    let no_clock = Limiter::builder(vegas())
        .clock(ManualClock::new())
        .build()
        .expect("valid limiter");
    group.bench_function("flowguard_try_manual_clock", |b| {
        b.iter(|| {
            let permit = no_clock.try_acquire().expect("uncontended");
            black_box(&permit);
            permit.success();
        })
    });
    // tokio's owned permit holds an `Arc`, like flowguard's `OwnedPermit`.
    let shared = std::sync::Arc::new(Semaphore::new(100));
    group.bench_function("tokio_semaphore_owned_try", |b| {
        b.iter(|| {
            let permit = std::sync::Arc::clone(&shared)
                .try_acquire_owned()
                .expect("uncontended");
            black_box(&permit);
            drop(permit);
        })
    });
    group.finish();
}

criterion_group!(benches, acquire_release);

/// Median over `rounds` paired rounds of: ns per async round trip of flowguard, tokio and timed
/// tokio, and the per-round ratios flowguard/tokio and flowguard/timed tokio. Each round times
/// `ITERS` round trips of each side back to back, rotating which goes first.
fn paired_async(rounds: usize) -> [f64; 5] {
    const ITERS: u32 = 100_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    let (flowguard, semaphore, clock) = (limiter(), Semaphore::new(100), MonotonicClock::new());
    let time = |side: usize| {
        runtime.block_on(async {
            let start = std::time::Instant::now();
            for _ in 0..ITERS {
                match side {
                    0 => flowguard_round_trip(&flowguard).await,
                    1 => tokio_round_trip(&semaphore).await,
                    _ => tokio_timed_round_trip(&semaphore, &clock).await,
                }
            }
            start.elapsed().as_secs_f64() * 1e9 / f64::from(ITERS)
        })
    };
    support::paired_medians(rounds, time)
}

fn main() {
    let Some(started) = support::run(benches) else {
        return;
    };
    println!();
    for (ours, theirs) in [
        ("flowguard", "tokio_semaphore"),
        ("flowguard", "tokio_semaphore_timed"),
        ("flowguard_try", "tokio_semaphore_try"),
    ] {
        let stats = [
            ("mean", support::mean_ns as fn(_, &str, &str) -> _),
            ("median", support::median_ns),
        ];
        for (statistic, estimate) in stats {
            if let (Some(f), Some(t)) = (
                estimate(started, "acquire_release", ours),
                estimate(started, "acquire_release", theirs),
            ) {
                println!(
                    "criterion {statistic:<6} {ours}/{theirs} = {:.2} ({f:.1} ns / {t:.1} ns)",
                    f / t
                );
            }
        }
    }
    const ROUNDS: usize = 41;
    let [f, t, timed, ratio, ratio_timed] = paired_async(ROUNDS);
    println!(
        "paired (median of {ROUNDS} rounds) flowguard/tokio_semaphore = {ratio:.2} \
         ({f:.1} ns / {t:.1} ns)"
    );
    println!(
        "paired (median of {ROUNDS} rounds) flowguard/tokio_semaphore_timed = {ratio_timed:.2} \
         ({f:.1} ns / {timed:.1} ns)"
    );
}
