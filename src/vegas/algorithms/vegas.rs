//! The Vegas limit algorithm: keep a small, bounded queue at the dependency.

use super::algorithm::{LimitAlgorithm, Outcome, Sample, duration_nanos};
use super::baseline::{
    Baseline, CutReference, INSENSITIVE, SampleWindow, WindowSummary, low_percentile,
};
use super::bounds::LimitBounds;
use crate::vegas::error::{ConfigError, check_range};

use std::time::Duration;

/// The settings of a [`Vegas`] algorithm; see [`VegasBuilder`] for what each one does.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    bounds: LimitBounds,
    alpha: f64,
    beta: f64,
    log10_scaling: bool,
    max_queue_share: f64,
    smoothing: f64,
    backoff_ratio: f64,
    growth_ratio: f64,
    baseline_window: usize,
    probe_interval: usize,
    probe_ratio: f64,
    probe_samples: usize,
    stale_rounds: f64,
    fleet: bool,
    base_horizon: Duration,
    drain_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bounds: LimitBounds::default(),
            alpha: 3.0,
            beta: 6.0,
            log10_scaling: true,
            max_queue_share: 0.2,
            smoothing: 0.5,
            backoff_ratio: 0.5,
            growth_ratio: 0.25,
            baseline_window: 16,
            probe_interval: 500,
            probe_ratio: 0.75,
            probe_samples: 16,
            stale_rounds: 4.0,
            fleet: false,
            base_horizon: Duration::from_secs(4),
            drain_interval: Duration::from_secs(2),
        }
    }
}

impl Settings {
    /// Checks every setting, naming the first one that cannot work.
    fn validate(&self) -> Result<(), ConfigError> {
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
        for (field, value) in [
            ("base_horizon", self.base_horizon),
            ("drain_interval", self.drain_interval),
        ] {
            if value.is_zero() {
                return Err(ConfigError::ZeroDuration { field });
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

/// Configures and builds a [`Vegas`] algorithm, from [`Vegas::builder`]. Every setting has a
/// default (the ones [`Vegas::new`] uses); [`Vegas`] explains what they steer.
///
/// ```
/// use flowguard::vegas::{LimitBounds, Vegas};
///
/// let vegas = Vegas::builder()
///     .bounds(LimitBounds::new(4, 500, 20)?)
///     .alpha(2.0)
///     .beta(4.0)
///     .build()?;
/// assert!(Vegas::builder().alpha(6.0).beta(3.0).build().is_err()); // alpha must be below beta
/// # Ok::<(), flowguard::vegas::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct VegasBuilder {
    settings: Settings,
}

impl VegasBuilder {
    /// Limit range and starting point (default [`LimitBounds::default`]).
    pub fn bounds(mut self, bounds: LimitBounds) -> Self {
        self.settings.bounds = bounds;
        self
    }

    /// Grow while fewer than `alpha` calls are estimated to queue, at least 0 and below `beta`
    /// (default 3).
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.settings.alpha = alpha;
        self
    }

    /// Shrink while more than `beta` calls are estimated to queue, above `alpha` (default 6).
    pub fn beta(mut self, beta: f64) -> Self {
        self.settings.beta = beta;
        self
    }

    /// Scale `alpha` and `beta` by `max(1, log10(limit))`, as the well-known Java implementation
    /// does, so large limits tolerate proportionally larger queues (default on).
    pub fn log10_scaling(mut self, on: bool) -> Self {
        self.settings.log10_scaling = on;
        self
    }

    /// Caps `beta` at this share of the limit and `alpha` at half of it, in `(0, 1]`
    /// (default 0.2). Below a limit of `alpha / (share / 2)` (30 by default) the band is this
    /// share of the RTT: grow while the queue is under 10 % of the calls in flight, cut above
    /// 20 %. Every instance sharing a dependency reads the same share from the same RTTs, so the
    /// fleet's queue stays short whatever the number of instances.
    pub fn max_queue_share(mut self, share: f64) -> Self {
        self.settings.max_queue_share = share;
        self
    }

    /// Share of the computed per-round growth applied, in `(0, 1]` (default 0.5).
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.settings.smoothing = smoothing;
        self
    }

    /// Factor applied to the limit on a dropped call, and the deepest one RTT-based cut goes, in
    /// `(0, 1)` (default 0.5).
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.settings.backoff_ratio = ratio;
        self
    }

