//! Faults: the server killed mid-load, restarted, paused, its script cache flushed. Every
//! decision comes back, made by the failure policy and marked degraded; Redis is used again as
//! soon as it answers.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::RedisServer;
use flowguard::clock::ManualClock;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};
use flowguard::gcra::{Decision, Degradation, DegradedReason, Quota};

/// A bound on any single check, far above the store's timeout: a check exceeding it is a hang.
const HANG: Duration = Duration::from_secs(3);

async fn check(limiter: &RemoteRateLimiter<RedisStore>, key: &[u8]) -> Decision {
    tokio::time::timeout(HANG, limiter.check_key(key))
        .await
        .expect("a check hung")
        .expect("no typed error")
}

/// Polls until a decision is made by Redis again (bounded).
async fn until_recovered(limiter: &RemoteRateLimiter<RedisStore>) -> Decision {
    for _ in 0..200 {
        let d = check(limiter, b"probe").await;
        if d.degraded.is_none() {
            return d;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the store did not recover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_load_fails_closed_then_recovers_after_restart() {
    let mut server = RedisServer::start();
    let store = RedisStore::builder(server.url()).connect().await.unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(1_000_000).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for task in 0..16u32 {
        let (limiter, stop) = (limiter.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut decisions = Vec::new();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                decisions.push(check(&limiter, format!("{task}-{i}").as_bytes()).await);
                tokio::task::yield_now().await;
            }
            decisions
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut normal = 0;
    let mut degraded = 0;
    for t in load {
        for d in t.await.unwrap() {
            match d.degraded {
                None => {
                    assert!(
                        d.allowed,
                        "fresh keys under a huge quota are allowed by Redis"
                    );
                    normal += 1;
                }
                Some(how) => {
                    assert_eq!(how, Degradation::FailClosed);
                    assert!(!d.allowed, "fail closed denies");
                    assert_eq!(d.retry_after, Some(limiter.store().probe_interval()));
                    degraded += 1;
                }
            }
        }
    }
    assert!(
        normal > 0 && degraded > 0,
        "normal {normal}, degraded {degraded}"
    );
    // Still down: still failing closed.
    assert_eq!(
        check(&limiter, b"x").await.degraded,
        Some(Degradation::FailClosed)
    );
    server.restart();
    let d = until_recovered(&limiter).await;
    assert!(d.allowed);
}

#[tokio::test]
async fn fail_open_allows_while_down() {
    let mut server = RedisServer::start();
    let store = RedisStore::builder(server.url()).connect().await.unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .build()
        .unwrap();
    assert_eq!(limiter.failure_policy(), FailurePolicy::FailOpen);
    assert!(check(&limiter, b"k").await.degraded.is_none());
    server.kill();
    for _ in 0..20 {
        let d = check(&limiter, b"k").await;
        assert_eq!(d.degraded, Some(Degradation::FailOpen));
        assert!(d.allowed);
        assert_eq!(
            (d.remaining(), d.reset_after()),
            (None, None),
            "no made-up numbers"
        );
    }
}

/// A store on `server` deciding at `clock`'s time (a local fallback reads it too).
async fn explicit_store(server: &RedisServer, clock: &ManualClock) -> RedisStore {
    RedisStore::builder(server.url())
        .explicit_time(clock.clone())
        .connect()
        .await
        .unwrap()
}

#[tokio::test]
async fn local_fallback_enforces_this_instances_share() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let store = explicit_store(&server, &clock).await;
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::local_instances(2))
        .build()
        .unwrap();
    let local = *limiter.local_quota().unwrap();
    assert_eq!(
        (local.burst(), local.emission_interval()),
        (5, Duration::from_millis(200))
    );
    assert!(check(&limiter, b"k").await.degraded.is_none());
    server.kill();
    for i in 0..5 {
        let d = check(&limiter, b"k").await;
        assert_eq!(d.degraded, Some(Degradation::LocalFallback), "request {i}");
        assert!(d.allowed, "request {i}");
    }
    let d = check(&limiter, b"k").await;
    assert_eq!(d.degraded, Some(Degradation::LocalFallback));
    assert!(!d.allowed, "the local share (burst 5) is spent");
    assert_eq!(d.retry_after, Some(Duration::from_millis(200)));
    // A cost that fits the global burst but not the local share is denied, not an error.
    let d = tokio::time::timeout(HANG, limiter.check_key_n(b"other", 8))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (d.allowed, d.degraded),
        (false, Some(Degradation::LocalFallback))
    );
    clock.advance(Duration::from_millis(200));
    assert!(check(&limiter, b"k").await.allowed);
}

#[tokio::test]
async fn client_pause_times_out_into_the_policy_and_recovers() {
    let server = RedisServer::start();
    let store = RedisStore::builder(server.url()).connect().await.unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(100).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    assert!(check(&limiter, b"k").await.degraded.is_none());
    assert_eq!(server.cli(&["client", "pause", "1000", "all"]), "OK");
    let d = check(&limiter, b"k").await;
    assert_eq!(
        d.degraded,
        Some(Degradation::FailClosed),
        "a paused server does not answer within the timeout"
    );
    assert_eq!(d.degraded_reason(), Some(DegradedReason::Timeout));
    // Calls within the probe interval do not wait for the server at all (on a machine slow
    // enough to pass the interval, the call probes and times out again).
    let d = check(&limiter, b"k").await;
    assert_eq!(d.degraded, Some(Degradation::FailClosed));
    assert!(
        matches!(
            d.degraded_reason(),
            Some(DegradedReason::Outage | DegradedReason::Timeout)
        ),
        "{d:?}"
    );
    let d = until_recovered(&limiter).await;
    assert_eq!(d.degraded_reason(), None);
    assert!(d.allowed);
}

#[tokio::test]
async fn script_flush_and_restart_are_recovered_from_transparently() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let store = RedisStore::builder(server.url())
        .explicit_time(clock.clone())
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    // A check of its own runs the lone script.
    let sha = sha1_smol::Sha1::from(include_str!("../../src/gcra/redis/lone.lua"))
        .digest()
        .to_string();
    assert_eq!(check(&limiter, b"k").await.remaining().unwrap(), 9);
    assert_eq!(server.cli(&["script", "exists", &sha]), "1");
    assert_eq!(server.cli(&["script", "flush"]), "OK");
    assert_eq!(server.cli(&["script", "exists", &sha]), "0");
    let d = check(&limiter, b"k").await;
    assert_eq!(
        (d.degraded, d.remaining().unwrap()),
        (None, 8),
        "NOSCRIPT answered by EVAL, state kept"
    );
    assert_eq!(
        server.cli(&["script", "exists", &sha]),
        "1",
        "EVAL cached the script again"
    );
    // One EVAL: after the flush. The first check found the script that connect loaded.
    let stats = server.cli(&["info", "commandstats"]);
    assert!(stats.contains("cmdstat_eval:calls=1"), "{stats}");
    // A restarted (empty) server has no scripts either.
    server.restart();
    let _ = until_recovered(&limiter).await;
    let d = check(&limiter, b"k").await;
    assert_eq!(
        (d.degraded, d.remaining().unwrap()),
        (None, 9),
        "the empty server decides with a freshly loaded script"
    );
}

