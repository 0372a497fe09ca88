//! A two-tier quota (`TwoTierLimiter` over a Redis-backed remote limiter) as the inbound layer's
//! store, on a private `redis-server`: built with `QuotaLayer::builder(..).build_with(..)` and
//! through `Guard::builder().quota(..).redis(url).two_tier(batch)` + `inbound_layer`. Requests are
//! allowed up to the quota and denied after it with the fields, keys never share, and Redis sees
//! one script call per batch of decisions.
#![cfg(all(feature = "redis", feature = "tower"))]

use std::convert::Infallible;
use std::time::Duration;

use crate::support::RedisServer;
use flowguard::Guard;
use flowguard::clock::ManualClock;
use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{ConfigError, KeyedLimit, LimitSpec, Quota, SeparateLimits};
use http::{HeaderMap, Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt, service_fn};

/// 50 a day: no token comes back while a test runs, whatever the clock.
fn fifty_a_day() -> Quota {
    Quota::new(50, Duration::from_secs(86_400)).unwrap()
}

const BATCH: u32 = 10;

/// A day's 50 tokens over 10 reservations of 10 would be 17,280 s (one token is 1,728 s).
const BATCH_SECONDS: u64 = 10 * 1_728;

/// Sends `n` requests of `key` one after another through `svc`: the statuses, and the headers of
/// the last one.
async fn send<S>(svc: &S, key: &str, n: usize) -> (Vec<StatusCode>, HeaderMap)
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible> + Clone,
{
    let mut statuses = Vec::with_capacity(n);
    let mut last = HeaderMap::new();
    for _ in 0..n {
        let request = Request::builder()
            .header("x-api-key", key)
            .body(())
            .unwrap();
        let response = svc.clone().oneshot(request).await.unwrap();
        statuses.push(response.status());
        last = response.headers().clone();
    }
    (statuses, last)
}

fn ok_service()
-> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send> + Clone
{
    service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) })
}

/// The requests of a key: the first `allowed` pass, the rest are denied.
fn passes_then_denied(statuses: &[StatusCode], allowed: usize) {
    let passed = statuses
        .iter()
        .take_while(|s| **s == StatusCode::OK)
        .count();
    assert_eq!(passed, allowed, "{statuses:?}");
    assert!(
        statuses[passed..]
            .iter()
            .all(|s| *s == StatusCode::TOO_MANY_REQUESTS),
        "{statuses:?}"
    );
}

