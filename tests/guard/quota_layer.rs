//! `Guard::quota_layer`: several quotas per request built on the guard's store, in memory and in
//! Redis: allowed only if all allow, a denial spends nothing from any of them, and the fields
//! name the policy that decided.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use flowguard::gcra::layer::{HeaderKey, LayerBuildError, Policy, QuotaLayer, QuotaLayerBuilder};
use flowguard::gcra::{Demand, KeyedRateLimiter, LimitSet, Quota};
use flowguard::headers::{QuotaPolicy, ServiceLimit};
use flowguard::{Guard, QuotaLayerError};
use http::{HeaderMap, Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt, service_fn};

/// Per key 2 a minute and 3 a day, and 4 a minute for everyone: limits 0, 1 and 2 of the set.
fn three_quotas() -> QuotaLayerBuilder<HeaderKey> {
    QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
        .policy(Policy::per_key("per-minute", Quota::per_minute(2).unwrap()))
        .policy(Policy::per_key(
            "per-day",
            Quota::new(3, Duration::from_secs(86_400)).unwrap(),
        ))
        .policy(Policy::global("global", Quota::per_minute(4).unwrap()))
}

/// The policy named in the `RateLimit` field: the one that decided.
fn deciding(headers: &HeaderMap) -> String {
    let limits = ServiceLimit::from_headers(headers).unwrap();
    let names: Vec<String> = limits.iter().map(|l| l.policy().to_string()).collect();
    assert_eq!(names.len(), 1, "one deciding policy: {names:?}");
    names[0].clone()
}

/// What limit `limit` has left for `key`, read with a peek that spends nothing.
async fn left(set: &Arc<dyn LimitSet>, limit: usize, key: &[u8]) -> u64 {
    let peek = [Demand {
        limit,
        key,
        cost: 0,
    }];
    u64::from(set.check_all(&peek).await.unwrap()[0].remaining().unwrap())
}

/// The three quotas on `guard`'s store: a denial by one spends nothing from the others, and
/// every answer names the deciding policy. `global` is the global policy's key in the set.
async fn check_three_quotas(guard: &Guard, global: &[u8]) {
    let layer = guard.quota_layer(three_quotas()).unwrap();
    let set = layer.set().as_ref().clone();
    let svc = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let send = |key: &'static str| {
        let svc = svc.clone();
        async move {
            let request = Request::builder()
                .header("x-api-key", key)
                .body(())
                .unwrap();
            svc.oneshot(request).await.unwrap()
        }
    };

    let first = send("a").await;
    assert_eq!(first.status(), StatusCode::OK);
    let advertised: Vec<(String, u64)> = QuotaPolicy::from_headers(first.headers())
        .unwrap()
        .iter()
        .map(|p| (p.name().to_string(), p.quota()))
        .collect();
    assert_eq!(
        advertised,
        vec![
            ("per-minute".into(), 2),
            ("per-day".into(), 3),
            ("global".into(), 4)
        ]
    );
    assert_eq!(send("a").await.status(), StatusCode::OK);

    let denied = send("a").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(deciding(denied.headers()), "per-minute");
    assert_eq!(
        (left(&set, 1, b"a").await, left(&set, 2, global).await),
        (1, 2),
        "the per-minute denial spent nothing from per-day or global"
    );

    // b spends the rest of the global quota; c is denied by it, with its own quotas untouched.
    assert_eq!(send("b").await.status(), StatusCode::OK);
    assert_eq!(send("b").await.status(), StatusCode::OK);
    let denied = send("c").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(deciding(denied.headers()), "global");
    assert_eq!(
        (left(&set, 0, b"c").await, left(&set, 1, b"c").await),
        (2, 3),
        "the global denial spent nothing from c's own quotas"
    );
}

#[tokio::test]
async fn in_memory_three_quotas_deny_together_and_name_the_deciding_policy() {
    let guard = Guard::builder()
        .quota(Quota::per_second(1).unwrap())
        .build()
        .await
        .unwrap();
    check_three_quotas(&guard, b"*").await;
    // A guard without a quota keeps a layer's quotas in memory too.
    let bare = Guard::builder().build().await.unwrap();
    check_three_quotas(&bare, b"*").await;
}

