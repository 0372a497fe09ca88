//! A gradient algorithm: compare short-term latency to a long-term average.

use super::algorithm::{LimitAlgorithm, Outcome, Sample, duration_nanos};
use super::bounds::{FractionalLimit, LimitBounds};
use crate::vegas::error::{ConfigError, check_range};

/// The settings of a [`Gradient`] algorithm; see [`GradientBuilder`] for what each one does.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    bounds: LimitBounds,
    smoothing: f64,
    rtt_tolerance: f64,
    long_window: usize,
    queue_size: f64,
    backoff_ratio: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bounds: LimitBounds::default(),
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            long_window: 600,
            queue_size: 4.0,
            backoff_ratio: 0.9,
        }
    }
}

/// Configures and builds a [`Gradient`] algorithm, from [`Gradient::builder`]. Every setting
/// has a default (the ones [`Gradient::new`] uses).
///
/// ```
/// use flowguard::vegas::Gradient;
///
/// let gradient = Gradient::builder().rtt_tolerance(2.0).queue_size(8.0).build()?;
/// assert!(Gradient::builder().long_window(0).build().is_err());
/// # Ok::<(), flowguard::vegas::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct GradientBuilder {
    settings: Settings,
}

impl GradientBuilder {
    /// Limit range and starting point (default [`LimitBounds::default`]).
    pub fn bounds(mut self, bounds: LimitBounds) -> Self {
        self.settings.bounds = bounds;
        self
    }

    /// Share of each new target applied per sample, in `(0, 1]` (default 0.2).
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.settings.smoothing = smoothing;
        self
    }

    /// Short-term latency may exceed the long-term average by this factor before the limit
    /// shrinks, at least 1 (default 1.5).
    pub fn rtt_tolerance(mut self, tolerance: f64) -> Self {
        self.settings.rtt_tolerance = tolerance;
        self
    }

    /// Samples averaged by the long-term exponential average, at least 1 (default 600).
    pub fn long_window(mut self, samples: usize) -> Self {
        self.settings.long_window = samples;
        self
    }

    /// Headroom added to the limit each sample, >= 0 (default 4).
    pub fn queue_size(mut self, size: f64) -> Self {
        self.settings.queue_size = size;
        self
    }

    /// Factor applied on a dropped call, in `(0, 1)` (default 0.9).
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.settings.backoff_ratio = ratio;
        self
    }

    /// The algorithm, or the first setting that cannot work.
    pub fn build(self) -> Result<Gradient, ConfigError> {
        let config = self.settings;
        check_range(
            "smoothing",
            config.smoothing,
            f64::MIN_POSITIVE,
            1.0,
            "in (0, 1]",
        )?;
        check_range(
            "rtt_tolerance",
            config.rtt_tolerance,
            1.0,
            f64::MAX,
            "at least 1",
        )?;
        check_range(
            "queue_size",
            config.queue_size,
            0.0,
            f64::MAX,
            "finite and >= 0",
        )?;
        check_range(
            "backoff_ratio",
            config.backoff_ratio,
            f64::MIN_POSITIVE,
            1.0 - f64::EPSILON,
            "in (0, 1)",
        )?;
        if config.long_window == 0 {
            return Err(ConfigError::ZeroCount {
                field: "long_window",
            });
        }
        Ok(Gradient::with(config))
    }
}

/// Gradient: `new = limit * clamp(tolerance * long_rtt / rtt, 0.5, 1) + queue_size`, smoothed.
/// The long-term average follows the load, so sustained queueing slowly becomes "normal".
///
/// ```
/// use flowguard::vegas::{Gradient, LimitAlgorithm, Outcome, Sample};
/// use std::time::Duration;
///
/// let mut gradient = Gradient::new();
/// for _ in 0..100 {
///     let in_flight = gradient.limit();
///     gradient.update(&Sample { rtt: Duration::from_millis(10), in_flight, outcome: Outcome::Success });
/// }
/// assert!(gradient.limit() > 20);
/// ```
#[derive(Debug, Clone)]
pub struct Gradient {
    config: Settings,
    estimate: FractionalLimit,
    long_rtt: Option<f64>,
}

impl Gradient {
    /// Starts configuring a gradient algorithm.
    pub fn builder() -> GradientBuilder {
        GradientBuilder {
            settings: Settings::default(),
        }
    }

    /// The builder with defaults (`Gradient::builder().build()`, which cannot fail): limits in
    /// `[1, 1000]` starting at 20, `smoothing` 0.2, `rtt_tolerance` 1.5, `long_window` 600,
    /// `queue_size` 4, `backoff_ratio` 0.9.
    pub fn new() -> Self {
        Self::with(Settings::default())
    }

    /// A gradient algorithm with validated `config`.
    fn with(config: Settings) -> Self {
        Self {
            estimate: FractionalLimit::new(config.bounds),
            long_rtt: None,
            config,
        }
    }

    fn on_success(&mut self, sample: &Sample) -> f64 {
        let rtt = (duration_nanos(sample.rtt) as f64).max(1.0);
        let weight = 2.0 / (self.config.long_window as f64 + 1.0);
        let mut long = self
            .long_rtt
            .map_or(rtt, |long| long + weight * (rtt - long));
        if long / rtt > 2.0 {
            // Latency is back to normal after a loaded period: let the average catch up.
            long *= 0.95;
        }
        self.long_rtt = Some(long);
        let current = self.estimate.value();
        if !self.estimate.is_used_by(sample.in_flight) {
            return current;
        }
        let gradient = (self.config.rtt_tolerance * long / rtt).clamp(0.5, 1.0);
        let target = current * gradient + self.config.queue_size;
        current * (1.0 - self.config.smoothing) + target * self.config.smoothing
    }
}

impl Default for Gradient {
    /// [`Gradient::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl LimitAlgorithm for Gradient {
    fn name(&self) -> &'static str {
        "gradient"
    }

    fn limit(&self) -> usize {
        self.estimate.limit()
    }

    fn update(&mut self, sample: &Sample) -> usize {
        let next = match sample.outcome {
            Outcome::Ignored => return self.estimate.limit(),
            Outcome::Dropped => self.estimate.value() * self.config.backoff_ratio,
            Outcome::Success => self.on_success(sample),
        };
        self.estimate.set(next)
    }
}
