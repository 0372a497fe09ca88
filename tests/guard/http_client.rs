//! End to end on loopback, set up as `examples/axum_server.rs` and `examples/reqwest_client.rs`
//! are: an axum server limited by a `Guard`'s inbound layer (per API key, else per peer address,
//! with `HeaderKey.or(PeerIpKey)`; the layer's own JSON 429), called by the reqwest client of
//! another `Guard` (retries, concurrency permits).
#![cfg(all(feature = "axum", feature = "reqwest"))]

use crate::support::retries;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use flowguard::Guard;
use flowguard::backoff::reqwest::Attempts;
use flowguard::backoff::{BackoffBounds, BackoffStrategy, RetryPolicy};
use flowguard::gcra::Quota;
use flowguard::gcra::layer::{HeaderKey, PeerIpKey};
use flowguard::headers::LegacyReset;
use flowguard::vegas::{Fixed, Limiter, Shed};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::util::MapRequestLayer;

/// When each request reached the server.
type Arrivals = Arc<Mutex<Vec<Instant>>>;

/// Serves `GET /api` (and `GET /slow`, which answers once `release` is notified) behind a quota
/// of `quota` per API key, else per peer address, as `examples/axum_server.rs` does; answers the
/// server's address.
async fn serve(quota: Quota, arrivals: Arrivals, release: Arc<Notify>) -> SocketAddr {
    let guard = Guard::builder().quota(quota).build().await.unwrap();
    let key = HeaderKey::new("x-api-key").unwrap().or(PeerIpKey::new());
    let app = Router::new()
        .route("/api", get(|| async { "hello" }))
        .route(
            "/slow",
            get(move || async move { release.notified().await }),
        )
        .layer(guard.inbound_layer(key).unwrap())
        // Outside the quota: every request that reaches the server, denied ones included.
        .layer(MapRequestLayer::new(move |request: Request| {
            arrivals.lock().unwrap().push(Instant::now());
            request
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

fn no_arrivals() -> Arrivals {
    Arc::new(Mutex::new(Vec::new()))
}

#[tokio::test]
async fn allowed_and_denied_answers_carry_the_ietf_fields_and_the_429_a_json_body() {
    let quota = Quota::per_minute(1).unwrap();
    let server = serve(quota, no_arrivals(), Arc::default()).await;
    let url = format!("http://{server}/api");
    let http = reqwest::Client::new();
    let get = || http.get(&url).header("x-api-key", "k1").send();

    let allowed = get().await.unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
    assert_eq!(
        allowed.headers()["ratelimit-policy"],
        r#""default";q=1;w=60"#
    );
    assert_eq!(allowed.headers()["ratelimit"], r#""default";r=0;t=60"#);

    let denied = get().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "60");
    assert_eq!(denied.headers()["ratelimit"], r#""default";r=0;t=60"#);
    assert_eq!(denied.headers()["content-type"], "application/json");
    assert_eq!(
        denied.text().await.unwrap(),
        r#"{"error":"too_many_requests","policy":"default","retry_after":60}"#
    );
}

#[tokio::test]
async fn keys_never_share_and_requests_without_a_key_are_limited_by_their_address() {
    let quota = Quota::per_minute(1).unwrap();
    let server = serve(quota, no_arrivals(), Arc::default()).await;
    let url = format!("http://{server}/api");
    let http = reqwest::Client::new();
    // Another peer address: 127.0.0.2 is loopback too.
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let status = |key: Option<&'static str>| {
        let request = http.get(&url);
        let request = match key {
            Some(key) => request.header("x-api-key", key),
            None => request,
        };
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(status(Some("a")).await, StatusCode::OK);
    assert_eq!(status(Some("a")).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status(Some("b")).await, StatusCode::OK);
    // No key: the address's quota, apart from every key's.
    assert_eq!(status(None).await, StatusCode::OK);
    assert_eq!(status(None).await, StatusCode::TOO_MANY_REQUESTS);
    // Per address: another address has its own.
    let from_other = other.get(&url).send().await.unwrap();
    assert_eq!(from_other.status(), StatusCode::OK);
    // And a key sent from an address whose quota is spent has the key's.
    assert_eq!(status(Some("c")).await, StatusCode::OK);
}

#[tokio::test]
async fn the_guards_client_retries_a_429_no_earlier_than_retry_after() {
    let arrivals = no_arrivals();
    // One request per 2 s: the second call comes well within them, however slow the machine.
    let quota = Quota::new(1, Duration::from_secs(2)).unwrap();
    let server = serve(quota, arrivals.clone(), Arc::default()).await;
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(20)).unwrap();
    let retry = RetryPolicy::builder()
        .backoff(BackoffStrategy::Decorrelated(bounds))
        .max_attempts(3)
        .build()
        .unwrap();
    let guard = Guard::builder().retry(retry).build().await.unwrap();
    let client = guard.reqwest_client(reqwest::Client::new());
    let url = format!("http://{server}/api");
    let get = || client.get(&url).header("x-api-key", "k1").send();

    let first = get().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.extensions().get::<Attempts>().unwrap().count, 1);

    // Denied (Retry-After: 2, or 1 if the machine paused), then retried no earlier.
    let second = get().await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let attempts = *second.extensions().get::<Attempts>().unwrap();
    assert_eq!(attempts.count, 2);
    assert!(attempts.waited >= Duration::from_secs(1), "{attempts:?}");
    let arrivals = arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 3);
    assert!(
        arrivals[2] - arrivals[1] >= Duration::from_secs(1),
        "{arrivals:?}"
    );
    assert_eq!(guard.concurrency().in_flight(), 0);
}

#[tokio::test]
async fn a_call_without_a_free_permit_is_shed_unsent() {
    let arrivals = no_arrivals();
    let release = Arc::new(Notify::new());
    let quota = Quota::per_second(100).unwrap();
    let server = serve(quota, arrivals.clone(), release.clone()).await;
    let guard = Guard::builder()
        .concurrency(Limiter::builder(Fixed::new(1).unwrap()).build().unwrap())
        .acquire_timeout(Duration::ZERO)
        .build()
        .await
        .unwrap();
    let client = guard.reqwest_client(reqwest::Client::new());
    let url = format!("http://{server}/slow");

    let first = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(&url).send().await.map(|r| r.status()) }
    });
    for waited in 0.. {
        if !arrivals.lock().unwrap().is_empty() {
            break;
        }
        assert!(waited < 10_000, "the first call never reached the server");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let error = client.get(&url).send().await.unwrap_err();
    let reqwest_middleware::Error::Middleware(error) = error else {
        panic!("not a middleware error: {error:?}")
    };
    assert!(error.downcast_ref::<Shed>().is_some(), "{error}");
    assert_eq!(arrivals.lock().unwrap().len(), 1, "the shed call was sent");

    release.notify_one();
    assert_eq!(first.await.unwrap().unwrap(), StatusCode::OK);
    assert_eq!(guard.concurrency().in_flight(), 0);
}

