//! The dependency's side of queue reports: `WorkerQueueLayer` serves at most its workers at once,
//! queues the rest in arrival order, reports each request's wait in `Server-Timing`, leaves
//! nothing behind when a request is dropped, and keeps the service's own answer. On a manual
//! clock, so every reported wait is exact. Behind a real axum server, read by a guard's reqwest
//! client: the guard tests' `queue_reports`.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::worker_queue::{Bounded, QueueFull, WorkerQueueLayer, WorkerQueueService};
use flowguard::vegas::{ConfigError, MAX_LIMIT, QueueTiming};
use http::{Request, Response, StatusCode};
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{Layer, Service, service_fn};

/// The metric the layer writes unless told otherwise.
fn timing() -> QueueTiming {
    QueueTiming::default()
}

/// Yields to the runtime until `done` holds (at most 1,000 times: the tasks it waits for only
/// need to be polled, never a timer).
async fn settle(done: impl Fn() -> bool) {
    for _ in 0..1_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the spawned calls did not get there");
}

/// The service behind the layer: request `id` records that it started, then answers once its
/// gate opens. Also tracks how many run at once, and the most that ever did.
#[derive(Clone, Default)]
struct Gated {
    started: Arc<Mutex<Vec<usize>>>,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

type Gate = (usize, oneshot::Receiver<()>);

impl Gated {
    fn service(
        &self,
    ) -> impl Service<Request<Gate>, Response = Response<()>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + 'static {
        let this = self.clone();
        service_fn(move |request: Request<Gate>| {
            let this = this.clone();
            async move {
                let (id, gate) = request.into_body();
                this.started.lock().push(id);
                let now = this.running.fetch_add(1, Ordering::SeqCst) + 1;
                this.most.fetch_max(now, Ordering::SeqCst);
                let _ = gate.await;
                this.running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(Response::new(()))
            }
        })
    }
}

/// Makes call `id` now (its wait is timed from here) and drives it on a task of its own: the
/// gate that lets the service answer it, and the task, whose output is the reported wait.
fn spawn_call<S>(service: &mut S, id: usize) -> (oneshot::Sender<()>, JoinHandle<Duration>)
where
    S: Service<Request<Gate>, Response = Response<()>, Error = Infallible>,
    S::Future: Send + 'static,
{
    let (open, gate) = oneshot::channel();
    let call = service.call(Request::new((id, gate)));
    let task = tokio::spawn(async move {
        let response = call.await.unwrap();
        timing()
            .read(response.headers())
            .expect("every answer reports its wait")
    });
    (open, task)
}

