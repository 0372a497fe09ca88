//! The cost per request of HTTP middleware, flowguard's against its peers, in one process: one
//! request at a time through `ServiceExt::ready().call()` on a trivial inner service that answers
//! `200` at once, so the middleware is all that is measured.
//!
//! Group `outbound` (adaptive concurrency on a client):
//! - `flowguard`: `vegas::layer::AdaptiveConcurrencyLayer` over a Vegas limiter: a permit per
//!   request, its RTT measured, the outcome classified from the status (`HttpClassifier`), the
//!   sample fed to Vegas.
//! - `tower_acc`: tower-acc's `ConcurrencyLimitLayer` with its Vegas (defaults): a semaphore
//!   permit, the RTT measured, the algorithm updated under a mutex.
//! - `tower_concurrency_limit`: tower's fixed `ConcurrencyLimitLayer` (limit 100): a semaphore
//!   permit and nothing measured, the floor.
//!
//! `cargo bench -p flowguard-harness --bench http_layer` prints criterion's estimates, then the
//! ratios flowguard/peer from criterion's means and medians and from paired rounds (each round
//! times the three back to back, so a burst of interference on a shared machine cannot land on
//! one side only).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use flowguard::vegas::layer::AdaptiveConcurrencyLayer;
use flowguard::vegas::{LimitBounds, Limiter, Vegas};
use http::{Request, Response};
use tower::{Layer, Service, ServiceExt};

mod support;

/// The trivial inner service: `200` at once.
#[derive(Clone, Copy)]
struct Ok200;

impl Service<Request<()>> for Ok200 {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Ready<Result<Response<()>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        ready(Ok(Response::new(())))
    }
}

fn flowguard() -> impl Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug> {
    let vegas = Vegas::builder()
        .bounds(LimitBounds::new(1, 1000, 100).expect("valid bounds"))
        .build()
        .expect("valid config");
    let limiter = Limiter::builder(vegas).build().expect("valid limiter");
    AdaptiveConcurrencyLayer::new(limiter).layer(Ok200)
}

fn tower_acc() -> impl Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug> {
    tower_acc::ConcurrencyLimitLayer::new(tower_acc::Vegas::default()).layer(Ok200)
}

fn tower_concurrency_limit()
-> impl Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug> {
    tower::limit::ConcurrencyLimitLayer::new(100).layer(Ok200)
}

/// `iters` requests one at a time through `service`; the time they took.
async fn run<S>(service: &mut S, iters: u64) -> Duration
where
    S: Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug>,
{
    let start = Instant::now();
    for _ in 0..iters {
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(Request::new(()))
            .await
            .expect("answered");
        black_box(response);
    }
    start.elapsed()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

fn outbound(c: &mut Criterion) {
    let mut group = c.benchmark_group("outbound");
    let runtime = runtime();
    let mut service = flowguard();
    group.bench_function("flowguard", |b| {
        b.iter_custom(|iters| runtime.block_on(run(&mut service, iters)))
    });
    let mut service = tower_acc();
    group.bench_function("tower_acc", |b| {
        b.iter_custom(|iters| runtime.block_on(run(&mut service, iters)))
    });
    let mut service = tower_concurrency_limit();
    group.bench_function("tower_concurrency_limit", |b| {
        b.iter_custom(|iters| runtime.block_on(run(&mut service, iters)))
    });
    group.finish();
}

criterion_group!(benches, outbound);

/// Median over `rounds` paired rounds of: ns per request of flowguard, tower-acc and tower's
/// `ConcurrencyLimit`, and the per-round ratios flowguard/tower-acc and flowguard/tower. Each
/// round times `ITERS` requests of each side back to back, rotating which goes first.
fn paired(rounds: usize) -> [f64; 5] {
    const ITERS: u64 = 100_000;
    let runtime = runtime();
    let (mut ours, mut acc, mut fixed) = (flowguard(), tower_acc(), tower_concurrency_limit());
    support::paired_medians(rounds, |side| {
        let took = runtime.block_on(async {
            match side {
                0 => run(&mut ours, ITERS).await,
                1 => run(&mut acc, ITERS).await,
                _ => run(&mut fixed, ITERS).await,
            }
        });
        took.as_secs_f64() * 1e9 / ITERS as f64
    })
}

fn main() {
    let Some(started) = support::run(benches) else {
        return;
    };
    println!();
    for theirs in ["tower_acc", "tower_concurrency_limit"] {
        let stats = [
            ("mean", support::mean_ns as fn(_, &str, &str) -> _),
            ("median", support::median_ns),
        ];
        for (statistic, estimate) in stats {
            if let (Some(f), Some(t)) = (
                estimate(started, "outbound", "flowguard"),
                estimate(started, "outbound", theirs),
            ) {
                println!(
                    "criterion {statistic:<6} outbound flowguard/{theirs} = {:.2} ({f:.1} ns / {t:.1} ns)",
                    f / t
                );
            }
        }
    }
    const ROUNDS: usize = 21;
    let [f, acc, fixed, ratio_acc, ratio_fixed] = paired(ROUNDS);
    println!(
        "paired (median of {ROUNDS} rounds) outbound flowguard/tower_acc = {ratio_acc:.2} \
         ({f:.1} ns / {acc:.1} ns)"
    );
    println!(
        "paired (median of {ROUNDS} rounds) outbound flowguard/tower_concurrency_limit = \
         {ratio_fixed:.2} ({f:.1} ns / {fixed:.1} ns)"
    );
}
