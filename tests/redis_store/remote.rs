//! The remote limiter over a store of this process that can be told to fail: what the limiter
//! does with a store's answers and failures, apart from Redis (whose own tests run the same
//! limiter against real servers). One store key derived per check, none for a cost above the
//! burst; one call per probe interval while a group fails, none in between; the failure policy
//! answers, and the first answer ends the degradation; groups fail apart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowguard::clock::{Clock, ManualClock};
use flowguard::gcra::remote::{
    Circuit, FailurePolicy, RemoteRateLimiter, RemoteStore, StoreDecision, StoreError, Unavailable,
};
use flowguard::gcra::{
    CheckError, ConfigError, Degradation, Gcra, GcraError, KeyedLimit, Quota, Ticks,
};

const PROBE: Duration = Duration::from_millis(100);

/// GCRA states in a map, decided at a manual clock's microseconds; keys starting with `b` are in
/// group 1, the others in group 0; a group can be switched off.
#[derive(Default)]
struct Counts {
    keys: AtomicUsize,
    decides: AtomicUsize,
    probe_failures: AtomicUsize,
    recoveries: AtomicUsize,
}

struct MapStore {
    clock: ManualClock,
    tats: Mutex<HashMap<Vec<u8>, Ticks>>,
    circuit: Circuit,
    down: [AtomicBool; 2],
    counts: Arc<Counts>,
}

impl MapStore {
    fn new(clock: &ManualClock) -> (MapStore, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        let store = MapStore {
            clock: clock.clone(),
            tats: Mutex::default(),
            circuit: Circuit::new(2, PROBE),
            down: [AtomicBool::new(false), AtomicBool::new(false)],
            counts: counts.clone(),
        };
        (store, counts)
    }
}

impl RemoteStore for MapStore {
    type Key = Vec<u8>;

    fn rule(&self, quota: &Quota) -> Result<Gcra, ConfigError> {
        Gcra::with_resolution(quota, Duration::from_micros(1)).map_err(ConfigError::StoreResolution)
    }

    fn key(&self, key: &[u8]) -> Vec<u8> {
        self.counts.keys.fetch_add(1, Ordering::SeqCst);
        [b"map:", key].concat()
    }

    fn circuit(&self) -> &Circuit {
        &self.circuit
    }

    fn group(&self, key: &Vec<u8>) -> usize {
        usize::from(key.get(4) == Some(&b'b'))
    }

    async fn decide(
        &self,
        key: &Vec<u8>,
        rule: &Gcra,
        cost: u32,
    ) -> Result<StoreDecision, CheckError> {
        self.counts.decides.fetch_add(1, Ordering::SeqCst);
        if self.down[self.group(key)].load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(Unavailable::Connection).into());
        }
        let now = self.clock.now_nanos() / 1000;
        let mut tats = self.tats.lock().unwrap();
        let tat = tats.get(key).copied().unwrap_or(Ticks::ZERO);
        let step = rule.decide(tat, now, cost)?;
        if let Some(new_tat) = step.new_tat {
            tats.insert(key.clone(), new_tat);
        }
        Ok(StoreDecision::new(
            step.decision,
            Duration::from_micros(now),
        ))
    }

    fn probe_failed(&self, _key: &Vec<u8>) {
        self.counts.probe_failures.fetch_add(1, Ordering::SeqCst);
    }

    fn recovered(&self) {
        self.counts.recoveries.fetch_add(1, Ordering::SeqCst);
    }

    fn explicit_clock(&self) -> Option<Arc<dyn Clock>> {
        Some(Arc::new(self.clock.clone()))
    }

    fn topology(&self) -> &'static str {
        "map"
    }
}

fn limiter(policy: FailurePolicy) -> (RemoteRateLimiter<MapStore>, Arc<Counts>, ManualClock) {
    let clock = ManualClock::new();
    let (store, counts) = MapStore::new(&clock);
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .failure_policy(policy)
        .build()
        .unwrap();
    (limiter, counts, clock)
}

