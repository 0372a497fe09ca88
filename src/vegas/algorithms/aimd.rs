//! Additive increase, multiplicative decrease: the loss-driven classic.

use std::time::Duration;

use super::algorithm::{LimitAlgorithm, Outcome, Sample};
use super::bounds::{FractionalLimit, LimitBounds};
use crate::vegas::error::{ConfigError, check_range};

/// The settings of an [`Aimd`] algorithm; see [`AimdBuilder`] for what each one does.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    bounds: LimitBounds,
    increase: f64,
    backoff_ratio: f64,
    latency_threshold: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bounds: LimitBounds::default(),
            increase: 1.0,
            backoff_ratio: 0.9,
            latency_threshold: None,
        }
    }
}

/// Configures and builds an [`Aimd`] algorithm, from [`Aimd::builder`]. Every setting has a
/// default (the ones [`Aimd::new`] uses).
///
/// ```
/// use flowguard::vegas::Aimd;
/// use std::time::Duration;
///
/// let aimd = Aimd::builder()
///     .backoff_ratio(0.8)
///     .latency_threshold(Duration::from_millis(250))
///     .build()?;
/// assert!(Aimd::builder().backoff_ratio(1.5).build().is_err());
/// # Ok::<(), flowguard::vegas::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct AimdBuilder {
    settings: Settings,
}

impl AimdBuilder {
    /// Limit range and starting point (default [`LimitBounds::default`]).
    pub fn bounds(mut self, bounds: LimitBounds) -> Self {
        self.settings.bounds = bounds;
        self
    }

    /// Limit added per round of successful calls (each sample adds `increase / in_flight`),
    /// positive (default 1).
    pub fn increase(mut self, increase: f64) -> Self {
        self.settings.increase = increase;
        self
    }

    /// Factor applied on each dropped call, in `(0, 1)` (default 0.9).
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.settings.backoff_ratio = ratio;
        self
    }

    /// Treat a successful call slower than `threshold` (non-zero) as dropped (default: none,
    /// drops only).
    pub fn latency_threshold(mut self, threshold: Duration) -> Self {
        self.settings.latency_threshold = Some(threshold);
        self
    }

    /// The algorithm, or the first setting that cannot work.
    pub fn build(self) -> Result<Aimd, ConfigError> {
        let config = self.settings;
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
        Ok(Aimd::with(config))
    }
}

/// AIMD: grows by `increase` per round while calls succeed (and the caller uses at least half
/// the limit), multiplies by `backoff_ratio` on every drop. It only reacts to losses, so it fills
/// the dependency's queue before it backs off.
///
/// ```
/// use flowguard::vegas::{Aimd, LimitAlgorithm, Outcome, Sample};
/// use std::time::Duration;
///
/// let mut aimd = Aimd::new();
/// let dropped = Sample { rtt: Duration::from_millis(5), in_flight: 20, outcome: Outcome::Dropped };
/// assert_eq!(aimd.update(&dropped), 18);
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    config: Settings,
    estimate: FractionalLimit,
}

impl Aimd {
    /// Starts configuring an AIMD algorithm.
    pub fn builder() -> AimdBuilder {
        AimdBuilder {
            settings: Settings::default(),
        }
    }

    /// The builder with defaults (`Aimd::builder().build()`, which cannot fail): limits in
    /// `[1, 1000]` starting at 20, `increase` 1, `backoff_ratio` 0.9, no latency threshold.
    pub fn new() -> Self {
        Self::with(Settings::default())
    }

    /// An AIMD algorithm with validated `config`.
    fn with(config: Settings) -> Self {
        Self {
            estimate: FractionalLimit::new(config.bounds),
            config,
        }
    }
}

impl Default for Aimd {
    /// [`Aimd::new`].
    fn default() -> Self {
        Self::new()
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
