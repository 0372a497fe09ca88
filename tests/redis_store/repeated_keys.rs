//! One answer across stores for a request that names a limit and key more than once: 3,000
//! fixed-seed random requests (several demands each, drawn from two limits and three keys, so
//! that many repeat a key) through the in-memory set, the Redis set (one script call per request,
//! explicit time) and a set of separate limits (the way two-tier limiters form a set), on one
//! manual clock. Every verdict and every number (`remaining`, `retry_after`, `reset_after`) of
//! every decision is the same, as `LimitSet` defines them.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::RedisServer;
use flowguard::clock::ManualClock;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::{RemoteLimitSet, RemoteRateLimiter};
use flowguard::gcra::{
    Decisions, Demand, KeyedLimit, KeyedRateLimiter, LimitSet, MemoryLimitSet, Quota,
    SeparateLimits, SetError,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const REQUESTS: usize = 3_000;
const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];

/// Two limits whose intervals are whole microseconds (the Redis store's resolution) and whole
/// nanoseconds, so that every store computes the same durations.
fn quotas() -> [Quota; 2] {
    [
        Quota::per_second(4).unwrap().with_burst(3).unwrap(),
        Quota::per_second(10).unwrap().with_burst(5).unwrap(),
    ]
}

/// A random request: 1 to 4 demands, costs 0 to 3 (a total above a burst is an error in every
/// store, which is compared too).
fn request(rng: &mut SmallRng) -> Vec<(usize, &'static [u8], u32)> {
    let demands = rng.random_range(1..=4);
    (0..demands)
        .map(|_| {
            (
                rng.random_range(0..2),
                KEYS[rng.random_range(0..KEYS.len())],
                rng.random_range(0..=3),
            )
        })
        .collect()
}

/// What a set answered, as comparable numbers: per decision `allowed`, `remaining`,
/// `retry_after`, `reset_after`; or the error's demand and text.
type Answer = Result<Vec<(bool, Option<u32>, Option<Duration>, Option<Duration>)>, String>;

fn answer(result: Result<Decisions, SetError>) -> Answer {
    match result {
        Ok(decisions) => Ok(decisions
            .as_slice()
            .iter()
            .map(|d| {
                assert!(d.degraded.is_none(), "{d:?}");
                (d.allowed, d.remaining(), d.retry_after, d.reset_after())
            })
            .collect()),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn every_store_reports_the_same_numbers_for_a_repeated_key() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let clock = ManualClock::new();
    // Explicit times stay far from the flowguard epoch's zero; a day in.
    clock.set(Duration::from_secs(86_400));
    let memory = MemoryLimitSet::builder(quotas())
        .clock(clock.clone())
        .build()
        .unwrap();
    let separate = SeparateLimits::shared(quotas().map(|q| {
        Arc::new(
            KeyedRateLimiter::<Vec<u8>>::builder(q)
                .clock(clock.clone())
                .build()
                .unwrap(),
        ) as Arc<dyn KeyedLimit>
    }));
    let redis = runtime.block_on(async {
        let store = RedisStore::builder(server.url())
            .explicit_time(clock.clone())
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        quotas()
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let own = store.with_prefix(format!("limit{i}:")).unwrap();
                RemoteRateLimiter::builder(own, *q).build().unwrap()
            })
            .collect::<RemoteLimitSet<_>>()
    });

    let mut rng = SmallRng::seed_from_u64(27);
    let (mut verdicts, mut numbers, mut repeated, mut denied_repeated) = (0, 0, 0, 0);
    for n in 0..REQUESTS {
        // 0 to 60 ms, in whole microseconds: tokens come back while requests arrive, slower
        // than they are asked for.
        clock.advance(Duration::from_micros(rng.random_range(0..60_000)));
        let demands: Vec<Demand<'_>> = request(&mut rng)
            .into_iter()
            .map(|(limit, key, cost)| Demand { limit, key, cost })
            .collect();
        let in_memory = answer(memory.decide(&demands));
        let in_redis = answer(runtime.block_on(redis.check_all(&demands)));
        let in_separate = answer(runtime.block_on(separate.check_all(&demands)));
        let repeats = demands.iter().enumerate().any(|(i, d)| {
            demands[..i]
                .iter()
                .any(|e| e.limit == d.limit && e.key == d.key)
        });
        repeated += usize::from(repeats);
        if let Ok(memory_answer) = &in_memory
            && repeats
            && memory_answer.iter().any(|d| !d.0)
        {
            denied_repeated += 1;
        }
        for (name, other) in [("Redis", &in_redis), ("separate limits", &in_separate)] {
            let verdict = |a: &Answer| -> Result<Vec<bool>, String> {
                a.clone().map(|ds| ds.iter().map(|d| d.0).collect())
            };
            if verdict(&in_memory) != verdict(other) {
                verdicts += 1;
                eprintln!(
                    "request {n} {demands:?}: verdicts differ, memory {in_memory:?}, {name} {other:?}"
                );
            } else if in_memory != *other {
                numbers += 1;
                eprintln!(
                    "request {n} {demands:?}: numbers differ, memory {in_memory:?}, {name} {other:?}"
                );
            }
        }
    }
    // The requests this test is about were drawn: many repeat a key, and many of those are denied.
    assert!(repeated > 900, "{repeated} requests repeat a key");
    assert!(denied_repeated > 400, "{denied_repeated} of them denied");
    eprintln!("{repeated} requests repeat a key, {denied_repeated} of them denied");
    assert_eq!((verdicts, numbers), (0, 0), "requests whose answers differ");
}