    /// Growth per round while no queue is measured, times `max(1, sqrt(limit))` (after slow
    /// start), in `[0, 10]` (default 0.25). The growth is sub-linear in the limit, so that
    /// instances sharing a dependency converge to equal limits (see [`Vegas`]).
    pub fn growth_ratio(mut self, ratio: f64) -> Self {
        self.settings.growth_ratio = ratio;
        self
    }

    /// Minimum successful samples per window (windows hold at least half the limit), at least 4
    /// (default 16).
    pub fn baseline_window(mut self, samples: usize) -> Self {
        self.settings.baseline_window = samples;
        self
    }

    /// Rounds (of `limit` samples) between periodic re-learning probes, at least 1
    /// (default 500).
    pub fn probe_interval(mut self, rounds: usize) -> Self {
        self.settings.probe_interval = rounds;
        self
    }

    /// The limit during a probe or a drain, as a share of the current limit, in `(0, 1)`
    /// (default 0.5).
    pub fn probe_ratio(mut self, ratio: f64) -> Self {
        self.settings.probe_ratio = ratio;
        self
    }

    /// Minimum samples at reduced concurrency a probe collects (it takes at least half the probe
    /// limit), at least 4 (default 8).
    pub fn probe_samples(mut self, samples: usize) -> Self {
        self.settings.probe_samples = samples;
        self
    }

    /// Rounds (of `limit` samples) the queue estimate must stay above `beta` before the baseline
    /// is suspected stale and re-learned by a probe, at least 1 (default 4). A fallback: the
    /// window after each cut judges the baseline first (see [`Vegas`]).
    pub fn stale_rounds(mut self, rounds: f64) -> Self {
        self.settings.stale_rounds = rounds;
        self
    }

    /// Fleet mode, for a dependency shared with other instances that run their own limiters
    /// (default off): one shared queue signal, additive increase with multiplicative decrease,
    /// a baseline that expires after [`base_horizon`](Self::base_horizon), and drains every
    /// [`drain_interval`](Self::drain_interval); see [`Vegas`], section "In a fleet". Turning
    /// it on starts the limit at the bounds' minimum rather than their initial limit (slow start
    /// takes it up: a newcomer must not add `initial` calls at once to a queue the others share),
    /// and sets `max_queue_share` to 0.1 (grow while under 5 % of the RTT is queueing,
    /// cut above 10 %), `probe_ratio` to 0.5 and `probe_samples` to 8 (set them after this call
    /// to choose others).
    ///
    /// ```
    /// use flowguard::vegas::{Limiter, Vegas};
    ///
    /// // Each instance of the service, in front of a dependency the instances share:
    /// let limiter = Limiter::builder(Vegas::builder().fleet(true).build()?).build()?;
    /// # let _ = limiter;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fleet(mut self, on: bool) -> Self {
        self.settings.fleet = on;
        if on {
            self.settings.max_queue_share = 0.1;
            self.settings.probe_ratio = 0.5;
            self.settings.probe_samples = 8;
        }
        self
    }

    /// In fleet mode, how long a measured RTT can serve as the baseline (default 4 s): the
    /// baseline is the lowest window low of the last horizon, so a baseline learned while a
    /// queue stood (an instance that started beside busy peers) is forgotten within it, and
    /// instances sharing a dependency agree on it. Time is what the windows spanned, computed
    /// from the samples. Zero is a [`ConfigError::ZeroDuration`].
    pub fn base_horizon(mut self, horizon: Duration) -> Self {
        self.settings.base_horizon = horizon;
        self
    }

    /// In fleet mode, the most time between drains (default 2 s). In a drain the limit drops
    /// to `probe_ratio` of itself for a short probe that measures the RTT at reduced
    /// concurrency (see [`Vegas`]); it falls on the first RTT-based cut after half the interval,
    /// and comes at the latest after the interval. Zero is a [`ConfigError::ZeroDuration`].
    pub fn drain_interval(mut self, interval: Duration) -> Self {
        self.settings.drain_interval = interval;
        self
    }

    /// The algorithm, or the first setting that cannot work.
    pub fn build(self) -> Result<Vegas, ConfigError> {
        self.settings.validate()?;
        Ok(Vegas::with(self.settings))
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
        /// Started while the queue estimate was above `beta` (a stale baseline is possible).
        stale: bool,
    },
}

