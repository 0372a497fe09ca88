//! The tower layers a `Guard` hands out: the outbound layer takes its permits from the guard's
//! limiter and never lets more calls run than the limit, the retry layer outside it retries with
//! the guard's policy holding one permit per attempt, and the inbound layer applies the guard's
//! quota.
#![cfg(feature = "tower")]

use crate::support::retries;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowguard::Guard;
use flowguard::backoff::{BackoffBounds, BackoffStrategy, BoxError, RetryPolicy};
use flowguard::gcra::Quota;
use flowguard::headers::LegacyReset;
use flowguard::vegas::{Fixed, Limiter, Shed};
use http::{Request, Response, StatusCode};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

/// Counts the calls running at once and the most seen.
#[derive(Default)]
struct Occupancy {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Occupancy {
    async fn call(&self, hold: Duration) {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(hold).await;
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(start_paused = true)]
async fn the_outbound_layer_never_runs_more_calls_than_the_guards_limit() {
    let guard = Guard::builder()
        .concurrency(Limiter::builder(Fixed::new(3).unwrap()).build().unwrap())
        .acquire_timeout(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let occupancy = Arc::new(Occupancy::default());
    let seen = occupancy.clone();
    let client = ServiceBuilder::new()
        .layer(guard.outbound_layer())
        .service(service_fn(move |_: Request<()>| {
            let seen = seen.clone();
            async move {
                seen.call(Duration::from_millis(10)).await;
                Ok::<_, BoxError>(Response::new(()))
            }
        }));
    let calls: Vec<_> = (0..40)
        .map(|_| tokio::spawn(client.clone().oneshot(Request::new(()))))
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    assert_eq!(occupancy.most.load(Ordering::SeqCst), 3);
    assert_eq!(guard.concurrency().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_without_a_permit_within_the_guards_wait_is_shed_unsent() {
    let guard = Guard::builder()
        .concurrency(Limiter::builder(Fixed::new(1).unwrap()).build().unwrap())
        .acquire_timeout(Duration::from_millis(5))
        .build()
        .await
        .unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let counted = sent.clone();
    let mut client = ServiceBuilder::new()
        .layer(guard.outbound_layer())
        .service(service_fn(move |_: Request<()>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, BoxError>(Response::new(())) }
        }));
    let held = guard.concurrency().try_acquire().unwrap();
    let error = client
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap_err();
    assert!(error.is::<Shed>(), "{error}");
    assert_eq!(sent.load(Ordering::SeqCst), 0);
    held.success();
}

#[tokio::test(start_paused = true)]
async fn the_retry_layer_outside_retries_503s_with_the_guards_policy_one_permit_per_attempt() {
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(20)).unwrap();
    let policy = RetryPolicy::builder()
        .backoff(BackoffStrategy::Decorrelated(bounds))
        .max_attempts(3)
        .without_budget()
        .seed(1)
        .build()
        .unwrap();
    let guard = Guard::builder()
        .concurrency(Limiter::builder(Fixed::new(1).unwrap()).build().unwrap())
        .retry(policy)
        .build()
        .await
        .unwrap();
    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = attempts.clone();
    let limiter = guard.concurrency().clone();
    let client = ServiceBuilder::new()
        .layer(guard.retry_layer())
        .layer(guard.outbound_layer())
        .service(service_fn(move |_: Request<String>| {
            // With a limit of 1, a second permit held across the wait would deadlock here.
            assert_eq!(limiter.in_flight(), 1);
            let status = match counted.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::OK,
            };
            async move {
                let mut response = Response::new(());
                *response.status_mut() = status;
                Ok::<_, BoxError>(response)
            }
        }));
    let response = client.oneshot(Request::new(String::new())).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert_eq!(guard.concurrency().in_flight(), 0);
}

/// The retry layer reads `X-RateLimit-Reset` when the builder says how: an hour to wait is past
/// the retry deadline, so it gives up at once; by default the field is not read and the 429 is
/// retried after the policy's backoff.
#[tokio::test(start_paused = true)]
async fn the_retry_layer_reads_x_ratelimit_reset_only_when_asked() {
    for (legacy, attempts_made) in [(None, 2), (Some(LegacyReset::DelaySeconds), 1)] {
        let policy = retries::two_attempts_within_30s();
        let guard = Guard::builder().retry(policy);
        let guard = match legacy {
            Some(reset) => guard.legacy_reset(reset),
            None => guard,
        };
        let guard = guard.build().await.unwrap();
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = attempts.clone();
        let client = ServiceBuilder::new()
            .layer(guard.retry_layer())
            .service(service_fn(move |_: Request<String>| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    let response = Response::builder()
                        .status(StatusCode::TOO_MANY_REQUESTS)
                        .header("x-ratelimit-reset", "3600")
                        .body(())
                        .unwrap();
                    Ok::<_, BoxError>(response)
                }
            }));
        let response = client.oneshot(Request::new(String::new())).await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(attempts.load(Ordering::SeqCst), attempts_made, "{legacy:?}");
    }
}

#[tokio::test]
async fn the_inbound_layer_applies_the_guards_quota_per_key() {
    let guard = Guard::builder()
        .quota(Quota::per_minute(1).unwrap())
        .build()
        .await
        .unwrap();
    let key = |req: &Request<()>| {
        req.headers()
            .get("x-api-key")
            .map(|v| v.as_bytes().to_vec())
    };
    let service = ServiceBuilder::new()
        .layer(guard.inbound_layer(key).unwrap())
        .service(service_fn(|_: Request<()>| async {
            // The default 429 has a JSON body: the response body is built from a `String`.
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }));
    let request = |api_key: &str| {
        Request::builder()
            .header("x-api-key", api_key)
            .body(())
            .unwrap()
    };
    let first = service.clone().oneshot(request("a")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit"], r#""default";r=0;t=60"#);
    let second = service.clone().oneshot(request("a")).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.headers()["retry-after"], "60");
    // Another key has its own quota; `admit` spends from the same one.
    assert_eq!(
        service.oneshot(request("b")).await.unwrap().status(),
        StatusCode::OK
    );
    assert!(!guard.admit(b"b").await.unwrap().allowed);
}
