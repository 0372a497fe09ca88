//! The inbound layer in a real axum server on loopback, called by a real reqwest client: the
//! fields on allowed and denied responses read back by flowguard's client code, keys that never
//! share (API keys, peer addresses from `ConnectInfo`), several quotas denying atomically under
//! concurrent clients, `route_layer`, the missing-key and shadow policies, a custom 429, and a
//! fail-open decision's fields.
#![cfg(all(feature = "tower", feature = "axum", feature = "reqwest"))]

use std::time::{Duration, SystemTime};

use crate::support::serve::serve;
use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use flowguard::clock::ManualClock;
use flowguard::gcra::layer::{HeaderKey, MissingKey, PeerIpKey, Policy, QuotaLayer, Refusal};
use flowguard::gcra::{ConfigError, Decision, LimitSpec, MemoryLimitSet, Quota};
use flowguard::headers::{QuotaPolicy, ServiceLimit, requested_wait};
use http::{Response, StatusCode};

/// `GET url` with `x-api-key: key` (none for `None`).
async fn get_with(client: &reqwest::Client, url: &str, key: Option<&str>) -> reqwest::Response {
    let mut request = client.get(url);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.unwrap()
}

/// The handler: the remaining quota of the decision the layer inserted (`unknown` when the
/// decision has no numbers).
async fn remaining(Extension(decision): Extension<Decision>) -> String {
    decision
        .remaining()
        .map_or("unknown".to_owned(), |left| left.to_string())
}

fn api_key() -> HeaderKey {
    HeaderKey::new("x-api-key").unwrap()
}

/// An in-memory set on a clock that stands still, so that the waits the server writes do not
/// depend on how long the requests take.
fn still(limits: &[LimitSpec]) -> Result<MemoryLimitSet<ManualClock>, ConfigError> {
    MemoryLimitSet::builder(limits.iter().map(LimitSpec::quota))
        .clock(ManualClock::new())
        .build()
}

