//! Uncontended acquire + release: flowguard's limiter (RTT measured, sample fed to Vegas) against
//! tokio's semaphore, side by side in one process.
//!
//! `flowguard` / `tokio_semaphore` use `try_acquire`; the `_async` pair awaits `acquire`;
//! `flowguard_manual_clock` isolates the limiter's own cost from the RTT clock reads;
//! `tokio_semaphore_owned` is tokio's `Arc`-holding permit, the closer peer of flowguard's.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use flowguard::vegas::{LimitBounds, Limiter, ManualClock, Vegas, VegasConfig};
use tokio::sync::Semaphore;

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
        b.iter(|| {
            let permit = flowguard.try_acquire().expect("uncontended");
            black_box(&permit);
            permit.success();
        })
    });
    // The same with a clock that costs nothing: the limiter's own overhead, without the two
    // clock reads that measure each RTT.
    let no_clock = Limiter::builder(vegas())
        .clock(ManualClock::new())
        .build()
        .expect("valid limiter");
    group.bench_function("flowguard_manual_clock", |b| {
        b.iter(|| {
            let permit = no_clock.try_acquire().expect("uncontended");
            black_box(&permit);
            permit.success();
        })
    });
    let semaphore = Semaphore::new(100);
    group.bench_function("tokio_semaphore", |b| {
        b.iter(|| {
            let permit = semaphore.try_acquire().expect("uncontended");
            black_box(&permit);
            drop(permit);
        })
    });

    // tokio's owned permit holds an `Arc` like flowguard's permit does.
    let shared = std::sync::Arc::new(Semaphore::new(100));
    group.bench_function("tokio_semaphore_owned", |b| {
        b.iter(|| {
            let permit = std::sync::Arc::clone(&shared)
                .try_acquire_owned()
                .expect("uncontended");
            black_box(&permit);
            drop(permit);
        })
    });

    let flowguard = limiter();
    group.bench_function("flowguard_async", |b| {
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
    group.bench_function("tokio_semaphore_async", |b| {
        b.to_async(&runtime).iter(|| async {
            let permit = semaphore.acquire().await.expect("open");
            black_box(&permit);
            drop(permit);
        })
    });
    group.finish();
}

criterion_group!(benches, acquire_release);
criterion_main!(benches);
