//! flowguard-rls as Envoy sees it: the binary on a loopback port, the in-memory backend, a gRPC
//! client sending `ShouldRateLimit`.

use crate::support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::google::protobuf::UInt64Value;
use support::{Rls, ask, code, descriptor, request, status_code};

const SHOP: &str = "
domain: shop
descriptors:
  - key: remote_address
    rate_limit: { name: per_client, unit: minute, requests_per_unit: 3 }
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 50 }
  - key: path
    value: /search
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: { unit: hour, requests_per_unit: 1 }
      - key: plan
        rate_limit: { unit: hour, requests_per_unit: 4 }
  - key: bulk
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: strict
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: trial
    rate_limit: { unit: minute, requests_per_unit: 1 }
    shadow_mode: true
  - key: internal
    rate_limit: { unlimited: true }
";

fn shop(args: &[&str]) -> Rls {
    Rls::start(&[("shop.yaml", SHOP)], args)
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_until_the_quota_then_over_limit_with_statuses() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    let ip = request("shop", &[&[("remote_address", "10.0.0.1")]]);
    for expected_remaining in [2, 1, 0] {
        let answer = ask(&mut client, ip.clone()).await;
        assert_eq!(code(&answer), Code::Ok);
        let status = &answer.statuses[0];
        assert_eq!(status_code(status), Code::Ok);
        assert_eq!(status.limit_remaining, expected_remaining);
        let limit = status.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit, limit.name.as_str()),
            (3, Unit::Minute as i32, "per_client")
        );
        // Until the full burst is back: 20 s per token spent, never more than the minute.
        let reset = status.duration_until_reset.unwrap();
        assert!(
            reset.seconds <= 20 * i64::from(3 - expected_remaining),
            "{reset:?}"
        );
    }
    let denied = ask(&mut client, ip).await;
    assert_eq!(code(&denied), Code::OverLimit);
    assert_eq!(status_code(&denied.statuses[0]), Code::OverLimit);
    assert_eq!(denied.statuses[0].limit_remaining, 0);
    // Another client has its own quota.
    let other = ask(
        &mut client,
        request("shop", &[&[("remote_address", "10.0.0.2")]]),
    )
    .await;
    assert_eq!(code(&other), Code::Ok);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_descriptor_gets_a_status_and_a_denied_request_spends_nothing() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    let both = request(
        "shop",
        &[&[("bulk", "x")], &[("strict", "x")], &[("nothing", "x")]],
    );
    let first = ask(&mut client, both.clone()).await;
    assert_eq!(code(&first), Code::Ok);
    assert_eq!(first.statuses.len(), 3);
    assert_eq!(first.statuses[0].limit_remaining, 4);
    assert_eq!(first.statuses[1].limit_remaining, 0);
    // A descriptor no rule matches: OK without a limit.
    assert_eq!(status_code(&first.statuses[2]), Code::Ok);
    assert!(first.statuses[2].current_limit.is_none());

    let second = ask(&mut client, both).await;
    assert_eq!(code(&second), Code::OverLimit);
    assert_eq!(status_code(&second.statuses[0]), Code::Ok);
    assert_eq!(status_code(&second.statuses[1]), Code::OverLimit);
    // `bulk` was not charged for the denied request: it still has 4, and spends one now.
    let bulk = ask(&mut client, request("shop", &[&[("bulk", "x")]])).await;
    assert_eq!(bulk.statuses[0].limit_remaining, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn nested_descriptors_and_a_value_beating_a_key() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    let limit_of = |answer: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        answer.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    let search = ask(&mut client, request("shop", &[&[("path", "/search")]])).await;
    assert_eq!(limit_of(&search), Some(2));
    let other = ask(&mut client, request("shop", &[&[("path", "/cart")]])).await;
    assert_eq!(limit_of(&other), Some(50));
    let free = ask(
        &mut client,
        request("shop", &[&[("tenant", "a"), ("plan", "free")]]),
    )
    .await;
    assert_eq!(limit_of(&free), Some(1));
    let pro = ask(
        &mut client,
        request("shop", &[&[("tenant", "a"), ("plan", "pro")]]),
    )
    .await;
    assert_eq!(limit_of(&pro), Some(4));
    // The tenant level has no limit of its own.
    let tenant = ask(&mut client, request("shop", &[&[("tenant", "a")]])).await;
    assert_eq!(limit_of(&tenant), None);
    // Each tenant and each value of a key-only entry has its own quota.
    let free_b = ask(
        &mut client,
        request("shop", &[&[("tenant", "b"), ("plan", "free")]]),
    )
    .await;
    assert_eq!(code(&free_b), Code::Ok);
    let free_again = ask(
        &mut client,
        request("shop", &[&[("tenant", "a"), ("plan", "free")]]),
    )
    .await;
    assert_eq!(code(&free_again), Code::OverLimit);
}

