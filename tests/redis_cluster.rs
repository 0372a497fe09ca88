//! A real local Redis Cluster (3 masters, 3 replicas): keys over many slots all work, and a
//! replica promoted with `CLUSTER FAILOVER` mid-load takes over without stopping decisions.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};
use flowguard::gcra::{Decision, Quota};
use support::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_slots_and_survive_a_failover() {
    let cluster = RedisCluster::start();
    let store = RedisStore::cluster_builder(cluster.urls())
        // Failover rounds (redirects, slot refresh) take a few round trips.
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store.clone(), Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();

    // Many keys, hence many slots on all three masters; a user key with braces is digested, not pinned.
    // Keys live 18 s (cost 3 of 10 per minute), long enough to be counted on each master.
    let slow = RemoteRateLimiter::builder(store, Quota::per_minute(10).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    for i in 0..300 {
        let d = slow
            .check_key_n(format!("user-{i}").as_bytes(), 3)
            .await
            .unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.degraded),
            (true, 7, None),
            "key {i}"
        );
    }
    assert_eq!(limiter.check_key(b"{tag}x").await.unwrap().remaining, 9);
    let masters: Vec<_> = cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["role"]).starts_with("master"))
        .collect();
    assert_eq!(masters.len(), 3);
    for m in &masters {
        let keys: u64 = m.cli(&["dbsize"]).parse().unwrap();
        assert!(keys > 50, "every master holds a share of the keys: {keys}");
    }

    // Failover under load.
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for task in 0..8u32 {
        let (limiter, stop) = (limiter.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let mut decisions: Vec<Decision> = Vec::new();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let key = format!("load-{task}-{}", i % 200);
                let d =
                    tokio::time::timeout(Duration::from_secs(5), limiter.check_key(key.as_bytes()))
                        .await
                        .expect("a check hung")
                        .expect("no typed error during failover");
                decisions.push(d);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            decisions
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let replica = cluster.replicas()[0];
    assert_eq!(replica.cli(&["cluster", "failover"]), "OK");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !replica.cli(&["role"]).starts_with("master") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica was not promoted: {}\n{}",
            replica.cli(&["info", "replication"]),
            replica.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.wait_ok();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut per_task = Vec::new();
    for t in load {
        per_task.push(t.await.unwrap());
    }
    let total: usize = per_task.iter().map(Vec::len).sum();
    let degraded: usize = per_task
        .iter()
        .flatten()
        .filter(|d| d.degraded.is_some())
        .count();
    eprintln!("failover: {total} decisions, {degraded} degraded");
    for decisions in &per_task {
        let tail = &decisions[decisions.len().saturating_sub(5)..];
        assert!(
            tail.iter().all(|d| d.degraded.is_none()),
            "decisions continue from Redis after the failover"
        );
    }
    // The promoted node serves its slots; it never saw the script before and loaded it through EVAL.
    let stats = replica.cli(&["info", "commandstats"]);
    assert!(
        stats.contains("cmdstat_evalsha") && stats.contains("cmdstat_eval:"),
        "{stats}"
    );
}
