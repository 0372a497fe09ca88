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
    let calls = Arc::new(AtomicU32::new(0));
    let counter = calls.clone();
    let service = ServiceBuilder::new()
        .retry(HttpRetry::new(HttpRetryPolicy::new(policy)))
        .service(service_fn(move |_req: http::Request<String>| {
            counter.fetch_add(1, Ordering::Relaxed);
            async move {
                let res = http::Response::builder()
                    .status(status)
                    .header("retry-after", retry_after)
                    .body(())
                    .unwrap();
                Ok::<_, BoxError>(res)
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
