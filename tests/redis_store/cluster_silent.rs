//! A master that stops answering without closing its connections (SIGSTOP: it accepts TCP and
//! answers nothing) is replaced by its replica after the node timeout. The store must move its
//! keys to the promoted replica while the old master stays silent, and keys of the other masters
//! must never be degraded (their circuits are their own).
//!
//! Nothing here bounds wall-clock time by a constant: the store's timeout is far above what a
//! healthy master takes even on a loaded machine, and the recovery is judged against rounds of
//! decisions timed by the test itself before the fault.
#![cfg(feature = "redis")]

use std::collections::HashMap;
use std::time::Duration;

use crate::support::RedisCluster;
use flowguard::gcra::Quota;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter, RemoteStore};
use tokio::time::Instant;

/// How soon after the promotion every key must be decided by Redis again, on an idle machine: the
/// store re-reads the slots when a call fails, and probes a failing master every 100 ms.
const RECOVERY: Duration = Duration::from_secs(1);

/// The store's timeout. A healthy master answers in well under a millisecond; a loaded test
/// machine can stall a reply for tens. The silent master costs this once per probe interval.
const TIMEOUT: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_master_is_replaced_without_degrading_other_masters() {
    // Without full coverage the other masters keep serving while the silent one's slots have no
    // master (with it, Redis refuses every key in that window: see docs/redis.md).
    let mut cluster = RedisCluster::start_with(&[
        "--cluster-node-timeout",
        "1000",
        "--cluster-require-full-coverage",
        "no",
    ]);
    let store = RedisStore::cluster_builder(cluster.urls())
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store.clone(), Quota::per_second(1_000_000).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();

    // 120 keys over all masters, each with the port of the master serving it.
    let view = cluster.view_from(0);
    let master_of = |slot: u16| {
        view.iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .map(|n| n.port)
            .unwrap()
    };
    let keys: Vec<(String, u16)> = (0..120)
        .map(|i| {
            let key = format!("user-{i}");
            let port = master_of(cluster.keyslot(&store.key(key.as_bytes())));
            (key, port)
        })
        .collect();
    let victim_port = keys[0].1;
    let victim_id = view
        .iter()
        .find(|n| n.port == victim_port)
        .unwrap()
        .id
        .clone();
    let replica_port = view
        .iter()
        .find(|n| n.master_id.as_deref() == Some(&victim_id))
        .unwrap()
        .port;
    let observer = cluster.index_of(
        view.iter()
            .find(|n| n.port != victim_port && n.port != replica_port)
            .unwrap()
            .port,
    );
    let per_master: HashMap<u16, usize> = keys.iter().fold(HashMap::new(), |mut m, (_, p)| {
        *m.entry(*p).or_default() += 1;
        m
    });
    assert_eq!(per_master.len(), 3, "keys on every master: {per_master:?}");
    // A round of decisions over every key, as the loop below makes them, timed before the fault:
    // the slowest of a few is this machine's pace now.
    let mut round_time = Duration::ZERO;
    for _ in 0..5 {
        let round = Instant::now();
        for (key, _) in &keys {
            let d = limiter.check_key(key.as_bytes()).await.unwrap();
            assert!(d.degraded.is_none(), "{key} before the fault");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        round_time = round_time.max(round.elapsed());
    }
    // A call to the silent master waits TIMEOUT before it counts as failed. On an idle machine
    // a round takes about 30 ms, and the bound is RECOVERY + TIMEOUT; a machine
    // that makes rounds slower gets a proportionally longer bound.
    let recovery_bound = (RECOVERY + TIMEOUT).max(50 * round_time);

    let victim = cluster.index_of(victim_port);
    cluster.nodes[victim].pause();
    let stopped = Instant::now();
    let mut promoted: Option<Instant> = None;
    let mut recovered: Option<Instant> = None;
    let mut victim_degraded = 0usize;
    // Node timeout 1 s, then an election: the promotion comes within a few seconds.
    let deadline = stopped + Duration::from_secs(30);
    while Instant::now() < deadline {
        let round = Instant::now();
        let mut all_from_redis = true;
        for (key, port) in &keys {
            let d = limiter.check_key(key.as_bytes()).await.unwrap();
            if d.degraded.is_some() {
                assert_eq!(
                    *port,
                    victim_port,
                    "{key} of another master was degraded {:?} after the stop",
                    stopped.elapsed()
                );
                victim_degraded += 1;
                all_from_redis = false;
            }
        }
        if promoted.is_none() {
            let now_master = tokio::task::block_in_place(|| {
                cluster
                    .view_from(observer)
                    .iter()
                    .any(|n| n.port == replica_port && n.master)
            });
            if now_master {
                promoted = Some(Instant::now());
            }
        }
        if let Some(p) = promoted {
            // A round that started after the promotion and saw every key decided by Redis.
            if all_from_redis && round >= p {
                recovered = Some(Instant::now());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let promoted = promoted.expect("the replica was promoted");
    let recovered =
        recovered.expect("every key decided by Redis again while the master is stopped");
    let recovery = recovered.saturating_duration_since(promoted);
    eprintln!(
        "silent master: promoted {:?} after the stop, every key from Redis {recovery:?} after the \
         promotion; {victim_degraded} degraded decisions, all on the silent master's keys",
        promoted - stopped
    );
    assert!(
        victim_degraded > 0,
        "the silent master's keys were degraded before the promotion"
    );
    assert!(
        recovery <= recovery_bound,
        "every key from Redis {recovery:?} after the promotion (more than {recovery_bound:?}, 50 \
         rounds of {round_time:?})"
    );
    // The old master is still silent, and every key keeps being decided by Redis.
    for _ in 0..3 {
        for (key, _) in &keys {
            let d = limiter.check_key(key.as_bytes()).await.unwrap();
            assert!(d.degraded.is_none(), "{key} after the recovery");
        }
    }
    cluster.nodes[victim].resume();
}