#[tokio::test(start_paused = true)]
async fn one_store_key_per_check_and_none_for_a_cost_above_the_burst() {
    let (limiter, counts, _) = limiter(FailurePolicy::local_instances(2));
    let d = limiter.check_key_n(b"k", 3).await.unwrap();
    assert_eq!(
        (d.allowed, d.remaining().unwrap(), d.degraded),
        (true, 7, None)
    );
    assert_eq!(counts.keys.load(Ordering::SeqCst), 1);
    assert_eq!(
        limiter.check_key_n(b"k", 11).await,
        Err(CheckError::Gcra(GcraError::InsufficientCapacity {
            cost: 11,
            burst: 10
        }))
    );
    assert_eq!(counts.keys.load(Ordering::SeqCst), 1, "no key, no call");
    assert_eq!(counts.decides.load(Ordering::SeqCst), 1);
    // Degraded (the local fallback decides), still one key per check.
    limiter.store().down[0].store(true, Ordering::SeqCst);
    let d = limiter.check_key(b"k").await.unwrap();
    assert_eq!(d.degraded, Some(Degradation::LocalFallback));
    let d = limiter.check_key(b"k").await.unwrap();
    assert_eq!(d.degraded, Some(Degradation::LocalFallback));
    assert_eq!(counts.keys.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_failed_group_is_probed_once_per_interval_and_recovers_on_the_first_answer() {
    let (limiter, counts, _) = limiter(FailurePolicy::FailClosed);
    limiter.store().down[0].store(true, Ordering::SeqCst);
    let decides = || counts.decides.load(Ordering::SeqCst);
    for _ in 0..5 {
        let d = limiter.check_key(b"a").await.unwrap();
        assert_eq!(d.degraded, Some(Degradation::FailClosed));
        assert!(!d.allowed);
        assert_eq!(
            d.retry_after,
            Some(PROBE),
            "retry when the store is next asked"
        );
    }
    assert_eq!(decides(), 1, "skipped until the next probe");
    assert_eq!(counts.probe_failures.load(Ordering::SeqCst), 0);
    // The other group is not degraded.
    let d = limiter.check_key(b"b").await.unwrap();
    assert_eq!((d.allowed, d.degraded), (true, None));
    assert_eq!(decides(), 2);

    tokio::time::advance(PROBE).await;
    let d = limiter.check_key(b"a").await.unwrap();
    assert_eq!(d.degraded, Some(Degradation::FailClosed));
    assert_eq!(decides(), 3, "one probe");
    assert_eq!(
        counts.probe_failures.load(Ordering::SeqCst),
        1,
        "the store is told"
    );
    let _ = limiter.check_key(b"a").await.unwrap();
    assert_eq!(decides(), 3);

    limiter.store().down[0].store(false, Ordering::SeqCst);
    tokio::time::advance(PROBE).await;
    let d = limiter.check_key(b"a").await.unwrap();
    assert_eq!((d.allowed, d.degraded), (true, None), "the probe's answer");
    assert_eq!(counts.recoveries.load(Ordering::SeqCst), 1);
    let d = limiter.check_key(b"a").await.unwrap();
    assert_eq!((d.allowed, d.degraded), (true, None));
    assert_eq!(decides(), 5);
}

#[tokio::test(start_paused = true)]
async fn fail_open_reports_no_numbers_and_the_fallback_this_instances_share() {
    let (open, _, _) = limiter(FailurePolicy::FailOpen);
    open.store().down[0].store(true, Ordering::SeqCst);
    let d = open.check_key_n(b"a", 4).await.unwrap();
    assert_eq!(
        (d.allowed, d.remaining(), d.reset_after(), d.degraded),
        (true, None, None, Some(Degradation::FailOpen))
    );

    let (local, _, clock) = limiter(FailurePolicy::local_instances(2));
    assert_eq!(local.local_quota().map(Quota::burst), Some(5));
    local.store().down[0].store(true, Ordering::SeqCst);
    for _ in 0..5 {
        assert!(local.check_key(b"a").await.unwrap().allowed);
    }
    let d = local.check_key(b"a").await.unwrap();
    assert_eq!(
        (d.allowed, d.degraded),
        (false, Some(Degradation::LocalFallback))
    );
    // Real numbers, of this instance's share: its burst, its state.
    assert_eq!(
        (d.limit, d.remaining(), d.reset_after()),
        (5, Some(0), Some(Duration::from_secs(1)))
    );
    // A cost within the quota's burst but above the share's: denied until the store is asked
    // again, with the share's numbers of the key as they are (nothing spent).
    let d = local.check_key_n(b"c", 7).await.unwrap();
    assert_eq!(
        (d.allowed, d.degraded, d.retry_after),
        (false, Some(Degradation::LocalFallback), Some(PROBE))
    );
    assert_eq!(
        (d.limit, d.remaining(), d.reset_after()),
        (5, Some(5), Some(Duration::ZERO))
    );
    // The fallback reads the store's clock: 200 ms (one interval of 5 per second) later, one more.
    clock.advance(Duration::from_millis(200));
    assert!(local.check_key(b"a").await.unwrap().allowed);
}

#[tokio::test(start_paused = true)]
async fn the_remote_limiter_is_a_keyed_limit_whose_check_owns_its_work() {
    let (limiter, _, _) = limiter(FailurePolicy::FailClosed);
    let shared: Arc<dyn KeyedLimit> = Arc::new(limiter);
    assert_eq!(shared.quota().burst(), 10);
    let check = shared.check(b"k", 10);
    drop(shared);
    let d = tokio::spawn(check).await.unwrap().unwrap();
    assert_eq!((d.allowed, d.remaining().unwrap()), (true, 0));
}
