//! flowguard-rls as an operator runs it: the debug listener's `/metrics`, `/healthcheck`,
//! `/rlconfig` and `/json`, the logs (JSON, no colour in a file), an unknown domain warned about
//! once and counted, and global shadow mode. Everything over loopback, in memory.

use crate::support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::{Rls, ask, code, request};

const SHOP: &str = "
domain: shop
descriptors:
  - key: remote_address
    rate_limit: { name: per_client, unit: minute, requests_per_unit: 3 }
  - key: path
    value: /search
    rate_limit: { unit: hour, requests_per_unit: 100, burst: 10 }
    shadow_mode: true
";

fn shop(args: &[&str]) -> Rls {
    Rls::start(&[("shop.yaml", SHOP)], args)
}

/// The value of the sample of `metric` whose labels include every one of `labels`, if any.
fn sample(scrape: &str, metric: &str, labels: &[&str]) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(metric))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Asks for one client four times (its quota is 3 a minute): the codes.
async fn four_calls(rls: &Rls) -> Vec<Code> {
    let mut client = rls.client().await;
    let ip = request("shop", &[&[("remote_address", "10.0.0.1")]]);
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(code(&ask(&mut client, ip.clone()).await));
    }
    codes
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_shows_the_decisions_by_domain_and_outcome() {
    let rls = shop(&[]);
    let codes = four_calls(&rls).await;
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
    let (status, scrape) = rls.http("/metrics", None).await;
    assert_eq!(status, 200);
    let decisions = |outcome: &str| {
        let outcome = format!("outcome=\"{outcome}\"");
        let labels = [
            "domain=\"shop\"",
            "descriptor=\"remote_address\"",
            outcome.as_str(),
        ];
        sample(&scrape, "flowguard_rls_decisions_total", &labels)
    };
    assert_eq!(decisions("ok"), Some(3.0), "{scrape}");
    assert_eq!(decisions("over_limit"), Some(1.0), "{scrape}");
    assert_eq!(
        sample(
            &scrape,
            "flowguard_rls_over_limit_total",
            &["domain=\"shop\""]
        ),
        Some(1.0)
    );
    // Four calls timed, in the histogram's count.
    assert_eq!(
        sample(&scrape, "flowguard_rls_request_duration_seconds_count", &[]),
        Some(4.0),
        "{scrape}"
    );
    assert!(scrape.contains("# HELP flowguard_rls_decisions_total"));
}

