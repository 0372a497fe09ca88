//! The outbound reqwest middleware: one permit per request (per attempt under the retry
//! middleware), never more requests than the limit, permits released on completion, drop and
//! abort, outcomes from the classifier (real `reqwest` connect and timeout errors on loopback),
//! and typed sheds. The dependency is the last middleware of the chain (no network) unless a
//! test needs a real transport error.
#![cfg(feature = "reqwest")]

use crate::common;

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::Scripted;
use flowguard::backoff::reqwest::RetryMiddleware;
use flowguard::backoff::{HttpRetryPolicy, RetryPolicy};
use flowguard::vegas::reqwest::AdaptiveConcurrencyMiddleware;
use flowguard::vegas::{
    AcquireError, ConfigError, Fixed, HttpClassifier, Limiter, Outcome, QueueTiming, Sample, Shed,
};
use http::Extensions;
use parking_lot::Mutex;
use reqwest::{Request, Response};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Error, Middleware, Next};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout};

const URL: &str = "http://dependency.test/";
const HOUR: Duration = Duration::from_secs(3600);

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

/// How the dependency answers one request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// A status, with `Retry-After` when given.
    Status(u16, Option<&'static str>),
    /// A status after this long.
    Slow(Duration),
    /// An error of a middleware below (no response), of this kind.
    Fails(std::io::ErrorKind),
    /// Never answers.
    Hang,
}

/// The dependency, as the last middleware: answers from a script (the last answer repeats) and
/// records, per request, the permits in flight when it arrived.
#[derive(Clone)]
struct Dependency {
    limiter: Limiter,
    script: Arc<Mutex<VecDeque<Answer>>>,
    seen: Arc<Mutex<Vec<usize>>>,
    entered: Arc<Notify>,
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Dependency {
    fn new(limiter: &Limiter, script: &[Answer]) -> Self {
        Self {
            limiter: limiter.clone(),
            script: Arc::new(Mutex::new(script.iter().copied().collect())),
            seen: Arc::default(),
            entered: Arc::default(),
            now: Arc::default(),
            most: Arc::default(),
        }
    }

    fn requests(&self) -> usize {
        self.seen.lock().len()
    }
}

#[async_trait::async_trait]
impl Middleware for Dependency {
    async fn handle(
        &self,
        _req: Request,
        _extensions: &mut Extensions,
        _next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        self.seen.lock().push(self.limiter.in_flight());
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        self.entered.notify_one();
        let answer = {
            let mut script = self.script.lock();
            match script.len() {
                0 => panic!("no answer scripted"),
                1 => script[0],
                _ => script.pop_front().unwrap(),
            }
        };
        let result = match answer {
            Answer::Status(code, retry_after) => {
                let mut response = http::Response::builder().status(code);
                if let Some(retry_after) = retry_after {
                    response = response.header("retry-after", retry_after);
                }
                Ok(Response::from(response.body("").unwrap()))
            }
            Answer::Slow(delay) => {
                tokio::time::sleep(delay).await;
                Ok(Response::from(http::Response::new("")))
            }
            Answer::Fails(kind) => Err(Error::middleware(std::io::Error::from(kind))),
            Answer::Hang => std::future::pending().await,
        };
        self.now.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

fn concurrency(limiter: &Limiter, max_wait: Duration) -> AdaptiveConcurrencyMiddleware {
    AdaptiveConcurrencyMiddleware::builder(limiter.clone())
        .max_wait(max_wait)
        .build()
        .unwrap()
}

fn client(limiter: &Limiter, max_wait: Duration, dependency: &Dependency) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(concurrency(limiter, max_wait))
        .with(dependency.clone())
        .build()
}

/// The retry middleware outside, the concurrency middleware inside.
fn retrying_client(
    limiter: &Limiter,
    max_wait: Duration,
    dependency: &Dependency,
) -> ClientWithMiddleware {
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .without_budget()
        .seed(7)
        .build()
        .unwrap();
    ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(HttpRetryPolicy::new(policy)))
        .with(concurrency(limiter, max_wait))
        .with(dependency.clone())
        .build()
}

fn shed_cause(error: &Error) -> Option<AcquireError> {
    match error {
        Error::Middleware(error) => error.downcast_ref::<Shed>().map(Shed::cause),
        Error::Reqwest(_) => None,
    }
}

#[tokio::test(start_paused = true)]
async fn the_http_classifier_drops_overload_and_transport_failures_and_ignores_other_errors() {
    use std::io::ErrorKind::{ConnectionRefused, Other, TimedOut};
    let (limiter, samples) = recorded(4, Outcome::Ignored);
    let table = [
        (Answer::Status(200, None), Outcome::Success),
        (Answer::Status(404, None), Outcome::Success),
        (Answer::Status(500, None), Outcome::Success),
        (Answer::Status(429, None), Outcome::Ignored),
        (Answer::Status(503, None), Outcome::Dropped),
        (Answer::Status(504, None), Outcome::Dropped),
        (Answer::Fails(TimedOut), Outcome::Dropped),
        (Answer::Fails(ConnectionRefused), Outcome::Dropped),
        (Answer::Fails(Other), Outcome::Ignored),
    ];
    for (answer, _) in table {
        let dependency = Dependency::new(&limiter, &[answer]);
        let result = client(&limiter, HOUR, &dependency).get(URL).send().await;
        // The answer reaches the caller unchanged.
        match (answer, result) {
            (Answer::Status(code, _), Ok(response)) => assert_eq!(response.status(), code),
            (Answer::Fails(kind), Err(Error::Middleware(error))) => {
                assert_eq!(error.downcast_ref::<std::io::Error>().unwrap().kind(), kind)
            }
            (answer, result) => panic!("{answer:?} came back as {result:?}"),
        }
    }
    let expected: Vec<Outcome> = table.iter().map(|(_, outcome)| *outcome).collect();
    assert_eq!(outcomes(&samples), expected);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test]
async fn reqwest_connect_errors_and_timeouts_are_drops() {
    let (limiter, samples) = recorded(4, Outcome::Ignored);
    let client = ClientBuilder::new(
        reqwest::Client::builder()
            .timeout(Duration::from_millis(200))
            .build()
            .unwrap(),
    )
    .with(concurrency(&limiter, HOUR))
    .build();

    // Nobody listens on a port just released.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let error = client
        .get(format!("http://{closed}/"))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error:?}");

