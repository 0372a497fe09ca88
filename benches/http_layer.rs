//! The cost per request of HTTP middleware, flowguard's against its peers, in one process: one
//! request at a time through `ServiceExt::ready().call()` on a trivial inner service that answers
//! `200` at once, so the middleware is all that is measured.
//!
//! Group `inbound` (quotas on a server; one quota, keyed by the `x-api-key` header, 64 keys in
//! turn, in memory; the quota never denies, so every request takes the allowed path, which is
//! the common one). The quota is 1 per second with a burst of 10^9: every key stays in debt
//! (its TAT ahead of now), as a client sending above its rate does, so the in-memory store keeps
//! it. The paired rounds also run a second quota, 10^9 per second with a burst of 1,000, under
//! which a key is idle again 1 ns after each request (as a client sending below its rate is
//! between requests): flowguard's bounded store then reclaims idle keys as new ones arrive and
//! takes a reclaimed key in again on its next request, where governor's unbounded map keeps it.
//! - `flowguard`: `gcra::layer::QuotaLayer` with one per-key policy (a `MemoryLimitSet`): the key
//!   borrowed from the header, a compare-and-swap, the `Decision` inserted into the request's
//!   extensions, `RateLimit-Policy` and `RateLimit` added to the response.
//! - `tower_governor`: tower_governor's `GovernorLayer` with the same quota and a header key
//!   extractor (its keys are owned: a `String` per request), with `use_headers()` so that it
//!   adds its rate-limit fields (`x-ratelimit-limit`, `x-ratelimit-remaining`) too.
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
//! Group `worker_queue` (a dependency that reports its queue, on a server):
//! - `flowguard`: `vegas::worker_queue::WorkerQueueLayer` with 100 workers: a semaphore permit
//!   taken inside a boxed future on a clone of the inner service, the wait timed, and
//!   `Server-Timing: queue;dur=...` formatted and appended to the response.
//! - `tower_concurrency_limit`: tower's fixed `ConcurrencyLimitLayer` (limit 100): the same
//!   bound, nothing timed or reported.
//!
//! `cargo bench -p flowguard-harness --bench http_layer` prints criterion's estimates, then the
//! ratios flowguard/peer from criterion's means and medians and from paired rounds (each round
//! times the three back to back, so a burst of interference on a shared machine cannot land on
//! one side only).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::time::{Duration, Instant};

use axum::body::Body;
use criterion::{Criterion, criterion_group};
use flowguard::gcra::Quota;
use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
use flowguard::vegas::layer::AdaptiveConcurrencyLayer;
use flowguard::vegas::worker_queue::WorkerQueueLayer;
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

/// The trivial inner service of the inbound group: `200` with an empty axum body at once (axum's
/// body, since tower_governor builds its refusals in it).
#[derive(Clone, Copy)]
struct OkBody;

impl Service<Request<()>> for OkBody {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        ready(Ok(Response::new(Body::empty())))
    }
}

/// An inbound quota: `per_second` tokens per second, burst `burst`.
#[derive(Clone, Copy)]
struct InboundQuota {
    per_second: u32,
    burst: u32,
}

/// Keys stay in debt: 1 per second, burst 10^9 (never denies within a bench).
const IN_DEBT: InboundQuota = InboundQuota {
    per_second: 1,
    burst: 1_000_000_000,
};

/// Keys are idle again 1 ns after each request: 10^9 per second, burst 1,000.
const IDLE: InboundQuota = InboundQuota {
    per_second: 1_000_000_000,
    burst: 1_000,
};

/// Keys sent in turn.
const KEYS: usize = 64;

type Inbound = dyn FnMut() -> Request<()>;

/// Requests with `x-api-key: key-0` ... `key-63` in turn.
fn requests() -> Box<Inbound> {
    let keys: Vec<http::HeaderValue> = (0..KEYS)
        .map(|i| format!("key-{i}").parse().expect("a header value"))
        .collect();
    let mut i = 0;
    Box::new(move || {
        i = (i + 1) % KEYS;
        let mut request = Request::new(());
        request.headers_mut().insert("x-api-key", keys[i].clone());
        request
    })
}

