//! `flowguard_quota_decisions_total{tier,policy,outcome}`, counted by the one function the
//! inbound layer and `Guard::admit` share: a denial under the policy that denied, a degraded
//! decision (a full in-memory store deciding a key untracked; a killed Redis failing open) as
//! `degraded`, and `Guard::admit` under the labels its `inbound_layer` counts with. (The
//! `allowed` and `shadow_denied` outcomes are in `gcra_layer.rs`; the spans in
//! `quota_spans.rs`.)

use crate::support::recorder;

use std::sync::Arc;

use flowguard::Guard;
use flowguard::gcra::Quota;
use recorder::{Store, TestRecorder};

/// Runs `test` to completion on this thread with a recorder of its own installed, and returns
/// what it kept: everything the futures count, wherever they are polled, is seen.
fn recorded<F: Future<Output = ()>>(test: impl FnOnce() -> F) -> Arc<Store> {
    let (recorder, store) = TestRecorder::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    store
}

/// The decisions counted for `tier`, `policy` and `outcome` (0 when none).
fn decisions(store: &Store, tier: &str, policy: &str, outcome: &str) -> f64 {
    store
        .get(&format!(
            "flowguard_quota_decisions_total{{tier={tier},policy={policy},outcome={outcome}}}"
        ))
        .unwrap_or(0.0)
}

#[cfg(feature = "tower")]
mod layer {
    use std::convert::Infallible;

    use flowguard::clock::ManualClock;
    use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
    use flowguard::gcra::{LimitSpec, MemoryLimitSet, Overflow, Quota};
    use http::{Request, Response, StatusCode};
    use tower::{ServiceBuilder, ServiceExt};

    use super::{decisions, recorded};

    /// An empty 200.
    async fn ok(_: Request<()>) -> Result<Response<String>, Infallible> {
        Ok(Response::new(String::new()))
    }

    fn request(key: &str) -> Request<()> {
        Request::builder()
            .header("x-api-key", key)
            .body(())
            .unwrap()
    }

    /// Per key 10 per second and 1 per minute, in the tier `plan`: the minute decides (fewest
    /// left) and then denies; the second never does.
    #[test]
    fn a_denial_is_counted_under_the_policy_that_denied() {
        let store = recorded(|| async {
            let layer = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
                .tier(
                    "plan",
                    [
                        Policy::per_key("per-second", Quota::per_second(10).unwrap()),
                        Policy::per_key("per-minute", Quota::per_minute(1).unwrap()),
                    ],
                )
                .build_with(|limits| {
                    MemoryLimitSet::builder(limits.iter().map(LimitSpec::quota))
                        .clock(ManualClock::new())
                        .build()
                })
                .unwrap();
            let svc = ServiceBuilder::new().layer(layer).service_fn(ok);
            let statuses = [
                svc.clone().oneshot(request("k")).await.unwrap().status(),
                svc.clone().oneshot(request("k")).await.unwrap().status(),
                svc.clone().oneshot(request("k")).await.unwrap().status(),
            ];
            assert_eq!(
                statuses,
                [
                    StatusCode::OK,
                    StatusCode::TOO_MANY_REQUESTS,
                    StatusCode::TOO_MANY_REQUESTS
                ]
            );
        });
        assert_eq!(decisions(&store, "plan", "per-minute", "allowed"), 1.0);
        assert_eq!(decisions(&store, "plan", "per-minute", "denied"), 2.0);
        for outcome in ["allowed", "denied", "shadow_denied", "degraded"] {
            assert_eq!(decisions(&store, "plan", "per-second", outcome), 0.0);
        }
    }

    /// A store of one key per policy deciding further keys untracked (failing open): their
    /// decisions are `degraded`, under the policy that decided, never `allowed`.
    #[test]
    fn a_degraded_decision_is_counted_as_degraded() {
        let store = recorded(|| async {
            let layer = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
                .policy(Policy::per_key("per-minute", Quota::per_minute(5).unwrap()))
                .build_with(|limits| {
                    MemoryLimitSet::builder(limits.iter().map(LimitSpec::quota))
                        .max_keys(1)
                        .overflow(Overflow::AllowUntracked)
                        .clock(ManualClock::new())
                        .build()
                })
                .unwrap();
            let svc = ServiceBuilder::new().layer(layer).service_fn(ok);
            for key in ["tracked", "untracked-1", "untracked-2", "tracked"] {
                let response = svc.clone().oneshot(request(key)).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
            }
        });
        assert_eq!(decisions(&store, "default", "per-minute", "allowed"), 2.0);
        assert_eq!(decisions(&store, "default", "per-minute", "degraded"), 2.0);
        assert_eq!(decisions(&store, "default", "per-minute", "denied"), 0.0);
    }
}

/// `Guard::admit` counts as the layer does, under the single quota's labels, which its
/// `inbound_layer` counts with too: allowed, denied (also a cost above the burst), no count for
/// a guard without a quota.
#[test]
fn guard_admit_counts_its_decisions() {
    let store = recorded(|| async {
        let guard = Guard::builder()
            .quota(Quota::per_minute(2).unwrap())
            .build()
            .await
            .unwrap();
        assert!(guard.admit(b"k").await.unwrap().allowed);
        assert!(guard.admit(b"k").await.unwrap().allowed);
        assert!(!guard.admit(b"k").await.unwrap().allowed);
        assert!(guard.admit_n(b"other", 3).await.is_err(), "above the burst");
        let none = Guard::builder().build().await.unwrap();
        assert!(none.admit(b"k").await.is_err());
        #[cfg(feature = "tower")]
        {
            use tower::{ServiceBuilder, ServiceExt};
            let svc = ServiceBuilder::new()
                .layer(
                    guard
                        .inbound_layer(|_: &http::Request<()>| Some("k"))
                        .unwrap(),
                )
                .service_fn(|_: http::Request<()>| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
                });
            let response = svc.oneshot(http::Request::new(())).await.unwrap();
            assert_eq!(response.status(), http::StatusCode::TOO_MANY_REQUESTS);
        }
    });
    let layer_denials = if cfg!(feature = "tower") { 1.0 } else { 0.0 };
    assert_eq!(decisions(&store, "default", "default", "allowed"), 2.0);
    assert_eq!(
        decisions(&store, "default", "default", "denied"),
        2.0 + layer_denials
    );
    assert_eq!(decisions(&store, "default", "default", "degraded"), 0.0);
}

/// A guard over a Redis whose server was killed, failing open: `admit` counts `degraded`.
#[cfg(feature = "redis")]
#[test]
fn guard_admit_counts_a_degraded_decision() {
    use flowguard::gcra::remote::FailurePolicy;

    let store = recorded(|| async {
        let mut server = crate::support::RedisServer::start();
        let guard = Guard::builder()
            .quota(Quota::per_second(10).unwrap())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .failure_policy(FailurePolicy::FailOpen)
            .build()
            .await
            .unwrap();
        assert!(guard.admit(b"k").await.unwrap().degraded.is_none());
        server.kill();
        for _ in 0..3 {
            assert!(guard.admit(b"k").await.unwrap().degraded.is_some());
        }
    });
    assert_eq!(decisions(&store, "default", "default", "allowed"), 1.0);
    assert_eq!(decisions(&store, "default", "default", "degraded"), 3.0);
}