/// Counts `flowguard_redis_degraded_total` increments by their labels.
#[derive(Default)]
struct CountingRecorder {
    counts: std::sync::Mutex<std::collections::HashMap<String, Arc<std::sync::atomic::AtomicU64>>>,
}

struct Count(Arc<std::sync::atomic::AtomicU64>);

impl metrics::CounterFn for Count {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl metrics::Recorder for CountingRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let cell = self.counts.lock().unwrap().entry(name).or_default().clone();
        metrics::Counter::from_arc(Arc::new(Count(cell)))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

#[test]
fn degraded_decisions_are_counted() {
    let recorder = CountingRecorder::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let mut server = RedisServer::start();
            let store = RedisStore::builder(server.url()).connect().await.unwrap();
            let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
                .build()
                .unwrap();
            assert!(check(&limiter, b"k").await.degraded.is_none());
            server.kill();
            // The first check finds the connection gone; the next are answered at once while
            // the circuit is open (or probe the dead server again, on a slow machine).
            for i in 0..3 {
                let d = check(&limiter, b"k").await;
                assert_eq!(d.degraded, Some(Degradation::FailOpen));
                let reason = d.degraded_reason();
                if i == 0 {
                    assert_eq!(reason, Some(DegradedReason::Connection));
                } else {
                    assert!(
                        matches!(
                            reason,
                            Some(DegradedReason::Outage | DegradedReason::Connection)
                        ),
                        "{reason:?}"
                    );
                }
            }
        })
    });
    let counts = recorder.counts.lock().unwrap();
    let labels = "flowguard_redis_degraded_total{policy=fail_open,topology=standalone,reason=";
    let by_reason: Vec<(&str, u64)> = counts
        .iter()
        .filter_map(|(k, c)| {
            let reason = k.strip_prefix(labels)?.strip_suffix('}')?;
            Some((reason, c.load(Ordering::Relaxed)))
        })
        .collect();
    assert_eq!(
        by_reason.iter().map(|(_, n)| n).sum::<u64>(),
        3,
        "{:?}",
        counts.keys().collect::<Vec<_>>()
    );
    assert!(
        by_reason
            .iter()
            .all(|(r, _)| *r == "connection" || *r == "outage"),
        "{by_reason:?}"
    );
    assert!(by_reason.iter().any(|(r, n)| *r == "connection" && *n >= 1));
}

