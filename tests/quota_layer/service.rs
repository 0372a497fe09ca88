//! The inbound tower middleware, request by request: 429 with `Retry-After`, a JSON body and the
//! rate-limit fields over quota; the fields on allowed responses; several policies decided
//! together (a denial spends nothing); tiers; the missing-key policies; shadow mode; the
//! decision in the request's extensions; custom refusals; metrics; and when the store cannot
//! decide, a status that says what is true: 413 (final) for a cost above the burst, 503 with
//! `Retry-After` for a full store, 500 for a misconfigured store.
#![cfg(feature = "tower")]

use crate::support::recorder;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::gcra::layer::{
    HeaderKey, KeyExtractor, MissingKey, Or, PeerIpKey, Policy, QuotaLayer, Refusal, RefusalKind,
};
use flowguard::gcra::{
    ConfigError, Decision, KeyedLimit, KeyedRateLimiter, LimitSpec, MemoryLimitSet, Quota,
};
use flowguard::headers::{HeaderStyle, QuotaPolicy, ServiceLimit};
use http::{HeaderMap, Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt};

fn request(key: Option<&str>) -> Request<()> {
    let mut b = Request::builder().uri("/orders");
    if let Some(k) = key {
        b = b.header("x-api-key", k);
    }
    b.body(()).unwrap()
}

fn api_key() -> HeaderKey {
    HeaderKey::new("x-api-key").unwrap()
}

/// An in-memory set on `clock` for a layer's limits.
fn memory(
    clock: &ManualClock,
) -> impl FnOnce(&[LimitSpec]) -> Result<MemoryLimitSet<ManualClock>, ConfigError> {
    let clock = clock.clone();
    move |limits| {
        MemoryLimitSet::builder(limits.iter().map(LimitSpec::quota))
            .clock(clock)
            .build()
    }
}

/// The `RateLimit` members of a response: (policy, remaining `r`, `t` in seconds).
fn limits(headers: &HeaderMap) -> Vec<(String, u64, u64)> {
    ServiceLimit::from_headers(headers)
        .unwrap()
        .iter()
        .map(|l| {
            (
                l.policy().to_string(),
                l.remaining(),
                l.reset().unwrap().as_secs(),
            )
        })
        .collect()
}

/// The `RateLimit-Policy` members of a response: (policy, `q`).
fn policies(headers: &HeaderMap) -> Vec<(String, u64)> {
    QuotaPolicy::from_headers(headers)
        .unwrap()
        .iter()
        .map(|p| (p.name().to_string(), p.quota()))
        .collect()
}

/// The service behind the layer: counts its calls and answers with the remaining quota of the
/// decision the layer put in the request's extensions (`-` without one, `unknown` for one
/// without numbers).
#[derive(Clone)]
struct Counted(Arc<AtomicUsize>);

impl Service<Request<()>> for Counted {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<()>) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        let remaining = req
            .extensions()
            .get::<Decision>()
            .map_or("-".to_string(), |d| {
                d.remaining()
                    .map_or("unknown".to_string(), |left| left.to_string())
            });
        std::future::ready(Ok(Response::new(remaining)))
    }
}

/// [`Counted`] behind `layer`.
fn service<L: Layer<Counted>>(layer: L, calls: &Arc<AtomicUsize>) -> L::Service {
    layer.layer(Counted(calls.clone()))
}

async fn send<S>(svc: &S, key: Option<&str>) -> Response<String>
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone,
{
    svc.clone().oneshot(request(key)).await.unwrap()
}

