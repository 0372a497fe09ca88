//! flowguard-rls on Redis: instances share quotas, and a Redis outage is `UNAVAILABLE` unless a
//! failure policy answers. Each test starts its own `redis-server` on a free loopback port.

use crate::support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use flowguard_test_redis::{RedisCluster, RedisServer, free_port};
use support::{Rls, ask, code, request};

const API: &str = "
domain: api
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: strict
    rate_limit: { unit: minute, requests_per_unit: 1 }
";

/// Only quotas with a burst of at least 2 (for local shares of one half, and batches of 2).
const WIDE: &str = "
domain: api
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 4 }
";

fn on_redis(redis: &RedisServer, extra: &[&str]) -> Rls {
    on_redis_with(API, redis, extra)
}

fn on_redis_with(config: &str, redis: &RedisServer, extra: &[&str]) -> Rls {
    let url = redis.url();
    let mut args = vec!["--redis", url.as_str(), "--redis-timeout-ms", "200"];
    args.extend_from_slice(extra);
    Rls::start(&[("api.yaml", config)], &args)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_on_one_redis_share_a_quota() {
    let redis = RedisServer::start();
    let (a, b) = (on_redis(&redis, &[]), on_redis(&redis, &[]));
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let req = request("api", &[&[("client", "c1")]]);
    let mut remaining = Vec::new();
    for i in 0..4 {
        let client = if i % 2 == 0 { &mut ca } else { &mut cb };
        let answer = ask(client, req.clone()).await;
        assert_eq!(code(&answer), Code::Ok, "request {i}");
        remaining.push(answer.statuses[0].limit_remaining);
    }
    assert_eq!(remaining, [3, 2, 1, 0]);
    assert_eq!(code(&ask(&mut ca, req.clone()).await), Code::OverLimit);
    assert_eq!(code(&ask(&mut cb, req).await), Code::OverLimit);
    // The key names the domain and the descriptor path.
    let keys = redis.cli(&["--scan"]);
    assert!(keys.contains("flowguard-rls:=3:api6:client2:c1"), "{keys}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_request_spends_nothing_on_redis_either() {
    let redis = RedisServer::start();
    let rls = on_redis(&redis, &[]);
    let mut client = rls.client().await;
    let both = request("api", &[&[("client", "m")], &[("strict", "m")]]);
    assert_eq!(code(&ask(&mut client, both.clone()).await), Code::Ok);
    assert_eq!(code(&ask(&mut client, both).await), Code::OverLimit);
    let alone = ask(&mut client, request("api", &[&[("client", "m")]])).await;
    assert_eq!(alone.statuses[0].limit_remaining, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_down_is_unavailable_by_default() {
    let mut redis = RedisServer::start();
    let rls = on_redis(&redis, &[]);
    let mut client = rls.client().await;
    let req = request("api", &[&[("client", "d")]]);
    assert_eq!(code(&ask(&mut client, req.clone()).await), Code::Ok);
    redis.kill();
    let error = client.should_rate_limit(req.clone()).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable, "{error:?}");
    // The message names what to change.
    assert!(error.message().contains("--on-redis-failure"), "{error:?}");
    assert!(!error.message().contains("limiters apply"), "{error:?}");
    // A descriptor no rule matches needs no store: still answered.
    let free = ask(&mut client, request("api", &[&[("other", "x")]])).await;
    assert_eq!(code(&free), Code::Ok);
    rls.wait_for_log("answering UNAVAILABLE");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_policy_answers_when_redis_is_down() {
    let mut redis = RedisServer::start();
    let closed = on_redis(&redis, &["--on-redis-failure", "fail-closed"]);
    let open = on_redis(&redis, &["--on-redis-failure", "fail-open"]);
    let local = on_redis_with(WIDE, &redis, &["--on-redis-failure", "local-instances=2"]);
    redis.kill();
    let req = request("api", &[&[("client", "p")]]);
    assert_eq!(
        code(&ask(&mut closed.client().await, req.clone()).await),
        Code::OverLimit
    );
    let mut open_client = open.client().await;
    for _ in 0..6 {
        let answer = ask(&mut open_client, req.clone()).await;
        assert_eq!(code(&answer), Code::Ok);
        // No made-up numbers: the store was not read.
        let status = &answer.statuses[0];
        assert!(status.current_limit.is_none(), "{status:?}");
        assert!(status.duration_until_reset.is_none(), "{status:?}");
        assert_eq!(status.limit_remaining, 0, "{status:?}");
    }
    // Local fallback: this instance's half of the quota (burst 2), then over limit.
    let mut local_client = local.client().await;
    let codes: Vec<Code> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(code(&ask(&mut local_client, req.clone()).await));
        }
        out
    };
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
}

#[test]
fn a_quota_the_policy_or_batch_cannot_serve_is_refused_at_start() {
    let redis = RedisServer::start();
    for args in [
        ["--two-tier-batch", "2"],
        ["--on-redis-failure", "local-instances=2"],
    ] {
        let out = std::process::Command::new(support::binary())
            .arg("--config")
            .arg(&support::ConfigDir::new(&[("api.yaml", API)]).0)
            .args(["--redis", &redis.url()])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("api.yaml: at descriptors[1].rate_limit: "),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_tier_spends_reserved_batches_within_the_global_quota() {
    let redis = RedisServer::start();
    let rls = on_redis_with(WIDE, &redis, &["--two-tier-batch", "2"]);
    let mut client = rls.client().await;
    let req = request("api", &[&[("client", "t")]]);
    let mut codes = Vec::new();
    for _ in 0..6 {
        codes.push(code(&ask(&mut client, req.clone()).await));
    }
    let allowed = codes.iter().filter(|c| **c == Code::Ok).count();
    assert_eq!(allowed, 4, "{codes:?}");
    assert_eq!(codes[4..], [Code::OverLimit, Code::OverLimit]);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_on_one_redis_cluster_share_a_quota() {
    let cluster = RedisCluster::start_without_replicas();
    let urls = cluster.urls();
    let mut args: Vec<&str> = Vec::new();
    for url in &urls[..2] {
        args.extend(["--redis", url.as_str()]);
    }
    args.extend(["--redis-cluster", "--redis-timeout-ms", "500"]);
    let (a, b) = (
        Rls::start(&[("api.yaml", API)], &args),
        Rls::start(&[("api.yaml", API)], &args),
    );
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    // Several clients, each key in its own hash slot; every client's quota is shared.
    for client in ["c1", "c2", "c3", "c4"] {
        let req = request("api", &[&[("client", client)]]);
        for i in 0..4 {
            let c = if i % 2 == 0 { &mut ca } else { &mut cb };
            assert_eq!(code(&ask(c, req.clone()).await), Code::Ok, "{client} {i}");
        }
        assert_eq!(
            code(&ask(&mut ca, req.clone()).await),
            Code::OverLimit,
            "{client}"
        );
        assert_eq!(code(&ask(&mut cb, req).await), Code::OverLimit, "{client}");
    }
    // A node reports cluster_state:ok to the health probe.
    assert_eq!(health_until(&a, 200).await, "OK\n");
}

/// Requests naming {wide, narrow} race requests naming {narrow} alone, from several tasks on two
/// instances (one answering `UNAVAILABLE` on failure: the raw store; one with a failure policy:
/// the remote limiter). On one Redis server a request's descriptors are decided in one call, all
/// or nothing, so `wide` is spent exactly once per allowed pair: no pair spends `wide` and is then
/// denied on `narrow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_spends_nothing_under_contention() {
    const CONFIG: &str = "
domain: api
descriptors:
  - key: wide
    rate_limit: { unit: day, requests_per_unit: 10, burst: 5000 }
  - key: narrow
    rate_limit: { unit: day, requests_per_unit: 100 }
";
    let redis = RedisServer::start();
    let instances = [
        on_redis_with(CONFIG, &redis, &[]),
        on_redis_with(CONFIG, &redis, &["--on-redis-failure", "fail-closed"]),
    ];
    let mut tasks = Vec::new();
    for task in 0..8usize {
        let mut client = instances[task % 2].client().await;
        tasks.push(tokio::spawn(async move {
            let pair = request("api", &[&[("wide", "w")], &[("narrow", "n")]]);
            let alone = request("api", &[&[("narrow", "n")]]);
            let mut pairs_allowed = 0u32;
            for _ in 0..50 {
                let wants_pair = task % 4 < 2;
                let req = if wants_pair { &pair } else { &alone };
                let answer = ask(&mut client, req.clone()).await;
                if wants_pair && code(&answer) == Code::Ok {
                    pairs_allowed += 1;
                }
            }
            pairs_allowed
        }));
    }
    let mut pairs_allowed = 0;
    for t in tasks {
        pairs_allowed += t.await.unwrap();
    }
    // The narrow quota (100) ran out: some pairs were denied.
    assert!(pairs_allowed < 200, "{pairs_allowed}");
    let mut client = instances[0].client().await;
    let wide = ask(&mut client, request("api", &[&[("wide", "w")]])).await;
    assert_eq!(wide.statuses[0].limit_remaining, 5000 - pairs_allowed - 1);
}

/// Without `--wait-for-redis`, a Redis that does not answer stops the start at once, with a
/// message naming the flags to change.
#[test]
fn an_unreachable_redis_stops_the_start_and_names_the_flags() {
    let config = support::ConfigDir::new(&[("api.yaml", API)]);
    let url = format!("redis://127.0.0.1:{}", free_port());
    let dir = config.0.to_str().unwrap();
    let args = ["--config", dir, "--redis", &url, "--listen", "127.0.0.1:0"];
    let (code, stderr) = support::run_to_exit(&args);
    assert_eq!(code, Some(1), "{stderr}");
    for flag in ["--redis", "--wait-for-redis", "--on-redis-failure"] {
        assert!(stderr.contains(flag), "{flag} in {stderr}");
    }
    assert!(stderr.contains(&url), "{stderr}");
}

/// With `--wait-for-redis`, the service says it waits, and serves once Redis answers.
#[tokio::test(flavor = "multi_thread")]
async fn the_start_waits_for_redis_behind_a_flag() {
    let config = support::ConfigDir::new(&[("api.yaml", API)]);
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    // Redis starts once the service has said that it waits for it.
    let log = Rls::log_path(&config);
    let redis = std::thread::spawn(move || {
        for _ in 0..1500 {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("--wait-for-redis") {
                return RedisServer::start_on(port, &[]);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("the service never said it waits for Redis");
    });
    let rls = Rls::start_in(config, &["--redis", &url, "--wait-for-redis", "60"]);
    let _redis = redis.join().expect("Redis started");
    let mut client = rls.client().await;
    let answer = ask(&mut client, request("api", &[&[("client", "w")]])).await;
    assert_eq!(code(&answer), Code::Ok);
    assert_eq!(answer.statuses[0].limit_remaining, 3);
    assert!(
        rls.log_text().contains("Redis answers"),
        "{}",
        rls.log_text()
    );
}

/// Polls `/healthcheck` (bounded: 30 s) until its status is `status`; returns the body.
async fn health_until(rls: &Rls, status: u16) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (now, body) = rls.http("/healthcheck", None).await;
        if now == status {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/healthcheck still answers {now} ({body:?}), not {status}; log:\n{}",
            rls.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `/healthcheck` fails while the configured Redis does not answer, naming its host and the
/// policy answering meanwhile, and passes again once it answers; decisions go on meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn healthcheck_follows_redis() {
    let mut redis = RedisServer::start();
    let port = redis.port;
    let rls = on_redis(&redis, &["--on-redis-failure", "fail-open"]);
    assert_eq!(health_until(&rls, 200).await, "OK\n");
    redis.kill();
    let problem = health_until(&rls, 503).await;
    assert!(problem.contains(&format!("127.0.0.1:{port}")), "{problem}");
    assert!(
        problem.contains("--on-redis-failure fail-open"),
        "{problem}"
    );
    rls.wait_for_log("/healthcheck fails");
    // The policy answers meanwhile.
    let mut client = rls.client().await;
    let req = request("api", &[&[("client", "h")]]);
    assert_eq!(code(&ask(&mut client, req.clone()).await), Code::Ok);
    let _redis = RedisServer::start_on(port, &[]);
    assert_eq!(health_until(&rls, 200).await, "OK\n");
    rls.wait_for_log("/healthcheck passes");
}
