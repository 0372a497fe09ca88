//! One model of the HTTP rate-limit fields, server and client: whatever flowguard's server
//! writes, flowguard's client reads back to the same wait; stacked layers keep each other's
//! fields; degraded decisions advertise no numbers they do not know; the legacy style; typed
//! errors for malformed fields.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowguard::backoff::{Classification, HttpRetryPolicy, RetryPolicy};
use flowguard::clock::ManualClock;
use flowguard::gcra::{Degradation, Quota, RateLimiter};
use flowguard::headers::{
    FieldError, HeaderStyle, LegacyReset, MAX_RETRY_AFTER, PolicyName, QuotaPolicy, RetryAfter,
    ServiceLimit, requested_wait,
};
use http::{HeaderMap, StatusCode};
use proptest::prelude::*;

const STYLES: [HeaderStyle; 3] = [HeaderStyle::Ietf, HeaderStyle::Legacy, HeaderStyle::Both];

/// flowguard's client, reading the legacy reset too.
fn client() -> HttpRetryPolicy {
    HttpRetryPolicy::new(RetryPolicy::builder().seed(1).build().unwrap())
        .legacy_reset(LegacyReset::DelaySeconds)
}

fn ceil_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0))
}

/// An instant for the client's wall clock (irrelevant to delay-seconds, fixed for determinism).
fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Every decision, in every style: the client reads back exactly the denial's wait
    /// (`Retry-After`, rounded up), waiting it makes the same request pass, and without
    /// `Retry-After` the rate-limit fields alone never ask for less. The fields parse back to
    /// the decision's numbers.
    #[test]
    fn every_decision_reads_back_to_the_same_wait(
        rate in 1u32..40,
        period_ms in prop::sample::select(vec![1_000u64, 7_000, 60_000, 3_600_000]),
        burst in 1u32..12,
        steps in prop::collection::vec((0u64..3_000, 1u32..12), 1..40),
    ) {
        let quota = Quota::new(rate, Duration::from_millis(period_ms)).unwrap().with_burst(burst).unwrap();
        let clock = ManualClock::new();
        let limiter = RateLimiter::builder(quota).clock(clock.clone()).build().unwrap();
        let name = PolicyName::new("per-key").unwrap();
        let policy = quota.rate_limit_policy(name.clone());
        prop_assert_eq!(policy.quota(), u64::from(burst));
        prop_assert_eq!(policy.window(), Some(ceil_secs(quota.burst_window())));
        for (advance_ms, cost) in steps {
            clock.advance(Duration::from_millis(advance_ms));
            let cost = cost.min(burst);
            let decision = limiter.check_n(cost).unwrap();
            for style in STYLES {
                let mut headers = HeaderMap::new();
                decision.write_headers(&policy, style, &mut headers);
                let status = if decision.allowed { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
                let class = client().classify_response(status, &headers, wall());
                if decision.allowed {
                    prop_assert_eq!(class, Classification::NotRetryable);
                    prop_assert!(headers.get("retry-after").is_none());
                } else {
                    let wait = ceil_secs(decision.retry_after.unwrap());
                    prop_assert_eq!(class, Classification::Retryable { retry_after: Some(wait) });
                }
                if style != HeaderStyle::Legacy {
                    prop_assert_eq!(QuotaPolicy::from_headers(&headers).unwrap(), vec![policy.clone()]);
                    let limits = ServiceLimit::from_headers(&headers).unwrap();
                    prop_assert_eq!(limits.len(), 1);
                    prop_assert_eq!(limits[0].policy(), &name);
                    prop_assert_eq!(limits[0].remaining(), u64::from(decision.remaining().unwrap()));
                    prop_assert_eq!(limits[0].reset(), Some(ceil_secs(decision.reset_after().unwrap())));
                }
                if style != HeaderStyle::Ietf {
                    prop_assert_eq!(&headers["x-ratelimit-limit"], &burst.to_string());
                    prop_assert_eq!(&headers["x-ratelimit-remaining"], &decision.remaining().unwrap().to_string());
                    prop_assert_eq!(&headers["x-ratelimit-reset"], &ceil_secs(decision.reset_after().unwrap()).as_secs().to_string());
                }
                if !decision.allowed {
                    // A proxy dropped Retry-After: the rate-limit fields alone never send the
                    // client back early. They ask for a wait only when the quota is exhausted
                    // (r=0); a costly request denied with quota left (0 < r < cost) leaves the
                    // client to its own backoff.
                    headers.remove("retry-after");
                    let alone = requested_wait(&headers, wall(), Some(LegacyReset::DelaySeconds))
                        .unwrap()
                        .map(RetryAfter::delay);
                    prop_assert_eq!(alone.is_some(), decision.remaining().unwrap() == 0);
                    if let Some(alone) = alone {
                        prop_assert!(alone >= decision.retry_after.unwrap(), "{:?}", alone);
                    }
                }
            }
            if !decision.allowed {
                // The client waits exactly what it read, then repeats the request: it passes.
                clock.advance(ceil_secs(decision.retry_after.unwrap()));
                prop_assert!(limiter.check_n(cost).unwrap().allowed);
            }
        }
    }
}