/// Vegas: grows or shrinks the limit to keep between `alpha` and `beta` calls queued at the
/// dependency.
///
/// `queue = limit * (1 - rtt_base / rtt)` estimates how many calls are waiting at the dependency
/// rather than being served. Below `alpha` the limit grows, above `beta` it shrinks, in between
/// it holds. What this implementation adds to the textbook rule, each against a known failure of
/// existing implementations:
///
/// - **Robust baseline.** Samples are judged in windows (at least `baseline_window` successful
///   samples, or half the limit if larger). `rtt` is the window's low percentile and `rtt_base`
///   the lowest window low of the last [`base_horizon`](VegasBuilder::base_horizon) (see
///   `baseline.rs`): one lucky 1 us sample, or a burst of fast failures (dropped calls never
///   feed it), cannot poison it, and service-time jitter does not read as a queue.
/// - **A slower dependency is not a queue.** A stale baseline (the dependency's service time rose,
///   its concurrency did not) reads exactly like a queue, and cutting on it would starve the
///   dependency down to a limit of 1. So every cut is judged by the window after it, built only
///   from calls granted under the new limit: a real queue shortens the RTT at least in
///   proportion to the concurrency removed; if the RTT instead stays where it was, the calls
///   after the cut no longer queue, their low percentile becomes the baseline and the limit
///   returns to where it was before the congestion (see `baseline.rs`). A window whose calls
///   were granted at mixed concurrency (a ramp) is never a reference.
/// - **Re-learning without adopting a loaded sample.** A probe lowers the limit to
///   `probe_ratio * limit`, skips one round, and takes the low percentile of samples granted
///   with at most that many calls in flight. It lowers the baseline; it raises it only if the RTT
///   did not fall with the concurrency (a stale baseline, whose cuts are then undone). Probes run
///   periodically, when the queue estimate stays above `beta` for `stale_rounds` rounds, and when
///   the dependency sped up.
/// - **Multiplicative cuts on drops**, at most once per round of calls, so a real overload halves
///   the load at once while a burst of fast failures costs one cut, not a collapse.
/// - **Growth only when used**: only windows whose calls were granted with, on average,
///   `in_flight >= limit / 2` grow the limit. Until the first queue or drop is seen it grows by
///   up to the whole limit per round (slow start).
///
/// # In a fleet
///
/// Every instance of a service runs its own limiter in front of the dependencies it shares with
/// the others. With no coordinator, the instances should share the way TCP flows share a link:
/// equal limits, whatever order they started in, and a queue that stays short however many they
/// are. Classic Vegas does neither. A flow that learns its `rtt_base` while a queue stands takes
/// the queue for the baseline, sees no queue and grows (Mo, La, Anantharam and Walrand, 1999;
/// Boutremans and Le Boudec, 2000). Each flow also keeps its own `alpha..beta` calls queued, so
/// N flows queue N times that. And an additive-increase, additive-decrease rule keeps whatever
/// split it starts from. Four choices answer this:
///
/// - **One shared signal.** For limits up to `alpha / (max_queue_share / 2)` (60 in fleet mode),
///   the band is a share of the RTT: grow while `1 - rtt_base / rtt` is under
///   `max_queue_share / 2` (5 %), cut above `max_queue_share` (10 %). Instances in front of one dependency see the same RTT, so they
///   read the same signal and act together, and the queue it allows is a share of the RTT,
///   not N times a per-instance count. There is no band floor of one call: a limit is a fraction
///   (permits are its floor), so four instances can settle near one permit each in front of four
///   workers.
/// - **Additive increase, multiplicative decrease** on that signal, which converges to equal
///   shares (Chiu and Jain, 1989): growth is `smoothing * growth_ratio * max(1, sqrt(limit))` per
///   round (additive at small limits, sub-linear at large ones, never a share of the limit), and
///   an RTT-based cut takes the limit down to the concurrency that leaves `alpha` queued,
///   `limit * (1 - queue_share) + alpha`, at most by `backoff_ratio`. Cutting every instance in
///   proportion empties the shared queue in one step.
/// - **A baseline that expires.** `rtt_base` is the lowest window low of the last
///   [`base_horizon`](VegasBuilder::base_horizon) (4 s), the windowed minimum of BBR: an
///   instance that learned a queue as its baseline forgets it, and instances that share a
///   dependency agree on the baseline, whatever each saw before. Time is what the windows
///   spanned (rounds times their RTT): the algorithm reads no clock.
/// - **Drains that line up without coordination.** The first RTT-based cut once half a
///   [`drain_interval`](VegasBuilder::drain_interval) (2 s) has passed becomes a drain, and one
///   comes at the latest after the interval: a probe at `probe_ratio` (0.5) of the limit, which
///   may only lower the baseline (unless the RTT proves insensitive to concurrency, the stale
///   case). As in BBR's ProbeRTT, instances drain together, so each sees the true minimum: cuts
///   follow the shared signal, so the instances' drains fall on the same congestion event and
///   their timers restart together. Envoy's adaptive concurrency filter re-measures the minimum
///   RTT periodically at a small fixed concurrency, with jitter; jitter would spread the drains
///   apart, which a fleet whose queue is shared cannot afford. Netflix's Gradient2 follows a
///   long-term average RTT instead of a minimum, which creeps up with a standing queue.
/// - **A newcomer starts small.** The limit starts at the bounds' minimum and slow start takes
///   it up, rather than adding `initial` calls at once to a queue the others share.
///
/// The price, alone in front of a dependency: a drain halves the limit for a few rounds every
/// 2 s, so the limit spends 4-6 % of the time below the dependency's concurrency (`vegas_sim
/// --step`), where `Vegas::new()` spends under 1 %. That is why fleet mode is a setting.
///
/// Measured in `vegas_sim --fleet` (4 workers at 10 ms, 3x overload, 2 to 8 instances, a late
/// joiner and one leaving): see `docs/PERFORMANCE.md`.
///
/// ```
/// use flowguard::vegas::{LimitAlgorithm, Outcome, Sample, Vegas};
/// use std::time::Duration;
///
/// let mut vegas = Vegas::new();
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
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    config: Settings,
    estimate: f64,
    /// The limit reported: the rounded estimate, or the probe limit while probing.
    current: usize,
    /// Samples per window at the current limit: `max(baseline_window, current / 2)`.
    window_len: usize,
    /// Samples between periodic probes at the current limit: `probe_interval * current`.
    probe_after: usize,
    window: SampleWindow,
    baseline: Baseline,
    phase: Phase,
    probe_buffer: Vec<u64>,
    samples_since_probe: usize,
    samples_since_cut: usize,
    cut_cooldown: usize,
    congested_rounds: f64,
    limit_before_congestion: f64,
    /// The window that caused the last RTT-based cut, until the window after it is judged.
    cut_reference: Option<CutReference>,
    /// No queue or drop seen yet: grow by the whole limit per round, like TCP slow start.
    slow_start: bool,
    /// Time spanned by windows since the last drain, in nanoseconds.
    since_drain: f64,
}

