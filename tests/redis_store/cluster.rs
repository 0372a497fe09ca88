//! A real local Redis Cluster (3 masters, 3 replicas): keys over many slots all work, and a
//! replica promoted with `CLUSTER FAILOVER` mid-load takes over without stopping decisions.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::RedisCluster;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::{
    DecideAllError, FailurePolicy, QuotaCheck, RemoteRateLimiter, RemoteStore, StoreItem,
};
use flowguard::gcra::{Decision, Quota};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_spread_over_slots_and_survive_a_failover() {
    let cluster = RedisCluster::start();
    let store = crate::support::cluster_builder(cluster.urls())
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
    // Another quota: a prefix of its own (one prefix holds the state of one quota).
    let slow = RemoteRateLimiter::builder(
        store.with_prefix("slow:").unwrap(),
        Quota::per_minute(10).unwrap(),
    )
    .failure_policy(FailurePolicy::FailClosed)
    .build()
    .unwrap();
    for i in 0..300 {
        let d = slow
            .check_key_n(format!("user-{i}").as_bytes(), 3)
            .await
            .unwrap();
        assert_eq!(
            (d.allowed, d.remaining().unwrap(), d.degraded),
            (true, 7, None),
            "key {i}"
        );
    }
    assert_eq!(
        limiter.check_key(b"{tag}x").await.unwrap().remaining(),
        Some(9)
    );
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

/// Spawns `check_key(key)` and lets it send (or queue) its call.
async fn spawn_check(
    limiter: &RemoteRateLimiter<RedisStore>,
    key: &str,
) -> tokio::task::JoinHandle<Decision> {
    let (limiter, key) = (limiter.clone(), key.to_string());
    let task = tokio::spawn(async move { limiter.check_key(key.as_bytes()).await.unwrap() });
    tokio::task::yield_now().await;
    task
}

/// The index in `cluster.nodes` of the master serving `slot`, as node 0 sees it.
fn owner(cluster: &RedisCluster, slot: u16) -> usize {
    let view = cluster.view_from(0);
    let node = view
        .iter()
        .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
        .expect("a master serves every slot");
    cluster.index_of(node.port)
}

async fn store_and_limiter(cluster: &RedisCluster) -> (RedisStore, RemoteRateLimiter<RedisStore>) {
    let store = crate::support::cluster_builder(cluster.urls())
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store.clone(), Quota::per_minute(10).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    (store, limiter)
}

/// Decisions queued behind a call to the same master go to that master together (one call
/// naming keys of several of its slots), and each is decided exactly once.
#[tokio::test(flavor = "current_thread")]
async fn decisions_go_together_per_master() {
    let mut cluster = RedisCluster::start();
    let (store, limiter) = store_and_limiter(&cluster).await;
    let masters: Vec<usize> = (0..cluster.nodes.len())
        .filter(|&i| cluster.nodes[i].cli(&["role"]).starts_with("master"))
        .collect();
    for &m in &masters {
        cluster.nodes[m].pause();
    }
    let mut tasks = Vec::new();
    for i in 0..90 {
        let key = format!("user-{}", i % 30);
        tasks.push((key.clone(), spawn_check(&limiter, &key).await));
    }
    for &m in &masters {
        cluster.nodes[m].resume();
    }
    let mut remaining: std::collections::HashMap<String, Vec<u32>> = Default::default();
    for (key, task) in tasks {
        let d = task.await.unwrap();
        assert_eq!(d.degraded, None);
        remaining
            .entry(key)
            .or_default()
            .push(d.remaining().unwrap());
    }
    for (key, mut r) in remaining {
        r.sort_unstable();
        assert_eq!(r, [7, 8, 9], "{key}: each decision once, in turn");
    }
    // Per master: one call alone, then one or two calls for the rest (and an EVAL where a
    // node did not have a script yet): far fewer calls than decisions.
    let calls = store.script_calls();
    assert!(calls <= 18, "{calls} calls for 90 decisions");
    for &m in &masters {
        let stats = cluster.nodes[m].cli(&["info", "commandstats"]);
        assert!(stats.contains("cmdstat_evalsha"), "{stats}");
    }
}

/// A slot moves to another master while the store's slot map is stale: the coalesced call
/// reaches the old master, which does not serve that key any more. The key is decided alone
/// (redirected by `MOVED` to its new master), once; the call's other keys are decided in it.
#[tokio::test(flavor = "current_thread")]
async fn a_key_whose_slot_moved_is_decided_alone_once() {
    let mut cluster = RedisCluster::start();
    let (_store, limiter) = store_and_limiter(&cluster).await;
    let moving = "moving";
    let moving_key = format!("flowguard:={moving}");
    let slot = cluster.keyslot(moving_key.as_bytes());
    let from = owner(&cluster, slot);
    let to = (0..cluster.nodes.len())
        .find(|&i| i != from && cluster.nodes[i].cli(&["role"]).starts_with("master"))
        .unwrap();
    // Two other keys served by the old master.
    let stays: Vec<String> = (0..)
        .map(|i| format!("stay-{i}"))
        .filter(|k| {
            let s = cluster.keyslot(format!("flowguard:={k}").as_bytes());
            s != slot && owner(&cluster, s) == from
        })
        .take(2)
        .collect();
    assert_eq!(
        limiter
            .check_key_n(moving.as_bytes(), 2)
            .await
            .unwrap()
            .remaining()
            .unwrap(),
        8
    );

    // Move the slot, with the key, as `redis-cli --cluster reshard` does.
    let id = |i: usize| {
        let port = cluster.nodes[i].port;
        cluster
            .view_from(0)
            .into_iter()
            .find(|n| n.port == port)
            .unwrap()
            .id
    };
    let (from_id, to_id, slot_text) = (id(from), id(to), slot.to_string());
    let to_port = cluster.nodes[to].port.to_string();
    let ok = |answer: String| assert_eq!(answer, "OK");
    ok(cluster.nodes[to].cli(&["cluster", "setslot", &slot_text, "importing", &from_id]));
    ok(cluster.nodes[from].cli(&["cluster", "setslot", &slot_text, "migrating", &to_id]));
    ok(cluster.nodes[from].cli(&[
        "migrate",
        "127.0.0.1",
        &to_port,
        "",
        "0",
        "5000",
        "keys",
        &moving_key,
    ]));
    for node in [to, from] {
        ok(cluster.nodes[node].cli(&["cluster", "setslot", &slot_text, "node", &to_id]));
    }

    // The old master is held while the first call is in flight, so the others queue.
    cluster.nodes[from].pause();
    let first = spawn_check(&limiter, &stays[0]).await;
    let moved = spawn_check(&limiter, moving).await;
    let stay = spawn_check(&limiter, &stays[1]).await;
    cluster.nodes[from].resume();
    assert_eq!(first.await.unwrap().remaining(), Some(9));
    assert_eq!(
        moved.await.unwrap().remaining().unwrap(),
        7,
        "decided on the new master, once"
    );
    assert_eq!(stay.await.unwrap().remaining(), Some(9));
    assert_eq!(
        limiter
            .check_key_n(moving.as_bytes(), 0)
            .await
            .unwrap()
            .remaining()
            .unwrap(),
        7,
        "no decision was lost or made twice"
    );
    assert_eq!(cluster.nodes[to].cli(&["exists", &moving_key]), "1");
    assert!(
        cluster.nodes[from]
            .cli(&["exists", &moving_key])
            .starts_with("MOVED")
    );
}

/// One identity's quotas, one prefix each: with hash-tagged keys they share a slot and are
/// decided all or nothing in one call; without, they are in different slots and the store says so
/// (`DecideAllError::Apart`), while `check_all` peeks and spends them one by one.
#[tokio::test(flavor = "current_thread")]
async fn tagged_quotas_of_one_identity_are_decided_together() {
    let cluster = RedisCluster::start();
    for tagged in [true, false] {
        let store = crate::support::cluster_builder(cluster.urls())
            .hash_tag_keys(tagged)
            .prefix("sec:")
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        let hourly = store.with_prefix("hour:").unwrap();
        let second = RemoteRateLimiter::builder(store.clone(), Quota::per_second(10).unwrap())
            .build()
            .unwrap();
        let hour = RemoteRateLimiter::builder(hourly.clone(), Quota::per_hour(100).unwrap())
            .build()
            .unwrap();
        let key = format!("alice-{tagged}");
        let (k1, k2) = (store.key(key.as_bytes()), hourly.key(key.as_bytes()));
        let apart = cluster.keyslot(&k1) != cluster.keyslot(&k2);
        assert_eq!(apart, !tagged, "{k1:?} {k2:?}");
        assert_eq!(store.can_decide_all(&[&k1, &k2]), tagged);
        let items = [
            StoreItem {
                key: &k1,
                rule: second.rule(),
                cost: 1,
            },
            StoreItem {
                key: &k2,
                rule: hour.rule(),
                cost: 1,
            },
        ];
        let together = store.decide_all(&items).await;
        if tagged {
            let answers = together.unwrap();
            assert_eq!(answers[0].decision.remaining(), Some(9));
            assert_eq!(answers[1].decision.remaining(), Some(99));
        } else {
            assert_eq!(together, Err(DecideAllError::Apart));
        }
        let checks = [
            QuotaCheck {
                limiter: &second,
                key: key.as_bytes(),
                cost: 1,
            },
            QuotaCheck {
                limiter: &hour,
                key: key.as_bytes(),
                cost: 1,
            },
        ];
        let d = RemoteRateLimiter::check_all(&checks).await.unwrap();
        let spent_before = if tagged { 1 } else { 0 };
        assert_eq!(
            d.iter().map(|d| d.remaining().unwrap()).collect::<Vec<_>>(),
            [9 - spent_before, 99 - spent_before]
        );
    }
}
