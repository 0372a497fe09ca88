//! Additive increase, multiplicative decrease: the loss-driven classic.

use std::time::Duration;

use super::algorithm::{LimitAlgorithm, Outcome, Sample};
use super::bounds::{FractionalLimit, LimitBounds};
use crate::vegas::error::{ConfigError, check_range};

/// Settings of the [`Aimd`] algorithm.
#[derive(Debug, Clone, PartialEq)]
pub struct AimdConfig {
    /// Limit range and starting point.
    pub bounds: LimitBounds,
    /// Limit added per round of successful calls (each sample adds `increase / in_flight`),
    /// positive (default 1).
    pub increase: f64,
    /// Factor applied on each dropped call, in `(0, 1)` (default 0.9).
    pub backoff_ratio: f64,
    /// Treat a successful call slower than this as dropped (default: none, drops only).
    pub latency_threshold: Option<Duration>,
}

impl Default for AimdConfig {
    fn default() -> Self {
        Self {
            bounds: LimitBounds::default(),
            increase: 1.0,
            backoff_ratio: 0.9,
            latency_threshold: None,
        }
    }
}

/// AIMD: grows by `increase` per round while calls succeed (and the caller uses at least half
/// the limit), multiplies by `backoff_ratio` on every drop. It only reacts to losses, so it fills
/// the dependency's queue before it backs off.
///
/// ```
/// use flowguard::vegas::{Aimd, AimdConfig, LimitAlgorithm, Outcome, Sample};
/// use std::time::Duration;
///
/// let mut aimd = Aimd::new(AimdConfig::default())?;
/// let dropped = Sample { rtt: Duration::from_millis(5), in_flight: 20, outcome: Outcome::Dropped };
/// assert_eq!(aimd.update(&dropped), 18);
/// # Ok::<(), flowguard::vegas::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    config: AimdConfig,
    estimate: FractionalLimit,
}

impl Aimd {
    /// An AIMD algorithm with validated settings.
    pub fn new(config: AimdConfig) -> Result<Self, ConfigError> {
        check_range(
            "increase",
            config.increase,
            f64::MIN_POSITIVE,
            f64::MAX,
            "positive",
        )?;
        check_range(
            "backoff_ratio",
            config.backoff_ratio,
            f64::MIN_POSITIVE,
            1.0 - f64::EPSILON,
            "in (0, 1)",
        )?;
        if config.latency_threshold == Some(Duration::ZERO) {
            return Err(ConfigError::ZeroDuration {
                field: "latency_threshold",
            });
        }
        Ok(Self {
            estimate: FractionalLimit::new(config.bounds),
            config,
        })
    }
}

impl LimitAlgorithm for Aimd {
    fn name(&self) -> &'static str {
        "aimd"
    }

    fn limit(&self) -> usize {
        self.estimate.limit()
    }

    fn update(&mut self, sample: &Sample) -> usize {
        let too_slow = self
            .config
            .latency_threshold
            .is_some_and(|threshold| sample.rtt > threshold);
        let current = self.estimate.value();
        match sample.outcome {
            Outcome::Dropped => self.estimate.set(current * self.config.backoff_ratio),
            Outcome::Success if too_slow => self.estimate.set(current * self.config.backoff_ratio),
            Outcome::Success if self.estimate.is_used_by(sample.in_flight) => self
                .estimate
                .set(current + self.config.increase / sample.in_flight.max(1) as f64),
            Outcome::Success | Outcome::Ignored => self.estimate.limit(),
        }
    }
}