#[tokio::test(flavor = "multi_thread")]
async fn hits_addend_is_the_cost_and_a_descriptor_may_override_it() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    let mut three = request("shop", &[&[("bulk", "h")]]);
    three.hits_addend = 3;
    let answer = ask(&mut client, three.clone()).await;
    assert_eq!(
        (code(&answer), answer.statuses[0].limit_remaining),
        (Code::Ok, 2)
    );
    // 3 more do not fit in 2: denied, and nothing spent.
    let answer = ask(&mut client, three).await;
    assert_eq!(
        (code(&answer), answer.statuses[0].limit_remaining),
        (Code::OverLimit, 2)
    );
    let mut two = request("shop", &[]);
    let mut d = descriptor(&[("bulk", "h")]);
    d.hits_addend = Some(UInt64Value { value: 2 });
    two.descriptors.push(d);
    two.hits_addend = 7;
    let answer = ask(&mut client, two).await;
    assert_eq!(
        (code(&answer), answer.statuses[0].limit_remaining),
        (Code::Ok, 0)
    );
    // More than the burst can never pass.
    let mut huge = request("shop", &[&[("bulk", "fresh")]]);
    huge.hits_addend = 6;
    let answer = ask(&mut client, huge).await;
    assert_eq!(
        (code(&answer), answer.statuses[0].limit_remaining),
        (Code::OverLimit, 5)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn shadow_mode_answers_ok_but_counts() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    let trial = request("shop", &[&[("trial", "t")]]);
    for remaining in [0, 0, 0] {
        let answer = ask(&mut client, trial.clone()).await;
        assert_eq!(code(&answer), Code::Ok);
        assert_eq!(status_code(&answer.statuses[0]), Code::Ok);
        assert_eq!(answer.statuses[0].limit_remaining, remaining);
    }
    // A shadow descriptor over its limit does not deny the others, nor stop them being spent.
    let with_bulk = request("shop", &[&[("trial", "t")], &[("bulk", "s")]]);
    let answer = ask(&mut client, with_bulk).await;
    assert_eq!(code(&answer), Code::Ok);
    assert_eq!(answer.statuses[1].limit_remaining, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn unlimited_descriptors_are_always_ok() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    for _ in 0..20 {
        let answer = ask(&mut client, request("shop", &[&[("internal", "batch")]])).await;
        assert_eq!(code(&answer), Code::Ok);
        assert_eq!(answer.statuses[0].limit_remaining, u32::MAX);
        assert!(answer.statuses[0].current_limit.is_none());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_domain_is_ok_without_limits_and_an_empty_one_is_refused() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    let answer = ask(
        &mut client,
        request("elsewhere", &[&[("remote_address", "1")], &[("a", "b")]]),
    )
    .await;
    assert_eq!(code(&answer), Code::Ok);
    assert_eq!(answer.statuses.len(), 2);
    assert!(
        answer
            .statuses
            .iter()
            .all(|s| s.current_limit.is_none() && s.code == Code::Ok as i32)
    );
    let empty = client
        .should_rate_limit(request("", &[&[("a", "b")]]))
        .await;
    assert_eq!(empty.unwrap_err().code(), tonic::Code::InvalidArgument);
    let none = client.should_rate_limit(request("shop", &[])).await;
    assert_eq!(none.unwrap_err().code(), tonic::Code::InvalidArgument);
}

/// The headers a response asks Envoy to add, as (name, value).
fn added_headers(
    answer: &envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse,
) -> Vec<(&str, &str)> {
    answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn response_headers_follow_the_ietf_fields_when_asked() {
    let rls = shop(&["--response-headers", "ietf"]);
    let mut client = rls.client().await;
    let strict = request("shop", &[&[("strict", "h")], &[("bulk", "h")]]);
    let answer = ask(&mut client, strict.clone()).await;
    let headers = added_headers(&answer);
    assert_eq!(
        headers,
        [
            ("ratelimit-policy", "\"strict\";q=1;w=60"),
            ("ratelimit", "\"strict\";r=0;t=60")
        ]
    );
    let denied = ask(&mut client, strict).await;
    let retry = denied
        .response_headers_to_add
        .iter()
        .find(|h| h.key == "retry-after")
        .expect("Retry-After when over limit");
    let secs: u64 = retry.value.parse().unwrap();
    assert!((1..=60).contains(&secs), "{secs}");
    let plain = shop(&[]);
    let mut client = plain.client().await;
    let answer = ask(&mut client, request("shop", &[&[("strict", "h")]])).await;
    assert!(answer.response_headers_to_add.is_empty());
    // The legacy fields, from the same header model.
    let legacy = shop(&["--response-headers", "legacy"]);
    let mut client = legacy.client().await;
    let answer = ask(&mut client, request("shop", &[&[("bulk", "l")]])).await;
    let headers = added_headers(&answer);
    assert_eq!(
        headers,
        [
            ("x-ratelimit-limit", "5"),
            ("x-ratelimit-remaining", "4"),
            ("x-ratelimit-reset", "12")
        ]
    );
}

const V1: &str = "
domain: reload
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

const V2: &str = "
domain: reload
descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 5 }
";

async fn limit_now(rls: &Rls) -> Option<u32> {
    let mut client = rls.client().await;
    let answer = ask(&mut client, request("reload", &[&[("k", "probe")]])).await;
    answer.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.requests_per_unit)
}

/// Polls (bounded) until the service answers with `limit`.
async fn until_limit(rls: &Rls, limit: u32) {
    for _ in 0..600 {
        if limit_now(rls).await == Some(limit) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the limit never became {limit}; log:\n{}", rls.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_file_is_reloaded_and_a_bad_one_keeps_the_old_configuration() {
    let rls = Rls::start(&[("reload.yaml", V1)], &[]);
    assert_eq!(limit_now(&rls).await, Some(1));
    rls.config.write("reload.yaml", V2);
    until_limit(&rls, 5).await;

    rls.config.write("reload.yaml", "domain: reload\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 9 }\n");
    rls.wait_for_log("configuration change rejected");
    let log = rls.log_text();
    assert!(
        log.contains("reload.yaml: at descriptors[0].rate_limit.unit"),
        "{log}"
    );
    assert_eq!(limit_now(&rls).await, Some(5));

    rls.config.write("reload.yaml", V1);
    until_limit(&rls, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn health_is_served_and_sigterm_stops_cleanly() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let mut rls = shop(&[]);
    let mut health = HealthClient::new(rls.channel().await);
    let service = "envoy.service.ratelimit.v3.RateLimitService";
    let answer = health
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let status = rls.terminate();
    assert!(status.success(), "{status:?}");
    // SIGTERM right after the address is printed, before any call: still a clean stop (the
    // handler is installed before the address is printed).
    let mut early = shop(&[]);
    let status = early.terminate();
    assert!(status.success(), "{status:?}");
}

#[test]
fn check_config_validates_and_exits() {
    let ok = support::ConfigDir::new(&[("shop.yaml", SHOP)]);
    let out = std::process::Command::new(support::binary())
        .arg("--config")
        .arg(&ok.0)
        .arg("--check-config")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 domain(s), 9 rule(s)"));
    let bad = support::ConfigDir::new(&[(
        "bad.yaml",
        "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
    )]);
    let out = std::process::Command::new(support::binary())
        .arg("--config")
        .arg(&bad.0)
        .arg("--check-config")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml: at descriptors[0].rate_limit.requests_per_unit"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_is_not_supported_is_refused_not_ignored() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    let mut refund = request("shop", &[]);
    let mut d = descriptor(&[("remote_address", "o")]);
    d.is_negative_hits = true;
    refund.descriptors.push(d);
    let error = client.should_rate_limit(refund).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
}

fn overridden(entries: &[(&str, &str)], requests_per_unit: u32, unit: i32) -> RateLimitRequest {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
    let mut d = descriptor(entries);
    d.limit = Some(RateLimitOverride {
        requests_per_unit,
        unit,
    });
    let mut r = request("shop", &[]);
    r.descriptors.push(d);
    r
}

/// A descriptor's `limit` (sent by Envoy from dynamic metadata) takes the place of the
/// configured rule, with the descriptor's own key; it is not shadowed.
#[tokio::test(flavor = "multi_thread")]
async fn a_limit_override_in_the_request_is_the_limit() {
    use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
    let rls = shop(&[]);
    let mut client = rls.client().await;
    // The configured rule allows 3 a minute; the override 2 an hour, on a shadowed key too.
    for entries in [[("remote_address", "ov")], [("trial", "ov")]] {
        let req = overridden(&entries, 2, RateLimitUnit::Hour as i32);
        let mut codes = Vec::new();
        for _ in 0..3 {
            codes.push(code(&ask(&mut client, req.clone()).await));
        }
        assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit], "{entries:?}");
        let answer = ask(&mut client, req).await;
        let limit = answer.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (2, Unit::Hour as i32)
        );
    }
    // The configured limit of the same descriptor is untouched.
    let plain = ask(&mut client, request("shop", &[&[("remote_address", "ov")]])).await;
    assert_eq!(plain.statuses[0].limit_remaining, 2);
    // What cannot be a quota is refused, saying what to send.
    let zero = overridden(&[("remote_address", "z")], 0, RateLimitUnit::Second as i32);
    let error = client.should_rate_limit(zero).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().contains("at least 1"), "{error:?}");
    let unknown = overridden(&[("remote_address", "z")], 5, RateLimitUnit::Unknown as i32);
    let error = client.should_rate_limit(unknown).await.unwrap_err();
    assert!(error.message().contains("SECOND, MINUTE"), "{error:?}");
}

