//! The limiter exports its limit, in-flight count, RTTs, outcomes and sheds through `metrics`.

use crate::support::recorder;

use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::{Fixed, Limiter};
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
