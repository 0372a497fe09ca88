//! Two-tier mode against a real Redis: global accuracy across instances (each with its own
//! connection) and the Redis load, counted by Redis itself (`INFO commandstats`).
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::RedisServer;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::RemoteRateLimiter;
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{KeyedLimit, Quota};

/// One instance: its own connection, reserving `batch` tokens per round trip; reserved tokens
/// live `max_token_age` (default: the quota's burst window).
async fn pod(
    server: &RedisServer,
    quota: Quota,
    batch: u32,
    max_token_age: Option<Duration>,
) -> Arc<TwoTierLimiter<RemoteRateLimiter<RedisStore>>> {
    // A generous timeout: these tests are about accuracy and load, not latency on a busy machine.
    let store = crate::support::redis_builder(server.url())
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store, quota).build().unwrap();
    let builder = TwoTierLimiter::builder(limiter, batch).max_keys(10_000);
    let builder = match max_token_age {
        Some(age) => builder.max_token_age(age),
        None => builder,
    };
    Arc::new(builder.build().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_batch_50_redis_sees_one_script_call_per_50_decisions() {
    let server = RedisServer::start();
    // A quota far above the offered load, and tokens that outlive the test: every decision is
    // allowed, so every reserved token is spent and the ratio is the protocol's, not the machine's.
    let quota = Quota::per_second(1_000_000)
        .unwrap()
        .with_burst(100_000)
        .unwrap();
    let age = Some(Duration::from_secs(60));
    let pods = [
        pod(&server, quota, 50, age).await,
        pod(&server, quota, 50, age).await,
    ];
    server.cli(&["CONFIG", "RESETSTAT"]);
    let per_pod = 25_000u64;
    let mut tasks = vec![];
    for p in &pods {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0u64;
            for _ in 0..per_pod {
                allowed += u64::from(p.check(b"tenant", 1).await.unwrap().allowed);
            }
            allowed
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.unwrap();
    }
    let decisions = per_pod * pods.len() as u64;
    assert_eq!(allowed, decisions);
    tokio::time::sleep(Duration::from_millis(100)).await; // let trailing background refills land
    let calls = server.script_calls();
    let ratio = calls as f64 / decisions as f64;
    eprintln!(
        "{decisions} decisions, {calls} script calls (Redis commandstats): {ratio:.5} per decision"
    );
    // One reservation per 50 decisions, plus at most one trailing refill per pod.
    assert!(
        calls <= decisions / 50 + pods.len() as u64,
        "{calls} calls for {decisions} decisions"
    );
    assert!(ratio <= 0.0201, "{ratio}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_together_stay_within_the_global_bound() {
    let server = RedisServer::start();
    let quota = Quota::per_second(1000).unwrap().with_burst(100).unwrap();
    let (batch, pods_n) = (20u32, 4usize);
    let mut pods = vec![];
    for _ in 0..pods_n {
        pods.push(pod(&server, quota, batch, None).await);
    }
    let run = Duration::from_secs(2);
    let start = tokio::time::Instant::now();
    let mut tasks = vec![];
    for p in &pods {
        for _ in 0..4 {
            let p = p.clone();
            tasks.push(tokio::spawn(async move {
                let mut allowed = 0u64;
                while start.elapsed() < run {
                    allowed += u64::from(p.check(b"tenant", 1).await.unwrap().allowed);
                    tokio::task::yield_now().await;
                }
                allowed
            }));
        }
    }
    let mut admitted = 0;
    for t in tasks {
        admitted += t.await.unwrap();
    }
    let elapsed = start.elapsed();
    // Every spent token was reserved by a script that ran after `start` and answered before the
    // tasks ended, so inside a window of `elapsed`: GCRA grants at most B + elapsed/T of them.
    let bound = 100 + elapsed.as_millis() as u64;
    let slack = pods_n as u64 * u64::from(batch + batch.div_ceil(5));
    eprintln!("admitted {admitted} in {elapsed:?}; bound {bound} + {slack}");
    assert!(
        admitted <= bound + slack,
        "admitted {admitted} > {bound} + {slack}"
    );
    // Overloaded instances get (nearly) the whole quota: 100 + 1000/s.
    let ideal = 100.0 + elapsed.as_secs_f64() * 1000.0;
    assert!(
        admitted as f64 >= 0.9 * ideal,
        "admitted {admitted}, ideal {ideal:.0}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_the_quota_rate_is_admitted_through_all_instances() {
    let server = RedisServer::start();
    // 500/s with a burst of 250: a scheduling stall of up to half a second on a busy machine
    // bunches the paced requests but still fits the burst, so the check is about the protocol.
    let quota = Quota::per_second(500).unwrap().with_burst(250).unwrap();
    let pods_n = 4;
    let mut pods = vec![];
    for _ in 0..pods_n {
        pods.push(pod(&server, quota, 20, None).await);
    }
    // One client sends exactly at the quota rate (every 2 ms), round-robin over the instances.
    let mut ticker = tokio::time::interval(Duration::from_millis(2));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut sent, mut admitted) = (0u64, 0u64);
    for i in 0..1500usize {
        ticker.tick().await;
        sent += 1;
        admitted += u64::from(pods[i % pods_n].check(b"tenant", 1).await.unwrap().allowed);
    }
    eprintln!("quota-rate client: admitted {admitted} of {sent}");
    assert!(
        admitted as f64 >= 0.95 * sent as f64,
        "admitted {admitted} of {sent}"
    );
}