fn inbound_flowguard(
    q: InboundQuota,
) -> impl Service<Request<()>, Response = Response<Body>, Error: std::fmt::Debug> {
    let quota = Quota::per_second(q.per_second)
        .and_then(|quota| quota.with_burst(q.burst))
        .expect("a valid quota");
    QuotaLayer::builder(HeaderKey::new("x-api-key").expect("a header name"))
        .policy(Policy::per_key("per-key", quota))
        .build()
        .expect("a valid layer")
        .layer(OkBody)
}

/// tower_governor keyed by the `x-api-key` header, as its users write it.
#[derive(Clone, Copy)]
struct ApiKey;

impl tower_governor::key_extractor::KeyExtractor for ApiKey {
    type Key = String;

    fn extract<T>(&self, req: &Request<T>) -> Result<String, tower_governor::GovernorError> {
        req.headers()
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or(tower_governor::GovernorError::UnableToExtractKey)
    }
}

fn inbound_tower_governor(
    q: InboundQuota,
) -> impl Service<Request<()>, Response = Response<Body>, Error: std::fmt::Debug> {
    let config = tower_governor::governor::GovernorConfigBuilder::default()
        .key_extractor(ApiKey)
        .per_nanosecond(1_000_000_000 / u64::from(q.per_second))
        .burst_size(q.burst)
        .use_headers()
        .finish()
        .expect("a valid config");
    tower_governor::GovernorLayer::new(config).layer(OkBody)
}

/// `iters` requests from `next` one at a time through `service`; the time they took.
async fn run_inbound<S>(service: &mut S, next: &mut Inbound, iters: u64) -> Duration
where
    S: Service<Request<()>, Response = Response<Body>, Error: std::fmt::Debug>,
{
    let start = Instant::now();
    for _ in 0..iters {
        let response = service
            .ready()
            .await
            .expect("ready")
            .call(next())
            .await
            .expect("answered");
        debug_assert_eq!(response.status(), http::StatusCode::OK);
        black_box(response);
    }
    start.elapsed()
}

fn inbound(c: &mut Criterion) {
    let mut group = c.benchmark_group("inbound");
    let runtime = runtime();
    let (mut service, mut next) = (inbound_flowguard(IN_DEBT), requests());
    group.bench_function("flowguard", |b| {
        b.iter_custom(|iters| runtime.block_on(run_inbound(&mut service, &mut next, iters)))
    });
    let (mut service, mut next) = (inbound_tower_governor(IN_DEBT), requests());
    group.bench_function("tower_governor", |b| {
        b.iter_custom(|iters| runtime.block_on(run_inbound(&mut service, &mut next, iters)))
    });
    group.finish();
}

