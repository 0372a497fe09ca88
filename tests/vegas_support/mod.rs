//! Shared helpers for the `vegas_*` integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use flowguard::vegas::{LimitAlgorithm, Outcome, Sample};
use parking_lot::Mutex;

/// An algorithm whose limit follows a script: each update moves to the next scripted limit (the
/// last one repeats). Every sample it is fed is recorded.
#[derive(Debug, Clone)]
pub struct Scripted {
    limits: Vec<usize>,
    next: usize,
    current: usize,
    pub samples: Arc<Mutex<Vec<Sample>>>,
}

impl Scripted {
    /// Starts at `initial`; updates take the limits in `then`, in order.
    pub fn new(initial: usize, then: &[usize]) -> Self {
        Self {
            limits: then.to_vec(),
            next: 0,
            current: initial,
            samples: Arc::default(),
        }
    }
}

impl LimitAlgorithm for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn limit(&self) -> usize {
        self.current
    }

    fn update(&mut self, sample: &Sample) -> usize {
        self.samples.lock().push(*sample);
        if let Some(limit) = self.limits.get(self.next) {
            self.current = *limit;
            self.next += 1;
        }
        self.current
    }
}

/// A sample with `rtt` in microseconds.
pub fn sample(rtt_micros: u64, in_flight: usize, outcome: Outcome) -> Sample {
    Sample {
        rtt: Duration::from_micros(rtt_micros),
        in_flight,
        outcome,
    }
}

/// Feeds `rounds` rounds of successful samples of `rtt_micros`, each round `limit` samples with
/// the caller using the whole limit. Returns the final limit.
pub fn busy_rounds(algorithm: &mut impl LimitAlgorithm, rounds: usize, rtt_micros: u64) -> usize {
    for _ in 0..rounds {
        let limit = algorithm.limit();
        for _ in 0..limit {
            algorithm.update(&sample(rtt_micros, limit, Outcome::Success));
        }
    }
    algorithm.limit()
}