/// A degraded decision lists its policy (configuration, known) but no `RateLimit` member and no
/// remaining/reset: failing open knows nothing, a local fallback only this instance's share.
/// A degraded denial still says when to come back.
#[test]
fn degraded_decisions_advertise_nothing_made_up() {
    let quota = Quota::per_second(10).unwrap();
    let policy = quota.rate_limit_policy(PolicyName::default());
    let limiter = RateLimiter::builder(quota)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let allowed = limiter.check().unwrap();
    let _ = limiter.check_n(9).unwrap();
    let denied = limiter.check().unwrap();
    assert!(allowed.allowed && !denied.allowed);
    for how in [
        Degradation::FailOpen,
        Degradation::FailClosed,
        Degradation::LocalFallback,
        Degradation::LocalFallbackFull,
    ] {
        for decision in [allowed.degraded(how), denied.degraded(how)] {
            assert_eq!(decision.service_limit(policy.name()), None);
            for style in STYLES {
                let mut headers = HeaderMap::new();
                decision.write_headers(&policy, style, &mut headers);
                let ietf = style != HeaderStyle::Legacy;
                assert_eq!(
                    QuotaPolicy::from_headers(&headers).unwrap(),
                    if ietf { vec![policy.clone()] } else { vec![] }
                );
                assert!(headers.get("ratelimit").is_none(), "{how:?} {style:?}");
                assert_eq!(
                    headers.get("x-ratelimit-limit").is_some(),
                    style != HeaderStyle::Ietf
                );
                assert!(headers.get("x-ratelimit-remaining").is_none());
                assert!(headers.get("x-ratelimit-reset").is_none());
                assert_eq!(
                    headers.get("retry-after").is_some(),
                    !decision.allowed,
                    "{how:?} {style:?}"
                );
            }
        }
    }
}

/// Legacy fields hold one policy: of two written into one response, the one closer to
/// exhaustion stays, whichever order they come in.
#[test]
fn legacy_fields_keep_the_policy_closest_to_exhaustion() {
    let second = QuotaPolicy::new(PolicyName::new("second").unwrap(), 10);
    let day = QuotaPolicy::new(PolicyName::new("day").unwrap(), 1000);
    let tight = ServiceLimit::new(second.name().clone(), 0)
        .with_reset(Duration::from_secs(1))
        .unwrap();
    let loose = ServiceLimit::new(day.name().clone(), 400)
        .with_reset(Duration::from_secs(3600))
        .unwrap();
    for order in [
        [(&second, &tight), (&day, &loose)],
        [(&day, &loose), (&second, &tight)],
    ] {
        let mut headers = HeaderMap::new();
        for (policy, limit) in order {
            HeaderStyle::Legacy.write(&mut headers, policy, Some(limit));
        }
        assert_eq!(headers["x-ratelimit-limit"], "10");
        assert_eq!(headers["x-ratelimit-remaining"], "0");
        assert_eq!(headers["x-ratelimit-reset"], "1");
        assert!(headers.get("ratelimit").is_none() && headers.get("ratelimit-policy").is_none());
        let wait = requested_wait(&headers, wall(), Some(LegacyReset::DelaySeconds)).unwrap();
        assert_eq!(wait.map(RetryAfter::delay), Some(Duration::from_secs(1)));
        assert_eq!(
            requested_wait(&headers, wall(), None),
            Ok(None),
            "read only when asked"
        );
    }
}

