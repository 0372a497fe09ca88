//! Differential tests: the same traces through the Redis store (explicit time) and in memory
//! reach identical decisions. Against the in-memory keyed limiter for whole-microsecond
//! intervals; against the pure rule at microsecond ticks for random quotas whose interval is a
//! fraction of a microsecond (periods of arbitrary nanoseconds, rates up to and beyond 10^6 per
//! second), with the window bound `B + t/T` and a client at exactly the rate checked too.
#![cfg(feature = "redis")]

use crate::support::window;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::support::RedisServer;
use flowguard::clock::ManualClock;
use flowguard::gcra::redis::{MAX_REDIS_WINDOW, RedisStore};
use flowguard::gcra::remote::RemoteRateLimiter;
use flowguard::gcra::{CheckError, Gcra, KeyedRateLimiter, Quota, Ticks};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};

/// Quotas whose window the Redis store accepts, most with `period / rate` not a whole number of µs.
fn quotas() -> impl Strategy<Value = Quota> {
    let rate = prop_oneof![1u32..50, 1u32..=1_000_000, Just(999_999), Just(2_000_000)];
    let period = prop_oneof![
        prop_oneof![Just(1u64), Just(60), 1u64..10].prop_map(Duration::from_secs),
        (1u64..=10_000_000_000).prop_map(Duration::from_nanos),
    ];
    let burst = prop_oneof![1u32..20, 1u32..=5_000];
    (rate, period, burst).prop_filter_map("a quota the Redis store accepts", |(r, p, b)| {
        let quota = Quota::new(r, p).and_then(|q| q.with_burst(b)).ok()?;
        (quota.burst_window() < MAX_REDIS_WINDOW).then_some(quota)
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn runner(cases: u32) -> TestRunner {
    // proptest's deterministic seed: the same cases on every run.
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::deterministic_rng(config.rng_algorithm);
    TestRunner::new_with_rng(config, rng)
}

async fn explicit(
    server: &RedisServer,
    quota: Quota,
    prefix: &str,
    clock: &ManualClock,
) -> RemoteRateLimiter<RedisStore> {
    let store = crate::support::redis_builder(server.url())
        .prefix(prefix)
        .timeout(Duration::from_secs(5))
        .explicit_time(clock.clone())
        .connect()
        .await
        .unwrap();
    RemoteRateLimiter::builder(store, quota).build().unwrap()
}

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

/// A case's quota (`rate` per `rate` intervals of `interval_us`, burst `burst`), a clock at 0, and
/// the in-memory limiter reading it: the reference.
fn reference(
    interval_us: u64,
    rate: u32,
    burst: u32,
) -> (Quota, ManualClock, KeyedRateLimiter<Vec<u8>, ManualClock>) {
    let quota = Quota::new(rate, Duration::from_micros(interval_us * u64::from(rate)))
        .and_then(|q| q.with_burst(burst))
        .unwrap();
    let clock = ManualClock::new();
    let memory = KeyedRateLimiter::<Vec<u8>>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    (quota, clock, memory)
}

#[test]
fn redis_and_memory_decide_identically() {
    let server = RedisServer::start();
    let rt = runtime();
    let mut runner = runner(32);
    let cases = AtomicU32::new(0);
    runner
        .run(&case(), |(interval_us, rate, burst, trace)| {
            let case_no = cases.fetch_add(1, Ordering::Relaxed);
            let (quota, clock, memory) = reference(interval_us, rate, burst);
            let redis = rt.block_on(explicit(&server, quota, &format!("case{case_no}:"), &clock));
            for (i, step) in trace.iter().enumerate() {
                clock.advance(Duration::from_micros(step.advance_us));
                let key = vec![step.key];
                let expected = memory
                    .check_key_n(&key[..], step.cost)
                    .map_err(CheckError::from);
                let actual = rt.block_on(redis.check_key_n(&key, step.cost));
                prop_assert_eq!(&actual, &expected, "step {} of {:?}", i, trace);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_script_keeps_fractions_of_a_microsecond_exactly() {
    let server = RedisServer::start();
    let rt = runtime();
    let cases = AtomicU32::new(0);
    let case = quotas().prop_flat_map(|quota| {
        let t = quota.emission_interval().as_micros() as u64;
        let window = quota.burst_window().as_micros() as u64;
        let burst = quota.burst();
        let step = prop_oneof![
            Just(0u64),
            0..=t + 1,
            0..=t.saturating_mul(3) + 1,
            0..=window.saturating_mul(2) + 1
        ];
        let cost = prop_oneof![0u32..=2, 0..=burst.saturating_add(1)];
        (
            Just(quota),
            prop::collection::vec((step, 0u8..2, cost), 1..60),
        )
    });
    runner(24)
        .run(&case, |(quota, trace)| {
            let n = cases.fetch_add(1, Ordering::Relaxed);
            let clock = ManualClock::new();
            let redis = rt.block_on(explicit(&server, quota, &format!("exact{n}:"), &clock));
            let rule = Gcra::with_resolution(&quota, Duration::from_micros(1)).unwrap();
            let mut tats: HashMap<u8, Ticks> = HashMap::new();
            let mut admitted: HashMap<u8, Vec<(u128, u128)>> = HashMap::new();
            for (i, &(step, key, cost)) in trace.iter().enumerate() {
                clock.advance(Duration::from_micros(step));
                let now = clock.elapsed().as_micros() as u64;
                let tat = tats.get(&key).copied().unwrap_or(Ticks::ZERO);
                let expected = rule.decide(tat, now, cost).map_err(CheckError::from);
                let actual = rt.block_on(redis.check_key_n(&[key], cost));
                prop_assert_eq!(
                    &actual.clone().map(|d| d.degraded),
                    &expected.clone().map(|_| None),
                    "not degraded"
                );
                prop_assert_eq!(
                    actual.clone(),
                    expected.clone().map(|s| s.decision),
                    "step {} of {:?} with {:?}",
                    i,
                    trace,
                    quota
                );
                if let Ok(s) = expected
                    && let Some(new_tat) = s.new_tat
                {
                    tats.insert(key, new_tat);
                    admitted
                        .entry(key)
                        .or_default()
                        .push((u128::from(now) * 1000, u128::from(cost)));
                }
            }
            for events in admitted.values() {
                window::check_windows(&quota, events).map_err(TestCaseError::fail)?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_client_at_exactly_the_rate_is_never_denied_by_redis() {
    let server = RedisServer::start();
    let rt = runtime();
    let cases = AtomicU32::new(0);
    runner(16)
        .run(&(quotas(), 0u64..1_000_000), |(quota, offset_us)| {
            let n = cases.fetch_add(1, Ordering::Relaxed);
            let (rate, period) = (u128::from(quota.rate()), quota.period().as_nanos());
            // The k-th request at k * T rounded up to the microsecond is at most 1 µs late; a
            // tolerance (B - 1) * T of at least 1 µs absorbs that (see `tolerance_for_a_clock_of_whole_nanoseconds`
            // in gcra_properties.rs). Whole intervals need none.
            let rule = Gcra::with_resolution(&quota, Duration::from_micros(1)).unwrap();
            let burst = if rule.is_whole() {
                1
            } else {
                1 + (rate * 1000).div_ceil(period) as u32
            };
            let quota = quota.with_burst(burst).unwrap();
            let clock = ManualClock::new();
            let redis = rt.block_on(explicit(&server, quota, &format!("rate{n}:"), &clock));
            clock.advance(Duration::from_micros(offset_us));
            let start = u128::from(offset_us);
            for k in 0..120u128 {
                let at = start + (k * period).div_ceil(rate * 1000);
                clock.set(Duration::from_micros(at as u64));
                let d = rt.block_on(redis.check_key(b"steady")).unwrap();
                prop_assert!(d.allowed, "request {} at {} µs denied: {:?}", k, at, quota);
            }
            Ok(())
        })
        .unwrap();
}

/// 300,000 per second is T = 3 1/3 µs. With T rounded down to 3 µs, Redis admitted 10% more
/// than the quota; now a greedy client gets exactly `B + floor(t / T)`.
#[tokio::test]
async fn a_high_rate_that_does_not_divide_a_microsecond_is_not_exceeded() {
    let server = RedisServer::start();
    let quota = Quota::per_second(300_000).unwrap().with_burst(10).unwrap();
    let clock = ManualClock::new();
    let redis = explicit(&server, quota, "greedy:", &clock).await;
    let span = Duration::from_millis(3);
    let mut admitted = 0u32;
    while clock.elapsed() <= span {
        let d = redis.check_key(b"k").await.unwrap();
        if d.allowed {
            admitted += 1;
        } else {
            clock.advance(d.retry_after.unwrap());
        }
    }
    assert_eq!(admitted, 10 + 900);
}

/// 3 per second with a burst of a million (a window of 3.9 days): spending the whole burst at 0
/// and again a third of a microsecond too early is denied. With T rounded down to 333,333 µs it was
/// allowed: the burst gained a token every few days.
#[tokio::test]
async fn a_large_burst_gains_no_token_over_days_in_redis() {
    let server = RedisServer::start();
    let quota = Quota::per_second(3).unwrap().with_burst(1_000_000).unwrap();
    let clock = ManualClock::new();
    let redis = explicit(&server, quota, "days:", &clock).await;
    assert!(redis.check_key_n(b"k", 1_000_000).await.unwrap().allowed);
    clock.set(Duration::from_micros(333_333_333_000));
    let d = redis.check_key_n(b"k", 1_000_000).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_micros(334)));
    clock.advance(Duration::from_micros(333));
    assert!(!redis.check_key_n(b"k", 1_000_000).await.unwrap().allowed);
    clock.advance(Duration::from_micros(1));
    assert!(redis.check_key_n(b"k", 1_000_000).await.unwrap().allowed);
    // The state keeps its fraction: granted at 333,333,333,334 µs (idle: the TAT had passed),
    // a million tokens later is 666,666,666,667 1/3 µs.
    let stored = server.cli(&["get", "days:=k"]);
    assert_eq!(stored, "666666666667+1/3");
}

/// The same traces through coalesced calls: the decisions of each group are issued together
/// while the server is stopped, so the first goes alone and the others queue behind it and go in
/// calls of up to `max_batch`. Each decision equals the in-memory limiter's, in queue order (a key
/// may appear several times in one call), and the calls are as few as the grouping says.
#[test]
fn coalesced_decisions_equal_calls_of_their_own() {
    const MAX_BATCH: usize = 4;
    let server = std::cell::RefCell::new(RedisServer::start());
    let url = server.borrow().url();
    let rt = runtime();
    let cases = AtomicU32::new(0);
    let strategy = (case(), prop::collection::vec(1usize..9, 1..16));
    runner(32)
        .run(&strategy, |((interval_us, rate, burst, trace), sizes)| {
            let case_no = cases.fetch_add(1, Ordering::Relaxed);
            let (quota, clock, memory) = reference(interval_us, rate, burst);
            let store = rt.block_on(
                crate::support::redis_builder(url.clone())
                    .prefix(format!("coalesced{case_no}:"))
                    .timeout(Duration::from_secs(5))
                    .explicit_time(clock.clone())
                    .max_batch(MAX_BATCH)
                    .connect(),
            );
            let store = store.unwrap();
            let redis = RemoteRateLimiter::builder(store.clone(), quota)
                .build()
                .unwrap();
            let mut steps = trace.iter();
            for &size in sizes.iter().cycle() {
                let group: Vec<&Step> = steps.by_ref().take(size).collect();
                if group.is_empty() {
                    break;
                }
                let calls_before = store.script_calls();
                server.borrow_mut().pause();
                let (results, expected, reaching) = rt.block_on(async {
                    let (mut tasks, mut expected, mut reaching) = (Vec::new(), Vec::new(), 0);
                    for step in &group {
                        clock.advance(Duration::from_micros(step.advance_us));
                        let key = vec![step.key];
                        expected.push(
                            memory
                                .check_key_n(&key[..], step.cost)
                                .map_err(CheckError::from),
                        );
                        reaching += usize::from(step.cost <= burst);
                        let (redis, cost) = (redis.clone(), step.cost);
                        tasks.push(tokio::spawn(
                            async move { redis.check_key_n(&key, cost).await },
                        ));
                        // The task reads the clock and sends (or queues) its decision now.
                        tokio::task::yield_now().await;
                    }
                    server.borrow_mut().resume();
                    let mut results = Vec::new();
                    for task in tasks {
                        results.push(task.await.unwrap());
                    }
                    (results, expected, reaching)
                });
                prop_assert_eq!(&results, &expected, "group {:?} of {:?}", group, trace);
                // One call alone, then the others in calls of up to MAX_BATCH; a call of one
                // decision runs the lone script, a call of several the general one (connect
                // loaded both: no call of the run meets NOSCRIPT).
                let calls = store.script_calls() - calls_before;
                let queued = reaching.saturating_sub(1);
                let alone = u64::from(reaching > 0) + u64::from(queued % MAX_BATCH == 1);
                let together = (queued / MAX_BATCH + usize::from(queued % MAX_BATCH > 1)) as u64;
                let want = alone + together;
                prop_assert_eq!(calls, want, "calls for {} decisions", reaching);
            }
            Ok(())
        })
        .unwrap();
}
