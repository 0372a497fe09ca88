//! The inbound tower middleware: 429 with headers over quota, headers on allowed responses,
//! unlimited requests without a key, 503 when the store cannot decide.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowguard::gcra::layer::RateLimitLayer;
use flowguard::gcra::{KeyedRateLimiter, ManualClock, Quota};
use http::{Request, Response, StatusCode};
use tower::{Service, ServiceBuilder, ServiceExt};

fn by_api_key(req: &Request<()>) -> Option<Vec<u8>> {
    req.headers()
        .get("x-api-key")
        .map(|v| v.as_bytes().to_vec())
}

fn request(key: Option<&str>) -> Request<()> {
    let mut b = Request::builder().uri("/orders");
    if let Some(k) = key {
        b = b.header("x-api-key", k);
    }
    b.body(()).unwrap()
}

fn service(
    store: Arc<KeyedRateLimiter<Vec<u8>, ManualClock>>,
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone {
    ServiceBuilder::new()
        .layer(RateLimitLayer::new(store, by_api_key))
        .service_fn(move |_req: Request<()>| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new("ok".to_string())) }
        })
}

#[tokio::test]
async fn over_quota_requests_get_429_and_never_reach_the_service() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(2).unwrap().with_burst(3).unwrap();
    let store = Arc::new(
        KeyedRateLimiter::builder(quota)
            .clock(clock.clone())
            .build::<Vec<u8>>()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(store, calls.clone());

    for remaining in ["2", "1", "0"] {
        let resp = svc.clone().oneshot(request(Some("alice"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["ratelimit-limit"], "3");
        assert_eq!(resp.headers()["ratelimit-remaining"], remaining);
        assert!(resp.headers().get("retry-after").is_none());
    }
    let denied = svc.clone().oneshot(request(Some("alice"))).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        denied.headers()["retry-after"],
        "1",
        "500 ms rounds up to 1 s"
    );
    assert_eq!(denied.headers()["ratelimit-remaining"], "0");
    assert_eq!(
        denied.headers()["ratelimit-reset"],
        "2",
        "1.5 s rounds up to 2 s"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // Another key has its own quota; requests without a key are not limited.
    assert_eq!(
        svc.clone()
            .oneshot(request(Some("bob")))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    for _ in 0..10 {
        let resp = svc.clone().oneshot(request(None)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers().get("ratelimit-limit").is_none());
    }

    // Waiting exactly Retry-After is enough.
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        svc.clone()
            .oneshot(request(Some("alice")))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_store_that_cannot_decide_answers_503() {
    let clock = ManualClock::new();
    let store = Arc::new(
        KeyedRateLimiter::builder(Quota::per_minute(1).unwrap())
            .max_keys(1)
            .clock(clock)
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(store, calls.clone());
    assert_eq!(
        svc.clone()
            .oneshot(request(Some("a")))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let full = svc.clone().oneshot(request(Some("b"))).await.unwrap();
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(full.headers()["retry-after"], "1");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