/// Malformed fields are rejected with errors that say what is wrong; the client ignores them
/// (the draft: malformed fields MUST be ignored) and never turns them into a wait.
#[test]
fn malformed_fields_are_rejected_with_typed_errors() {
    let cases: [(&str, &str, FieldError); 7] = [
        ("ratelimit", "", FieldError::Empty { field: "ratelimit" }),
        (
            "ratelimit",
            "\"default\";r=0;t=30,",
            FieldError::Syntax {
                field: "ratelimit",
                at: 19,
            },
        ),
        (
            "ratelimit",
            "\"default\";t=30",
            FieldError::MissingParameter {
                field: "ratelimit",
                parameter: "r",
            },
        ),
        (
            "ratelimit",
            "\"default\";r=0;t=2.5",
            FieldError::WrongType {
                field: "ratelimit",
                parameter: "t",
                expected: "a non-negative Integer",
            },
        ),
        (
            "ratelimit",
            "\"default\";r=0;t=-5",
            FieldError::Negative { field: "ratelimit" },
        ),
        (
            "retry-after",
            "-5",
            FieldError::Negative {
                field: "retry-after",
            },
        ),
        (
            "retry-after",
            "in a minute",
            FieldError::Syntax {
                field: "retry-after",
                at: 0,
            },
        ),
    ];
    for (field, value, error) in cases {
        let mut headers = HeaderMap::new();
        headers.insert(field, value.parse().unwrap());
        assert_eq!(
            requested_wait(&headers, wall(), None),
            Err(error),
            "{field}: {value}"
        );
        assert_eq!(
            client().classify_response(StatusCode::TOO_MANY_REQUESTS, &headers, wall()),
            Classification::Retryable { retry_after: None },
            "{field}: {value} is ignored"
        );
    }
    assert_eq!(
        QuotaPolicy::parse_list(b"\"default\";q=10;w=0"),
        Err(FieldError::ZeroWindow)
    );
    assert_eq!(
        PolicyName::new("caf\u{e9}"),
        Err(FieldError::InvalidPolicyName)
    );
}