#[tokio::test]
async fn allowed_and_denied_responses_carry_fields_the_client_reads() {
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key("per-minute", Quota::per_minute(2).unwrap()))
        .build_with(still)
        .unwrap();
    let url = serve(Router::new().route("/api", get(remaining)).layer(layer)).await + "/api";
    let client = reqwest::Client::new();

    for left in ["1", "0"] {
        let ok = get_with(&client, &url, Some("alice")).await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()["ratelimit-policy"], r#""per-minute";q=2;w=60"#);
        assert!(ok.headers().get("retry-after").is_none());
        assert_eq!(
            ok.text().await.unwrap(),
            left,
            "the decision reached the handler"
        );
    }
    let denied = get_with(&client, &url, Some("alice")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let headers = denied.headers().clone();
    assert_eq!(headers["content-type"], "application/json");
    let limits = ServiceLimit::from_headers(&headers).unwrap();
    assert_eq!((limits.len(), limits[0].remaining()), (1, 0));
    // flowguard's client code reads the wait the server wrote: 30 s, one token of 2 per minute.
    let wait = requested_wait(&headers, SystemTime::now(), None).unwrap();
    assert_eq!(wait.map(|w| w.delay()), Some(Duration::from_secs(30)));
    assert_eq!(
        denied.text().await.unwrap(),
        r#"{"error":"too_many_requests","policy":"per-minute","retry_after":30}"#
    );
    // Another key never shares alice's quota.
    assert_eq!(
        get_with(&client, &url, Some("bob")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn peer_addresses_key_requests_through_connect_info() {
    let layer = QuotaLayer::builder(PeerIpKey::new())
        .policy(Policy::per_key("per-client", Quota::per_minute(1).unwrap()))
        .build()
        .unwrap()
        .missing_key(MissingKey::Reject(StatusCode::BAD_REQUEST));
    let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
    let client = reqwest::Client::new();
    // Every request comes from 127.0.0.1, whatever its API key: one client.
    assert_eq!(
        get_with(&client, &url, Some("a")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        get_with(&client, &url, Some("b")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// Per key a wide quota, and a narrow global one; eight clients race. The global quota admits
/// exactly its burst, and each key's wide quota is spent exactly once per admitted request of
/// that key: no denied request spent from the wide quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_quotas_deny_atomically_under_concurrent_clients() {
    let day = Duration::from_secs(86_400);
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key(
            "wide",
            Quota::new(1, day).unwrap().with_burst(1000).unwrap(),
        ))
        .policy(Policy::global("narrow", Quota::new(40, day).unwrap()))
        .build_with(still)
        .unwrap();
    let set = layer.set().clone();
    let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
    let mut total = 0;
    for (key, admitted) in crate::support::serve::race_clients(&url, 8, 15).await {
        let left = set
            .limiter(0)
            .unwrap()
            .check_key_n(key.as_bytes(), 0)
            .unwrap()
            .remaining()
            .unwrap();
        assert_eq!(
            1000 - left,
            admitted,
            "{key}: wide spent only for admitted requests"
        );
        total += admitted;
    }
    assert_eq!(total, 40, "the global quota admits exactly its burst");
}

#[tokio::test]
async fn route_layer_limits_matched_routes_only() {
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key("per-minute", Quota::per_minute(1).unwrap()))
        .build_with(still)
        .unwrap();
    let app = Router::new()
        .route("/api", get(remaining))
        .route_layer(layer)
        .route("/health", get(|| async { "ok" }));
    let base = serve(app).await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let health = get_with(&client, &format!("{base}/health"), Some("k")).await;
        assert_eq!(health.status(), StatusCode::OK);
        assert!(health.headers().get("ratelimit-policy").is_none());
        let missing = get_with(&client, &format!("{base}/nowhere"), Some("k")).await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    }
    let api = format!("{base}/api");
    assert_eq!(
        get_with(&client, &api, Some("k")).await.status(),
        StatusCode::OK
    );
    assert_eq!(
        get_with(&client, &api, Some("k")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn missing_keys_shadow_mode_and_a_custom_429_over_the_wire() {
    let quota = Quota::per_minute(1).unwrap();
    let layer = || {
        QuotaLayer::builder(api_key())
            .policy(Policy::per_key("per-minute", quota))
            .build_with(still)
            .unwrap()
    };
    let app = Router::new()
        .route(
            "/reject",
            get(remaining)
                .route_layer(layer().missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))),
        )
        .route("/shadow", get(remaining).route_layer(layer().shadow(true)))
        .route(
            "/custom",
            get(remaining).route_layer(layer().refusal(|refusal: &Refusal<'_>| {
                let mut response = Response::new(axum::body::Body::from(format!(
                    "come back in {} s",
                    refusal.retry_after().unwrap().as_secs()
                )));
                *response.status_mut() = refusal.status();
                response
            })),
        );
    let base = serve(app).await;
    let client = reqwest::Client::new();

    let unauthorized = get_with(&client, &format!("{base}/reject"), None).await;
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        unauthorized.text().await.unwrap(),
        r#"{"error":"missing_key"}"#
    );

    for _ in 0..3 {
        let shadow = get_with(&client, &format!("{base}/shadow"), Some("k")).await;
        assert_eq!(shadow.status(), StatusCode::OK, "shadow mode never refuses");
        assert!(shadow.headers().get("ratelimit").is_some());
    }

    let custom = format!("{base}/custom");
    get_with(&client, &custom, Some("k")).await;
    let denied = get_with(&client, &custom, Some("k")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "60");
    assert_eq!(denied.text().await.unwrap(), "come back in 60 s");
}

/// A Redis store on a port where nothing listens, failing open: requests pass, their fields
/// list the policy without a `RateLimit` member, and the handler's decision has no numbers
/// either (the numbers are unknown).
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_fail_open_decision_advertises_no_numbers() {
    use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};
    use std::sync::Arc;

    let mut server = crate::support::RedisServer::start();
    server.kill();
    let store = crate::support::redis_builder(server.url())
        .connect_lazy()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::FailOpen)
        .build()
        .unwrap();
    let layer = QuotaLayer::new(Arc::new(limiter), api_key());
    let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let response = get_with(&client, &url, Some("k")).await;
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers();
        let policies = QuotaPolicy::from_headers(headers).unwrap();
        assert_eq!(policies.len(), 1);
        assert_eq!(policies[0].quota(), 10);
        assert!(headers.get("ratelimit").is_none(), "no made-up numbers");
        assert!(headers.get("retry-after").is_none());
        assert_eq!(
            response.text().await.unwrap(),
            "unknown",
            "no made-up numbers"
        );
    }
}