#[tokio::test]
async fn a_lazy_store_starts_while_redis_is_down_and_picks_it_up() {
    let mut server = RedisServer::start();
    server.kill();
    let store = RedisStore::builder(server.url())
        .connect_lazy()
        .await
        .expect("no server needed to build a lazy store");
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    assert_eq!(
        check(&limiter, b"k").await.degraded,
        Some(Degradation::FailClosed)
    );
    server.restart();
    let d = until_recovered(&limiter).await;
    assert!(d.allowed);
}

/// During an outage, a flood of distinct keys fills the local fallback. docs/redis.md promises that
/// a key flood cannot make any key unlimited: a key the full fallback cannot track is denied
/// (marked `LocalFallbackFull`), never allowed untracked, and tracked keys keep their share.
#[tokio::test]
async fn a_key_flood_during_an_outage_makes_no_key_unlimited() {
    let mut server = RedisServer::start();
    let clock = ManualClock::new();
    let store = explicit_store(&server, &clock).await;
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::local_instances(2))
        .local_max_keys(100)
        .build()
        .unwrap();
    let local = *limiter.local_quota().unwrap();
    assert_eq!(local.burst(), 5);
    assert!(check(&limiter, b"k").await.degraded.is_none());
    server.kill();

    let mut flood_allowed = 0;
    for i in 0..1_000 {
        if check(&limiter, format!("flood-{i}").as_bytes())
            .await
            .allowed
        {
            flood_allowed += 1;
        }
    }
    assert_eq!(
        flood_allowed, 100,
        "one token for each key the fallback can track"
    );

    // Every key, new or flooded, gets at most this instance's burst.
    for key in ["victim", "flood-0", "flood-99", "flood-999"] {
        let mut allowed = 0;
        for _ in 0..20 {
            let d = check(&limiter, key.as_bytes()).await;
            assert!(d.degraded.is_some());
            allowed += usize::from(d.allowed);
        }
        assert!(
            allowed <= 5,
            "{key}: {allowed} of 20 allowed, local burst 5"
        );
    }
    let d = check(&limiter, b"victim").await;
    assert_eq!(d.degraded, Some(Degradation::LocalFallbackFull));
    assert_eq!(d.retry_after, Some(limiter.store().probe_interval()));
    // A tracked key is still decided by the fallback, against its own state.
    let tracked = check(&limiter, b"flood-0").await;
    assert_eq!(tracked.degraded, Some(Degradation::LocalFallback));

    // Once the flood's keys have expired, new keys are tracked again.
    clock.advance(local.burst_window());
    let d = check(&limiter, b"victim").await;
    assert_eq!(
        (d.allowed, d.degraded),
        (true, Some(Degradation::LocalFallback))
    );
}
