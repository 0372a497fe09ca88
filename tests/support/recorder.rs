//! A `metrics` recorder for tests: keeps the latest value (gauges), total (counters) or sum
//! (histograms) of every metric, by name and labels (`name{label=value,...}`).
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
    pub values: Mutex<HashMap<String, f64>>,
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
    /// The value of `key` (`name{label=value,...}`, labels in the order they were given).
    pub fn value(&self, key: &str) -> Option<f64> {
        self.values.lock().get(key).copied()
    }
}
