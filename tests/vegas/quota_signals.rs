//! A `429` is a quota, not a concurrency signal: against a real local server that answers `429`
//! with `Retry-After`, the default classifier leaves the limit alone, a classifier given to the
//! `GuardBuilder` reaches both the tower layer and the reqwest middleware, and a shed call is
//! told from a failed one with `Shed::of`, whatever error type carries it.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use flowguard::Guard;
use flowguard::backoff::BoxError;
use flowguard::vegas::{HttpClassifier, LimitBounds, Limiter, Outcome, Shed, Vegas};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

/// A server whose `/quota` answers `429 Too Many Requests` with `Retry-After: 1` at once, whose
/// `/busy` answers `503` at once, and whose `/held` answers `200` once the test releases it.
async fn server(held: Arc<Semaphore>) -> String {
    let app = Router::new()
        .route(
            "/quota",
            get(|| async { (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "") }),
        )
        .route("/busy", get(|| async { StatusCode::SERVICE_UNAVAILABLE }))
        .route(
            "/held",
            get(move || {
                let held = held.clone();
                async move {
                    let _released = held.acquire().await.unwrap();
                    "ok"
                }
            }),
        );
    crate::support::serve::serve(app).await
}

/// A Vegas limiter starting at 10, as a new user's guard would have.
fn limiter() -> Limiter {
    let vegas = Vegas::builder()
        .bounds(LimitBounds::new(1, 1000, 10).unwrap())
        .build()
        .unwrap();
    Limiter::builder(vegas).build().unwrap()
}

/// 100 calls to `path` through the guard's reqwest client, 10 at a time.
async fn burst(guard: &Guard, base: &str, path: &str) -> Vec<reqwest_middleware::Result<u16>> {
    let client = guard.reqwest_client(reqwest::Client::new());
    let mut results = Vec::new();
    for _ in 0..10 {
        let calls: Vec<_> = (0..10)
            .map(|_| {
                let (client, url) = (client.clone(), format!("{base}{path}"));
                tokio::spawn(async move {
                    let response = client.get(url).send().await?;
                    Ok(response.status().as_u16())
                })
            })
            .collect();
        for call in calls {
            results.push(call.await.unwrap());
        }
    }
    results
}

#[tokio::test]
async fn a_burst_of_429s_leaves_the_limit_and_sheds_nothing() {
    let base = server(Arc::new(Semaphore::new(0))).await;
    let guard = Guard::builder()
        .concurrency(limiter())
        .build()
        .await
        .unwrap();
    let results = burst(&guard, &base, "/quota").await;
    assert!(results.iter().all(|r| matches!(r, Ok(429))), "{results:?}");
    assert_eq!(
        guard.concurrency().limit(),
        10,
        "a quota answer is no congestion"
    );
    // A 503 still is. The cuts leave calls waiting for a permit: a guard that waits long
    // enough for them (a busy machine answers slowly) keeps the test about the limit.
    let guard = Guard::builder()
        .concurrency(limiter())
        .acquire_timeout(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let results = burst(&guard, &base, "/busy").await;
    assert!(results.iter().all(|r| matches!(r, Ok(503))), "{results:?}");
    assert!(guard.concurrency().limit() < 10);
}

#[tokio::test]
async fn a_classifier_given_to_the_guard_reaches_the_middleware_and_the_layer() {
    let base = server(Arc::new(Semaphore::new(0))).await;
    // A dependency whose 429 means "too busy": the caller says so.
    let classifier = HttpClassifier::with_statuses(|status| match status {
        http::StatusCode::TOO_MANY_REQUESTS => Outcome::Dropped,
        other => HttpClassifier::status(other),
    });
    let guard = Guard::builder()
        .concurrency(limiter())
        .outbound_classifier(classifier.clone())
        .build()
        .await
        .unwrap();
    burst(&guard, &base, "/quota").await;
    assert!(guard.concurrency().limit() < 10, "the middleware used it");

    let guard = Guard::builder()
        .concurrency(limiter())
        .outbound_classifier(classifier)
        .build()
        .await
        .unwrap();
    let mut service = guard.outbound_layer().layer(reqwest::Client::new());
    for _ in 0..20 {
        let request = reqwest::Request::new(
            reqwest::Method::GET,
            format!("{base}/quota").parse().unwrap(),
        );
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(response.status(), 429);
    }
    assert!(guard.concurrency().limit() < 10, "the layer used it");
}

#[tokio::test]
async fn a_shed_call_is_told_from_a_failed_one_through_either_error_type() {
    let held = Arc::new(Semaphore::new(0));
    let base = server(held.clone()).await;
    let guard = Guard::builder()
        .concurrency(
            Limiter::builder(flowguard::vegas::Fixed::new(1).unwrap())
                .build()
                .unwrap(),
        )
        .acquire_timeout(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let client = guard.reqwest_client(reqwest::Client::new());
    let first = tokio::spawn({
        let (client, url) = (client.clone(), format!("{base}/held"));
        async move { client.get(url).send().await }
    });
    // The first request holds the only permit once its task has run (a bounded wait: the
    // server holds the answer, so the permit stays taken).
    for _ in 0..100_000 {
        if guard.concurrency().in_flight() == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        guard.concurrency().in_flight(),
        1,
        "the first request holds the permit"
    );
    // The reqwest middleware's error.
    let shed = client.get(format!("{base}/held")).send().await.unwrap_err();
    assert!(Shed::of(&shed).is_some(), "{shed:?}");
    // The tower layer's error.
    let mut service = guard.outbound_layer().layer(reqwest::Client::new());
    let request = reqwest::Request::new(
        reqwest::Method::GET,
        format!("{base}/held").parse().unwrap(),
    );
    let shed: BoxError = service
        .ready()
        .await
        .unwrap()
        .call(request)
        .await
        .unwrap_err();
    assert!(Shed::of(&shed).is_some(), "{shed:?}");
    held.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);

    // A call that failed is no shed: a refused connection, through both.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/", listener.local_addr().unwrap())
    };
    let failed = client.get(&closed).send().await.unwrap_err();
    assert!(Shed::of(&failed).is_none(), "{failed:?}");
    let request = reqwest::Request::new(reqwest::Method::GET, closed.parse().unwrap());
    let failed = service
        .ready()
        .await
        .unwrap()
        .call(request)
        .await
        .unwrap_err();
    assert!(Shed::of(&failed).is_none(), "{failed:?}");
}
