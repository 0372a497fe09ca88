//! The inbound layer's quotas in Redis: a request's quotas are decided in one script call, all
//! or nothing (`RemoteLimitSet`), and a Redis that does not answer is met by the failure policy.
#![cfg(all(feature = "redis", feature = "tower"))]

use std::convert::Infallible;

use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer, QuotaService};
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::{FailurePolicy, RemoteLimitSet, RemoteRateLimiter, RemoteStore};
use flowguard::gcra::{ConfigError, KeyedLimit, LimitSpec, Quota};
use flowguard::headers::ServiceLimit;
use http::{Request, Response, StatusCode};
use tower::{Layer, ServiceExt, service_fn};

type Handler = tower::util::ServiceFn<
    fn(Request<()>) -> std::future::Ready<Result<Response<String>, Infallible>>,
>;

fn ok(_: Request<()>) -> std::future::Ready<Result<Response<String>, Infallible>> {
    std::future::ready(Ok(Response::new(String::new())))
}

/// One remote limiter per limit, each under its own prefix on `store`, failing by `policy`.
fn remote(
    store: RedisStore,
    policy: FailurePolicy,
) -> impl FnOnce(&[LimitSpec]) -> Result<RemoteLimitSet<RedisStore>, ConfigError> {
    move |limits| {
        limits
            .iter()
            .map(|limit| {
                let store = store.with_prefix(format!("test:{}:", limit.name()))?;
                RemoteRateLimiter::builder(store, limit.quota())
                    .failure_policy(policy)
                    .build()
            })
            .collect()
    }
}

/// Per key 3 a minute, and 4 a minute for everyone.
fn layer(
    store: RedisStore,
    policy: FailurePolicy,
) -> QuotaLayer<RemoteLimitSet<RedisStore>, HeaderKey> {
    QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
        .policy(Policy::per_key("per-minute", Quota::per_minute(3).unwrap()))
        .policy(Policy::global("global", Quota::per_minute(4).unwrap()))
        .build_with(remote(store, policy))
        .unwrap()
}

async fn send(
    svc: &QuotaService<
        Handler,
        RemoteLimitSet<RedisStore>,
        HeaderKey,
        flowguard::gcra::layer::JsonRefusal,
    >,
    key: &str,
) -> Response<String> {
    let request = Request::builder()
        .header("x-api-key", key)
        .body(())
        .unwrap();
    svc.clone().oneshot(request).await.unwrap()
}

/// What limit `limit` has left for `key`, read with a peek (cost 0) that spends nothing.
async fn left(set: &RemoteLimitSet<RedisStore>, limit: usize, key: &[u8]) -> u32 {
    set.limiter(limit)
        .unwrap()
        .check(key, 0)
        .await
        .unwrap()
        .remaining()
        .unwrap()
}

#[tokio::test]
async fn a_request_denied_by_one_quota_spends_nothing_from_the_others() {
    let server = crate::support::RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .hash_tag_keys(true)
        .connect()
        .await
        .unwrap();
    let layer = layer(store.clone(), FailurePolicy::FailClosed);
    let set = layer.set().clone();
    let svc = layer.layer(service_fn(ok as fn(_) -> _));

    for _ in 0..3 {
        assert_eq!(send(&svc, "a").await.status(), StatusCode::OK);
    }
    assert_eq!(
        left(&set, 1, b"*").await,
        1,
        "the global quota took all three"
    );
    let calls = store.script_calls();
    let denied = send(&svc, "a").await;
    assert_eq!(
        store.script_calls(),
        calls + 1,
        "both quotas decided in one script call, not peeked then spent"
    );
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let limits = ServiceLimit::from_headers(denied.headers()).unwrap();
    assert_eq!(
        limits.first().unwrap().policy().to_string(),
        "per-minute",
        "the quota that denied"
    );
    assert_eq!(
        left(&set, 1, b"*").await,
        1,
        "the denied request spent no global token"
    );

    // The last global token goes to another key; then the global quota denies, and the
    // per-key quota of the denied key is left whole.
    assert_eq!(send(&svc, "b").await.status(), StatusCode::OK);
    assert_eq!(
        send(&svc, "c").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(left(&set, 0, b"c").await, 3);
    assert_eq!(left(&set, 0, b"b").await, 2);
}

/// Two instances (two stores, two layers) over one Redis, eight clients at once: the global
/// quota admits exactly its burst, and every client's own quota was spent exactly once per
/// request it got through.
#[tokio::test]
async fn two_instances_under_contention_admit_exactly_the_global_burst() {
    let server = crate::support::RedisServer::start();
    let mut services = Vec::new();
    let mut set = None;
    for _ in 0..2 {
        let store = crate::support::redis_builder(server.url())
            .hash_tag_keys(true)
            .connect()
            .await
            .unwrap();
        let layer = layer(store, FailurePolicy::FailClosed);
        set.get_or_insert_with(|| layer.set().clone());
        services.push(layer.layer(service_fn(ok as fn(_) -> _)));
    }
    let set = set.unwrap();
    let mut tasks = Vec::new();
    for client in 0..8 {
        let svc = services[client % 2].clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("client-{client}");
            let mut allowed = 0u32;
            for _ in 0..3 {
                if send(&svc, &key).await.status() == StatusCode::OK {
                    allowed += 1;
                }
            }
            (key, allowed)
        }));
    }
    let mut total = 0;
    for task in tasks {
        let (key, allowed) = task.await.unwrap();
        total += allowed;
        assert_eq!(
            left(&set, 0, key.as_bytes()).await,
            3 - allowed,
            "{key}: its own quota spent once per request let through, never for a denied one"
        );
    }
    assert_eq!(total, 4, "the global burst, exactly");
    assert_eq!(left(&set, 1, b"*").await, 0);
}

/// Redis gone, failing open: requests pass, and the answer makes up no numbers.
#[tokio::test]
async fn a_failed_store_is_answered_by_the_failure_policy_without_made_up_numbers() {
    let mut server = crate::support::RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .hash_tag_keys(true)
        .timeout(std::time::Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    assert_eq!(store.topology(), "standalone");
    let svc = layer(store, FailurePolicy::FailOpen).layer(service_fn(ok as fn(_) -> _));
    assert_eq!(send(&svc, "a").await.status(), StatusCode::OK);
    server.kill();
    let degraded = send(&svc, "a").await;
    assert_eq!(degraded.status(), StatusCode::OK);
    assert!(
        degraded.headers().get("ratelimit-policy").is_some(),
        "the policies are still known"
    );
    assert!(
        degraded.headers().get("ratelimit").is_none(),
        "no remaining count that Redis did not give"
    );
}
