//! The limiter exports its limit, in-flight count, RTTs, outcomes and sheds through `metrics`.

use crate::support::recorder;

use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::{Fixed, Limiter, Vegas};
use recorder::TestRecorder;

#[test]
fn limit_in_flight_rtt_and_outcomes_are_exported() {
    let (recorder, store) = TestRecorder::new();
    let clock = ManualClock::new();
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder(Fixed::new(4).unwrap())
            .name("payments")
            .clock(clock.clone())
            .build()
            .unwrap()
    });
    let value = |key: &str| store.get(key);

    let first = limiter.try_acquire().unwrap();
    let second = limiter.try_acquire().unwrap();
    assert_eq!(value("flowguard_vegas_limit{limiter=payments}"), Some(4.0));
    assert_eq!(
        value("flowguard_vegas_in_flight{limiter=payments}"),
        Some(2.0)
    );

    clock.advance(Duration::from_millis(250));
    first.success();
    second.dropped();
    assert_eq!(
        value("flowguard_vegas_in_flight{limiter=payments}"),
        Some(0.0)
    );
    assert_eq!(
        value("flowguard_vegas_rtt_seconds{limiter=payments}"),
        Some(0.25)
    );
    assert_eq!(
        value("flowguard_vegas_outcomes_total{limiter=payments,outcome=success}"),
        Some(1.0)
    );
    assert_eq!(
        value("flowguard_vegas_outcomes_total{limiter=payments,outcome=dropped}"),
        Some(1.0)
    );
}

/// Vegas's baseline (the unloaded RTT it reads queues against) is in the snapshot and in a
/// gauge, so that the instances of a fleet can be compared; an algorithm without one leaves both
/// empty.
#[test]
fn the_baseline_is_exported_once_learned() {
    let (recorder, store) = TestRecorder::new();
    let clock = ManualClock::new();
    let (vegas, fixed) = metrics::with_local_recorder(&recorder, || {
        (
            Limiter::builder(Vegas::new())
                .name("inventory")
                .clock(clock.clone())
                .build()
                .unwrap(),
            Limiter::builder(Fixed::new(4).unwrap())
                .name("ledger")
                .clock(clock.clone())
                .build()
                .unwrap(),
        )
    });
    let gauge = || store.get("flowguard_vegas_rtt_base_seconds{limiter=inventory}");
    let call = |limiter: &Limiter| {
        let permit = limiter.try_acquire().unwrap();
        clock.advance(Duration::from_millis(8));
        permit.success();
    };

    // Vegas starts at one permit and judges windows of 16 calls: nothing learned before.
    for _ in 0..15 {
        call(&vegas);
    }
    assert_eq!((vegas.limit(), vegas.snapshot().rtt_base), (1, None));
    assert_eq!(gauge(), None);
    // The 16th completes the window: the baseline is its low percentile, and the limit grows.
    call(&vegas);
    assert!(vegas.limit() > 1, "limit {}", vegas.limit());
    assert_eq!(vegas.snapshot().rtt_base, Some(Duration::from_millis(8)));
    assert_eq!(gauge(), Some(0.008));

    call(&fixed);
    assert_eq!(fixed.snapshot().rtt_base, None);
    assert_eq!(
        store.get("flowguard_vegas_rtt_base_seconds{limiter=ledger}"),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn refused_permits_are_counted_as_shed_once_each() {
    let (recorder, store) = TestRecorder::new();
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder(Fixed::new(1).unwrap())
            .name("search")
            .build()
            .unwrap()
    });
    let shed = || {
        store
            .get("flowguard_vegas_shed_total{limiter=search}")
            .unwrap_or(0.0)
    };
    let held = limiter.try_acquire().unwrap();
    assert_eq!(shed(), 0.0);
    assert!(limiter.try_acquire().is_err());
    assert_eq!(shed(), 1.0);
    // A wait that times out is one shed, not two (its fast path is not counted).
    assert!(limiter.acquire(Duration::from_millis(10)).await.is_err());
    assert_eq!(shed(), 2.0);
    held.success();
    // A wait that is served is no shed.
    limiter
        .acquire(Duration::from_millis(10))
        .await
        .unwrap()
        .success();
    assert_eq!(shed(), 2.0);
}
