//! Two-tier mode over an in-memory "global" store on a manual clock: deterministic checks of the
//! protocol (few store calls, one reservation in flight, denials honoured, failures survived)
//! and of global accuracy with several instances. `tests/redis_two_tier.rs` repeats the
//! accuracy and load checks against a real Redis.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{CheckFuture, ConfigError, GcraError, KeyedLimit, KeyedRateLimiter, Quota};

/// Wraps a store, counting the calls that reach it, optionally failing them or making them wait.
struct Probe<S> {
    inner: Arc<S>,
    calls: AtomicUsize,
    fail: Arc<AtomicBool>,
    delay: Option<Duration>,
}

impl<S> Probe<S> {
    fn new(inner: S) -> Arc<Self> {
        Arc::new(Probe {
            inner: Arc::new(inner),
            calls: AtomicUsize::new(0),
            fail: Arc::new(AtomicBool::new(false)),
            delay: None,
        })
    }
    fn slow(inner: S, delay: Duration) -> Arc<Self> {
        Arc::new(Probe {
            inner: Arc::new(inner),
            calls: AtomicUsize::new(0),
            fail: Arc::new(AtomicBool::new(false)),
            delay: Some(delay),
        })
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl<S: KeyedLimit + 'static> KeyedLimit for Probe<S> {
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (inner, fail, delay) = (self.inner.clone(), self.fail.clone(), self.delay);
        let key = key.to_vec();
        CheckFuture::new(async move {
            if let Some(d) = delay {
                tokio::time::sleep(d).await;
            }
            if fail.load(Ordering::SeqCst) {
                return Err(GcraError::KeyLimitReached { max_keys: 0 }.into());
            }
            inner.check(&key, cost).await
        })
    }
    fn quota(&self) -> Quota {
        self.inner.quota()
    }
}

fn global(quota: Quota, clock: &ManualClock) -> KeyedRateLimiter<Vec<u8>, ManualClock> {
    KeyedRateLimiter::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn most_decisions_never_reach_the_store() {
    let clock = ManualClock::new();
    let store = Probe::new(global(
        Quota::per_second(10_000).unwrap().with_burst(1000).unwrap(),
        &clock,
    ));
    let limiter = TwoTierLimiter::builder(store.clone(), 50)
        .clock(clock.clone())
        .max_keys(1000)
        .build()
        .unwrap();
    let mut allowed = 0;
    for _ in 0..5000 {
        clock.advance(Duration::from_micros(100)); // exactly the quota's rate
        if limiter.check(b"k", 1).await.unwrap().allowed {
            allowed += 1;
        }
        tokio::task::yield_now().await; // let background refills run
    }
    assert_eq!(allowed, 5000);
    let per_decision = store.calls() as f64 / 5000.0;
    assert!(
        per_decision <= 0.02 + 1.0 / 5000.0,
        "{} store calls for 5000 decisions",
        store.calls()
    );
}

#[tokio::test(start_paused = true)]
async fn concurrent_callers_share_one_reservation() {
    let clock = ManualClock::new();
    let store = Probe::slow(
        global(Quota::per_second(1000).unwrap(), &clock),
        Duration::from_millis(5),
    );
    let limiter = Arc::new(
        TwoTierLimiter::builder(store.clone(), 50)
            .clock(clock)
            .max_keys(1000)
            .build()
            .unwrap(),
    );
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check(b"k", 1).await.unwrap().allowed })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += usize::from(t.await.unwrap());
    }
    assert_eq!(allowed, 30);
    assert_eq!(
        store.calls(),
        1,
        "30 callers on an empty reservoir, one reservation"
    );
}

#[tokio::test]
async fn a_denied_reservation_is_honoured_locally_without_asking_again() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap().with_burst(10).unwrap();
    let store = Probe::new(global(quota, &clock));
    let _ = store.inner.check_key_n(b"k".as_slice(), 10).unwrap(); // another instance spent the whole burst
    let limiter = TwoTierLimiter::builder(store.clone(), 5)
        .clock(clock.clone())
        .max_keys(1000)
        .build()
        .unwrap();
    let first = limiter.check(b"k", 1).await.unwrap();
    assert!(!first.allowed);
    assert_eq!(
        first.retry_after,
        Some(Duration::from_millis(500)),
        "5 tokens are 500 ms away"
    );
    for _ in 0..100 {
        clock.advance(Duration::from_millis(4));
        assert!(!limiter.check(b"k", 1).await.unwrap().allowed);
    }
    assert_eq!(store.calls(), 1, "no store call before retry_after");
    clock.advance(Duration::from_millis(100)); // 500 ms since the denial
    assert!(limiter.check(b"k", 1).await.unwrap().allowed);
    assert_eq!(store.calls(), 2);
}