fn queue_on(clock: &ManualClock, workers: usize) -> WorkerQueueLayer {
    WorkerQueueLayer::builder(workers)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// A manual clock, a layer of `workers` on it, and a gated service to put behind it.
fn gated_queue(workers: usize) -> (ManualClock, WorkerQueueLayer, Gated) {
    let clock = ManualClock::new();
    let queue = queue_on(&clock, workers);
    (clock, queue, Gated::default())
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_that_waits_for_a_worker_reports_its_wait() {
    let (clock, queue, gated) = gated_queue(1);
    let mut service = queue.layer(gated.service());

    let (open_first, first) = spawn_call(&mut service, 0);
    settle(|| queue.busy() == 1).await;
    clock.advance(Duration::from_millis(3)); // the second arrives 3 ms later
    let (open_second, second) = spawn_call(&mut service, 1);
    settle(|| queue.waiting() == 1).await;
    assert_eq!(*gated.started.lock(), [0], "one worker serves one call");

    clock.advance(Duration::from_micros(4_250));
    open_first.send(()).unwrap();
    assert_eq!(first.await.unwrap(), Duration::ZERO);
    settle(|| queue.waiting() == 0 && queue.busy() == 1).await;
    clock.advance(Duration::from_millis(10)); // its service time is not part of the wait
    open_second.send(()).unwrap();
    assert_eq!(second.await.unwrap(), Duration::from_micros(4_250));
    assert_eq!((queue.busy(), queue.waiting()), (0, 0));
}

#[tokio::test(flavor = "current_thread")]
async fn never_more_calls_than_workers_and_the_queue_is_served_in_arrival_order() {
    let (clock, queue, gated) = gated_queue(2);
    let mut service = queue.layer(gated.service());
    let calls: Vec<_> = (0..6).map(|id| spawn_call(&mut service, id)).collect();
    settle(|| queue.busy() == 2 && queue.waiting() == 4).await;

    // Each call answers 1 ms after the one before it; the next in line takes its worker.
    let mut waits = Vec::new();
    for (open, task) in calls {
        clock.advance(Duration::from_millis(1));
        open.send(()).unwrap();
        waits.push(task.await.unwrap());
    }
    let ms = Duration::from_millis;
    assert_eq!(waits, [ms(0), ms(0), ms(1), ms(2), ms(3), ms(4)]);
    assert_eq!(*gated.started.lock(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(gated.most.load(Ordering::SeqCst), 2);
    assert_eq!((queue.busy(), queue.waiting()), (0, 0));
}

#[tokio::test(flavor = "current_thread")]
async fn a_request_dropped_while_it_waits_or_is_served_leaves_nothing_behind() {
    let (_clock, queue, gated) = gated_queue(1);
    let mut service = queue.layer(gated.service());

    let (_open_served, served) = spawn_call(&mut service, 0);
    let (_open_waiting, waiting) = spawn_call(&mut service, 1);
    settle(|| queue.busy() == 1 && queue.waiting() == 1).await;
    waiting.abort(); // its client went away while it queued
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert_eq!(queue.waiting(), 0);
    served.abort(); // and this one while it was served
    assert!(served.await.unwrap_err().is_cancelled());
    assert_eq!((queue.busy(), queue.waiting()), (0, 0));

    // The worker is free again, and the next call takes it at once.
    let (open, next) = spawn_call(&mut service, 2);
    open.send(()).unwrap();
    assert_eq!(next.await.unwrap(), Duration::ZERO);
    assert_eq!(
        *gated.started.lock(),
        [0, 2],
        "the dropped waiter never ran"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_report_joins_the_services_own_metrics_and_errors_pass_through() {
    let queue = queue_on(&ManualClock::new(), 1);
    let mut service = queue.layer(service_fn(|request: Request<bool>| async move {
        if *request.body() {
            return Err("the service failed");
        }
        Ok(Response::builder()
            .header("server-timing", "app;dur=7")
            .body(())
            .unwrap())
    }));
    let response = service.call(Request::new(false)).await.unwrap();
    let fields: Vec<_> = response.headers().get_all("server-timing").iter().collect();
    assert_eq!(fields.len(), 2);
    assert_eq!(fields[0], "app;dur=7");
    assert_eq!(fields[1], "flowguard-queue;dur=0.000");
    assert_eq!(timing().read(response.headers()), Some(Duration::ZERO));

    // Always ready: no `ready()` needed before a call.
    let error = service.call(Request::new(true)).await.unwrap_err();
    assert_eq!(error, "the service failed");
    assert_eq!(queue.busy(), 0, "a failed call frees its worker");
}

#[test]
fn a_worker_count_of_zero_or_above_the_largest_limit_is_refused() {
    let zero = WorkerQueueLayer::new(0).unwrap_err();
    assert_eq!(zero, ConfigError::ZeroCount { field: "workers" });
    assert_eq!(zero.to_string(), "`workers` is 0; it must be at least 1");
    let huge = WorkerQueueLayer::new(MAX_LIMIT + 1).unwrap_err();
    assert_eq!(
        huge,
        ConfigError::LimitTooLarge {
            field: "workers",
            value: MAX_LIMIT + 1,
            max: MAX_LIMIT
        }
    );
    let layer = WorkerQueueLayer::new(MAX_LIMIT).unwrap();
    assert_eq!((layer.workers(), layer.busy()), (MAX_LIMIT, 0));
    assert_eq!(layer.timing(), &QueueTiming::default());
}

#[tokio::test]
async fn the_wait_is_written_under_the_metric_named() {
    let named = QueueTiming::server_timing("queue").unwrap();
    let queue = WorkerQueueLayer::builder(1)
        .queue_timing(named.clone())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(queue.timing(), &named);
    let mut service = queue.layer(service_fn(|_request: Request<()>| async {
        Ok::<_, Infallible>(Response::new(()))
    }));
    let response = service.call(Request::new(())).await.unwrap();
    let fields: Vec<_> = response.headers().get_all("server-timing").iter().collect();
    assert_eq!(fields, ["queue;dur=0.000"]);
    assert_eq!(timing().read(response.headers()), None);
}

#[tokio::test(flavor = "current_thread")]
async fn busy_waiting_and_each_wait_are_exported() {
    let (recorder, store) = crate::support::recorder::TestRecorder::new();
    let clock = ManualClock::new();
    let queue = metrics::with_local_recorder(&recorder, || {
        WorkerQueueLayer::builder(1)
            .name("inventory")
            .clock(clock.clone())
            .build()
            .unwrap()
    });
    let value = |metric: &str| {
        store.get(&format!(
            "flowguard_worker_queue_{metric}{{queue=inventory}}"
        ))
    };
    assert_eq!((value("busy"), value("waiting")), (Some(0.0), Some(0.0)));

    let gated = Gated::default();
    let mut service = queue.layer(gated.service());
    let (open_first, first) = spawn_call(&mut service, 0);
    let (open_second, second) = spawn_call(&mut service, 1);
    settle(|| queue.busy() == 1 && queue.waiting() == 1).await;
    assert_eq!((value("busy"), value("waiting")), (Some(1.0), Some(1.0)));
    clock.advance(Duration::from_millis(5));
    open_first.send(()).unwrap();
    first.await.unwrap();
    settle(|| queue.waiting() == 0).await;
    assert_eq!((value("busy"), value("waiting")), (Some(1.0), Some(0.0)));
    open_second.send(()).unwrap();
    second.await.unwrap();
    assert_eq!((value("busy"), value("waiting")), (Some(0.0), Some(0.0)));
    // The test recorder sums a histogram: 0 s for the first call, 5 ms for the second.
    assert_eq!(value("wait_seconds"), Some(0.005));
}

/// Every clone of a service, and every service of one layer, shares the one set of workers.
#[tokio::test(flavor = "current_thread")]
async fn clones_and_services_of_one_layer_share_its_workers() {
    let (clock, queue, gated) = gated_queue(1);
    let mut one: WorkerQueueService<_> = queue.layer(gated.service());
    let mut clone = one.clone();
    let mut other = queue.layer(gated.service());
    let (open_a, a) = spawn_call(&mut one, 0);
    let (open_b, b) = spawn_call(&mut clone, 1);
    let (open_c, c) = spawn_call(&mut other, 2);
    settle(|| queue.busy() == 1 && queue.waiting() == 2).await;
    for (open, task) in [(open_a, a), (open_b, b), (open_c, c)] {
        clock.advance(Duration::from_millis(2));
        open.send(()).unwrap();
        task.await.unwrap();
    }
    assert_eq!(gated.most.load(Ordering::SeqCst), 1);
}

/// A queue of 1 worker on which at most `max_waiting` wait, a clock, and a gated service.
fn bounded_queue(max_waiting: usize) -> (ManualClock, WorkerQueueLayer<Bounded>, Gated) {
    let clock = ManualClock::new();
    let queue = WorkerQueueLayer::builder(1)
        .max_waiting(max_waiting)
        .clock(clock.clone())
        .build()
        .unwrap();
    (clock, queue, Gated::default())
}

/// Calls `service` with a request that is never let through, and expects it answered at once
/// (within a few turns of the runtime, with no worker freed meanwhile).
async fn refused<S>(service: &mut S, id: usize) -> Response<()>
where
    S: Service<Request<Gate>, Response = Response<()>, Error = Infallible>,
    S::Future: Send + 'static,
{
    let (_open, gate) = oneshot::channel();
    let call = tokio::spawn(service.call(Request::new((id, gate))));
    settle(|| call.is_finished()).await;
    call.await.unwrap().unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_is_answered_503_at_once_without_calling_the_service() {
    let (clock, queue, gated) = bounded_queue(2);
    assert_eq!(queue.max_waiting(), Some(2));
    let mut service = queue.layer(gated.service());
    let (open_served, served) = spawn_call(&mut service, 0);
    let (open_first, first) = spawn_call(&mut service, 1);
    let (open_second, second) = spawn_call(&mut service, 2);
    settle(|| queue.busy() == 1 && queue.waiting() == 2).await;

    let full = refused(&mut service, 3).await;
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(timing().read(full.headers()), None, "it waited for nothing");
    assert!(full.headers().get("retry-after").is_none());
    assert_eq!((queue.busy(), queue.waiting()), (1, 2), "it took no place");

    // The queue drains in order, and has room again once a waiter leaves it.
    clock.advance(Duration::from_millis(2));
    open_served.send(()).unwrap();
    served.await.unwrap();
    settle(|| queue.waiting() == 1).await;
    let (open_next, next) = spawn_call(&mut service, 4);
    settle(|| queue.waiting() == 2).await;
    for (open, task) in [
        (open_first, first),
        (open_second, second),
        (open_next, next),
    ] {
        open.send(()).unwrap();
        task.await.unwrap();
    }
    assert_eq!(
        *gated.started.lock(),
        [0, 1, 2, 4],
        "the refused call never ran"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_waiter_that_is_dropped_gives_its_place_back() {
    let (_clock, queue, gated) = bounded_queue(1);
    let mut service = queue.layer(gated.service());
    let (open_served, served) = spawn_call(&mut service, 0);
    let (_open_waiting, waiting) = spawn_call(&mut service, 1);
    settle(|| queue.waiting() == 1).await;
    assert_eq!(refused(&mut service, 2).await.status(), 503);
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert_eq!(queue.waiting(), 0);

    let (open_next, next) = spawn_call(&mut service, 3);
    settle(|| queue.waiting() == 1).await;
    open_served.send(()).unwrap();
    served.await.unwrap();
    open_next.send(()).unwrap();
    next.await.unwrap();
    assert_eq!(*gated.started.lock(), [0, 3]);
}

#[tokio::test(flavor = "current_thread")]
async fn no_place_to_wait_sheds_whenever_every_worker_is_busy() {
    let (_clock, queue, gated) = bounded_queue(0);
    let mut service = queue.layer(gated.service());
    let (open, served) = spawn_call(&mut service, 0);
    settle(|| queue.busy() == 1).await;
    assert_eq!(refused(&mut service, 1).await.status(), 503);
    open.send(()).unwrap();
    assert_eq!(served.await.unwrap(), Duration::ZERO);
    // The worker is free: the next call is served, not shed.
    let (open, next) = spawn_call(&mut service, 2);
    open.send(()).unwrap();
    assert_eq!(next.await.unwrap(), Duration::ZERO);
    assert_eq!(queue.waiting(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_can_answer_with_a_response_of_ones_own() {
    let queue = WorkerQueueLayer::builder(1)
        .max_waiting(3)
        .when_full(|full: &QueueFull| {
            Response::builder()
                .status(StatusCode::TOO_MANY_REQUESTS)
                .header("retry-after", "1")
                .header("x-workers", full.workers())
                .header("x-max-waiting", full.max_waiting())
                .body(())
                .unwrap()
        })
        .max_waiting(0) // set again after the answer: the answer stays
        .build()
        .unwrap();
    assert_eq!(queue.max_waiting(), Some(0));
    let gated = Gated::default();
    let mut service = queue.layer(gated.service());
    let (open, served) = spawn_call(&mut service, 0);
    settle(|| queue.busy() == 1).await;
    let full = refused(&mut service, 1).await;
    assert_eq!(full.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(full.headers()["retry-after"], "1");
    assert_eq!(full.headers()["x-workers"], "1");
    assert_eq!(full.headers()["x-max-waiting"], "0");
    open.send(()).unwrap();
    served.await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn each_request_refused_by_a_full_queue_is_counted() {
    let (recorder, store) = crate::support::recorder::TestRecorder::new();
    let queue = metrics::with_local_recorder(&recorder, || {
        WorkerQueueLayer::builder(1)
            .name("checkout")
            .max_waiting(0)
            .build()
            .unwrap()
    });
    let refused_total = || store.get("flowguard_worker_queue_refused_total{queue=checkout}");
    let gated = Gated::default();
    let mut service = queue.layer(gated.service());
    let (open, served) = spawn_call(&mut service, 0);
    settle(|| queue.busy() == 1).await;
    for id in 1..=3 {
        assert_eq!(refused(&mut service, id).await.status(), 503);
    }
    assert_eq!(refused_total(), Some(3.0));
    open.send(()).unwrap();
    served.await.unwrap();
    assert_eq!(refused_total(), Some(3.0));
}