/// A wait beyond the bound is a typed outcome, whichever field asks for it: the retry engine
/// gives up at once, keeping the response, instead of coming back early.
#[tokio::test(start_paused = true)]
async fn a_too_long_wait_is_a_typed_outcome() {
    let too_long = MAX_RETRY_AFTER.as_secs() + 1;
    for (field, value) in [
        ("retry-after", too_long.to_string()),
        ("ratelimit", format!("\"day\";r=0;t={too_long}")),
        ("x-ratelimit-reset", too_long.to_string()),
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(field, value.parse().unwrap());
        assert_eq!(
            requested_wait(&headers, wall(), Some(LegacyReset::DelaySeconds)),
            Err(FieldError::TooLarge {
                max: MAX_RETRY_AFTER
            })
        );
        let rules = client();
        assert_eq!(
            rules.classify_response(StatusCode::TOO_MANY_REQUESTS, &headers, wall()),
            Classification::RetryAfterTooLarge
        );
        let start = tokio::time::Instant::now();
        let result = rules
            .policy()
            .retry(
                |_| async { Ok::<_, std::io::Error>(StatusCode::TOO_MANY_REQUESTS) },
                |_| rules.classify_response(StatusCode::TOO_MANY_REQUESTS, &headers, wall()),
            )
            .await;
        let error = result.unwrap_err();
        assert_eq!(
            error.give_up_reason(),
            Some(&flowguard::backoff::GiveUp::RetryAfterTooLarge)
        );
        assert_eq!(error.attempts(), 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}

#[cfg(feature = "tower")]
mod layer {
    use std::convert::Infallible;
    use std::sync::Arc;

    use flowguard::gcra::layer::{KeyExtractor, Policy, QuotaLayer};
    use flowguard::gcra::{KeyedRateLimiter, Overflow, SeparateLimits};
    use http::{Request, Response};
    use tower::{ServiceBuilder, ServiceExt};

    use super::*;

    fn by_api_key(req: &Request<()>) -> Option<Vec<u8>> {
        req.headers()
            .get("x-api-key")
            .map(|v| v.as_bytes().to_vec())
    }

    fn request(key: &str) -> Request<()> {
        Request::builder()
            .header("x-api-key", key)
            .body(())
            .unwrap()
    }

    fn store(quota: Quota, clock: &ManualClock) -> Arc<KeyedRateLimiter<Vec<u8>, ManualClock>> {
        Arc::new(
            KeyedRateLimiter::builder(quota)
                .clock(clock.clone())
                .build()
                .unwrap(),
        )
    }

    /// A layer of one per-key policy named `name`, kept in `store`.
    fn named<K: KeyExtractor<()>>(
        name: &str,
        store: Arc<KeyedRateLimiter<Vec<u8>, ManualClock>>,
        key: K,
    ) -> QuotaLayer<SeparateLimits, K> {
        QuotaLayer::builder(key)
            .policy(Policy::per_key(name, *store.quota()))
            .build_with(|_| Ok::<_, std::convert::Infallible>(SeparateLimits::new([store])))
            .unwrap()
    }

    /// (policy name, r, t) of every `RateLimit` member.
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

    fn policies(headers: &HeaderMap) -> Vec<(String, u64, u64)> {
        QuotaPolicy::from_headers(headers)
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p.name().to_string(),
                    p.quota(),
                    p.window().unwrap().as_secs(),
                )
            })
            .collect()
    }

    /// A global quota in front of a per-key one: every response lists both policies and both
    /// current limits; the inner layer's denial keeps its `Retry-After` through the outer
    /// layer, and the client reads exactly that wait.
    #[tokio::test]
    async fn stacked_layers_keep_both_policies() {
        let clock = ManualClock::new();
        let global = store(Quota::per_second(5).unwrap(), &clock);
        let per_key = store(Quota::per_minute(2).unwrap(), &clock);
        let svc = ServiceBuilder::new()
            .layer(named("global", global, |_: &Request<()>| {
                Some(b"all".to_vec())
            }))
            .layer(named("per-key", per_key, by_api_key))
            .service_fn(|_req: Request<()>| async {
                Ok::<_, Infallible>(Response::new("ok".to_string()))
            });

        let first = svc.clone().oneshot(request("a")).await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let expected_policies = vec![("per-key".to_string(), 2, 60), ("global".to_string(), 5, 1)];
        assert_eq!(
            policies(first.headers()),
            expected_policies,
            "inner first: it writes first"
        );
        assert_eq!(
            limits(first.headers()),
            vec![("per-key".to_string(), 1, 30), ("global".to_string(), 4, 1)]
        );

        svc.clone().oneshot(request("a")).await.unwrap();
        let denied = svc.clone().oneshot(request("a")).await.unwrap();
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(policies(denied.headers()), expected_policies);
        assert_eq!(
            limits(denied.headers()),
            vec![("per-key".to_string(), 0, 60), ("global".to_string(), 2, 1)]
        );
        assert_eq!(denied.headers()["retry-after"], "30");
        assert_eq!(
            client().classify_response(denied.status(), denied.headers(), wall()),
            Classification::Retryable {
                retry_after: Some(Duration::from_secs(30))
            }
        );
        clock.advance(Duration::from_secs(30));
        let again = svc.clone().oneshot(request("a")).await.unwrap();
        assert_eq!(
            again.status(),
            StatusCode::OK,
            "waiting exactly Retry-After is enough"
        );
    }

    /// The layer's legacy style: `X-RateLimit-*` only, read back by the client when asked.
    #[tokio::test]
    async fn the_legacy_style_writes_x_ratelimit_fields() {
        let clock = ManualClock::new();
        let svc = ServiceBuilder::new()
            .layer(
                QuotaLayer::new(store(Quota::per_minute(2).unwrap(), &clock), by_api_key)
                    .header_style(HeaderStyle::Legacy),
            )
            .service_fn(|_req: Request<()>| async {
                Ok::<_, Infallible>(Response::new("ok".to_string()))
            });
        let first = svc.clone().oneshot(request("a")).await.unwrap();
        let h = first.headers();
        assert_eq!(
            (
                &h["x-ratelimit-limit"],
                &h["x-ratelimit-remaining"],
                &h["x-ratelimit-reset"]
            ),
            (
                &"2".parse().unwrap(),
                &"1".parse().unwrap(),
                &"30".parse().unwrap()
            )
        );
        assert!(h.get("ratelimit").is_none() && h.get("ratelimit-policy").is_none());
        svc.clone().oneshot(request("a")).await.unwrap();
        let mut denied = svc.clone().oneshot(request("a")).await.unwrap();
        assert_eq!(denied.headers()["x-ratelimit-remaining"], "0");
        assert_eq!(denied.headers()["x-ratelimit-reset"], "60");
        assert_eq!(denied.headers()["retry-after"], "30");
        // Without Retry-After, a client that reads the legacy reset waits for it.
        denied.headers_mut().remove("retry-after");
        assert_eq!(
            client().classify_response(denied.status(), denied.headers(), wall()),
            Classification::Retryable {
                retry_after: Some(Duration::from_secs(60))
            }
        );
    }

    /// A store full of keys that decides new keys untracked (fail open): the response lists
    /// the policy but gives no remaining quota it does not know.
    #[tokio::test]
    async fn a_fail_open_decision_lists_the_policy_without_numbers() {
        let clock = ManualClock::new();
        let store = Arc::new(
            KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_second(10).unwrap())
                .max_keys(1)
                .overflow(Overflow::AllowUntracked)
                .clock(clock)
                .build()
                .unwrap(),
        );
        let svc = ServiceBuilder::new()
            .layer(QuotaLayer::new(store, by_api_key).header_style(HeaderStyle::Both))
            .service_fn(|_req: Request<()>| async {
                Ok::<_, Infallible>(Response::new("ok".to_string()))
            });
        let tracked = svc.clone().oneshot(request("a")).await.unwrap();
        assert_eq!(limits(tracked.headers()).len(), 1);
        let untracked = svc.clone().oneshot(request("b")).await.unwrap();
        assert_eq!(untracked.status(), StatusCode::OK);
        let h = untracked.headers();
        assert_eq!(policies(h), vec![("default".to_string(), 10, 1)]);
        assert!(h.get("ratelimit").is_none());
        assert_eq!(h["x-ratelimit-limit"], "10");
        assert!(h.get("x-ratelimit-remaining").is_none() && h.get("x-ratelimit-reset").is_none());
    }

    /// The same through a Redis store that is down: failing open lists the policy only;
    /// failing closed answers 429 with the failure policy's wait and no numbers.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_redis_store_that_is_down_advertises_no_numbers() {
        use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};

        for policy in [FailurePolicy::FailOpen, FailurePolicy::FailClosed] {
            let mut server = crate::support::RedisServer::start();
            let store = crate::support::redis_builder(server.url())
                .connect()
                .await
                .unwrap();
            let probe = ceil_secs(store.probe_interval()).as_secs().to_string();
            let limiter = Arc::new(
                RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
                    .failure_policy(policy)
                    .build()
                    .unwrap(),
            );
            let svc = ServiceBuilder::new()
                .layer(QuotaLayer::new(limiter, by_api_key))
                .service_fn(|_req: Request<()>| async {
                    Ok::<_, Infallible>(Response::new("ok".to_string()))
                });
            let up = svc.clone().oneshot(request("a")).await.unwrap();
            assert_eq!(limits(up.headers()), vec![("default".to_string(), 9, 1)]);
            server.kill();
            let down = svc.clone().oneshot(request("a")).await.unwrap();
            assert_eq!(
                policies(down.headers()),
                vec![("default".to_string(), 10, 1)]
            );
            assert!(down.headers().get("ratelimit").is_none(), "{policy:?}");
            match policy {
                FailurePolicy::FailOpen => {
                    assert_eq!(down.status(), StatusCode::OK);
                    assert!(down.headers().get("retry-after").is_none());
                }
                _ => {
                    assert_eq!(down.status(), StatusCode::TOO_MANY_REQUESTS);
                    assert_eq!(down.headers()["retry-after"], probe.as_str());
                }
            }
        }
    }
}
