//! The limiter exports its limit, in-flight count, RTTs and outcomes through `metrics`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::{Fixed, Limiter};
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use parking_lot::Mutex;

/// Keeps the latest value (gauges), total (counters) or sum (histograms) per metric and labels.
#[derive(Default)]
struct Store {
    values: Mutex<HashMap<String, f64>>,
}

struct Cell {
    key: String,
    store: Arc<Store>,
}

impl Cell {
    fn update(&self, f: impl FnOnce(f64) -> f64) {
        let mut values = self.store.values.lock();
        let value = values.entry(self.key.clone()).or_default();
        *value = f(*value);
    }
}

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.update(|v| v + value as f64);
    }
    fn absolute(&self, value: u64) {
        self.update(|_| value as f64);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }
    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }
    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        self.update(|v| v + value);
    }
}

struct TestRecorder(Arc<Store>);

impl TestRecorder {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        Arc::new(Cell {
            key: format!("{}{{{}}}", key.name(), labels.join(",")),
            store: Arc::clone(&self.0),
        })
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.cell(key))
    }
}

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
