//! Shared helpers for the `vegas_*` integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use flowguard::vegas::{LimitAlgorithm, Outcome, Sample};
use parking_lot::Mutex;

/// An algorithm whose limit follows a script: each update moves to the next scripted limit (the
/// last one repeats). Every sample it is fed is recorded, and so is every queueing reported with
/// a success (`Permit::success_queued`), which also counts as a successful sample.
#[derive(Debug, Clone)]
pub struct Scripted {
    limits: Vec<usize>,
    next: usize,
    current: usize,
    pub samples: Arc<Mutex<Vec<Sample>>>,
    pub queued: Arc<Mutex<Vec<Duration>>>,
}

impl Scripted {
    /// Starts at `initial`; updates take the limits in `then`, in order.
    pub fn new(initial: usize, then: &[usize]) -> Self {
        Self {
            limits: then.to_vec(),
            next: 0,
            current: initial,
            samples: Arc::default(),
            queued: Arc::default(),
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

    fn update_queued(&mut self, rtt_nanos: u64, in_flight: usize, queued_nanos: u64) -> usize {
        self.queued.lock().push(Duration::from_nanos(queued_nanos));
        self.update_nanos(rtt_nanos, in_flight, Outcome::Success)
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

/// A dependency with `slots` concurrent slots: calls beyond them queue, so RTT grows with
/// in-flight beyond the slots.
#[derive(Debug, Clone, Copy)]
pub struct Dependency {
    pub slots: usize,
    pub service_micros: u64,
}

impl Dependency {
    /// The RTT of a call granted with `in_flight` calls in flight.
    pub fn rtt_micros(&self, in_flight: usize) -> u64 {
        let load = (in_flight as f64 / self.slots as f64).max(1.0);
        (self.service_micros as f64 * load) as u64
    }

    /// Runs `rounds` rounds in which the caller uses the whole limit.
    pub fn drive(&self, algorithm: &mut impl LimitAlgorithm, rounds: usize) -> usize {
        for _ in 0..rounds {
            self.round(algorithm, 0);
        }
        algorithm.limit()
    }

    /// Runs one round in which the caller uses the whole limit, each call delayed by
    /// `host_micros` more (a busy host's own delay); returns the limit after it.
    pub fn round(&self, algorithm: &mut impl LimitAlgorithm, host_micros: u64) -> usize {
        let limit = algorithm.limit();
        for _ in 0..limit {
            let rtt = self.rtt_micros(limit) + host_micros;
            algorithm.update(&sample(rtt, limit, Outcome::Success));
        }
        algorithm.limit()
    }
}

/// A fixed-seed generator (SplitMix64): uniform in [0, 1).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) as f64 / (u64::MAX as f64 + 1.0)
    }
}
