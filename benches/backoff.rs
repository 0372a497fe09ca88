//! Backoff hot paths, with peers side by side:
//! - retry budget: flowguard `RetryBudget` vs tower's `TpsBudget` (feature `tower`),
//!   single-threaded and with 2 threads contending;
//! - one delay from each backoff sequence.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use flowguard::backoff::{
    BackoffBounds, CapAwareJitter, DecorrelatedJitter, Exponential, FullJitter, RetryBudget,
};

fn budgets(c: &mut Criterion) {
    let mut g = c.benchmark_group("retry_budget/deposit+withdraw");
    let ours = Arc::new(RetryBudget::new(Duration::from_secs(10), 10, 0.2).unwrap());
    g.bench_function("flowguard_RetryBudget", |b| {
        b.iter(|| {
            let now = Instant::now();
            ours.deposit(now);
            black_box(ours.try_withdraw(now))
        })
    });
    {
        use tower::retry::budget::{Budget, TpsBudget};
        let tower = Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2));
        g.bench_function("tower_TpsBudget", |b| {
            b.iter(|| {
                tower.deposit();
                black_box(tower.withdraw())
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("retry_budget/2_threads");
    g.bench_function("flowguard_RetryBudget", |b| {
        b.iter_custom(|iters| {
            contended(iters, &ours, |b| {
                let now = Instant::now();
                b.deposit(now);
                b.try_withdraw(now)
            })
        })
    });
    {
        use tower::retry::budget::{Budget, TpsBudget};
        let tower = Arc::new(TpsBudget::new(Duration::from_secs(10), 10, 0.2));
        g.bench_function("tower_TpsBudget", |b| {
            b.iter_custom(|iters| {
                contended(iters, &tower, |b| {
                    b.deposit();
                    b.withdraw()
                })
            })
        });
    }
    g.finish();
}

/// Mean time per operation while two threads run `op` on the same budget.
fn contended<B: Send + Sync + 'static>(
    iters: u64,
    budget: &Arc<B>,
    op: fn(&B) -> bool,
) -> Duration {
    let start = Instant::now();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let budget = budget.clone();
            std::thread::spawn(move || {
                for _ in 0..iters {
                    black_box(op(&budget));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    start.elapsed() / 2
}

fn sequences(c: &mut Criterion) {
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_secs(1)).unwrap();
    let mut g = c.benchmark_group("backoff/next");
    let mut exp = Exponential::new(bounds);
    g.bench_function("exponential", |b| b.iter(|| black_box(exp.next())));
    let mut full = FullJitter::new(bounds, 1);
    g.bench_function("full_jitter", |b| b.iter(|| black_box(full.next())));
    let mut dec = DecorrelatedJitter::new(bounds, 1);
    g.bench_function("decorrelated_jitter", |b| b.iter(|| black_box(dec.next())));
    let mut cap = CapAwareJitter::new(bounds, 1);
    g.bench_function("cap_aware_jitter", |b| b.iter(|| black_box(cap.next())));
    g.finish();
}

criterion_group!(benches, budgets, sequences);
criterion_main!(benches);
