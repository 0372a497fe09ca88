//! Uncontended acquire + release: flowguard's limiter (RTT measured, sample fed to Vegas) against
//! tokio's semaphore, side by side in one process.
//!
//! The headline pair is the async API on both sides: `flowguard` awaits `Limiter::acquire` and
//! finishes the permit with `success()`; `tokio_semaphore` awaits `Semaphore::acquire` and drops
//! the permit. The `_try` functions are the same round trip through the non-waiting calls;
//! `flowguard_try_manual_clock` isolates the limiter's own cost from the two clock reads that
//! measure each RTT; `tokio_semaphore_owned_try` is tokio's `Arc`-holding permit, the closer peer
//! of flowguard's. The ratio of the headline pair is printed at the end.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group};
use flowguard::vegas::{LimitBounds, Limiter, ManualClock, Vegas, VegasConfig};
use tokio::sync::Semaphore;

mod support;

fn vegas() -> Vegas {
    Vegas::new(VegasConfig {
        bounds: LimitBounds::new(1, 1000, 100).expect("valid bounds"),
        ..VegasConfig::default()
    })
    .expect("valid config")
}

fn limiter() -> Limiter {
    Limiter::new(vegas()).expect("valid limiter")
}

fn acquire_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("acquire_release");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");

    let flowguard = limiter();
    group.bench_function("flowguard", |b| {
        b.to_async(&runtime).iter(|| async {
            let permit = flowguard
                .acquire(Duration::from_secs(1))
                .await
                .expect("uncontended");
            black_box(&permit);
            permit.success();
        })
    });
    let semaphore = Semaphore::new(100);
    group.bench_function("tokio_semaphore", |b| {
        b.to_async(&runtime).iter(|| async {
            let permit = semaphore.acquire().await.expect("open");
            black_box(&permit);
            drop(permit);
        })
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

    // The same with a clock that costs nothing: the limiter's own overhead, without the two
    // clock reads that measure each RTT.
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
    // tokio's owned permit holds an `Arc` like flowguard's permit does.
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

fn main() {
    let started = std::time::SystemTime::now();
    benches();
    Criterion::default().configure_from_args().final_summary();
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    println!();
    for (ours, theirs) in [
        ("flowguard", "tokio_semaphore"),
        ("flowguard_try", "tokio_semaphore_try"),
    ] {
        if let (Some(f), Some(t)) = (
            support::mean_ns(started, "acquire_release", ours),
            support::mean_ns(started, "acquire_release", theirs),
        ) {
            println!(
                "ratio {ours}/{theirs} = {:.2} ({f:.1} ns / {t:.1} ns)",
                f / t
            );
        }
    }
}