impl Vegas {
    /// Starts configuring a Vegas algorithm.
    pub fn builder() -> VegasBuilder {
        VegasBuilder {
            settings: Settings::default(),
        }
    }

    /// The builder with defaults (`Vegas::builder().build()`, which cannot fail): limits in
    /// `[1, 1000]` starting at 20, `alpha` 3, `beta` 6, log10 scaling on.
    pub fn new() -> Self {
        Self::with(Settings::default())
    }

    /// A Vegas algorithm with validated `config`.
    fn with(config: Settings) -> Self {
        // In a fleet, a newcomer starts at the least limit and slow start takes it up: starting
        // at `initial` would add that many calls at once to a queue the others share.
        let start = if config.fleet {
            config.bounds.min()
        } else {
            config.bounds.initial()
        };
        Self {
            estimate: start as f64,
            current: start,
            window_len: window_len(&config, start, false),
            probe_after: probe_after(&config, start),
            window: SampleWindow::with_capacity(config.baseline_window),
            baseline: Baseline::default(),
            phase: Phase::Tracking,
            probe_buffer: Vec::with_capacity(config.probe_samples),
            samples_since_probe: 0,
            samples_since_cut: 0,
            cut_cooldown: 0,
            congested_rounds: 0.0,
            limit_before_congestion: start as f64,
            cut_reference: None,
            slow_start: true,
            since_drain: 0.0,
            config,
        }
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
        // log10 is at most 1 up to 10, where the scale is 1 anyway: skip it for small limits.
        let scale = if self.config.log10_scaling && self.estimate > 10.0 {
            self.estimate.log10().max(1.0)
        } else {
            1.0
        };
        // Never tolerate a queue above a share of the limit: 3..6 queued calls are a small delay
        // in front of 100 slots but a large one in front of 10.
        let cap = self.estimate * self.config.max_queue_share;
        let alpha = (self.config.alpha * scale).min(cap / 2.0);
        let beta = self.config.beta * scale;
        if self.config.fleet {
            // A share of the RTT for small limits, the same for every instance.
            return (alpha, beta.min(cap));
        }
        // But keep the band at least one call wide (up to the configured beta): a queue is a
        // whole number of calls, and a narrower band holds none of them, so a small limit would
        // swing between growing and shrinking around it.
        (alpha, beta.min(cap).max(beta.min(alpha + 1.0)))
    }

