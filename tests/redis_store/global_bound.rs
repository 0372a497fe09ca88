//! Global bound: 8 independent stores (separate connections) x 16 tasks hammer one key; the
//! admitted count stays within `B + t/T` and reaches at least 95% of it, with `t` measured on the
//! server's clock (the time each script decided at).
#![cfg(feature = "redis")]

use std::time::Duration;

use crate::support::RedisServer;
use flowguard::gcra::redis::RESOLUTION;
use flowguard::gcra::remote::RemoteStore;
use flowguard::gcra::{CheckError, Gcra, Quota};

const STORES: usize = 8;
const TASKS_PER_STORE: usize = 16;
const RUN_FOR: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_share_one_quota() {
    let server = RedisServer::start();
    // T = 5 ms: 200/s, far below what 128 busy callers ask for. B = 200 (a one-second window): a
    // stall of the shared test machine shorter than that loses no tokens, so the 95% floor measures
    // the store, not the scheduler.
    let quota = Quota::per_second(200).unwrap().with_burst(200).unwrap();
    let rule = Gcra::with_resolution(&quota, RESOLUTION).unwrap();
    // 5,000 µs exactly: a whole number of ticks.
    let interval = rule.interval_ticks();
    assert_eq!(interval.frac, 0);
    let interval_us = interval.whole;
    let burst = u64::from(rule.burst());
    let mut tasks = Vec::new();
    for _ in 0..STORES {
        // Each store is its own instance: its own connection. A generous timeout: this test is about
        // the bound, not latency on a shared 2-core machine.
        let store = crate::support::redis_builder(server.url())
            .timeout(Duration::from_secs(2))
            .connect()
            .await
            .unwrap();
        assert_eq!(
            store.rule(&quota),
            Ok(rule),
            "the store's rule is the µs rule"
        );
        for _ in 0..TASKS_PER_STORE {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let stop = tokio::time::Instant::now() + RUN_FOR;
                let mut seen: Vec<(bool, u64)> = Vec::new();
                while tokio::time::Instant::now() < stop {
                    let answer = store.decide(&store.key(b"shared"), &rule, 1).await?;
                    seen.push((answer.decision.allowed, answer.at.as_micros() as u64));
                }
                Ok::<_, CheckError>(seen)
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap().expect("no store errors"));
    }
    let first = all.iter().map(|&(_, at)| at).min().unwrap();
    let last = all.iter().map(|&(_, at)| at).max().unwrap();
    let last_allowed = all.iter().filter(|d| d.0).map(|&(_, at)| at).max().unwrap();
    let admitted = all.iter().filter(|d| d.0).count() as u64;
    // Every admission happened in [first, last_allowed] by the server's clock.
    let upper = burst + (last_allowed - first) / interval_us;
    let ideal = burst as f64 + (last - first) as f64 / interval_us as f64;
    eprintln!(
        "decisions {} admitted {admitted} bound {upper} ideal {ideal:.1} span {} ms",
        all.len(),
        (last - first) / 1000
    );
    assert!(admitted <= upper, "admitted {admitted} > B + t/T = {upper}");
    assert!(
        admitted as f64 >= 0.95 * ideal,
        "admitted {admitted} < 95% of {ideal:.1}"
    );
    assert!(
        all.len() as u64 > 2 * admitted,
        "the key was contended: {} decisions",
        all.len()
    );
}
