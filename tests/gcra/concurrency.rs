//! Many threads on one key with a frozen clock admit exactly the burst, never more: with an
//! emission interval of whole nanoseconds (a 64-bit cell) and with a fractional one (a 128-bit cell).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use flowguard::clock::ManualClock;
use flowguard::gcra::{KeyedRateLimiter, Quota, RateLimiter};

const THREADS: usize = 8;
const ATTEMPTS: usize = 20_000;

#[test]
fn threads_on_one_key_admit_exactly_the_burst() {
    for rate in [1000, 3] {
        let quota = Quota::per_second(rate).unwrap().with_burst(5000).unwrap();
        one_key_admits_exactly_the_burst(quota);
    }
}

fn one_key_admits_exactly_the_burst(quota: Quota) {
    let limiter = Arc::new(
        RateLimiter::builder(quota)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            thread::spawn(move || {
                for _ in 0..ATTEMPTS {
                    // Mixed costs: 1, 2 and 3 tokens.
                    let cost = 1 + (i % 3) as u32;
                    if limiter.check_n(cost).unwrap().allowed {
                        admitted.fetch_add(u64::from(cost), Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let total = admitted.load(Ordering::Relaxed);
    assert!(
        total <= 5000,
        "admitted {total} tokens with a frozen clock and burst 5000"
    );
    // Every thread keeps asking until none of its costs fits, so at most 2 tokens can be left over.
    assert!(total >= 4998, "admitted only {total}");
    assert!(!limiter.check().unwrap().allowed || total < 5000);
}

#[test]
fn threads_on_one_keyed_entry_admit_exactly_the_burst() {
    for rate in [10, 7] {
        let quota = Quota::per_second(rate).unwrap().with_burst(1000).unwrap();
        one_keyed_entry_admits_exactly_the_burst(quota);
    }
}

fn one_keyed_entry_admits_exactly_the_burst(quota: Quota) {
    let limiter = Arc::new(
        KeyedRateLimiter::<u64>::builder(quota)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            thread::spawn(move || {
                for n in 0..ATTEMPTS as u64 {
                    // Everyone hammers key 1 (racing on its insertion too) and touches other keys.
                    if limiter.check_key(&1).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = limiter.check_key(&(n % 64 + 2));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(admitted.load(Ordering::Relaxed), 1000);
    assert_eq!(limiter.len(), 65);
}
