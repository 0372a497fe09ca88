//! The Vegas limit algorithm: keep a small, bounded queue at the dependency.
//!
//! For each successful call, `queue = limit * (1 - rtt_base / rtt)` estimates how many calls are
//! waiting at the dependency rather than being served. Below `alpha` the limit grows, above `beta`
//! it shrinks, in between it holds. What this implementation adds to the textbook rule, each
//! against a known failure of existing implementations:
//!
//! - **Robust baseline.** `rtt_base` is the low percentile of windows of successful samples
//!   (see `baseline.rs`): one lucky 1 us sample or a burst of fast failures
//!   (dropped calls never feed it) cannot poison it.
//! - **Probing without adopting a loaded sample.** The baseline is re-learned periodically, and
//!   at once when the queue estimate stays above `beta` for several rounds despite cuts (the sign
//!   of a stale, too-low baseline after the dependency got slower). A probe lowers the limit to
//!   `probe_ratio * limit`, waits one round, and takes the low percentile of samples that were
//!   granted with at most that many calls in flight: samples at reduced concurrency, never one
//!   loaded sample.
//! - **Multiplicative cuts on drops**, at most once per round of calls, so a real overload halves
//!   the load quickly while a burst of fast failures costs one cut, not a collapse.
//! - **Growth only when used**: the limit grows only for samples granted while
//!   `in_flight >= limit / 2`.
//! - **Per-round steps.** Each sample moves the limit by `smoothing * step / in_flight`, so over
//!   one round trip the limit moves by about `smoothing * step`, where `step` aims the queue at the
//!   middle of `[alpha, beta]`; with no queue at all the limit grows by `growth_ratio` per round.

use super::algorithm::{LimitAlgorithm, LimitBounds, Outcome, Sample};
use super::baseline::{Baseline, low_percentile};
use super::error::{ConfigError, check_range};

/// Settings of the [`Vegas`] algorithm. Start from [`VegasConfig::default`].
#[derive(Debug, Clone, PartialEq)]
pub struct VegasConfig {
    /// Limit range and starting point.
    pub bounds: LimitBounds,
    /// Grow while fewer than `alpha` calls are estimated to queue (default 3).
    pub alpha: f64,
    /// Shrink while more than `beta` calls are estimated to queue (default 6).
    pub beta: f64,
    /// Scale `alpha` and `beta` by `max(1, log10(limit))`, as the well-known Java implementation
    /// does, so large limits tolerate proportionally larger queues (default off).
    pub log10_scaling: bool,
    /// Share of the computed per-round step applied, in `(0, 1]` (default 0.5).
    pub smoothing: f64,
    /// Factor applied to the limit on a dropped call, in `(0, 1)` (default 0.5).
    pub backoff_ratio: f64,
    /// Growth per round while no queue is measured, as a share of the limit, in `[0, 10]`
    /// (default 0.25).
    pub growth_ratio: f64,
    /// Successful samples per baseline window, at least 4 (default 32).
    pub baseline_window: usize,
    /// Samples between periodic re-learning probes (default 20 000).
    pub probe_interval: usize,
    /// The limit during a probe, as a share of the current limit, in `(0, 1)` (default 0.75).
    pub probe_ratio: f64,
    /// Samples at reduced concurrency a probe collects, at least 4 (default 16).
    pub probe_samples: usize,
    /// Rounds (of `limit` samples) the queue estimate must stay above `beta` before the baseline is
    /// suspected stale and re-learned, at least 1 (default 4).
    pub stale_rounds: f64,
}

impl Default for VegasConfig {
    fn default() -> Self {
        Self {
            bounds: LimitBounds::default(),
            alpha: 3.0,
            beta: 6.0,
            log10_scaling: false,
            smoothing: 0.5,
            backoff_ratio: 0.5,
            growth_ratio: 0.25,
            baseline_window: 32,
            probe_interval: 20_000,
            probe_ratio: 0.75,
            probe_samples: 16,
            stale_rounds: 4.0,
        }
    }
}

