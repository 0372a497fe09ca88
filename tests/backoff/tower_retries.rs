//! The tower policy against an in-process service on tokio's paused clock.
#![cfg(feature = "tower")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use flowguard::backoff::tower::HttpRetry;
use flowguard::backoff::{BoxError, HttpRetryPolicy, RetryPolicy};
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt, service_fn};

/// Runs one GET through the policy against a service answering `status` with `retry_after`;
/// returns (final status, calls made, virtual time spent).
async fn run(policy: RetryPolicy, status: u16, retry_after: &'static str) -> (u16, u32, Duration) {
    run_rules(HttpRetryPolicy::new(policy), status, Some(retry_after)).await
}

/// [`run`] with any HTTP rules, and `Retry-After` only when given.
async fn run_rules(
    rules: HttpRetryPolicy,
    status: u16,
    retry_after: Option<&'static str>,
) -> (u16, u32, Duration) {
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let service = ServiceBuilder::new()
        .retry(HttpRetry::new(rules))
        .service(service_fn(move |_req: http::Request<String>| {
            counter.fetch_add(1, Ordering::Relaxed);
            async move {
                let mut res = http::Response::builder().status(status);
                if let Some(retry_after) = retry_after {
                    res = res.header("retry-after", retry_after);
                }
                Ok::<_, BoxError>(res.body(()).unwrap())
            }
        }));
    let start = Instant::now();
    let req = http::Request::get("http://svc/")
        .body(String::new())
        .unwrap();
    let res = service.oneshot(req).await.unwrap();
    (
        res.status().as_u16(),
        calls.load(Ordering::Relaxed),
        start.elapsed(),
    )
}

fn policy() -> flowguard::backoff::RetryPolicyBuilder {
    RetryPolicy::builder()
        .max_attempts(4)
        .without_budget()
        .seed(2)
}

#[tokio::test(start_paused = true)]
async fn waits_retry_after_between_attempts_until_attempts_run_out() {
    let (status, calls, spent) = run(policy().build().unwrap(), 503, "30").await;
    assert_eq!((status, calls), (503, 4));
    // Three waits, each at least the server's 30 s (the default backoff caps at 20 s).
    assert_eq!(spent, Duration::from_secs(90));
}

#[tokio::test(start_paused = true)]
async fn fails_fast_when_retry_after_is_beyond_the_deadline() {
    let p = policy().deadline(Duration::from_secs(10)).build().unwrap();
    let (status, calls, spent) = run(p, 429, "30").await;
    assert_eq!((status, calls, spent), (429, 1, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_beyond_the_bound_is_not_waited_for() {
    let (status, calls, spent) = run(policy().build().unwrap(), 429, "172800").await;
    assert_eq!((status, calls, spent), (429, 1, Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn other_statuses_are_not_retried() {
    let (status, calls, _) = run(policy().build().unwrap(), 500, "1").await;
    assert_eq!((status, calls), (500, 1));
}

#[tokio::test(start_paused = true)]
async fn a_413_without_retry_after_is_final_even_when_listed() {
    let rules = || {
        HttpRetryPolicy::new(policy().build().unwrap())
            .retry_statuses([http::StatusCode::PAYLOAD_TOO_LARGE])
    };
    let (status, calls, spent) = run_rules(rules(), 413, None).await;
    assert_eq!((status, calls, spent), (413, 1, Duration::ZERO));
    // With Retry-After the server says the condition is temporary: a listed 413 is retried.
    let (status, calls, _) = run_rules(rules(), 413, Some("1")).await;
    assert_eq!((status, calls), (413, 4));
}

/// flowguard's client against flowguard's server: a request costing more than the burst gets a
/// final answer and is sent once, instead of being retried until the attempts run out.
#[tokio::test(start_paused = true)]
async fn a_request_above_the_burst_is_sent_once() {
    use flowguard::clock::ManualClock;
    use flowguard::gcra::layer::{KeyExtractor, QuotaLayer, RequestKey};
    use flowguard::gcra::{KeyedRateLimiter, Quota};

    /// Every request costs 5 tokens of client "c".
    #[derive(Clone)]
    struct Costs5(Arc<AtomicU32>);
    impl KeyExtractor<String> for Costs5 {
        fn key<'r>(&self, _req: &'r http::Request<String>) -> Option<RequestKey<'r>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Some(RequestKey::borrowed(b"c"))
        }
        fn cost(&self, _req: &http::Request<String>) -> u32 {
            5
        }
    }

    let store = Arc::new(
        KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_second(3).unwrap())
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let checked = Arc::new(AtomicU32::new(0));
    let client = ServiceBuilder::new()
        .retry(HttpRetry::new(HttpRetryPolicy::new(
            policy().build().unwrap(),
        )))
        .layer(QuotaLayer::new(store, Costs5(checked.clone())))
        .service(service_fn(|_req: http::Request<String>| async {
            Ok::<_, BoxError>(http::Response::new(String::new()))
        }));
    let req = http::Request::get("http://svc/batch")
        .body(String::new())
        .unwrap();
    let start = Instant::now();
    let res = client.oneshot(req).await.unwrap();
    assert_eq!(res.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(checked.load(Ordering::Relaxed), 1, "sent once, not retried");
    assert_eq!(start.elapsed(), Duration::ZERO);
}