const REPLACING: &str = "
domain: api
descriptors:
  - key: client
    rate_limit: { name: per_client, unit: minute, requests_per_unit: 1 }
  - key: plan
    value: gold
    rate_limit: { name: gold, unit: minute, requests_per_unit: 100, replaces: [{ name: per_client }] }
";

/// A matched rule that `replaces` another by name: the replaced one is not applied.
#[tokio::test(flavor = "multi_thread")]
async fn a_rule_replaces_another_by_name() {
    let rls = Rls::start(&[("api.yaml", REPLACING)], &[]);
    let mut client = rls.client().await;
    let gold = request("api", &[&[("client", "g")], &[("plan", "gold")]]);
    for _ in 0..3 {
        let answer = ask(&mut client, gold.clone()).await;
        assert_eq!(code(&answer), Code::Ok);
        assert!(
            answer.statuses[0].current_limit.is_none(),
            "replaced: no limit"
        );
    }
    let plain = request("api", &[&[("client", "g")], &[("plan", "free")]]);
    assert_eq!(code(&ask(&mut client, plain.clone()).await), Code::Ok);
    assert_eq!(code(&ask(&mut client, plain).await), Code::OverLimit);
}

const FILES: &str = "
domain: files
descriptors:
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: path
    value: /own/*
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

/// `share_threshold: true` on a wildcard: every matching value spends one quota; without it,
/// each value has its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_shared_threshold_is_one_quota_for_every_matching_value() {
    let rls = Rls::start(&[("files.yaml", FILES)], &[]);
    let mut client = rls.client().await;
    let path = |p: &str| request("files", &[&[("path", p)]]);
    let mut shared = Vec::new();
    for p in ["/shared/a", "/shared/b", "/shared/c"] {
        shared.push(code(&ask(&mut client, path(p)).await));
    }
    assert_eq!(shared, [Code::Ok, Code::Ok, Code::OverLimit]);
    let mut own = Vec::new();
    for p in ["/own/a", "/own/b", "/own/c"] {
        own.push(code(&ask(&mut client, path(p)).await));
    }
    assert_eq!(own, [Code::Ok, Code::Ok, Code::Ok]);
}
