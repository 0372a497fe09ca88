//! The outbound tower layer: one permit per call, never more calls than the limit, permits
//! released on completion, cancellation and abort, outcomes from the classifier, shedding at once
//! or after a bounded wait, and one permit per attempt under the retry layer. On tokio's paused
//! clock, against in-process services.
#![cfg(feature = "tower")]

use crate::common;

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::Scripted;
use flowguard::backoff::tower::HttpRetry;
use flowguard::backoff::{BoxError, HttpRetryPolicy, RetryPolicy};
use flowguard::vegas::layer::AdaptiveConcurrencyLayer;
use flowguard::vegas::{AcquireError, ConfigError, Fixed, Limiter, Outcome, Sample, Shed};
use http::{Request, Response, StatusCode};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::{Instant, timeout};
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};

/// A limiter with a fixed `limit` that records every sample it is fed, and what unfinished
/// permits report.
fn recorded(limit: usize, unfinished: Outcome) -> (Limiter, Arc<Mutex<Vec<Sample>>>) {
    let algorithm = Scripted::new(limit, &[]);
    let samples = Arc::clone(&algorithm.samples);
    let limiter = Limiter::builder(algorithm)
        .unfinished(unfinished)
        .build()
        .unwrap();
    (limiter, samples)
}

fn outcomes(samples: &Mutex<Vec<Sample>>) -> Vec<Outcome> {
    samples.lock().iter().map(|s| s.outcome).collect()
}

fn layer(limiter: &Limiter, max_wait: Duration) -> AdaptiveConcurrencyLayer {
    AdaptiveConcurrencyLayer::builder(limiter.clone())
        .max_wait(max_wait)
        .build()
        .unwrap()
}

fn status(code: u16) -> Response<()> {
    Response::builder().status(code).body(()).unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);

/// Counts the calls inside the inner service, and the most at once.
#[derive(Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
    calls: AtomicUsize,
}

