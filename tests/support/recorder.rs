//! A `metrics` recorder for tests: keeps the latest value (gauges), total (counters) or sum
//! (histograms) of each metric, keyed `name{label=value,...}`. Install it for one closure with
//! `metrics::with_local_recorder`, or read what it kept with [`Store::get`].
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use parking_lot::Mutex;

/// Keeps the latest value (gauges), total (counters) or sum (histograms) per metric and labels.
#[derive(Default)]
pub struct Store {
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

pub struct TestRecorder(pub Arc<Store>);

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

impl Store {
    /// The value kept for `key` (`name{label=value,...}`, labels in registration order).
    pub fn get(&self, key: &str) -> Option<f64> {
        self.values.lock().get(key).copied()
    }
}

impl TestRecorder {
    /// A recorder and the store it writes to.
    pub fn new() -> (TestRecorder, Arc<Store>) {
        let store = Arc::new(Store::default());
        (TestRecorder(Arc::clone(&store)), store)
    }
}