impl VegasConfig {
    /// Checks every setting, naming the first one that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.alpha.is_finite() && self.beta.is_finite() && self.alpha >= 0.0)
            || self.alpha >= self.beta
        {
            return Err(ConfigError::AlphaNotBelowBeta {
                alpha: self.alpha,
                beta: self.beta,
            });
        }
        check_range(
            "smoothing",
            self.smoothing,
            f64::MIN_POSITIVE,
            1.0,
            "in (0, 1]",
        )?;
        check_range(
            "backoff_ratio",
            self.backoff_ratio,
            f64::MIN_POSITIVE,
            1.0 - f64::EPSILON,
            "in (0, 1)",
        )?;
        check_range("growth_ratio", self.growth_ratio, 0.0, 10.0, "in [0, 10]")?;
        check_range(
            "probe_ratio",
            self.probe_ratio,
            f64::MIN_POSITIVE,
            1.0 - f64::EPSILON,
            "in (0, 1)",
        )?;
        check_range(
            "stale_rounds",
            self.stale_rounds,
            1.0,
            f64::MAX,
            "at least 1",
        )?;
        for (field, value) in [
            ("baseline_window", self.baseline_window),
            ("probe_samples", self.probe_samples),
        ] {
            if value < 4 {
                return Err(ConfigError::OutOfRange {
                    field,
                    value: value as f64,
                    allowed: "at least 4",
                });
            }
        }
        if self.probe_interval == 0 {
            return Err(ConfigError::ZeroCount {
                field: "probe_interval",
            });
        }
        Ok(())
    }
}

/// What the algorithm is doing about its baseline.
#[derive(Debug, Clone)]
enum Phase {
    /// Following the queue estimate.
    Tracking,
    /// Running at a reduced limit to re-learn the baseline.
    Probing {
        /// The limit to return to.
        restore: f64,
        /// The reduced limit; samples granted with more in flight are not used.
        probe_limit: usize,
        /// Samples still to skip: calls granted before the probe began.
        skip: usize,
        /// Samples seen since the probe began (to give up on an idle caller).
        seen: usize,
    },
}

/// Vegas: grows or shrinks the limit to keep between `alpha` and `beta` calls queued at the
/// dependency, with a robust baseline (see the [module docs](self)).
///
/// ```
/// use flowguard::vegas::{LimitAlgorithm, Outcome, Sample, Vegas, VegasConfig};
/// use std::time::Duration;
///
/// let mut vegas = Vegas::new(VegasConfig::default())?;
/// let start = vegas.limit();
/// // A busy caller whose calls all take 10 ms: no queue, so the limit grows.
/// for _ in 0..200 {
///     let in_flight = vegas.limit();
///     vegas.update(&Sample { rtt: Duration::from_millis(10), in_flight, outcome: Outcome::Success });
/// }
/// assert!(vegas.limit() > start);
/// // A dropped call cuts it multiplicatively.
/// let before = vegas.limit();
/// vegas.update(&Sample { rtt: Duration::from_millis(1), in_flight: before, outcome: Outcome::Dropped });
/// assert_eq!(vegas.limit(), before / 2);
/// # Ok::<(), flowguard::vegas::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    config: VegasConfig,
    estimate: f64,
    baseline: Baseline,
    phase: Phase,
    probe_buffer: Vec<u64>,
    samples_since_probe: usize,
    samples_since_cut: usize,
    cut_cooldown: usize,
    congested_run: usize,
}

