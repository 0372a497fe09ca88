//! The limiter exports its limit, in-flight count, RTTs and outcomes through `metrics`.

use std::sync::Arc;
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::{Fixed, Limiter};

#[path = "support/recorder.rs"]
mod recorder;

use recorder::{Store, TestRecorder};

#[test]
fn limit_in_flight_rtt_and_outcomes_are_exported() {
    let store = Arc::new(Store::default());
    let recorder = TestRecorder(Arc::clone(&store));
    let clock = ManualClock::new();
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder(Fixed::new(4).unwrap())
            .name("payments")
            .clock(clock.clone())
            .build()
            .unwrap()
    });
    let value = |key: &str| store.values.lock().get(key).copied();

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