    fn set_estimate(&mut self, value: f64) {
        self.estimate = self.config.bounds.clamp_f64(value);
    }

    #[inline(never)]
    fn start_probe(&mut self, stale: bool) {
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
            stale,
        };
    }

    #[inline(never)]
    fn end_probe(&mut self, restore: f64, learned: Option<u64>) {
        if let Some(rtt) = learned {
            self.baseline.relearn(rtt);
        }
        self.phase = Phase::Tracking;
        self.window.clear();
        self.samples_since_probe = 0;
        self.congested_rounds = 0.0;
        self.set_estimate(restore);
    }

    #[inline(never)]
    fn on_drop(&mut self) {
        self.slow_start = false;
        self.congested_rounds = 0.0;
        self.cut_reference = None;
        if let Phase::Probing { restore, .. } = self.phase {
            self.end_probe(restore, None);
        }
        if self.samples_since_cut >= self.cut_cooldown {
            self.cut_cooldown = self.config.bounds.clamp(self.estimate);
            self.samples_since_cut = 0;
            self.set_estimate(self.estimate * self.config.backoff_ratio);
        }
    }

    #[inline(never)]
    fn on_probe_sample(&mut self, in_flight: usize, rtt: u64) {
        let Phase::Probing {
            restore,
            probe_limit,
            skip,
            seen,
            stale,
        } = &mut self.phase
        else {
            return;
        };
        *seen += 1;
        if *skip > 0 {
            *skip -= 1;
        } else if in_flight <= *probe_limit {
            self.probe_buffer.push(rtt);
        }
        let wanted = self.config.probe_samples.max(*probe_limit / 2);
        let (mut restore, stale) = (*restore, *stale);
        let give_up = *seen > 8 * (restore as usize + wanted);
        if self.probe_buffer.len() >= wanted {
            let learned = low_percentile(&mut self.probe_buffer);
            // RTT did not fall when concurrency did: the congestion was a stale baseline, not a
            // queue, so the cuts made since it began were wrong and are undone.
            let least = if self.config.fleet { INSENSITIVE } else { 0.9 };
            let insensitive = match (learned, self.baseline.last_window()) {
                (Some(learned), Some(recent)) => learned as f64 >= least * recent as f64,
                _ => false,
            };
            if stale && insensitive {
                restore = restore.max(self.limit_before_congestion);
            }
            // A probe lowers the baseline; it raises it only when the RTT did not fall with the
            // concurrency (a stale baseline). Otherwise a probe run alone in a fleet, whose RTT
            // still holds the others' queue, would take that queue for the baseline.
            match learned {
                Some(rtt) if (stale && insensitive) || !self.config.fleet => {
                    self.baseline.relearn(rtt)
                }
                Some(rtt) => self.baseline.lower_to(rtt),
                None => {}
            }
            self.end_probe(restore, None);
        } else if give_up {
            self.end_probe(restore, None);
        }
    }

    /// Feeds a successful sample while tracking; answers whether the estimate or the phase may
    /// have changed. Most samples only join the current window, so that path is kept minimal.
    #[inline]
    fn on_success(&mut self, in_flight: usize, rtt: u64) -> bool {
        self.samples_since_probe += 1;
        let mut changed = false;
        // A call granted with more in flight than the limit allows now was granted before a cut:
        // its RTT describes the old concurrency, so it joins no window.
        if in_flight <= self.current
            && let Some(window) = self.window.push(rtt, in_flight, self.window_len)
        {
            self.on_window(&window);
            changed = true;
        }
        // Not while a cut is being judged: that window is a probe already.
        if self.samples_since_probe >= self.probe_after && self.cut_reference.is_none() {
            self.start_probe(self.congested_rounds > 0.0);
            changed = true;
        }
        changed
    }

    #[inline(never)]
    fn on_window(&mut self, window: &WindowSummary) {
        // A much faster window means the dependency sped up; the windows that follow are loaded
        // by the limit that suited the slower dependency, so re-learn at reduced concurrency.
        let sped_up = self
            .baseline
            .estimate()
            .is_some_and(|base| (window.low as f64) < 0.8 * base as f64);
        let rounds = window.samples as f64 / window.mean_in_flight.max(1.0);
        let spanned = rounds * window.low as f64;
        self.since_drain += spanned;
        self.baseline.observe(
            window.low,
            spanned,
            if self.config.fleet {
                self.config.base_horizon.as_secs_f64() * 0.5e9
            } else {
                f64::INFINITY
            },
        );
        let Some(base) = self.baseline.estimate() else {
            return;
        };
        if let Some(reference) = self.cut_reference.take()
            && reference.reveals_stale(base, window, self.config.fleet)
        {
            // The cut did not shorten the RTT: the dependency got slower, it is not queueing.
            // Adopt the RTT after the cut (taken at reduced concurrency) as the baseline and undo
            // the cuts made since the congestion began.
            self.baseline.relearn(window.low);
            self.congested_rounds = 0.0;
            self.set_estimate(self.estimate.max(self.limit_before_congestion));
            return;
        }
        let limit = self.estimate;
        let queue = limit * (1.0 - base as f64 / window.low as f64).max(0.0);
        let (alpha, beta) = self.thresholds();
        let target = (alpha + beta) / 2.0;
        let used = window.mean_in_flight * 2.0 >= limit;
        let change = if queue < alpha {
            self.congested_rounds = 0.0;
            if used {
                let headroom = (alpha - queue) / alpha;
                if self.slow_start {
                    self.config.smoothing * (target - queue).max(limit * headroom) * rounds
                } else if self.config.fleet {
                    // Sub-linear growth per round: additive at small limits, sqrt(limit) at
                    // large ones, so that instances converge to equal limits.
                    self.config.smoothing
                        * self.config.growth_ratio
                        * limit.sqrt().max(1.0)
                        * headroom
                        * rounds
                } else {
                    // Far below alpha, grow by a share of the limit; near alpha, by what is
                    // missing.
                    let growth = limit * self.config.growth_ratio * headroom;
                    self.config.smoothing * (target - queue).max(growth) * rounds
                }
            } else {
                0.0
            }
        } else if queue > beta {
            self.slow_start = false;
            if self.congested_rounds == 0.0 {
                self.limit_before_congestion = limit;
            }
            self.congested_rounds += rounds;
            self.cut_reference = CutReference::of(window);
            if self.config.fleet {
                // Multiplicative: down to the concurrency that leaves `alpha` queued, at most by
                // `backoff_ratio`. Every instance in front of the dependency cuts in proportion,
                // which empties the shared queue in one step.
                -((queue - alpha).min(limit * (1.0 - self.config.backoff_ratio)))
            } else {
                // Each round the queue persists, remove `smoothing` of what remains of it: over
                // the window's rounds that compounds to less than the whole excess, so one
                // window never cuts below the concurrency the dependency was measured to serve.
                (target - queue) * (1.0 - (1.0 - self.config.smoothing).powf(rounds))
            }
        } else {
            self.slow_start = false;
            self.congested_rounds = 0.0;
            0.0
        };
        self.set_estimate(limit + change);
        // A pending cut check is the better probe: it judges the stale-baseline question at the
        // concurrency the cut chose, with no further reduction.
        let stale =
            self.congested_rounds >= self.config.stale_rounds && self.cut_reference.is_none();
        // Drains fall on a cut (which the instances sharing the dependency make together) once
        // half the interval has passed, and come at the latest after the interval.
        let interval = self.config.drain_interval.as_secs_f64() * 1e9;
        let drain = self.config.fleet
            && (self.since_drain >= interval
                || (change < 0.0 && self.since_drain >= interval / 2.0));
        if sped_up || stale {
            self.start_probe(self.congested_rounds > 0.0);
        } else if drain {
            self.since_drain = 0.0;
            self.cut_reference = None;
            self.start_probe(true);
        }
    }
}