#[tokio::test]
async fn policies_the_layer_refuses_and_a_store_the_guard_does_not_know_are_typed_errors() {
    let guard = Guard::builder().build().await.unwrap();
    let none = guard.quota_layer(QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap()));
    assert!(
        matches!(none, Err(QuotaLayerError::Layer(LayerBuildError::NoPolicy))),
        "{:?}",
        none.err()
    );

    let own = Guard::builder()
        .rate_limit(KeyedRateLimiter::<Vec<u8>>::new(
            Quota::per_second(1).unwrap(),
        ))
        .build()
        .await
        .unwrap();
    let err = own.quota_layer(three_quotas()).err().unwrap();
    assert!(matches!(err, QuotaLayerError::OwnRateLimit), "{err:?}");
    assert!(err.to_string().contains("build_with"), "{err}");
}

/// The layer's services are `Send` and their futures too, over the guard's `Arc<dyn LimitSet>`.
#[test]
fn the_layer_s_service_is_send() {
    fn send<T: Send>(_: &T) {}
    let layer = in_memory_layer();
    let mut svc = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    send(&svc);
    send(&svc.call(Request::new(())));
}

fn in_memory_layer() -> QuotaLayer<Arc<dyn LimitSet>, HeaderKey> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            let guard = Guard::builder().build().await.unwrap();
            guard.quota_layer(three_quotas()).unwrap()
        })
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use flowguard::gcra::remote::FailurePolicy;

    /// A prefix no other test uses.
    fn unique_prefix() -> String {
        use rand::{Rng, SeedableRng};
        let id: u64 = rand::rngs::SmallRng::from_os_rng().random();
        format!("gql-{id:016x}:")
    }

    #[tokio::test]
    async fn in_redis_the_quotas_deny_atomically_each_under_its_own_prefix() {
        let server = crate::support::RedisServer::start();
        let prefix = unique_prefix();
        let guard = Guard::builder()
            .quota(Quota::per_second(1).unwrap())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix(&prefix)
            .build()
            .await
            .unwrap();
        check_three_quotas(&guard, b"*").await;

        // One prefix per limit, named after it; each user key in a hash tag, so that one
        // identity's quotas share a cluster slot.
        let mut keys: Vec<String> = server
            .cli(&["--scan", "--pattern", &format!("{prefix}*")])
            .lines()
            .map(|k| k.strip_prefix(&prefix).unwrap().to_owned())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "default:per-day:={a}",
                "default:per-day:={b}",
                "default:per-minute:={a}",
                "default:per-minute:={b}",
                "global:global:={*}",
            ]
        );
    }

    #[tokio::test]
    async fn the_guard_s_failure_policy_answers_for_every_quota() {
        let mut server = crate::support::RedisServer::start();
        let guard = Guard::builder()
            .quota(Quota::per_second(1).unwrap())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix(unique_prefix())
            .failure_policy(FailurePolicy::FailClosed)
            .build()
            .await
            .unwrap();
        let layer = guard.quota_layer(three_quotas()).unwrap();
        let set = layer.set().as_ref().clone();
        server.kill();
        let both = [
            Demand {
                limit: 0,
                key: b"a",
                cost: 1,
            },
            Demand {
                limit: 2,
                key: b"*",
                cost: 1,
            },
        ];
        let decisions = set.check_all(&both).await.unwrap();
        assert!(!decisions.allowed(), "fail closed denies");
        assert!(decisions.as_slice().iter().all(|d| d.degraded.is_some()));
    }

    #[tokio::test]
    async fn two_tier_guards_and_limits_that_would_share_keys_are_refused() {
        let server = crate::support::RedisServer::start();
        let two_tier = Guard::builder()
            .quota(Quota::per_second(10).unwrap())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix(unique_prefix())
            .two_tier(2)
            .build()
            .await
            .unwrap();
        let err = two_tier.quota_layer(three_quotas()).err().unwrap();
        assert!(matches!(err, QuotaLayerError::TwoTier), "{err:?}");

        let guard = Guard::builder()
            .quota(Quota::per_second(10).unwrap())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix(unique_prefix())
            .build()
            .await
            .unwrap();
        let q = Quota::per_second(1).unwrap();
        let clash = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
            .tier("free", [Policy::global("x", q)])
            .tier("global", [Policy::per_key("x", q)]);
        let err = guard.quota_layer(clash).err().unwrap();
        assert!(
            matches!(&err, QuotaLayerError::SharedKeys { limit } if limit == "global:x"),
            "{err:?}"
        );
        assert!(err.to_string().contains("rename"), "{err}");
    }
}