impl InFlight {
    fn enter(&self) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn concurrent_calls_never_exceed_the_limit_and_all_complete() {
    let (limiter, samples) = recorded(4, Outcome::Ignored);
    let count = Arc::new(InFlight::default());
    let inner = {
        let count = Arc::clone(&count);
        service_fn(move |_req: Request<()>| {
            let count = Arc::clone(&count);
            async move {
                count.enter();
                tokio::time::sleep(Duration::from_millis(10)).await;
                count.leave();
                Ok::<_, BoxError>(status(200))
            }
        })
    };
    let svc = layer(&limiter, HOUR).layer(inner);
    let calls: Vec<_> = (0..64)
        .map(|_| tokio::spawn(svc.clone().oneshot(Request::new(()))))
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    assert_eq!(
        count.most.load(Ordering::SeqCst),
        4,
        "the limit, and no more"
    );
    assert_eq!(count.calls.load(Ordering::SeqCst), 64);
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(outcomes(&samples), vec![Outcome::Success; 64]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_from_many_threads_never_exceed_the_limit() {
    let limiter = Limiter::builder(Fixed::new(3).unwrap()).build().unwrap();
    let count = Arc::new(InFlight::default());
    let inner = {
        let count = Arc::clone(&count);
        service_fn(move |_req: Request<()>| {
            let count = Arc::clone(&count);
            async move {
                count.enter();
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                count.leave();
                // A concrete error type: with `BoxError` written in the inner future, rustc
                // cannot prove the spawned `async` block `Send` (its erased-lifetime limitation,
                // which tower's own `Timeout` over such a service shares).
                Ok::<_, std::io::Error>(status(200))
            }
        })
    };
    let svc = layer(&limiter, HOUR).layer(inner);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    svc.clone().oneshot(Request::new(())).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(count.most.load(Ordering::SeqCst) <= 3);
    assert_eq!(count.calls.load(Ordering::SeqCst), 800);
    assert_eq!(limiter.in_flight(), 0);
}

/// An inner service that signals `entered` and then never answers.
fn stuck(
    entered: Arc<Notify>,
) -> impl Service<Request<()>, Response = Response<()>, Error = BoxError, Future: Send> + Clone {
    service_fn(move |_req: Request<()>| {
        let entered = Arc::clone(&entered);
        async move {
            entered.notify_one();
            std::future::pending::<()>().await;
            Ok::<_, BoxError>(status(200))
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_flight_releases_its_permit_with_the_limiters_unfinished_outcome() {
    for unfinished in [Outcome::Ignored, Outcome::Success, Outcome::Dropped] {
        let (limiter, samples) = recorded(2, unfinished);
        let entered = Arc::new(Notify::new());
        let mut svc = layer(&limiter, HOUR).layer(stuck(Arc::clone(&entered)));
        let mut call = Box::pin(svc.ready().await.unwrap().call(Request::new(())));
        assert!(timeout(Duration::from_secs(1), &mut call).await.is_err());
        entered.notified().await;
        assert_eq!(limiter.in_flight(), 1);
        drop(call);
        assert_eq!(limiter.in_flight(), 0);
        assert_eq!(outcomes(&samples), vec![unfinished]);
    }
}

#[tokio::test(start_paused = true)]
async fn an_aborted_call_releases_its_permit() {
    let (limiter, samples) = recorded(2, Outcome::Ignored);
    let entered = Arc::new(Notify::new());
    let svc = layer(&limiter, HOUR).layer(stuck(Arc::clone(&entered)));
    let task = tokio::spawn(svc.oneshot(Request::new(())));
    entered.notified().await;
    assert_eq!(limiter.in_flight(), 1);
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(outcomes(&samples), vec![Outcome::Ignored]);
}

#[tokio::test(start_paused = true)]
async fn a_call_aborted_while_waiting_for_a_permit_leaves_the_queue() {
    let (limiter, samples) = recorded(1, Outcome::Ignored);
    let entered = Arc::new(Notify::new());
    let svc = layer(&limiter, HOUR).layer(stuck(Arc::clone(&entered)));
    let holder = tokio::spawn(svc.clone().oneshot(Request::new(())));
    entered.notified().await;
    let waiter = tokio::spawn(svc.clone().oneshot(Request::new(())));
    while limiter.snapshot().waiting == 0 {
        tokio::task::yield_now().await;
    }
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!((limiter.in_flight(), limiter.snapshot().waiting), (1, 0));
    holder.abort();
    let _ = holder.await;
    assert_eq!(limiter.in_flight(), 0);
    // The waiter never held a permit: one sample, the holder's.
    assert_eq!(outcomes(&samples), vec![Outcome::Ignored]);
}

/// What the inner service answers for a request.
#[derive(Clone, Copy)]
enum Answer {
    Status(u16),
    Io(std::io::ErrorKind),
    Other,
    Hang,
}

#[tokio::test(start_paused = true)]
async fn the_http_classifier_drops_overload_and_transport_failures_and_ignores_other_errors() {
    let (limiter, samples) = recorded(8, Outcome::Ignored);
    let inner = service_fn(|req: Request<Answer>| async move {
        match *req.body() {
            Answer::Status(code) => Ok(status(code)),
            Answer::Io(kind) => Err(BoxError::from(std::io::Error::from(kind))),
            Answer::Other => Err(BoxError::from("the request could not be encoded")),
            Answer::Hang => std::future::pending().await,
        }
    });
    // A timeout inside the layer: a timed-out call is an error the classifier sees.
    let mut svc = ServiceBuilder::new()
        .layer(layer(&limiter, HOUR))
        .timeout(Duration::from_secs(1))
        .service(inner);
    use std::io::ErrorKind::{ConnectionRefused, ConnectionReset, PermissionDenied, TimedOut};
    let table = [
        (Answer::Status(200), Outcome::Success),
        (Answer::Status(404), Outcome::Success),
        (Answer::Status(500), Outcome::Success),
        (Answer::Status(429), Outcome::Ignored),
        (Answer::Status(503), Outcome::Dropped),
        (Answer::Status(504), Outcome::Dropped),
        (Answer::Io(ConnectionRefused), Outcome::Dropped),
        (Answer::Io(ConnectionReset), Outcome::Dropped),
        (Answer::Io(TimedOut), Outcome::Dropped),
        (Answer::Hang, Outcome::Dropped),
        (Answer::Io(PermissionDenied), Outcome::Ignored),
        (Answer::Other, Outcome::Ignored),
    ];
    for (answer, _) in table {
        let result = svc.ready().await.unwrap().call(Request::new(answer)).await;
        // The answer reaches the caller unchanged, errors still typed behind the box.
        match (answer, result) {
            (Answer::Status(code), Ok(response)) => assert_eq!(response.status(), code),
            (Answer::Io(kind), Err(error)) => {
                assert_eq!(error.downcast_ref::<std::io::Error>().unwrap().kind(), kind)
            }
            (Answer::Hang, Err(error)) => assert!(error.is::<tower::timeout::error::Elapsed>()),
            (Answer::Other, Err(error)) => assert!(!error.is::<Shed>()),
            _ => panic!("the inner service's answer was changed"),
        }
    }
    let expected: Vec<Outcome> = table.iter().map(|(_, outcome)| *outcome).collect();
    assert_eq!(outcomes(&samples), expected);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_queue_the_dependency_reports_reaches_the_algorithm_with_the_success() {
    let algorithm = Scripted::new(4, &[]);
    let (samples, queued) = (algorithm.samples.clone(), algorithm.queued.clone());
    let limiter = Limiter::builder(algorithm).build().unwrap();
    // The default classifier reads the metric `flowguard-queue`.
    let concurrency = AdaptiveConcurrencyLayer::builder(limiter.clone())
        .build()
        .unwrap();
    let mut svc = concurrency.layer(service_fn(|req: Request<(u16, &'static str)>| async move {
        let (code, server_timing) = *req.body();
        let mut response = status(code);
        if !server_timing.is_empty() {
            let value = server_timing.parse().unwrap();
            response.headers_mut().insert("server-timing", value);
        }
        Ok::<_, BoxError>(response)
    }));
    for answer in [
        (200, "app;dur=9, flowguard-queue;dur=2.5"),
        (200, ""),                       // no report: a plain success
        (200, "flowguard-queue;dur=-1"), // a malformed report: a plain success
        (200, "queue;dur=3"),            // another metric: a plain success
        (503, "flowguard-queue;dur=40"), // a drop stays a drop
        (404, "flowguard-queue;dur=0"),  // any success carries its report
    ] {
        svc.ready()
            .await
            .unwrap()
            .call(Request::new(answer))
            .await
            .unwrap();
    }
    use Outcome::{Dropped, Success};
    assert_eq!(
        outcomes(&samples),
        vec![Success, Success, Success, Success, Dropped, Success]
    );
    assert_eq!(
        *queued.lock(),
        vec![Duration::from_micros(2500), Duration::ZERO]
    );
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_custom_classifier_decides_the_outcome() {
    let (limiter, samples) = recorded(2, Outcome::Ignored);
    // A dependency that says "busy" with a header rather than a status.
    let classify = |result: &Result<Response<()>, BoxError>| match result {
        Ok(response) if response.headers().contains_key("x-busy") => Outcome::Dropped,
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::Ignored,
    };
    let concurrency = AdaptiveConcurrencyLayer::builder(limiter.clone())
        .classifier(classify)
        .build()
        .unwrap();
    let mut svc = concurrency.layer(service_fn(|busy: Request<bool>| async move {
        let mut response = status(200);
        if *busy.body() {
            response
                .headers_mut()
                .insert("x-busy", "1".parse().unwrap());
        }
        Ok::<_, BoxError>(response)
    }));
    for busy in [false, true] {
        svc.ready()
            .await
            .unwrap()
            .call(Request::new(busy))
            .await
            .unwrap();
    }
    assert_eq!(outcomes(&samples), vec![Outcome::Success, Outcome::Dropped]);
}

#[tokio::test(start_paused = true)]
async fn without_a_wait_a_full_limit_sheds_at_once_without_calling_the_inner_service() {
    let (limiter, samples) = recorded(1, Outcome::Ignored);
    let entered = Arc::new(Notify::new());
    let calls = Arc::new(AtomicUsize::new(0));
    let inner = {
        let calls = Arc::clone(&calls);
        stuck(Arc::clone(&entered)).map_request(move |req| {
            calls.fetch_add(1, Ordering::SeqCst);
            req
        })
    };
    let svc = layer(&limiter, Duration::ZERO).layer(inner);
    let _holder = tokio::spawn(svc.clone().oneshot(Request::new(())));
    entered.notified().await;
    let start = Instant::now();
    let error = svc.clone().oneshot(Request::new(())).await.unwrap_err();
    let shed = error.downcast_ref::<Shed>().expect("a typed shed");
    assert_eq!(
        shed.cause(),
        AcquireError::Full {
            limit: 1,
            in_flight: 1
        }
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the shed call was not made"
    );
    assert_eq!(limiter.snapshot().waiting, 0, "and never queued");
    assert!(outcomes(&samples).is_empty(), "a shed feeds no sample");
}

/// An inner service that answers after the number of milliseconds in the request.
fn slow()
-> impl Service<Request<u64>, Response = Response<()>, Error = BoxError, Future: Send> + Clone {
    service_fn(|req: Request<u64>| async move {
        tokio::time::sleep(Duration::from_millis(*req.body())).await;
        Ok::<_, BoxError>(status(200))
    })
}

#[tokio::test(start_paused = true)]
async fn a_call_waits_up_to_the_bound_for_a_permit() {
    let (limiter, samples) = recorded(1, Outcome::Ignored);
    let svc = layer(&limiter, Duration::from_millis(100)).layer(slow());
    let start = Instant::now();
    let first = tokio::spawn(svc.clone().oneshot(Request::new(50)));
    tokio::task::yield_now().await;
    // Queued behind the first, served once it completes, 50 ms in.
    let second = svc.clone().oneshot(Request::new(0)).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    first.await.unwrap().unwrap();
    assert_eq!(outcomes(&samples), vec![Outcome::Success, Outcome::Success]);
}

#[tokio::test(start_paused = true)]
async fn a_call_without_a_permit_within_the_bound_is_shed() {
    let (limiter, samples) = recorded(1, Outcome::Ignored);
    let svc = layer(&limiter, Duration::from_millis(100)).layer(slow());
    let start = Instant::now();
    let first = tokio::spawn(svc.clone().oneshot(Request::new(1_000)));
    tokio::task::yield_now().await;
    let error = svc.clone().oneshot(Request::new(0)).await.unwrap_err();
    assert_eq!(
        error.downcast_ref::<Shed>().map(Shed::cause),
        Some(AcquireError::Timeout {
            waited: Duration::from_millis(100)
        })
    );
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(limiter.snapshot().waiting, 0);
    first.await.unwrap().unwrap();
    assert_eq!(outcomes(&samples), vec![Outcome::Success]);
}

#[tokio::test(start_paused = true)]
async fn poll_ready_is_pending_while_waiting_and_holds_the_permit_once_ready() {
    let (limiter, samples) = recorded(1, Outcome::Success);
    let svc = layer(&limiter, HOUR).layer(slow());
    let first = tokio::spawn(svc.clone().oneshot(Request::new(100)));
    tokio::task::yield_now().await;
    let mut second = svc.clone();
    // Pending while the first call holds the only permit.
    assert!(
        timeout(Duration::from_millis(10), second.ready())
            .await
            .is_err()
    );
    assert_eq!(limiter.snapshot().waiting, 1);
    second.ready().await.unwrap();
    assert_eq!(limiter.in_flight(), 1, "the ready service holds the permit");
    first.await.unwrap().unwrap();
    // A clone starts without a permit (and, here, cannot get one at once).
    let mut clone = second.clone();
    assert!(
        timeout(Duration::from_millis(10), clone.ready())
            .await
            .is_err()
    );
    drop(clone);
    // Ready but never called: the permit is released as ignored, though this limiter reports
    // unfinished permits as successes: it measured no call.
    drop(second);
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(outcomes(&samples), vec![Outcome::Success, Outcome::Ignored]);
}

#[tokio::test(start_paused = true)]
async fn a_shed_clone_does_not_disturb_a_ready_service() {
    let (limiter, _) = recorded(1, Outcome::Ignored);
    let mut ready = layer(&limiter, Duration::ZERO).layer(slow());
    ready.ready().await.unwrap();
    let mut clone = ready.clone();
    // Ready at once, to answer its call with the shed.
    let error = clone
        .ready()
        .await
        .unwrap()
        .call(Request::new(0))
        .await
        .unwrap_err();
    assert!(error.is::<Shed>());
    ready.call(Request::new(0)).await.unwrap();
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn calls_count_against_the_named_partition() {
    let limiter = Limiter::builder(Fixed::new(4).unwrap())
        .partition("batch", 0.5)
        .build()
        .unwrap();
    let concurrency = AdaptiveConcurrencyLayer::builder(limiter.clone())
        .partition("batch")
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let svc = {
        let (limiter, seen) = (limiter.clone(), Arc::clone(&seen));
        concurrency.layer(service_fn(move |_req: Request<()>| {
            seen.lock().push(limiter.snapshot().partitions);
            async { Ok::<_, BoxError>(status(200)) }
        }))
    };
    svc.oneshot(Request::new(())).await.unwrap();
    assert_eq!(
        *seen.lock(),
        vec![vec![("default".to_owned(), 0), ("batch".to_owned(), 1)]]
    );
    let unknown = AdaptiveConcurrencyLayer::builder(limiter)
        .partition("bulk")
        .build()
        .unwrap_err();
    assert_eq!(
        unknown,
        ConfigError::UnknownPartition {
            name: "bulk".to_owned()
        }
    );
    assert!(unknown.to_string().contains("LimiterBuilder::partition"));
}

/// A dependency that answers `503` with `Retry-After: 1` first, then `200`; each attempt records
/// the permits in flight when it reaches the dependency.
fn busy_then_ok(
    limiter: &Limiter,
    seen: &Arc<Mutex<Vec<usize>>>,
) -> impl Service<Request<String>, Response = Response<()>, Error = BoxError, Future: Send> + Clone
{
    let (limiter, seen) = (limiter.clone(), Arc::clone(seen));
    service_fn(move |_req: Request<String>| {
        let attempt = {
            let mut seen = seen.lock();
            seen.push(limiter.in_flight());
            seen.len()
        };
        async move {
            Ok::<_, BoxError>(if attempt == 1 {
                Response::builder()
                    .status(503)
                    .header("retry-after", "1")
                    .body(())
                    .unwrap()
            } else {
                status(200)
            })
        }
    })
}

fn retry() -> HttpRetry {
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .without_budget()
        .seed(7)
        .build()
        .unwrap();
    HttpRetry::new(HttpRetryPolicy::new(policy))
}

#[tokio::test(start_paused = true)]
async fn under_the_retry_layer_each_attempt_holds_its_own_permit_and_none_is_held_while_sleeping() {
    let (limiter, samples) = recorded(4, Outcome::Ignored);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = ServiceBuilder::new()
        .retry(retry())
        .layer(layer(&limiter, HOUR))
        .service(busy_then_ok(&limiter, &seen));
    let start = Instant::now();
    let mut call = pin!(client.oneshot(Request::new(String::new())));
    // Half-way through the server's one-second wait: the first attempt is over.
    assert!(
        timeout(Duration::from_millis(500), &mut call)
            .await
            .is_err()
    );
    assert_eq!(seen.lock().len(), 1);
    assert_eq!(
        limiter.in_flight(),
        0,
        "no permit held while the retry sleeps"
    );
    assert_eq!(outcomes(&samples), vec![Outcome::Dropped]);
    let response = call.await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(start.elapsed() >= Duration::from_secs(1));
    // Two attempts, each under one permit: its own.
    assert_eq!(*seen.lock(), vec![1, 1]);
    assert_eq!(outcomes(&samples), vec![Outcome::Dropped, Outcome::Success]);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_shed_attempt_is_not_retried() {
    let (limiter, _) = recorded(1, Outcome::Ignored);
    let held = limiter.try_acquire_owned().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let client = ServiceBuilder::new()
        .retry(retry())
        .layer(layer(&limiter, Duration::ZERO))
        .service(busy_then_ok(&limiter, &seen));
    let start = Instant::now();
    let error = client
        .oneshot(Request::new(String::new()))
        .await
        .unwrap_err();
    assert!(error.is::<Shed>());
    assert_eq!(start.elapsed(), Duration::ZERO, "no retry wait");
    assert!(seen.lock().is_empty(), "the dependency was not called");
    held.ignore();
}

#[test]
fn the_service_is_send_and_sync_and_its_future_send() {
    fn send_sync<T: Send + Sync + 'static>(_: &T) {}
    fn send<T: Send>(_: &T) {}
    let limiter = Limiter::builder(Fixed::new(1).unwrap()).build().unwrap();
    let mut svc = AdaptiveConcurrencyLayer::new(limiter.clone()).layer(service_fn(
        |_req: Request<()>| async { Ok::<_, std::io::Error>(status(200)) },
    ));
    send_sync(&svc);
    // Called without `poll_ready`: a permit is taken at once, or the call is shed.
    let first = svc.call(Request::new(()));
    send(&first);
    assert_eq!(limiter.in_flight(), 1);
    let second = svc.call(Request::new(()));
    drop(first);
    assert_eq!(limiter.in_flight(), 0);
    let error = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(second)
        .unwrap_err();
    assert!(error.is::<Shed>());
}