    // A server that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let error = client
        .get(format!("http://{address}/"))
        .send()
        .await
        .unwrap_err();
    assert!(error.is_timeout(), "{error:?}");
    server.abort();

    assert_eq!(outcomes(&samples), vec![Outcome::Dropped, Outcome::Dropped]);
    assert_eq!(limiter.in_flight(), 0);
}

/// A hyper server on loopback that answers every request `200` with `Server-Timing: <value>`
/// (none when empty), taking the values in order; answers its address.
async fn reporting_server(values: &'static [&'static str]) -> std::net::SocketAddr {
    use hyper::server::conn::http1;
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let next = next.clone();
            let service = hyper::service::service_fn(move |_request| {
                let value = values[next.fetch_add(1, Ordering::SeqCst) % values.len()];
                let mut response = http::Response::builder();
                if !value.is_empty() {
                    response = response.header("server-timing", value);
                }
                async move { response.body(String::new()) }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    address
}

#[tokio::test]
async fn a_queue_the_dependency_reports_over_http_reaches_the_algorithm() {
    let algorithm = Scripted::new(4, &[]);
    let (samples, queued) = (algorithm.samples.clone(), algorithm.queued.clone());
    let limiter = Limiter::builder(algorithm).build().unwrap();
    let timing = QueueTiming::server_timing("queue").unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(
            AdaptiveConcurrencyMiddleware::builder(limiter.clone())
                .classifier(HttpClassifier::new().queue_timing(timing))
                .build()
                .unwrap(),
        )
        .build();
    let address = reporting_server(&["db;dur=1, queue;dur=12.5", "", "queue;dur=0.25"]).await;
    for _ in 0..3 {
        let response = client
            .get(format!("http://{address}/"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(outcomes(&samples), vec![Outcome::Success; 3]);
    assert_eq!(
        *queued.lock(),
        vec![Duration::from_micros(12_500), Duration::from_micros(250)]
    );
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_never_exceed_the_limit_and_all_complete() {
    let (limiter, samples) = recorded(3, Outcome::Ignored);
    let dependency = Dependency::new(&limiter, &[Answer::Slow(Duration::from_millis(10))]);
    let client = client(&limiter, HOUR, &dependency);
    let requests: Vec<_> = (0..30)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.get(URL).send().await })
        })
        .collect();
    for request in requests {
        assert_eq!(request.await.unwrap().unwrap().status(), 200);
    }
    assert_eq!(dependency.most.load(Ordering::SeqCst), 3);
    assert_eq!(dependency.requests(), 30);
    assert!(
        dependency
            .seen
            .lock()
            .iter()
            .all(|in_flight| *in_flight <= 3)
    );
    assert_eq!(outcomes(&samples), vec![Outcome::Success; 30]);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_mid_flight_releases_its_permit_with_the_limiters_unfinished_outcome() {
    for unfinished in [Outcome::Ignored, Outcome::Success, Outcome::Dropped] {
        let (limiter, samples) = recorded(2, unfinished);
        let dependency = Dependency::new(&limiter, &[Answer::Hang]);
        let client = client(&limiter, HOUR, &dependency);
        let mut request = Box::pin(client.get(URL).send());
        assert!(timeout(Duration::from_secs(1), &mut request).await.is_err());
        assert_eq!(limiter.in_flight(), 1);
        drop(request);
        assert_eq!(limiter.in_flight(), 0);
        assert_eq!(outcomes(&samples), vec![unfinished]);
    }
}

#[tokio::test(start_paused = true)]
async fn an_aborted_request_releases_its_permit() {
    let (limiter, samples) = recorded(2, Outcome::Ignored);
    let dependency = Dependency::new(&limiter, &[Answer::Hang]);
    let client = client(&limiter, HOUR, &dependency);
    let task = tokio::spawn(async move { client.get(URL).send().await });
    dependency.entered.notified().await;
    assert_eq!(limiter.in_flight(), 1);
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(outcomes(&samples), vec![Outcome::Ignored]);
}

#[tokio::test(start_paused = true)]
async fn a_full_limit_sheds_at_once_or_after_the_bound_with_a_typed_error() {
    let (limiter, samples) = recorded(1, Outcome::Ignored);
    let held = limiter.try_acquire_owned().unwrap();
    let dependency = Dependency::new(&limiter, &[Answer::Status(200, None)]);

    let start = Instant::now();
    let at_once = client(&limiter, Duration::ZERO, &dependency)
        .get(URL)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        shed_cause(&at_once),
        Some(AcquireError::Full {
            limit: 1,
            in_flight: 1
        })
    );
    assert_eq!(start.elapsed(), Duration::ZERO);

    let bounded = client(&limiter, Duration::from_millis(100), &dependency)
        .get(URL)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        shed_cause(&bounded),
        Some(AcquireError::Timeout {
            waited: Duration::from_millis(100)
        })
    );
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(dependency.requests(), 0, "shed requests are not sent");
    assert_eq!(limiter.snapshot().waiting, 0);
    held.ignore();
    assert_eq!(outcomes(&samples), vec![Outcome::Ignored]);
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_up_to_the_bound_for_a_permit() {
    let (limiter, _) = recorded(1, Outcome::Ignored);
    let dependency = Dependency::new(
        &limiter,
        &[
            Answer::Slow(Duration::from_millis(50)),
            Answer::Status(200, None),
        ],
    );
    let client = client(&limiter, Duration::from_millis(100), &dependency);
    let start = Instant::now();
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.get(URL).send().await }
    });
    dependency.entered.notified().await;
    let second = client.get(URL).send().await.unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    first.await.unwrap().unwrap();
    assert_eq!(*dependency.seen.lock(), vec![1, 1]);
}

