//! Differential test: the same random traces through the in-memory keyed limiter and the Redis
//! store (explicit time) reach identical decisions.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use flowguard::gcra::redis::{RedisRateLimiter, RedisStore};
use flowguard::gcra::{KeyedRateLimiter, ManualClock, Quota};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::RedisServer;

/// One step of a trace: advance the clock, then check `cost` tokens for one of a few keys.
#[derive(Clone, Debug)]
struct Step {
    advance_us: u64,
    key: u8,
    cost: u32,
}

fn case() -> impl Strategy<Value = (u64, u32, u32, Vec<Step>)> {
    // Emission intervals are whole microseconds (the Redis store's resolution), rates don't divide
    // the period evenly into round numbers, and costs run past the burst.
    (1u64..=400_000, 1u32..=7, 1u32..=12).prop_flat_map(|(interval_us, rate, burst)| {
        let step = (
            0..=interval_us * u64::from(burst) * 2,
            0u8..3,
            0..=burst + 1,
        )
            .prop_map(|(advance_us, key, cost)| Step {
                advance_us,
                key,
                cost,
            });
        (
            Just(interval_us),
            Just(rate),
            Just(burst),
            prop::collection::vec(step, 1..48),
        )
    })
}

#[test]
fn redis_and_memory_decide_identically() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let cases = std::sync::atomic::AtomicU32::new(0);
    runner
        .run(&case(), |(interval_us, rate, burst, trace)| {
            let case_no = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let quota = Quota::new(rate, Duration::from_micros(interval_us * u64::from(rate)))
                .and_then(|q| q.with_burst(burst))
                .unwrap();
            let clock = ManualClock::new();
            let memory = KeyedRateLimiter::builder(quota)
                .clock(clock.clone())
                .build::<Vec<u8>>()
                .unwrap();
            let redis = rt.block_on(async {
                let store = RedisStore::standalone(server.url())
                    .prefix(format!("case{case_no}:"))
                    .timeout(Duration::from_secs(5))
                    .explicit_time(clock.clone())
                    .connect()
                    .await
                    .unwrap();
                RedisRateLimiter::new(store, quota).unwrap()
            });
            for (i, step) in trace.iter().enumerate() {
                clock.advance(Duration::from_micros(step.advance_us));
                let key = vec![step.key];
                let expected = memory.check_key_n(&key[..], step.cost);
                let actual = rt.block_on(redis.check_key_n(&key, step.cost));
                prop_assert_eq!(&actual, &expected, "step {} of {:?}", i, trace);
            }
            Ok(())
        })
        .unwrap();
}