/// `build_with` a two-tier limiter per limit, over a store and a local side that read one
/// stopped clock: exact fields, and one script call per reservation of 10.
#[tokio::test]
async fn a_two_tier_store_built_with_the_layer_reserves_a_batch_per_script_call() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let store = crate::support::redis_builder(server.url())
        .explicit_time(clock.clone())
        .connect()
        .await
        .unwrap();
    let two_tier = |limits: &[LimitSpec]| -> Result<SeparateLimits, ConfigError> {
        let mut tiers = Vec::new();
        for limit in limits {
            let own = store.with_prefix(format!("tt:{}:", limit.name()))?;
            let remote = RemoteRateLimiter::builder(own, limit.quota())
                .failure_policy(FailurePolicy::FailClosed)
                .build()?;
            tiers.push(
                TwoTierLimiter::builder(remote, BATCH)
                    .clock(clock.clone())
                    .build()?,
            );
        }
        Ok(SeparateLimits::new(tiers))
    };
    let layer = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
        .policy(Policy::per_key("per-day", fifty_a_day()))
        .build_with(two_tier)
        .unwrap();
    let svc = layer.layer(ok_service());
    // The server learns the script on the first call (`NOSCRIPT`, then `EVAL`): count from after
    // it.
    let warm_up = RemoteRateLimiter::builder(store.with_prefix("warm-up:").unwrap(), fifty_a_day())
        .build()
        .unwrap();
    let _ = warm_up.check(b"k", 0).await.unwrap();
    let before = store.script_calls();

    let (first, headers) = send(&svc, "a", 1).await;
    assert_eq!(first, [StatusCode::OK]);
    assert_eq!(headers["ratelimit-policy"], r#""per-day";q=50;w=86400"#);
    // `r` counts this instance's reserved tokens left: 9 of the first batch of 10, whose
    // reservation put the shared state 10 tokens (17,280 s) ahead.
    assert_eq!(
        headers["ratelimit"],
        format!(r#""per-day";r=9;t={BATCH_SECONDS}"#).as_str()
    );
    assert_eq!(store.script_calls() - before, 1, "one reservation");

    let (rest, denied) = send(&svc, "a", 59).await;
    passes_then_denied(&rest, 49);
    assert_eq!(
        store.script_calls() - before,
        6,
        "50 decisions and 10 denials from 5 granted reservations and 1 denied"
    );
    // The denied reservation's wait: 10 tokens fit again once 17,280 s have passed.
    assert_eq!(denied["retry-after"], BATCH_SECONDS.to_string().as_str());
    assert_eq!(denied["ratelimit"], r#""per-day";r=0;t=86400"#);
    assert_eq!(
        server
            .cli(&["GET", "tt:default:per-day:=a"])
            .split('+')
            .next()
            .unwrap(),
        (86_400u64 * 1_000_000).to_string(),
        "Redis holds the key's TAT a whole day ahead: 50 tokens spent, no more"
    );

    // Another key never shares: its own reservation.
    let (other, _) = send(&svc, "b", 1).await;
    assert_eq!(other, [StatusCode::OK]);
    assert_eq!(store.script_calls() - before, 7);

    // Time passes on the one clock: a batch fits again.
    clock.advance(Duration::from_secs(BATCH_SECONDS));
    let (later, _) = send(&svc, "a", BATCH as usize + 1).await;
    passes_then_denied(&later, BATCH as usize);
}

/// The guard's two-tier quota (`quota` + `redis` + `two_tier`) behind `inbound_layer`: Redis, on
/// its own clock, sees about one script call per batch (counted by Redis itself).
#[tokio::test]
async fn a_guards_two_tier_quota_behind_its_inbound_layer() {
    let server = RedisServer::start();
    let guard = Guard::builder()
        .quota(fifty_a_day())
        .redis(server.url())
        .redis_timeout(crate::support::STORE_TIMEOUT)
        .redis_prefix("guard:")
        .two_tier(BATCH)
        .build()
        .await
        .unwrap();
    let svc = guard
        .inbound_layer(HeaderKey::new("x-api-key").unwrap())
        .unwrap()
        .layer(ok_service());
    server.cli(&["CONFIG", "RESETSTAT"]);

    let (first, headers) = send(&svc, "a", 1).await;
    assert_eq!(first, [StatusCode::OK]);
    assert_eq!(headers["ratelimit-policy"], r#""default";q=50;w=86400"#);
    let limit = headers["ratelimit"].to_str().unwrap();
    assert!(limit.starts_with(r#""default";r=9;t="#), "{limit}");

    let (rest, denied) = send(&svc, "a", 59).await;
    passes_then_denied(&rest, 49);
    let calls = server.script_calls();
    assert_eq!(
        calls, 6,
        "50 decisions and 10 denials from 5 granted reservations and 1 denied"
    );
    let wait: u64 = denied["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(
        (1..=BATCH_SECONDS).contains(&wait),
        "at most a batch's wait: {wait}"
    );
    assert!(
        denied["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with(r#""default";r=0;"#)
    );

    let (other, _) = send(&svc, "b", BATCH as usize).await;
    passes_then_denied(&other, BATCH as usize);
    let more = server.script_calls() - calls;
    assert!(
        (1..=2).contains(&more),
        "another key: its own batch, and the refill its 9th request started (maybe not answered yet): {more}"
    );
}