#[tokio::test(start_paused = true)]
async fn under_the_retry_middleware_each_attempt_holds_its_own_permit_and_none_is_held_while_sleeping()
 {
    let (limiter, samples) = recorded(4, Outcome::Ignored);
    let dependency = Dependency::new(
        &limiter,
        &[Answer::Status(503, Some("1")), Answer::Status(200, None)],
    );
    let client = retrying_client(&limiter, HOUR, &dependency);
    let start = Instant::now();
    let mut request = pin!(client.get(URL).send());
    // Half-way through the server's one-second wait: the first attempt is over.
    assert!(
        timeout(Duration::from_millis(500), &mut request)
            .await
            .is_err()
    );
    assert_eq!(dependency.requests(), 1);
    assert_eq!(
        limiter.in_flight(),
        0,
        "no permit held while the retry sleeps"
    );
    assert_eq!(outcomes(&samples), vec![Outcome::Dropped]);
    let response = request.await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(start.elapsed() >= Duration::from_secs(1));
    // Two attempts, each under one permit: its own.
    assert_eq!(*dependency.seen.lock(), vec![1, 1]);
    assert_eq!(outcomes(&samples), vec![Outcome::Dropped, Outcome::Success]);
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_shed_attempt_is_not_retried() {
    let (limiter, _) = recorded(1, Outcome::Ignored);
    let held = limiter.try_acquire_owned().unwrap();
    let dependency = Dependency::new(&limiter, &[Answer::Status(200, None)]);
    let start = Instant::now();
    let error = retrying_client(&limiter, Duration::ZERO, &dependency)
        .get(URL)
        .send()
        .await
        .unwrap_err();
    assert!(shed_cause(&error).is_some(), "{error:?}");
    assert_eq!(start.elapsed(), Duration::ZERO, "no retry wait");
    assert_eq!(dependency.requests(), 0);
    held.ignore();
}

#[test]
fn a_partition_the_limiter_lacks_is_refused_when_built() {
    let limiter = Limiter::builder(Fixed::new(4).unwrap())
        .partition("batch", 0.5)
        .build()
        .unwrap();
    assert!(
        AdaptiveConcurrencyMiddleware::builder(limiter.clone())
            .partition("batch")
            .build()
            .is_ok()
    );
    let error = AdaptiveConcurrencyMiddleware::builder(limiter)
        .partition("bulk")
        .build()
        .unwrap_err();
    assert_eq!(
        error,
        ConfigError::UnknownPartition {
            name: "bulk".to_owned()
        }
    );
}