#[tokio::test]
async fn over_quota_requests_get_429_with_a_json_body_and_never_reach_the_service() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(2).unwrap().with_burst(3).unwrap();
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key("per-key", quota))
        .build_with(memory(&clock))
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(layer, &calls);

    for remaining in [2, 1, 0] {
        let resp = send(&svc, Some("alice")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()["ratelimit-policy"],
            r#""per-key";q=3;w=2"#,
            "burst 3 at 0.5 s each: 1.5 s rounds up to 2 s"
        );
        assert_eq!(limits(resp.headers())[0].1, remaining);
        assert_eq!(
            resp.body(),
            &remaining.to_string(),
            "the decision reaches the handler"
        );
        assert!(resp.headers().get("retry-after").is_none());
    }
    let denied = send(&svc, Some("alice")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        denied.headers()["retry-after"],
        "1",
        "500 ms rounds up to 1 s"
    );
    assert_eq!(denied.headers()["content-type"], "application/json");
    assert_eq!(
        denied.body(),
        r#"{"error":"too_many_requests","policy":"per-key","retry_after":1}"#
    );
    assert_eq!(limits(denied.headers()), vec![("per-key".into(), 0, 2)]);
    assert_eq!(calls.load(Ordering::SeqCst), 3);

    // Another key has its own quota.
    assert_eq!(send(&svc, Some("bob")).await.status(), StatusCode::OK);
    // Waiting exactly Retry-After is enough.
    clock.advance(Duration::from_secs(1));
    assert_eq!(send(&svc, Some("alice")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn requests_without_a_key_share_one_quota_by_default() {
    let clock = ManualClock::new();
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key("per-key", Quota::per_minute(2).unwrap()))
        .build_with(memory(&clock))
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(layer, &calls);
    assert_eq!(send(&svc, None).await.status(), StatusCode::OK);
    // An empty key is no key: the same anonymous quota.
    assert_eq!(send(&svc, Some("")).await.status(), StatusCode::OK);
    let third = send(&svc, None).await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limits(third.headers()), vec![("per-key".into(), 0, 60)]);
    // Keyed clients are not affected.
    assert_eq!(send(&svc, Some("alice")).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn requests_without_a_key_can_be_rejected_or_let_through() {
    let quota = Quota::per_minute(1).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = || {
        QuotaLayer::builder(api_key())
            .policy(Policy::per_key("per-key", quota))
            .build()
            .unwrap()
    };
    let rejecting = service(
        layer().missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED)),
        &calls,
    );
    let refused = send(&rejecting, None).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(refused.body(), r#"{"error":"missing_key"}"#);
    assert!(refused.headers().get("ratelimit-policy").is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // A status that is not a client error is answered as 400.
    let odd = service(
        layer().missing_key(MissingKey::Reject(StatusCode::OK)),
        &calls,
    );
    assert_eq!(send(&odd, None).await.status(), StatusCode::BAD_REQUEST);

    let bypassing = service(layer().missing_key(MissingKey::Bypass), &calls);
    for _ in 0..3 {
        let resp = send(&bypassing, None).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers().get("ratelimit-policy").is_none());
        assert_eq!(resp.body(), "-", "no decision was made");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// Per key 2 per second and 3 per minute, and 5 per minute for everyone: a request passes only
/// if all three allow it; the fields list all three and name the one that decided; a denial
/// spends nothing from the others.
#[tokio::test]
async fn several_policies_decide_together_and_a_denial_spends_nothing() {
    let clock = ManualClock::new();
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key("per-second", Quota::per_second(2).unwrap()))
        .policy(Policy::per_key("per-minute", Quota::per_minute(3).unwrap()))
        .policy(Policy::global("global", Quota::per_minute(5).unwrap()))
        .build_with(memory(&clock))
        .unwrap();
    let set = layer.set().clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(layer, &calls);
    let peek = |limit: usize, key: &[u8]| {
        set.limiter(limit)
            .unwrap()
            .check_key_n(key, 0)
            .unwrap()
            .remaining()
            .unwrap()
    };

    let first = send(&svc, Some("a")).await;
    assert_eq!(
        policies(first.headers()),
        vec![
            ("per-second".into(), 2),
            ("per-minute".into(), 3),
            ("global".into(), 5)
        ]
    );
    assert_eq!(
        limits(first.headers()),
        vec![("per-second".into(), 1, 1)],
        "the fewest left"
    );
    send(&svc, Some("a")).await;
    let denied = send(&svc, Some("a")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limits(denied.headers()), vec![("per-second".into(), 0, 1)]);
    assert_eq!(denied.headers()["retry-after"], "1");
    assert_eq!(
        (peek(1, b"a"), peek(2, b"*")),
        (1, 3),
        "the denial spent nothing"
    );

    clock.advance(Duration::from_secs(1));
    let third = send(&svc, Some("a")).await;
    assert_eq!(third.status(), StatusCode::OK);
    assert_eq!(limits(third.headers()), vec![("per-minute".into(), 0, 59)]);
    let denied = send(&svc, Some("a")).await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        denied.headers()["retry-after"],
        "19",
        "one of 3 per minute back 20 s after the first two, spent at 0 s"
    );
    assert_eq!(
        peek(0, b"a"),
        1,
        "the per-second quota was not spent by the denial"
    );

    // The global quota counts every key: 3 spent by a, 2 more fit.
    assert_eq!(send(&svc, Some("b")).await.status(), StatusCode::OK);
    assert_eq!(send(&svc, Some("c")).await.status(), StatusCode::OK);
    let global = send(&svc, Some("d")).await;
    assert_eq!(global.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limits(global.headers())[0].0, "global");
    assert_eq!(peek(0, b"d"), 2, "d's own quotas are untouched");
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn tiers_choose_each_request_s_quota_from_one_store() {
    let clock = ManualClock::new();
    let plan = |req: &Request<()>| match req.headers().get("x-plan").map(|v| v.as_bytes()) {
        Some(b"pro") => Some("pro"),
        Some(b"unknown") => Some("unknown"),
        _ => None,
    };
    let layer = QuotaLayer::builder(api_key().with_tier(plan))
        .tier(
            "free",
            [Policy::per_key("per-minute", Quota::per_minute(1).unwrap())],
        )
        .tier(
            "pro",
            [Policy::per_key("per-minute", Quota::per_minute(3).unwrap())],
        )
        .build_with(memory(&clock))
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(layer, &calls);
    let send_plan = |key: &'static str, plan: Option<&'static str>| {
        let svc = svc.clone();
        async move {
            let mut b = Request::builder().header("x-api-key", key);
            if let Some(plan) = plan {
                b = b.header("x-plan", plan);
            }
            svc.oneshot(b.body(()).unwrap()).await.unwrap()
        }
    };
    for _ in 0..3 {
        let resp = send_plan("p", Some("pro")).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(policies(resp.headers()), vec![("per-minute".into(), 3)]);
    }
    assert_eq!(
        send_plan("p", Some("pro")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The default (first) tier for no plan and for a plan the layer does not know.
    let free = send_plan("f", None).await;
    assert_eq!(policies(free.headers()), vec![("per-minute".into(), 1)]);
    assert_eq!(
        send_plan("f", Some("unknown")).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn shadow_mode_never_refuses_and_counts_what_it_would_have() {
    let clock = ManualClock::new();
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key("per-minute", Quota::per_minute(1).unwrap()))
        .build_with(memory(&clock))
        .unwrap()
        .shadow(true);
    let calls = Arc::new(AtomicUsize::new(0));
    let mut svc = service(layer, &calls);
    let (recorder, store) = recorder::TestRecorder::new();
    for _ in 0..3 {
        // An in-memory set decides inside `call`, where the local recorder is installed.
        let future = metrics::with_local_recorder(&recorder, || svc.call(request(Some("k"))));
        let resp = future.await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(resp.headers().get("retry-after").is_none());
        assert_eq!(limits(resp.headers()), vec![("per-minute".into(), 0, 60)]);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let counted = |outcome: &str| {
        store.get(&format!(
            "flowguard_quota_decisions_total{{tier=default,policy=per-minute,outcome={outcome}}}"
        ))
    };
    assert_eq!(counted("allowed"), Some(1.0));
    assert_eq!(counted("shadow_denied"), Some(2.0));
    assert_eq!(counted("denied"), None);
}

/// A cost above the burst can never pass: in shadow mode it passes anyway, with the policies
/// (whose `q` is the burst, as its 413 would carry) but no `RateLimit` member and no decision,
/// counted as would-be-denied under that policy; in either header style.
#[tokio::test]
async fn shadow_mode_passes_a_cost_above_the_burst_with_the_policies_and_counts_it() {
    let cost = |req: &Request<()>| {
        req.headers()
            .get("x-cost")
            .map_or(1, |v| v.to_str().unwrap().parse().unwrap())
    };
    let costly = || {
        Request::builder()
            .header("x-api-key", "alice")
            .header("x-cost", "4")
            .body(())
            .unwrap()
    };
    for style in [HeaderStyle::Ietf, HeaderStyle::Legacy] {
        let layer = QuotaLayer::builder(api_key().with_cost(cost))
            .policy(Policy::per_key(
                "per-second",
                Quota::per_second(2).unwrap().with_burst(3).unwrap(),
            ))
            .build_with(memory(&ManualClock::new()))
            .unwrap()
            .header_style(style)
            .shadow(true);
        let calls = Arc::new(AtomicUsize::new(0));
        let mut svc = service(layer, &calls);
        let (recorder, store) = recorder::TestRecorder::new();
        let future = metrics::with_local_recorder(&recorder, || svc.call(costly()));
        let resp = future.await.unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::OK,
            "{style:?}: shadow mode never refuses"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(resp.body(), "-", "no decision was made");
        let headers = resp.headers();
        assert!(headers.get("retry-after").is_none());
        match style {
            HeaderStyle::Ietf => {
                assert_eq!(policies(headers), vec![("per-second".into(), 3)]);
                assert!(headers.get("ratelimit").is_none(), "no numbers");
            }
            _ => {
                assert_eq!(headers["x-ratelimit-limit"], "3");
                assert!(headers.get("x-ratelimit-remaining").is_none(), "no numbers");
            }
        }
        let counted = |outcome: &str| {
            store.get(&format!(
                "flowguard_quota_decisions_total{{tier=default,policy=per-second,outcome={outcome}}}"
            ))
        };
        assert_eq!(counted("shadow_denied"), Some(1.0));
        assert_eq!(counted("denied"), None);
    }
}

/// `MissingKey::Reject` refuses a request without a key, counted as denied under no policy
/// (`policy=""`); in shadow mode, which never denies, the request passes (without fields or a
/// decision: its refusal carries none) and is counted as would-be-denied.
#[tokio::test]
async fn shadow_mode_passes_a_request_without_a_key_that_would_be_rejected() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (recorder, store) = recorder::TestRecorder::new();
    for shadow in [false, true] {
        let layer = QuotaLayer::builder(api_key())
            .tier(
                "free",
                [Policy::per_key("per-key", Quota::per_minute(1).unwrap())],
            )
            .build()
            .unwrap()
            .missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
            .shadow(shadow);
        let mut svc = service(layer, &calls);
        for _ in 0..2 {
            let future = metrics::with_local_recorder(&recorder, || svc.call(request(None)));
            let resp = future.await.unwrap();
            if shadow {
                assert_eq!(resp.status(), StatusCode::OK, "shadow mode never refuses");
                assert_eq!(resp.body(), "-", "no decision was made");
                assert!(resp.headers().get("ratelimit-policy").is_none());
            } else {
                assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
            }
        }
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "only the shadow requests");
    let counted = |outcome: &str| {
        store.get(&format!(
            "flowguard_quota_decisions_total{{tier=free,policy=,outcome={outcome}}}"
        ))
    };
    assert_eq!(counted("denied"), Some(2.0));
    assert_eq!(counted("shadow_denied"), Some(2.0));
    assert_eq!(counted("allowed"), None);
}

#[tokio::test]
async fn a_custom_refusal_gets_the_decision_and_keeps_the_fields() {
    let layer = QuotaLayer::builder(api_key())
        .policy(Policy::per_key("per-minute", Quota::per_minute(1).unwrap()))
        .build()
        .unwrap()
        .refusal(|refusal: &Refusal<'_>| {
            assert_eq!(refusal.kind(), RefusalKind::OverQuota);
            let decision = refusal.decision().unwrap();
            let mut response = Response::new(format!(
                "{} spent; {} left",
                refusal.policy().unwrap(),
                decision.remaining().unwrap()
            ));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response
        });
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(layer, &calls);
    send(&svc, Some("k")).await;
    let denied = send(&svc, Some("k")).await;
    assert_eq!(denied.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(denied.body(), "per-minute spent; 0 left");
    assert_eq!(denied.headers()["retry-after"], "60");
    assert_eq!(limits(denied.headers()), vec![("per-minute".into(), 0, 60)]);
}

#[tokio::test]
async fn a_full_store_answers_503_with_retry_after() {
    let store = Arc::new(
        KeyedRateLimiter::<String>::builder(Quota::per_minute(1).unwrap())
            .max_keys(1)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(QuotaLayer::new(store, api_key()), &calls);
    assert_eq!(send(&svc, Some("a")).await.status(), StatusCode::OK);
    let full = send(&svc, Some("b")).await;
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(full.headers()["retry-after"], "1");
    assert_eq!(
        full.body(),
        r#"{"error":"rate_limiter_unavailable","retry_after":1}"#
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_cost_above_the_burst_is_a_final_413_without_retry_after() {
    let store = Arc::new(
        KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_second(2).unwrap().with_burst(3).unwrap())
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let cost = |req: &Request<()>| {
        req.headers()
            .get("x-cost")
            .map_or(1, |v| v.to_str().unwrap().parse().unwrap())
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(QuotaLayer::new(store, api_key().with_cost(cost)), &calls);
    let costly = |n: u32| {
        Request::builder()
            .header("x-api-key", "alice")
            .header("x-cost", n.to_string())
            .body(())
            .unwrap()
    };

    let too_big = svc.clone().oneshot(costly(4)).await.unwrap();
    assert_eq!(too_big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        too_big.headers().get("retry-after").is_none(),
        "no wait makes a cost of 4 fit a burst of 3: nothing to retry after"
    );
    assert_eq!(
        policies(too_big.headers()),
        vec![("default".into(), 3)],
        "the largest cost that passes"
    );
    assert!(too_big.headers().get("ratelimit").is_none());
    assert_eq!(
        too_big.body(),
        r#"{"error":"cost_above_burst","policy":"default","cost":4,"burst":3}"#
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // The key's quota is untouched: the whole burst still fits.
    let fits = svc.clone().oneshot(costly(3)).await.unwrap();
    assert_eq!(fits.status(), StatusCode::OK);
    assert_eq!(limits(fits.headers())[0].1, 0);
}

/// Extractors are closures too, and `Arc<dyn KeyedLimit>` is a store like any other.
#[tokio::test]
async fn a_closure_keys_requests_against_a_dyn_store() {
    let store: Arc<dyn KeyedLimit> = Arc::new(KeyedRateLimiter::<Vec<u8>>::new(
        Quota::per_minute(1).unwrap(),
    ));
    let by_tenant = |req: &Request<()>| {
        req.uri()
            .path()
            .strip_prefix("/tenants/")
            .map(|t| t.to_owned())
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(QuotaLayer::new(store, by_tenant), &calls);
    let get = |path: &str| Request::builder().uri(path).body(()).unwrap();
    assert_eq!(
        svc.clone()
            .oneshot(get("/tenants/a"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        svc.clone()
            .oneshot(get("/tenants/a"))
            .await
            .unwrap()
            .status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        svc.clone()
            .oneshot(get("/tenants/b"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let _ = api_key().key(&get("/"));
}

/// A Redis key of another type under the limiter's prefix: a fault of the deployment, which no
/// wait repairs, so 500 without `Retry-After` (not 503, which invites retries).
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_misconfigured_store_answers_500_without_retry_after() {
    use flowguard::gcra::remote::RemoteRateLimiter;

    let server = crate::support::RedisServer::start();
    server.cli(&["RPUSH", "flowguard:=alice", "not-a-tat"]);
    let store = crate::support::redis_builder(server.url())
        .connect()
        .await
        .unwrap();
    let store = Arc::new(
        RemoteRateLimiter::builder(store, Quota::per_second(2).unwrap())
            .build()
            .unwrap(),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(QuotaLayer::new(store, api_key()), &calls);
    let resp = send(&svc, Some("alice")).await;
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(resp.headers().get("retry-after").is_none());
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Other keys are decided as usual.
    assert_eq!(send(&svc, Some("bob")).await.status(), StatusCode::OK);
}

/// A request with `x-api-key: key` (if any) from the peer `peer` (if any), as a hyper server or
/// axum's `ConnectInfo` would say.
fn from_peer(key: Option<&str>, peer: Option<&str>) -> Request<()> {
    let mut req = request(key);
    if let Some(peer) = peer {
        req.extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
    }
    req
}

/// The status and remaining quota of `req` through `svc`.
async fn status<S>(svc: &S, req: Request<()>) -> (StatusCode, String)
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone,
{
    let resp = svc.clone().oneshot(req).await.unwrap();
    (resp.status(), resp.into_body())
}

/// `HeaderKey.or(PeerIpKey)`: the API key when the request has one (wherever it comes from),
/// else its peer address; neither is the missing-key policy's.
#[tokio::test]
async fn an_api_key_else_the_peer_address_each_with_its_own_quota() {
    let key = HeaderKey::new("x-api-key").unwrap().or(PeerIpKey::new());
    let layer = QuotaLayer::builder(key)
        .policy(Policy::per_key("per-key", Quota::per_minute(2).unwrap()))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = service(layer, &calls);
    let ok = |left: &str| (StatusCode::OK, left.to_owned());

    // The first source wins: one key's quota from two addresses.
    let a = "192.0.2.1:1000";
    let b = "192.0.2.2:2000";
    assert_eq!(status(&svc, from_peer(Some("k1"), Some(a))).await, ok("1"));
    assert_eq!(status(&svc, from_peer(Some("k1"), Some(b))).await, ok("0"));
    let (denied, _) = status(&svc, from_peer(Some("k1"), Some(a))).await;
    assert_eq!(denied, StatusCode::TOO_MANY_REQUESTS);
    // The second when the first has no key (an empty header is none): the address's quota,
    // untouched by the API key sent from it.
    assert_eq!(status(&svc, from_peer(None, Some(a))).await, ok("1"));
    assert_eq!(status(&svc, from_peer(Some(""), Some(a))).await, ok("0"));
    assert_eq!(status(&svc, from_peer(None, Some(b))).await, ok("1"));

    // Neither: the missing-key policy (by default one shared anonymous quota).
    assert_eq!(status(&svc, from_peer(None, None)).await, ok("1"));
    let layer = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap().or(PeerIpKey::new()))
        .policy(Policy::per_key("per-key", Quota::per_minute(2).unwrap()))
        .build()
        .unwrap()
        .missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED));
    let rejecting = service(layer, &calls);
    let (refused, body) = status(&rejecting, from_peer(None, None)).await;
    assert_eq!(refused, StatusCode::UNAUTHORIZED);
    assert_eq!(body, r#"{"error":"missing_key"}"#);
    assert_eq!(status(&rejecting, from_peer(None, Some(a))).await, ok("1"));
}

/// A header value equal to an address's key bytes (65.66.67.68 is `ABCD`), or a key of the
/// first source equal to the tagged form of the second's, never shares that address's quota.
#[tokio::test]
async fn a_key_crafted_to_equal_an_address_key_gets_a_quota_of_its_own() {
    let quota = || Policy::per_key("per-key", Quota::per_minute(1).unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let peer = "65.66.67.68:443";
    let other = "192.0.2.9:1000";

    let key = HeaderKey::new("x-api-key").unwrap().or(PeerIpKey::new());
    let svc = service(
        QuotaLayer::builder(key).policy(quota()).build().unwrap(),
        &calls,
    );
    assert_eq!(
        status(&svc, from_peer(None, Some(peer))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, from_peer(Some("ABCD"), Some(other))).await.0,
        StatusCode::OK,
        "the header ABCD is not the address 65.66.67.68"
    );
    assert_eq!(
        status(&svc, from_peer(None, Some(peer))).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );

    // A first source that can write any bytes: the address's tagged form as its key.
    let tagged = |req: &Request<()>| {
        req.headers()
            .contains_key("x-forge")
            .then(|| vec![0, 2, 65, 66, 67, 68])
    };
    assert_eq!(
        Or::new(tagged, PeerIpKey::new())
            .key(&from_peer(None, Some(peer)))
            .unwrap()
            .as_bytes(),
        [0, 2, 65, 66, 67, 68]
    );
    let svc = service(
        QuotaLayer::builder(Or::new(tagged, PeerIpKey::new()))
            .policy(quota())
            .build()
            .unwrap(),
        &calls,
    );
    let mut forged = from_peer(None, Some(other));
    forged.headers_mut().insert("x-forge", "1".parse().unwrap());
    assert_eq!(
        status(&svc, from_peer(None, Some(peer))).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status(&svc, forged).await.0,
        StatusCode::OK,
        "its own quota"
    );
    assert_eq!(
        status(&svc, from_peer(None, Some(peer))).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// The combined extractor costs and tiers every request as its first source says, whichever
/// source gave the key; `with_cost` on the combination applies to both.
#[tokio::test]
async fn cost_and_tier_are_the_first_sources() {
    let key = HeaderKey::new("x-api-key")
        .unwrap()
        .with_cost(|_: &Request<()>| 2)
        .with_tier(|req: &Request<()>| req.headers().get("x-plan").map(|_| "pro"))
        .or(PeerIpKey::new().with_cost(|_: &Request<()>| 7));
    let mut pro = from_peer(None, Some("192.0.2.1:1"));
    pro.headers_mut().insert("x-plan", "1".parse().unwrap());
    assert_eq!(
        key.cost(&pro),
        2,
        "keyed by the address, costed by the first"
    );
    assert_eq!(key.tier(&pro), Some("pro"));
    assert_eq!(key.cost(&from_peer(Some("k"), None)), 2);
    assert_eq!(key.tier(&from_peer(Some("k"), None)), None);
    let both = HeaderKey::new("x-api-key")
        .unwrap()
        .or(PeerIpKey::new())
        .with_cost(|_: &Request<()>| 3);
    assert_eq!(both.cost(&from_peer(None, Some("192.0.2.1:1"))), 3);
}
