//! The inbound tower middleware: 429 with headers over quota, headers on allowed responses,
//! unlimited requests without a key; when the store cannot decide, a status that says what is
//! true: 413 (final) for a cost above the burst, 503 with `Retry-After` for a full store, 500 for
//! a misconfigured store.
#![cfg(feature = "tower")]

mod support;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::gcra::layer::{KeyExtractor, QuotaLayer};
use flowguard::gcra::{KeyedLimit, KeyedRateLimiter, Quota};
use flowguard::headers::{QuotaPolicy, ServiceLimit};
use http::{HeaderMap, Request, Response, StatusCode};
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

/// The one `RateLimit` member of a response: (remaining `r`, `t` in seconds).
fn limit(headers: &HeaderMap) -> (u64, u64) {
    let limits = ServiceLimit::from_headers(headers).unwrap();
    assert_eq!(limits.len(), 1, "{headers:?}");
    (limits[0].remaining(), limits[0].reset().unwrap().as_secs())
}

/// The quota `q` of the one `RateLimit-Policy` member of a response.
fn policy_quota(headers: &HeaderMap) -> u64 {
    let policies = QuotaPolicy::from_headers(headers).unwrap();
    assert_eq!(policies.len(), 1, "{headers:?}");
    policies[0].quota()
}

/// A service behind the rate limit of `store`, keyed by `key`, counting the calls that reach it.
fn service<St: KeyedLimit + 'static>(
    store: Arc<St>,
    key: impl KeyExtractor<()>,
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone {
    ServiceBuilder::new()
        .layer(QuotaLayer::new(store, key))
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
        KeyedRateLimiter::<Vec<u8>>::builder(quota)
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(store, by_api_key, calls.clone());

    for remaining in [2, 1, 0] {
        let resp = svc.clone().oneshot(request(Some("alice"))).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["ratelimit-policy"],
            r#""default";q=3;w=2"#,
            "burst 3 at 0.5 s each: 1.5 s rounds up to 2 s"
        );
        assert_eq!(limit(resp.headers()).0, remaining);
        assert!(resp.headers().get("retry-after").is_none());
    }
    let denied = svc.clone().oneshot(request(Some("alice"))).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        denied.headers()["retry-after"],
        "1",
        "500 ms rounds up to 1 s"
    );
    assert_eq!(limit(denied.headers()), (0, 2), "1.5 s rounds up to 2 s");
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
        assert!(resp.headers().get("ratelimit-policy").is_none());
        assert!(resp.headers().get("ratelimit").is_none());
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
async fn a_full_store_answers_503_with_retry_after() {
    let clock = ManualClock::new();
    let store = Arc::new(
        KeyedRateLimiter::<String>::builder(Quota::per_minute(1).unwrap())
            .max_keys(1)
            .clock(clock)
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(store, by_api_key, calls.clone());
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

/// Keys by `x-api-key`, costs what `x-cost` says (default 1).
#[derive(Clone)]
struct CostHeader;

impl KeyExtractor<()> for CostHeader {
    fn key(&self, req: &Request<()>) -> Option<Vec<u8>> {
        by_api_key(req)
    }

    fn cost(&self, req: &Request<()>) -> u32 {
        req.headers()
            .get("x-cost")
            .map_or(1, |v| v.to_str().unwrap().parse().unwrap())
    }
}

fn costly(key: &str, cost: u32) -> Request<()> {
    Request::builder()
        .uri("/batch")
        .header("x-api-key", key)
        .header("x-cost", cost.to_string())
        .body(())
        .unwrap()
}

#[tokio::test]
async fn a_cost_above_the_burst_is_a_final_413_without_retry_after() {
    let store = Arc::new(
        KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_second(2).unwrap().with_burst(3).unwrap())
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(store, CostHeader, calls.clone());

    let too_big = svc.clone().oneshot(costly("alice", 4)).await.unwrap();
    assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        too_big.headers().get("retry-after").is_none(),
        "no wait makes a cost of 4 fit a burst of 3: nothing to retry after"
    );
    assert_eq!(
        policy_quota(too_big.headers()),
        3,
        "the largest cost that can pass"
    );
    assert!(too_big.headers().get("ratelimit").is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // The key's quota is untouched: the whole burst still fits.
    let fits = svc.clone().oneshot(costly("alice", 3)).await.unwrap();
    assert_eq!(fits.status(), StatusCode::OK);
    assert_eq!(limit(fits.headers()).0, 0);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// A Redis key of another type under the limiter's prefix: a fault of the deployment, which no
/// wait repairs, so 500 without `Retry-After` (not 503, which invites retries).
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_misconfigured_store_answers_500_without_retry_after() {
    use flowguard::gcra::redis::RedisStore;
    use flowguard::gcra::remote::RemoteRateLimiter;

    let server = support::RedisServer::start();
    server.cli(&["RPUSH", "flowguard:=alice", "not-a-tat"]);
    let store = RedisStore::builder(server.url()).connect().await.unwrap();
    let store = Arc::new(
        RemoteRateLimiter::builder(store, Quota::per_second(2).unwrap())
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(store, by_api_key, calls.clone());
    let resp = svc.clone().oneshot(request(Some("alice"))).await.unwrap();
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(resp.headers().get("retry-after").is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Other keys are decided as usual.
    let resp = svc.clone().oneshot(request(Some("bob"))).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
}