/// Answers its first request `429` with `X-RateLimit-Reset: reset` and no other field saying
/// when to come back (no `Retry-After`, no `RateLimit`), and `200` to every later one; answers
/// its address and the count of requests.
async fn serve_legacy_reset(reset: String) -> (SocketAddr, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let app = Router::new().route(
        "/api",
        get(move || async move {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                let fields = [
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", &reset),
                ];
                let fields = fields.map(|(name, value)| (name, value.to_owned()));
                (StatusCode::TOO_MANY_REQUESTS, fields).into_response()
            } else {
                "hello".into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (address, requests)
}

/// The status and attempts of one call through a guard's client retrying twice at most, within
/// 30 s, reading `X-RateLimit-Reset` as `legacy` says, against a server asking to wait `reset`.
async fn call_with_reset(legacy: Option<LegacyReset>, reset: String) -> (StatusCode, Attempts) {
    let (server, requests) = serve_legacy_reset(reset).await;
    let retry = retries::two_attempts_within_30s();
    let guard = Guard::builder().retry(retry);
    let guard = match legacy {
        Some(reset) => guard.legacy_reset(reset),
        None => guard,
    };
    let client = guard
        .build()
        .await
        .unwrap()
        .reqwest_client(reqwest::Client::new());
    let response = client
        .get(format!("http://{server}/api"))
        .send()
        .await
        .unwrap();
    let attempts = *response.extensions().get::<Attempts>().unwrap();
    assert_eq!(attempts.count as usize, requests.load(Ordering::SeqCst));
    (response.status(), attempts)
}

/// By default the guard's client does not read `X-RateLimit-Reset` (an hour away: retried after
/// its own backoff anyway); asked to, it reads it the way it is told: an hour to wait is past
/// the retry deadline, so it gives up at once with the 429, and so does an hour-ahead Unix time,
/// while `3600` as a Unix time is long past and asks for no wait.
#[tokio::test]
async fn the_guards_client_reads_x_ratelimit_reset_only_when_asked() {
    let in_an_hour = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let cases = [
        (None, "3600".to_owned(), StatusCode::OK, 2),
        (
            Some(LegacyReset::DelaySeconds),
            "3600".to_owned(),
            StatusCode::TOO_MANY_REQUESTS,
            1,
        ),
        (
            Some(LegacyReset::UnixSeconds),
            in_an_hour.to_string(),
            StatusCode::TOO_MANY_REQUESTS,
            1,
        ),
        (
            Some(LegacyReset::UnixSeconds),
            "3600".to_owned(),
            StatusCode::OK,
            2,
        ),
    ];
    for (legacy, reset, status, count) in cases {
        let (got, attempts) = call_with_reset(legacy, reset.clone()).await;
        assert_eq!((got, attempts.count), (status, count), "{legacy:?} {reset}");
    }
}

/// Asked to, the guard's client waits for `X-RateLimit-Reset` before it retries.
#[tokio::test]
async fn the_guards_client_honours_x_ratelimit_reset_when_asked() {
    let (status, attempts) = call_with_reset(Some(LegacyReset::DelaySeconds), "1".into()).await;
    assert_eq!((status, attempts.count), (StatusCode::OK, 2));
    assert!(attempts.waited >= Duration::from_secs(1), "{attempts:?}");
}