/// Median over `rounds` paired rounds of: ns per request of flowguard, tower_governor and the
/// bare inner service (the floor), and the per-round ratios flowguard/tower_governor and
/// flowguard/bare.
fn paired_inbound(rounds: usize, quota: InboundQuota) -> [f64; 5] {
    const ITERS: u64 = 100_000;
    let runtime = runtime();
    let (mut ours, mut theirs, mut bare) = (
        inbound_flowguard(quota),
        inbound_tower_governor(quota),
        OkBody,
    );
    let mut next = requests();
    support::paired_medians(rounds, |side| {
        let took = runtime.block_on(async {
            match side {
                0 => run_inbound(&mut ours, &mut next, ITERS).await,
                1 => run_inbound(&mut theirs, &mut next, ITERS).await,
                _ => run_inbound(&mut bare, &mut next, ITERS).await,
            }
        });
        took.as_secs_f64() * 1e9 / ITERS as f64
    })
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

/// `WorkerQueueLayer` with 100 workers, reporting under its default metric.
fn worker_queue() -> impl Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug> {
    WorkerQueueLayer::new(100)
        .expect("valid workers")
        .layer(Ok200)
}

fn worker_queue_group(c: &mut Criterion) {
    let mut group = c.benchmark_group("worker_queue");
    let runtime = runtime();
    let mut service = worker_queue();
    group.bench_function("flowguard", |b| {
        b.iter_custom(|iters| runtime.block_on(run(&mut service, iters)))
    });
    let mut service = tower_concurrency_limit();
    group.bench_function("tower_concurrency_limit", |b| {
        b.iter_custom(|iters| runtime.block_on(run(&mut service, iters)))
    });
    group.finish();
}

criterion_group!(benches, inbound, outbound, worker_queue_group);

/// Median over `rounds` paired rounds of three services: ns per request of each, and the
/// per-round ratios of the first to the second and to the third. Each round times `ITERS`
/// requests of each back to back, rotating which goes first.
fn paired<A, B, C>(rounds: usize, mut first: A, mut second: B, mut third: C) -> [f64; 5]
where
    A: Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug>,
    B: Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug>,
    C: Service<Request<()>, Response = Response<()>, Error: std::fmt::Debug>,
{
    const ITERS: u64 = 100_000;
    let runtime = runtime();
    support::paired_medians(rounds, |side| {
        let took = runtime.block_on(async {
            match side {
                0 => run(&mut first, ITERS).await,
                1 => run(&mut second, ITERS).await,
                _ => run(&mut third, ITERS).await,
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
    for (group, theirs) in [
        ("inbound", "tower_governor"),
        ("outbound", "tower_acc"),
        ("outbound", "tower_concurrency_limit"),
        ("worker_queue", "tower_concurrency_limit"),
    ] {
        let stats = [
            ("mean", support::mean_ns as fn(_, &str, &str) -> _),
            ("median", support::median_ns),
        ];
        for (statistic, estimate) in stats {
            if let (Some(f), Some(t)) = (
                estimate(started, group, "flowguard"),
                estimate(started, group, theirs),
            ) {
                println!(
                    "criterion {statistic:<6} {group} flowguard/{theirs} = {:.2} ({f:.1} ns / {t:.1} ns)",
                    f / t
                );
            }
        }
    }
    const ROUNDS: usize = 21;
    let filter = support::filter();
    let wants = |group: &str| {
        filter
            .as_deref()
            .is_none_or(|f| group.contains(f) || f.contains(group))
    };
    if wants("inbound") {
        for (keys, quota) in [("in debt", IN_DEBT), ("idle between requests", IDLE)] {
            let [f, gov, bare, ratio_gov, _] = paired_inbound(ROUNDS, quota);
            println!(
                "paired (median of {ROUNDS} rounds) inbound, keys {keys}: flowguard/tower_governor = \
                 {ratio_gov:.2} ({f:.1} ns / {gov:.1} ns; the bare service: {bare:.1} ns)"
            );
        }
    }
    if wants("outbound") {
        let [f, acc, fixed, ratio_acc, ratio_fixed] =
            paired(ROUNDS, flowguard(), tower_acc(), tower_concurrency_limit());
        println!(
            "paired (median of {ROUNDS} rounds) outbound flowguard/tower_acc = {ratio_acc:.2} \
             ({f:.1} ns / {acc:.1} ns)"
        );
        println!(
            "paired (median of {ROUNDS} rounds) outbound flowguard/tower_concurrency_limit = \
             {ratio_fixed:.2} ({f:.1} ns / {fixed:.1} ns)"
        );
    }
    if wants("worker_queue") {
        let [f, fixed, bare, ratio_fixed, _] =
            paired(ROUNDS, worker_queue(), tower_concurrency_limit(), Ok200);
        println!(
            "paired (median of {ROUNDS} rounds) worker_queue flowguard/tower_concurrency_limit = \
             {ratio_fixed:.2} ({f:.1} ns / {fixed:.1} ns; the bare service: {bare:.1} ns)"
        );
    }
}