#[tokio::test(flavor = "multi_thread")]
async fn healthcheck_and_rlconfig_show_the_service_and_its_configuration() {
    let rls = shop(&[]);
    assert_eq!(rls.http("/healthcheck", None).await, (200, "OK\n".into()));
    let (status, config) = rls.http("/rlconfig", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        config,
        "shop.path_/search: unit=HOUR requests_per_unit=100 burst=10, shadow_mode: true\n\
         shop.remote_address: unit=MINUTE requests_per_unit=3 burst=3, shadow_mode: false, \
         name: per_client\n"
    );
    // A reloaded configuration is the one shown.
    rls.config.write(
        "shop.yaml",
        "domain: shop\ndescriptors:\n  - key: ip\n    rate_limit: { unit: second, requests_per_unit: 9 }\n",
    );
    rls.wait_for_log("configuration reloaded");
    let (_, config) = rls.http("/rlconfig", None).await;
    assert_eq!(
        config,
        "shop.ip: unit=SECOND requests_per_unit=9 burst=9, shadow_mode: false\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_json_endpoint_answers_should_rate_limit() {
    let rls = shop(&[]);
    let body = r#"{"domain": "shop", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.9"}]}]}"#;
    let (status, answer) = rls.http("/json", Some(body)).await;
    assert_eq!(status, 200, "{answer}");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["overallCode"], "OK");
    let first = &answer["statuses"][0];
    assert_eq!(first["code"], "OK");
    assert_eq!(first["currentLimit"]["requestsPerUnit"], 3);
    assert_eq!(first["currentLimit"]["unit"], "MINUTE");
    assert_eq!(first["currentLimit"]["name"], "per_client");
    assert_eq!(first["limitRemaining"], 2);
    assert_eq!(first["durationUntilReset"], "20s");
    // The JSON and the gRPC calls spend the same quota.
    let mut client = rls.client().await;
    let grpc = request("shop", &[&[("remote_address", "10.0.0.9")]]);
    assert_eq!(code(&ask(&mut client, grpc.clone()).await), Code::Ok);
    assert_eq!(code(&ask(&mut client, grpc).await), Code::Ok);
    let (status, answer) = rls.http("/json", Some(body)).await;
    assert_eq!(status, 429, "{answer}");
    assert!(answer.contains(r#""overallCode":"OVER_LIMIT""#), "{answer}");
    // What cannot be read, or is refused, is a 400 that says why.
    let (status, problem) = rls.http("/json", Some("{\"domain\": 3}")).await;
    assert_eq!(status, 400);
    assert!(problem.contains("not a RateLimitRequest"), "{problem}");
    let (status, problem) = rls
        .http("/json", Some(r#"{"domain": "", "descriptors": []}"#))
        .await;
    assert_eq!(status, 400);
    assert!(problem.contains("domain"), "{problem}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_domain_is_warned_about_once_and_counted() {
    let rls = shop(&[]);
    let mut client = rls.client().await;
    for _ in 0..3 {
        let answer = ask(&mut client, request("shopp", &[&[("remote_address", "a")]])).await;
        assert_eq!(code(&answer), Code::Ok);
    }
    ask(&mut client, request("other", &[&[("k", "v")]])).await;
    let (_, scrape) = rls.http("/metrics", None).await;
    assert_eq!(
        sample(&scrape, "flowguard_rls_unknown_domain_total", &[]),
        Some(4.0),
        "{scrape}"
    );
    // No label carries a name that came from a request.
    assert!(!scrape.contains("domain=\"shopp\""), "{scrape}");
    let log = rls.log_text();
    let warned = |domain: &str| {
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains(&format!("domain=\"{domain}\"")))
            .count()
    };
    assert_eq!(warned("shopp"), 1, "{log}");
    assert_eq!(warned("other"), 1, "{log}");
    assert!(log.contains("add a file with `domain: shopp`"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_are_json_lines_when_asked_and_never_coloured_in_a_file() {
    let text = shop(&[]);
    text.wait_for_log("flowguard-rls serving");
    assert!(!text.log_text().contains('\u{1b}'), "{}", text.log_text());
    let json = shop(&["--log-format", "json"]);
    json.wait_for_log("flowguard-rls serving");
    let log = json.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let serving = lines
        .iter()
        .find(|l| l["fields"]["message"] == "flowguard-rls serving")
        .expect("the start is logged");
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["fields"]["backend"], "memory");
}

#[tokio::test(flavor = "multi_thread")]
async fn global_shadow_mode_answers_ok_but_decides_and_counts() {
    let rls = shop(&["--shadow-mode"]);
    let mut client = rls.client().await;
    let ip = request("shop", &[&[("remote_address", "10.0.0.1")]]);
    for _ in 0..4 {
        let answer = ask(&mut client, ip.clone()).await;
        assert_eq!(code(&answer), Code::Ok);
    }
    let last = ask(&mut client, ip).await;
    assert_eq!(last.statuses[0].limit_remaining, 0, "still decided");
    let (_, scrape) = rls.http("/metrics", None).await;
    let shadowed = sample(
        &scrape,
        "flowguard_rls_shadow_over_limit_total",
        &["domain=\"shop\""],
    );
    assert_eq!(shadowed, Some(2.0), "{scrape}");
}

/// Every option can come from the environment, as envoyproxy/ratelimit is configured.
#[tokio::test(flavor = "multi_thread")]
async fn options_can_be_set_by_environment_variables() {
    let config = support::ConfigDir::new(&[("shop.yaml", SHOP)]);
    let envs = [
        ("FLOWGUARD_RLS_SHADOW_MODE", "true"),
        ("FLOWGUARD_RLS_LOG_FORMAT", "json"),
    ];
    let rls = Rls::start_in_env(config, &[], &envs);
    let mut client = rls.client().await;
    let ip = request("shop", &[&[("remote_address", "10.0.0.1")]]);
    for _ in 0..4 {
        let answer = ask(&mut client, ip.clone()).await;
        assert_eq!(code(&answer), Code::Ok, "shadow mode");
    }
    rls.wait_for_log("flowguard-rls serving");
    let log = rls.log_text();
    assert!(log.lines().all(|l| l.starts_with('{')), "JSON lines: {log}");
}

/// `--worker-threads 1` serves on one thread, with the same answers and the same debug
/// endpoints; `0` is refused, naming the flag.
#[tokio::test(flavor = "multi_thread")]
async fn one_worker_thread_serves_the_same_answers() {
    let rls = shop(&["--worker-threads", "1"]);
    let codes = four_calls(&rls).await;
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
    assert_eq!(rls.http("/healthcheck", None).await, (200, "OK\n".into()));
    let config = support::ConfigDir::new(&[("shop.yaml", SHOP)]);
    let dir = config.0.to_str().unwrap();
    let (exit, stderr) = support::run_to_exit(&["--config", dir, "--worker-threads", "0"]);
    assert_eq!(exit, Some(2), "{stderr}");
    assert!(stderr.contains("--worker-threads"), "{stderr}");
}