/// A guard on a real local Redis Cluster (3 masters, 3 replicas), from a `redis+cluster://` URL
/// and without a quota of its own: one identity's quotas share a hash slot, so they are decided
/// in one script call on its master; a global quota's key lies in another slot, so a request
/// that also counts against it is peeked on both slots, then spent.
#[cfg(feature = "redis")]
mod cluster {
    use super::*;
    use crate::support::RedisCluster;

    /// Script runs (`EVALSHA` + `EVAL`, less failed ones such as a first `NOSCRIPT`) on the
    /// cluster's masters since they started.
    fn script_calls(cluster: &RedisCluster) -> u64 {
        cluster
            .nodes
            .iter()
            .filter(|n| n.cli(&["role"]).starts_with("master"))
            .map(|n| n.script_calls())
            .sum()
    }

    async fn guard_on(cluster: &RedisCluster, prefix: &str) -> Guard {
        let nodes: Vec<String> = cluster.nodes.iter().map(|n| n.addr()).collect();
        Guard::builder()
            .redis(format!("redis+cluster://{}", nodes.join(",")))
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix(prefix)
            // These tests count calls and decisions, not latency: a slow moment of a loaded
            // machine must not turn a decision into a degraded one.
            .redis_timeout(Duration::from_secs(5))
            .build()
            .await
            .unwrap()
    }

    async fn send(svc: &QuotaLayer<Arc<dyn LimitSet>, HeaderKey>, key: &str) -> StatusCode {
        let svc = svc.layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        let request = Request::builder()
            .header("x-api-key", key)
            .body(())
            .unwrap();
        svc.oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn one_identity_s_quotas_take_one_call_and_a_global_quota_is_peeked_then_spent() {
        let cluster = RedisCluster::start();
        let guard = guard_on(&cluster, "gqc:").await;
        // The three quotas behave on a cluster as on one server.
        check_three_quotas(&guard, b"*").await;

        // Two per-key quotas: one call per request, for identities spread over every master.
        let per_key = guard
            .quota_layer(
                QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
                    .policy(Policy::per_key("second", Quota::per_minute(10).unwrap()))
                    .policy(Policy::per_key("day", Quota::per_hour(100).unwrap())),
            )
            .unwrap();
        let ids: Vec<String> = (0..32).map(|i| format!("id-{i}")).collect();
        let masters: std::collections::BTreeSet<usize> = ids
            .iter()
            .map(|id| {
                let slot = cluster.keyslot(id.as_bytes());
                cluster
                    .view_from(0)
                    .iter()
                    .find(|n| n.master && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
                    .map(|n| cluster.index_of(n.port))
                    .unwrap()
            })
            .collect();
        assert_eq!(masters.len(), 3, "the identities reach every master");
        for id in &ids {
            // Loads the script on every master, so that the next round counts no NOSCRIPT.
            assert_eq!(send(&per_key, id).await, StatusCode::OK);
        }
        let before = script_calls(&cluster);
        for id in &ids {
            assert_eq!(send(&per_key, id).await, StatusCode::OK);
        }
        assert_eq!(
            script_calls(&cluster) - before,
            ids.len() as u64,
            "one script call per request"
        );
        // Each identity's keys, one per quota, as stored, share its slot.
        let stored: Vec<String> = cluster
            .nodes
            .iter()
            .filter(|n| n.cli(&["role"]).starts_with("master"))
            .flat_map(|n| {
                n.cli(&["--scan", "--pattern", "gqc:default:*"])
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        for id in &ids {
            let tag = format!("={{{id}}}");
            let slots: Vec<u16> = stored
                .iter()
                .filter(|k| k.ends_with(&tag))
                .map(|k| cluster.keyslot(k.as_bytes()))
                .collect();
            assert_eq!(slots.len(), 2, "{id}: one key per quota in {stored:?}");
            assert_eq!(slots[0], slots[1], "{id}");
        }

        // Per key and global: an allowed request peeks both slots, then spends on both; a
        // denied one only peeks.
        let with_global = guard
            .quota_layer(
                QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
                    .policy(Policy::per_key("own", Quota::per_minute(1).unwrap()))
                    .policy(Policy::global("all", Quota::per_minute(100).unwrap())),
            )
            .unwrap();
        let before = script_calls(&cluster);
        assert_eq!(send(&with_global, "g").await, StatusCode::OK);
        assert_eq!(
            script_calls(&cluster) - before,
            4,
            "allowed: 2 peeks, 2 spends"
        );
        let before = script_calls(&cluster);
        assert_eq!(send(&with_global, "g").await, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(script_calls(&cluster) - before, 2, "denied: 2 peeks");
    }
}