impl Vegas {
    /// A Vegas algorithm with validated settings.
    pub fn new(config: VegasConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            estimate: config.bounds.initial() as f64,
            baseline: Baseline::new(config.baseline_window),
            phase: Phase::Tracking,
            probe_buffer: Vec::with_capacity(config.probe_samples),
            samples_since_probe: 0,
            samples_since_cut: 0,
            cut_cooldown: 0,
            congested_run: 0,
            config,
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &VegasConfig {
        &self.config
    }

    /// The current unloaded-RTT estimate, once learned.
    pub fn rtt_base(&self) -> Option<std::time::Duration> {
        self.baseline
            .estimate()
            .map(std::time::Duration::from_nanos)
    }

    /// Whether a baseline probe (reduced limit) is running.
    pub fn is_probing(&self) -> bool {
        matches!(self.phase, Phase::Probing { .. })
    }

    fn thresholds(&self) -> (f64, f64) {
        let scale = if self.config.log10_scaling {
            self.estimate.log10().max(1.0)
        } else {
            1.0
        };
        (self.config.alpha * scale, self.config.beta * scale)
    }

    fn set_estimate(&mut self, value: f64) {
        self.estimate = self.config.bounds.clamp_f64(value);
    }

    fn start_probe(&mut self) {
        let probe_limit = self
            .config
            .bounds
            .clamp(self.estimate * self.config.probe_ratio);
        self.probe_buffer.clear();
        self.phase = Phase::Probing {
            restore: self.estimate,
            probe_limit,
            skip: self.config.bounds.clamp(self.estimate),
            seen: 0,
        };
    }

    fn end_probe(&mut self, restore: f64, learned: Option<u64>) {
        if let Some(rtt) = learned {
            self.baseline.relearn(rtt);
        }
        self.phase = Phase::Tracking;
        self.samples_since_probe = 0;
        self.congested_run = 0;
        self.set_estimate(restore);
    }

    fn on_drop(&mut self) {
        self.congested_run = 0;
        if let Phase::Probing { restore, .. } = self.phase {
            self.end_probe(restore, None);
        }
        if self.samples_since_cut >= self.cut_cooldown {
            self.cut_cooldown = self.config.bounds.clamp(self.estimate);
            self.samples_since_cut = 0;
            self.set_estimate(self.estimate * self.config.backoff_ratio);
        }
    }

    fn on_probe_sample(&mut self, sample: &Sample, rtt: u64) {
        let Phase::Probing {
            restore,
            probe_limit,
            skip,
            seen,
        } = &mut self.phase
        else {
            return;
        };
        *seen += 1;
        if *skip > 0 {
            *skip -= 1;
        } else if sample.in_flight <= *probe_limit {
            self.probe_buffer.push(rtt);
        }
        let restore = *restore;
        let give_up = *seen > 8 * (restore as usize + self.config.probe_samples);
        if self.probe_buffer.len() >= self.config.probe_samples {
            let learned = low_percentile(&mut self.probe_buffer);
            self.end_probe(restore, learned);
        } else if give_up {
            self.end_probe(restore, None);
        }
    }

    fn on_success(&mut self, sample: &Sample, rtt: u64) {
        self.baseline.observe(rtt);
        self.samples_since_probe += 1;
        let Some(base) = self.baseline.estimate() else {
            return;
        };
        let limit = self.estimate;
        let queue = limit * (1.0 - base as f64 / rtt as f64).max(0.0);
        let (alpha, beta) = self.thresholds();
        let target = (alpha + beta) / 2.0;
        let used = sample.in_flight as f64 * 2.0 >= limit;
        let step = if queue < alpha {
            self.congested_run = 0;
            if !used {
                0.0
            } else if queue < 1.0 {
                (target - queue).max(limit * self.config.growth_ratio)
            } else {
                target - queue
            }
        } else if queue > beta {
            self.congested_run += 1;
            target - queue
        } else {
            self.congested_run = 0;
            0.0
        };
        let per_sample = self.config.smoothing * step / sample.in_flight.max(1) as f64;
        self.set_estimate(limit + per_sample);

        let stale = self.congested_run as f64 >= self.config.stale_rounds * limit.max(1.0);
        if stale || self.samples_since_probe >= self.config.probe_interval {
            self.start_probe();
        }
    }
}

impl LimitAlgorithm for Vegas {
    fn name(&self) -> &'static str {
        "vegas"
    }

    fn limit(&self) -> usize {
        match self.phase {
            Phase::Probing { probe_limit, .. } => probe_limit,
            Phase::Tracking => self.config.bounds.clamp(self.estimate),
        }
    }

    fn update(&mut self, sample: &Sample) -> usize {
        self.samples_since_cut = self.samples_since_cut.saturating_add(1);
        let rtt = u64::try_from(sample.rtt.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        match (sample.outcome, &self.phase) {
            (Outcome::Ignored, _) => {}
            (Outcome::Dropped, _) => self.on_drop(),
            (Outcome::Success, Phase::Probing { .. }) => self.on_probe_sample(sample, rtt),
            (Outcome::Success, Phase::Tracking) => self.on_success(sample, rtt),
        }
        self.limit()
    }
}