impl Vegas {
    /// Feeds one completed call, its RTT in nanoseconds (no `Duration` round trip): both
    /// [`LimitAlgorithm`] methods land here.
    #[inline]
    fn feed(&mut self, rtt_nanos: u64, in_flight: usize, outcome: Outcome) -> usize {
        self.samples_since_cut = self.samples_since_cut.saturating_add(1);
        let rtt = rtt_nanos.max(1);
        match (outcome, &self.phase) {
            // Nothing the limit depends on changed.
            (Outcome::Ignored, _) => return self.current,
            (Outcome::Success, Phase::Tracking) => {
                if !self.on_success(in_flight, rtt) {
                    return self.current;
                }
            }
            (Outcome::Dropped, _) => self.on_drop(),
            (Outcome::Success, Phase::Probing { .. }) => self.on_probe_sample(in_flight, rtt),
        }
        self.refresh_current()
    }

    /// Recomputes the reported limit after the estimate or the phase may have changed.
    #[inline(never)]
    fn refresh_current(&mut self) -> usize {
        let current = match self.phase {
            Phase::Probing { probe_limit, .. } => probe_limit,
            Phase::Tracking => self.config.bounds.clamp(self.estimate),
        };
        self.window_len = window_len(&self.config, current, self.cut_reference.is_some());
        if current != self.current {
            self.current = current;
            self.probe_after = probe_after(&self.config, current);
        }
        current
    }
}

/// Samples per window at limit `current`: at least `baseline_window`, at least half the limit.
/// The window that judges a cut takes half as many (at least 4): at a small limit it is the one
/// spent at reduced concurrency, and its low percentile still skips its fastest sample.
fn window_len(config: &Settings, current: usize, judging_cut: bool) -> usize {
    let least = if judging_cut {
        (config.baseline_window / 2).max(4)
    } else {
        config.baseline_window
    };
    least.max(current / 2)
}

/// Samples between periodic probes at limit `current`: `probe_interval` rounds of the limit.
fn probe_after(config: &Settings, current: usize) -> usize {
    config.probe_interval.saturating_mul(current)
}

impl Default for Vegas {
    /// [`Vegas::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl LimitAlgorithm for Vegas {
    fn name(&self) -> &'static str {
        "vegas"
    }

    fn limit(&self) -> usize {
        self.current
    }

    fn update(&mut self, sample: &Sample) -> usize {
        self.feed(duration_nanos(sample.rtt), sample.in_flight, sample.outcome)
    }

    #[inline]
    fn update_nanos(&mut self, rtt_nanos: u64, in_flight: usize, outcome: Outcome) -> usize {
        self.feed(rtt_nanos, in_flight, outcome)
    }
}