#[tokio::test]
async fn tokens_on_hand_survive_a_failing_store() {
    let clock = ManualClock::new();
    let store = Probe::new(global(Quota::per_second(1000).unwrap(), &clock));
    let limiter = TwoTierLimiter::builder(store.clone(), 20)
        .clock(clock.clone())
        .max_keys(1000)
        .build()
        .unwrap();
    assert!(limiter.check(b"k", 1).await.unwrap().allowed);
    store.fail.store(true, Ordering::SeqCst);
    for i in 0..19 {
        assert!(
            limiter.check(b"k", 1).await.unwrap().allowed,
            "token {i} on hand"
        );
        tokio::task::yield_now().await;
    }
    // Empty, and the store fails: the error reaches the caller (no silent allow).
    assert!(limiter.check(b"k", 1).await.is_err());
    store.fail.store(false, Ordering::SeqCst);
    assert!(
        limiter.check(b"k", 1).await.unwrap().allowed,
        "recovers once the store answers"
    );
}

#[tokio::test]
async fn stale_tokens_are_not_hoarded() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(100).unwrap(); // burst window 1 s
    let store = Probe::new(global(quota, &clock));
    let limiter = TwoTierLimiter::builder(store.clone(), 50)
        .clock(clock.clone())
        .max_keys(1000)
        .build()
        .unwrap();
    assert_eq!(
        limiter.check(b"k", 1).await.unwrap().remaining().unwrap(),
        49
    );
    clock.advance(Duration::from_secs(1));
    // The 49 left are a second old: dropped; a fresh batch is reserved.
    assert_eq!(
        limiter.check(b"k", 1).await.unwrap().remaining().unwrap(),
        49
    );
    assert_eq!(store.calls(), 2);
    // Idle reservoirs are reclaimed.
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.reclaim(), 1);
    assert!(limiter.is_empty());
}

#[tokio::test]
async fn costs_are_validated_and_large_ones_go_to_the_store() {
    let clock = ManualClock::new();
    let store = Probe::new(global(Quota::per_second(100).unwrap(), &clock));
    let limiter = TwoTierLimiter::builder(store.clone(), 10)
        .clock(clock)
        .max_keys(1000)
        .build()
        .unwrap();
    assert_eq!(
        limiter.check(b"k", 101).await,
        Err(GcraError::InsufficientCapacity {
            cost: 101,
            burst: 100
        }
        .into())
    );
    assert_eq!(store.calls(), 0);
    let big = limiter.check(b"k", 60).await.unwrap();
    assert!(big.allowed);
    assert_eq!(store.calls(), 1);
    let err = TwoTierLimiter::builder(store.clone(), 101)
        .clock(ManualClock::new())
        .max_keys(10)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("at most 100"), "{err}");
    let err = TwoTierLimiter::builder(store, 10)
        .clock(ManualClock::new())
        .max_keys(0)
        .build()
        .unwrap_err();
    assert_eq!(err, ConfigError::ZeroMaxKeys);
    assert!(err.to_string().contains("at least one"), "{err}");
}

/// N instances share one global quota; a client sends through all of them, round-robin.
async fn simulate(instances: usize, offered_per_interval: u32, seconds: u64) -> (u64, u64, u64) {
    let clock = ManualClock::new();
    let quota = Quota::per_second(1000).unwrap().with_burst(100).unwrap();
    let store = Arc::new(global(quota, &clock));
    let batch = 10;
    let pods: Vec<_> = (0..instances)
        .map(|_| {
            TwoTierLimiter::builder(store.clone(), batch)
                .clock(clock.clone())
                .max_keys(1000)
                .build()
                .unwrap()
        })
        .collect();
    let (mut sent, mut admitted) = (0u64, 0u64);
    let steps = seconds * 1000; // one emission interval (1 ms) per step
    for step in 0..steps {
        for i in 0..offered_per_interval {
            let pod =
                &pods[(step as usize * offered_per_interval as usize + i as usize) % instances];
            sent += 1;
            if pod.check(b"tenant", 1).await.unwrap().allowed {
                admitted += 1;
            }
        }
        tokio::task::yield_now().await;
        clock.advance(Duration::from_millis(1));
    }
    let bound = 100 + steps + instances as u64 * u64::from(batch + batch.div_ceil(5));
    (sent, admitted, bound)
}

#[tokio::test]
async fn a_client_at_the_quota_rate_is_admitted_through_all_instances() {
    let (sent, admitted, bound) = simulate(4, 1, 10).await;
    eprintln!("quota rate: admitted {admitted} of {sent}, bound {bound}");
    assert!(admitted <= bound);
    assert!(
        admitted as f64 >= 0.95 * sent as f64,
        "admitted {admitted} of {sent}"
    );
}

#[tokio::test]
async fn overload_through_many_instances_stays_within_the_bound() {
    let (sent, admitted, bound) = simulate(8, 3, 10).await;
    eprintln!("overload: admitted {admitted} of {sent}, bound {bound}");
    assert_eq!(sent, 30_000);
    assert!(admitted <= bound, "admitted {admitted} > bound {bound}");
    // The quota is 10,100 over 10 s: overload must still get (nearly) all of it.
    assert!(admitted >= 9_500, "admitted only {admitted}");
}
