//! The Vegas limit algorithm: keep a small, bounded queue at the dependency.

use super::algorithm::{LimitAlgorithm, Outcome, Sample, duration_nanos};
use super::baseline::{Baseline, CutReference, INSENSITIVE, SampleWindow, WindowSummary};
use super::bounds::LimitBounds;
use super::percentile::low_percentile;
use super::raise_spacing::RaiseSpacing;
use crate::vegas::error::{ConfigError, check_range};

/// The least queue, in calls, Vegas tolerates per instance (and twice that before it cuts): see
/// `Vegas::thresholds`.
const MIN_ALPHA: f64 = 0.25;

/// Below this limit, the band counts at least [`MIN_ALPHA`] calls of the instance's own (and at
/// any limit [`REPORTED_MIN_ALPHA`] while the dependency reports its queue): see
/// `Vegas::thresholds`.
const CALLS_BELOW: f64 = 4.0;

/// The least queue, in calls, Vegas keeps per instance while the dependency reports its queue
/// (and twice that before it cuts). The reports are then read as the calls' mean wait, which
/// sees the short queues that come and go while the calls in flight are about the workers,
/// where the low percentile of the RTT does not; read so, a quarter of a call left the workers
/// idle at times (`vegas_sim --fleet --reported-queue`, 2 instances in front of 4 workers: 0.87
/// of fixed 4's goodput at the least, against 0.99 at half a call).
const REPORTED_MIN_ALPHA: f64 = 0.5;

/// While the dependency reports its queue, the share of the distance to the band's middle the
/// limit moves per round inside the band, as FAST TCP moves its window: the middle is fewer
/// calls per permit for a larger limit, so instances that read the same queue share settle at
/// equal limits, where a band that only holds lets any split up to 4:1 stand.
const REPORTED_MOVE_GAIN: f64 = 0.05;

/// While reports come in, a slow start that ended above the band resumes if, within this many
/// rounds, a window reads at most [`RESUME_BELOW`] of `alpha` queued: the queue that ended it was
/// the newcomer's own last doubling, waiting behind the others' calls until they cut, as
/// HyStart++ (RFC 9406) resumes a slow start whose RTT falls back during its conservative phase.
const RESUME_WITHIN_ROUNDS: f64 = 4.0;

/// The share of `alpha` a window must read at most for a slow start that ended above the band
/// to resume (see [`RESUME_WITHIN_ROUNDS`]): the queue is gone, not merely back in the band.
const RESUME_BELOW: f64 = 0.25;

/// Without reports, the share of `window_rounds` a window that reads the queue holds (at least
/// `baseline_window` calls): an eighth of the limit by default. The baseline is lowered only by
/// the low percentile of whole `window_rounds` of calls (see [`Vegas`], "Short windows to read the
/// queue").
const READING_SHARE: f64 = 0.25;

/// From this limit up, without reports, a window cuts only if its queue is above `beta` by more
/// than [`MARGIN_ERRORS`] standard errors of its low percentile: see [`Vegas`], "Short windows to
/// read the queue". Below it, fleets of small limits keep the band they share.
const MARGIN_FROM: f64 = 16.0;

/// The standard errors of a window's low percentile by which its queue must pass `beta` before
/// it cuts (from a limit of [`MARGIN_FROM`] up, without reports).
const MARGIN_ERRORS: f64 = 2.0;

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
    band_growth: f64,
    baseline_window: usize,
    window_rounds: f64,
    probe_interval: usize,
    probe_ratio: f64,
    probe_samples: usize,
    stale_rounds: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bounds: LimitBounds::STARTING_AT_MIN,
            alpha: 3.0,
            beta: 6.0,
            log10_scaling: true,
            max_queue_share: 0.1,
            smoothing: 0.5,
            backoff_ratio: 0.5,
            growth_ratio: 0.25,
            band_growth: 0.5,
            baseline_window: 16,
            window_rounds: 0.5,
            probe_interval: 500,
            probe_ratio: 0.5,
            probe_samples: 8,
            stale_rounds: 4.0,
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
        check_range("band_growth", self.band_growth, 0.0, 1.0, "in [0, 1]")?;
        check_range(
            "probe_ratio",
            self.probe_ratio,
            f64::MIN_POSITIVE,
            1.0 - f64::EPSILON,
            "in (0, 1)",
        )?;
        check_range(
            "window_rounds",
            self.window_rounds,
            0.5,
            64.0,
            "in [0.5, 64]",
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
    /// Limit range and starting point (default `[1, 1000]` starting at 1: slow start takes the
    /// limit up within a few rounds). An instance that starts high beside others in front of a
    /// shared dependency adds that many calls at once to their queue.
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
    /// (default 0.1). Below a limit of `alpha / (share / 2)` (60 by default) the band is this
    /// share of the RTT: grow while under 5 % of the RTT is queueing, cut above 10 %. Every
    /// instance sharing a dependency reads the same share from the same RTTs, so the fleet's
    /// queue is a share of the RTT, not a number of calls per instance (while the instances are
    /// no more than the dependency's workers: each keeps at least one permit). Below a limit of
    /// 4, the band is never less than a quarter of a call of the instance's own (half a call to
    /// cut), unless `alpha` and `beta` are themselves lower: there it lets the smaller of two
    /// instances that read the same share grow (see [`Vegas`]). While the dependency reports
    /// its queue, `alpha` is instead the geometric mean of that quarter of a call and half this
    /// share of the limit (`sqrt(0.25 * limit * share / 2)` calls), but at least half a call
    /// (0.5 to 1.8 calls between limits of 20 and 256 by default), and `beta` twice that; slow
    /// start then ends only above that band and above `0.75 * share` of the RTT.
    ///
    /// On a busy host the RTT of a fast dependency can scatter by as much as the default band
    /// with nothing queued, which holds a lone instance far below a dependency of many workers
    /// unless the dependency reports its queue (on real sockets, 0.24x a fixed limit's goodput
    /// in front of 64 workers at 10 ms; 0.34-0.39x since the growth goes on inside the band). A
    /// share of 0.2 served 1.00x there; it costs fleets in
    /// front of few workers their even shares, so keep the default for them (see the Vegas
    /// guide, [`crate::guide::vegas`]). Windows of 3 rounds
    /// ([`window_rounds`](Self::window_rounds)) served 1.05x there for an instance alone.
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
    /// `(0, 1)` (default 0.5). An RTT-based cut takes the limit to the concurrency that leaves
    /// `alpha` queued, multiplicatively, so instances sharing a dependency cut in proportion.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.settings.backoff_ratio = ratio;
        self
    }

    /// Growth per round while no queue is measured, times `smoothing` and `max(1, sqrt(limit))`
    /// (after slow start), in `[0, 10]` (default 0.25), and times the share of `alpha` still
    /// free, unless the dependency reports its queue. The growth is additive at small limits
    /// and sub-linear at large ones, never a share of the limit, so that instances sharing a
    /// dependency converge to equal limits (see [`Vegas`]).
    pub fn growth_ratio(mut self, ratio: f64) -> Self {
        self.settings.growth_ratio = ratio;
        self
    }

    /// Growth inside the band (between `alpha` and `beta` calls queued), as a share of the
    /// additive growth below it, in `[0, 1]` (default 0.5), unless the dependency reports its
    /// queue; after slow start, the growth below `alpha` tapers toward `alpha` no further than
    /// this share either. 0 holds the limit anywhere inside the band, as textbook Vegas does.
    ///
    /// Instances that share a dependency read the same queue share from the same RTTs, so a
    /// band that holds lets any split of the dependency stand that puts every instance inside
    /// it, and only the scatter of the readings moved them apart again. Growing on through the
    /// band, they reach `beta` and cut together, each in proportion to its limit, and additive
    /// increase with multiplicative decrease evens out their shares (Chiu and Jain, 1989). In
    /// `vegas_sim --fleet` at a 10 % spread, seeds 1-30, the least Jain's index against that of
    /// the previous default, whose band held: 2 instances in front of 64 workers 0.895 against
    /// 0.747 (3 seeds below 0.95 against 12, the late joiner over 3 s in 1 against 14), 2 in
    /// front of 16 workers 0.984 against 0.928, 4 in front of 4 workers 0.993 against 0.979, 6
    /// in front of 4 0.950 against 0.863. The queue the band allows then comes and goes between
    /// its edges, rather than standing anywhere in it.
    ///
    /// The rate of that growth also sets how soon a newcomer gets its share. Each cycle of
    /// growth and proportional cuts moves a share of the limits from the larger instance to the
    /// smaller, and a cycle lasts as many rounds of calls as the growth takes to refill what the
    /// cut removed, so in seconds it takes longer the longer the dependency's RTT. For a few
    /// instances that each hold tens of permits, 1.0 (the same growth all the way up to `beta`,
    /// with no taper below `alpha` either) shortens the cycles: on real sockets, 2 instances in
    /// front of 64 workers at 40 ms shared at a Jain's index of 0.965-1.000 in ten runs, the
    /// late joiner at 80 % of its share after 2.5-4.5 s, against 0.903-0.999 (three runs below
    /// 0.95) and 3.0-6.5 s with the default; alone, it also holds a wider spread of the service
    /// time (0.38 of the capacity at the least at a uniform 30 % in simulation, against 0.13).
    /// It is not the default because every instance's growth adds to one queue, which grows
    /// longer with many instances at a few permits each: 8 instances in front of 4 workers
    /// summed 16.7-17.3 permits against 13.5-13.6 and shared at 0.929 and 0.979 against 0.988
    /// and 0.993 (see `docs/PERFORMANCE.md`, "A newcomer's share comes with rounds of calls").
    pub fn band_growth(mut self, share: f64) -> Self {
        self.settings.band_growth = share;
        self
    }

    /// Minimum successful samples per window (windows also hold at least `window_rounds` times
    /// the limit), at least 4 (default 16).
    pub fn baseline_window(mut self, samples: usize) -> Self {
        self.settings.baseline_window = samples;
        self
    }

    /// Minimum rounds of calls per window: a window holds at least `rounds * limit` successful
    /// samples (and at least `baseline_window`), in `[0.5, 64]` (default 0.5, half the limit).
    /// Without reports of the dependency's queue, the windows that read the queue at a steady
    /// limit hold a quarter of that (an eighth of the limit by default: see [`Vegas`], "In a
    /// fleet"), and the baseline is lowered by the low percentile of each `rounds * limit` of
    /// their calls together.
    ///
    /// The queue is read from each window's low percentile, which scatters with the
    /// dependency's service time: the more calls a window holds, the less it scatters. For an
    /// instance alone, or one of few, in front of a dependency of many workers whose service
    /// time varies (and that does not report its queue), 3 rounds kept the limit near the
    /// workers where the default collapsed: on real sockets, alone in front of 64 workers whose
    /// service time is lognormal with a standard deviation of 10 % of its mean, 0.86x and 0.90x
    /// a fixed limit's goodput against 0.07x and 0.08x (with a band as wide as a wider spread,
    /// see [`Vegas`], 0.99-1.04x at 30 %). Longer windows scatter less, and in a fleet they cost
    /// evenness, as the larger instance's window holds more calls and scatters least: it cuts
    /// less often than the smaller one. In simulation at a 10 % spread, 2 instances in front of
    /// 16 workers kept a least Jain's index of 0.89 with 3 rounds (seeds 1-30), against 0.98
    /// with the default, and on real sockets (before the growth went on inside the band, see
    /// [`band_growth`](Self::band_growth)) 2 instances in front of 64 workers 0.76, the late
    /// joiner held at 6-19 permits beside the first one's 104-118. Small limits are not affected
    /// (16 samples are more than 3 rounds below a limit of 6). Alone in front of a fast dependency
    /// of many workers on a busy host, 3 rounds also kept the limit at the workers (1.05x a
    /// fixed limit of 64's goodput, against 0.24x). Since the growth goes on inside the band
    /// ([`band_growth`](Self::band_growth)), 1.5 rounds go about as far there (0.94x and 1.00x,
    /// against the default's 0.34-0.39x) at less cost to fleets; see the Vegas guide
    /// ([`crate::guide::vegas`]) and [`Vegas`], "A service time that varies widely". Those
    /// figures were measured while every window held `rounds` of calls; now that the windows
    /// that read the queue hold a quarter of them (0.75 rounds at 3), 3 rounds alone serve a
    /// little less in simulation (seeds 1-6, the least: 0.973 of the capacity against 0.989 at a
    /// uniform 30 % in front of 50 slots, 0.991 against 0.996 at a lognormal 10 % in front of
    /// 200), and with the wider band as well the same as before (0.997-0.998).
    ///
    /// The longer windows are for reading the queue at a steady limit: a running slow start's
    /// windows hold at most one round, since slow start learns of the queue its growth built
    /// only when the window closes. At their full length there, 3 rounds let that queue stand
    /// long enough to cost fleets their worst p99 (in simulation, 4 instances in front of 4
    /// workers: 119 ms at the worst over 30 seeds, against 83 ms with at most one round in slow
    /// start and 64 ms for a fixed limit of 1 each).
    pub fn window_rounds(mut self, rounds: f64) -> Self {
        self.settings.window_rounds = rounds;
        self
    }

    /// Rounds (of `limit` samples) between periodic probes, at least 1 (default 500). A periodic
    /// probe lowers the limit to the concurrency at which the last window would not have queued
    /// (none when nothing queued) and may only lower the baseline.
    pub fn probe_interval(mut self, rounds: usize) -> Self {
        self.settings.probe_interval = rounds;
        self
    }

    /// The limit during a probe that tests a suspected stale baseline, as a share of the current
    /// limit, in `(0, 1)` (default 0.5); the least a periodic probe goes to.
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
        /// A trial of one call more than the limit's floor, where a probe cannot go lower.
        up: bool,
    },
}

/// Vegas: grows or shrinks the limit to keep between `alpha` and `beta` calls queued at the
/// dependency.
///
/// `queue = limit * (1 - rtt_base / rtt)` estimates how many calls are waiting at the dependency
/// rather than being served. Below `alpha` the limit grows, above `beta` it shrinks, in between
/// it grows at half the rate ([`VegasBuilder::band_growth`]; textbook Vegas holds there). What
/// this implementation adds to the textbook rule, each against a known failure of existing
/// implementations:
///
/// - **Robust baseline.** Samples are judged in windows (at least `baseline_window` successful
///   samples, or `window_rounds` times the limit if larger: half of it by default; without
///   reports, the windows that read the queue hold a quarter of that, see "In a fleet"). `rtt`
///   is the window's low percentile and `rtt_base` the lowest low percentile of `window_rounds`
///   of calls since it was last re-learned (see `baseline.rs`): one lucky 1 us sample, or a burst
///   of fast failures (dropped calls never feed it), cannot poison it, and a service time that
///   varies by about 10 % either way does not read as a queue (a wider spread does: see below).
/// - **A slower dependency is not a queue.** A stale baseline (the dependency's service time rose,
///   its concurrency did not) reads exactly like a queue, and cutting on it would starve the
///   dependency down to a limit of 1. So every cut is judged by the window after it, built only
///   from calls granted under the new limit: a real queue shortens the RTT at least in
///   proportion to the concurrency removed; if the RTT instead stays where it was, the calls
///   after the cut no longer queue, their low percentile becomes the baseline and the limit
///   returns to where it was before the congestion: the concurrency the window that began it
///   was granted at, not a limit its calls never filled, such as a slow start's last doubling
///   (see `baseline.rs`). A window whose calls were granted at mixed concurrency (a ramp) is
///   never a reference.
/// - **An RTT that grows with the load is not a queue either.** On a busy host the RTT can rise
///   by several percent with the load before the dependency's workers are all busy (10.4 ms at
///   low load, 11.7 ms with 7 calls in flight in front of 8 workers, measured on loopback with
///   client and backend on 2 cores), and the band reads that as a queue, which would keep the
///   limit below the workers. When the RTT after a cut stays within 2 % of the RTT before it,
///   the baseline is raised by at most the band (`max_queue_share`) and the cut undone.
/// - **Re-learning without adopting a loaded sample.** When the queue estimate stays above
///   `beta` for `stale_rounds` rounds, or the dependency sped up, a probe lowers the limit to
///   `probe_ratio * limit`, skips one round, and takes the low percentile of samples granted
///   with at most that many calls in flight. It lowers the baseline; it raises it only if the RTT
///   did not fall with the concurrency (a stale baseline, whose cuts are then undone), and then
///   by at most the band (`max_queue_share`): the window after a cut, or the trial at the
///   floor, re-learns a slower dependency whole. A periodic
///   probe goes only as low as the concurrency at which the last window would not have queued,
///   and may only lower the baseline.
/// - **At the floor, one call more.** A limit at the bounds' minimum cannot be cut, and no probe
///   goes lower, so there the stale-baseline question is asked the other way round: the limit
///   is raised by one call for a few samples. If the RTT does not rise, a worker was free and
///   the dependency only got slower: its RTT is re-learned and the limit grows again. If it
///   rises, the queue is real, and another caller's: this one, at its floor, cannot shorten
///   it. Its RTT at the floor then becomes the baseline (see "In a fleet", where the instances
///   outnumber the workers). Without the trial, a limit that sat at 1 when the dependency
///   slowed stayed at 1 for good. The same trial runs when a small limit (at the
///   floor, or below 4, where the band is at least a quarter of a call) has held its permits for
///   `HOLD_TRIAL_ROUNDS` rounds without a cut: a baseline a little too low (a lucky
///   window) reads an idle dependency as a few percent queued, which neither grows nor cuts the
///   limit, and on real sockets one instance held 1 permit for 7 s that way, three of four
///   workers idle, after the other instance had left.
/// - **Multiplicative cuts on drops**, at most once per round of calls, so a real overload halves
///   the load at once while a burst of fast failures costs one cut, not a collapse.
/// - **Growth only when used**: only windows whose calls were granted with, on average,
///   `in_flight >= limit / 2` grow the limit. Until the first queue or drop is seen it grows by
///   up to the whole limit per round (slow start), from the bounds' initial limit (1 by default).
///
/// # A service time that varies widely
///
/// Without reports, the band is read from a window's low percentile (the second smallest RTT of
/// 16 calls) against the least such low since the baseline was last learned. The more the
/// dependency's service time varies, the more that low scatters with nothing queued, and the
/// further the least of them sits below a usual one: with a service time drawn uniformly within
/// 30 % of its mean either way, a usual window reads 0-18 % queued against the band's 5-10 %,
/// and the limit ratchets down. In `vegas_sim --service-jitter`, a lone instance in front of 50
/// slots serves 0.995 of the capacity at 10 %, 0.98 at 15 %, 0.92 at 20 % and 0.13 at 30 % (seeds
/// 1-10, the least; 0.52 at 20 % before a cut needed its queue above `beta` by two standard
/// errors of the window's low percentile, see "In a fleet", and 0.34 before the growth went on
/// inside the band); on real sockets, alone in front of 64 workers at 30 %, 0.06x a fixed
/// limit's goodput (measured before those changes). A lognormal service time, the shape
/// measured ones tend to have, does so sooner: its thin left tail keeps lowering the least low,
/// and a standard deviation of 10 % of the mean costs a lone instance nearly all the capacity
/// (0.15 at the least), 5 % a little of it (0.98 at the least in front of 50 slots, 0.86 in front
/// of 200, where it was 0.93 before the windows that read the queue held an eighth of the limit
/// rather than half of it). Small limits are spared
/// (the band is at least a quarter of a call below 4 permits): 4 instances in front of 4
/// workers keep their shares at a 30 % spread of either shape.
///
/// Where the dependency reports its queue ([`Permit::success_queued`](crate::vegas::Permit::success_queued)),
/// the spread does not enter the reading: 0.986x a fixed limit's goodput in the same socket run.
/// Where it cannot, an instance that is alone, or one of few (with the same settings on every
/// one: see "In a fleet"), in front of it can read longer windows and take a band as wide as
/// the spread:
/// `Vegas::builder().window_rounds(3.0).max_queue_share(0.3).alpha(10.0).beta(20.0)`. Windows of
/// 3 rounds ([`VegasBuilder::window_rounds`]: 192 calls at 64 permits, rather than 32) scatter
/// less, and the band of 15-30 % of the RTT covers what scatter is left. Alone in front of 64
/// workers on real sockets it served 0.99x and 1.02x a fixed limit's goodput at a uniform 30 %,
/// and 1.02x and 1.04x at a lognormal standard deviation of 30 %, where the band alone served
/// 0.13x; in simulation, 0.95-0.998 of the capacity at either spread and shape, in front of 50
/// or 200 slots. Windows of 3 rounds alone served 0.86x and 0.90x on those sockets at a
/// lognormal 10 % (the default: 0.07x and 0.08x); they cost 4 instances in front of 4 workers
/// nothing (their windows stay at 16 calls), but fleets at larger limits some of their evenness
/// (2 instances in front of 16 workers: Jain's index 0.89 at the least over 30 seeds in
/// simulation, against 0.98). The band costs fleets in front of few workers their even shares
/// (4 instances in front of 4 workers: 0.61 at the least over seeds 1-10, and 0.58 with the
/// windows too, against 0.99). So neither is the default.
///
/// # In a fleet
///
/// Every instance of a service runs its own limiter in front of the dependencies it shares with
/// the others. With no coordinator, the instances should share the way TCP flows share a link:
/// equal limits, whatever order they started in, and a queue that stays short however many they
/// are. Classic Vegas does neither. A flow that learns its `rtt_base` while a queue stands takes
/// the queue for the baseline, sees no queue and grows (Mo, La, Anantharam and Walrand, 1999;
/// Boutremans and Le Boudec, 2000). Each flow also keeps its own `alpha..beta` calls queued, so
/// N flows queue N times that. And a rule that grows in proportion to the limit keeps whatever
/// split it starts from. Four choices answer this, with no setting to turn on (the instances
/// need not know of each other):
///
/// - **One shared signal.** For limits up to `alpha / (max_queue_share / 2)` (60 by default),
///   the band is a share of the RTT: grow while `1 - rtt_base / rtt` is under
///   `max_queue_share / 2` (5 %), cut above `max_queue_share` (10 %). Instances in front of one
///   dependency see the same RTT, so they read the same signal and act together, and the queue
///   it allows is a share of the RTT, not N times a per-instance count. There is no band floor
///   of one call: a limit is a fraction (permits are its floor), so four instances can settle
///   near one permit each in front of four workers.
/// - **But at least a quarter of a call of one's own, at small limits.** The share alone is
///   the same for every instance whatever its limit, so it cannot say who should give way: two
///   instances in front of 4 workers, one at 1 permit and one at 3-5, both read the queue inside
///   the band and kept that split. On real sockets the low percentile of a window grows by only
///   about 1 % with one call queued behind 4 busy workers and 7 % with two, and Jain's index for
///   2 instances was 0.725-0.997 in eleven runs. Below a limit of 4 the band therefore counts at
///   least a quarter of a call of the instance's own (half a call to cut), as textbook Vegas
///   counts calls: the same share is fewer calls of its own for the smaller instance, which
///   grows where the larger one holds, and the shares converge. It costs at most a quarter of a
///   call queued per instance. From 4 up, the share alone: alone in front of a dependency, such
///   a limit is about the dependency's own concurrency, which the floor would only raise by a
///   call at times. The floor also favours an instance whose baseline holds part of the queue,
///   which is why the instances at their floor take the queue in (below).
/// - **Additive increase, multiplicative decrease** on that signal, which converges to equal
///   shares (Chiu and Jain, 1989): growth is `smoothing * growth_ratio * max(1, sqrt(limit))` per
///   round (additive at small limits, sub-linear at large ones, never a share of the limit), and
///   an RTT-based cut takes the limit down to the concurrency that leaves `alpha` queued,
///   `limit * (1 - queue_share) + alpha`, at most by `backoff_ratio`. Cutting every instance in
///   proportion empties the shared queue in one step. The growth goes on inside the band, at
///   half the rate ([`VegasBuilder::band_growth`]), so the instances keep reaching `beta` and
///   cutting together: a band that holds let any split stand that put every instance inside
///   it, and only the scatter of their readings moved them (in seed 20 of `vegas_sim --fleet
///   --instances 2 --workers 64` the late joiner held 8 permits for 10 s beside the first
///   instance's 60, both reading 5-9 % queued; over seeds 1-30, Jain's index was 0.747 at the
///   least with a band that held, and is 0.895 growing through it).
/// - **A baseline re-learned only at reduced concurrency.** A probe run by one instance, whose
///   RTT still holds the others' queue, may only lower its baseline; it raises it only when the
///   RTT did not fall at all with the concurrency (a slower dependency). So an instance does not
///   take the fleet's queue for its unloaded RTT, and the windows that follow a cut lower any
///   baseline learned while a queue stood. The baseline is not a windowed minimum that expires
///   with time (BBR's, kept fresh by periodic drains to a small concurrency, as Envoy's adaptive
///   concurrency filter re-measures its minimum RTT): without the drains, such a baseline
///   creeps up with the queue the band keeps standing; with them, alone in front of a
///   dependency, the limit spends 4-6 % of the time below the dependency's concurrency.
///   Netflix's Gradient2 follows a long-term average RTT instead of a minimum, which creeps up
///   with a standing queue too.
/// - **Raises of the baseline are spaced.** One instance cannot always tell a slower dependency
///   from the queue the others keep: when it alone lowers its concurrency, the RTT stays about
///   where it was in both cases. A baseline raised on the others' queue lets the instance grow,
///   which lengthens the queue, which its next raise takes in again, and the instances that
///   took the queue for their baseline hold the others down at a permit each. So a raise comes
///   at least 50 rounds after the previous one, and a raise that follows the previous one within
///   four such gaps doubles the gap (up to 200 rounds); the small raises for an RTT that grows
///   with the load are spaced apart the same way, on their own. A probe raises the baseline by
///   at most the band: halving one instance's concurrency in front of a queue the others keep
///   shortens it by that instance's share only, and an uncapped raise took the whole queue in.
///   Capped so, it is one of the small raises and is spaced with them, so it does not hold back
///   the whole re-learning of a slower dependency by the trial at the floor that may follow it.
///   Alone, a dependency that got slower needs one raise, not a series.
/// - **After a raise to a stale baseline's RTT, the limit holds for 32 rounds.** The raise undoes
///   the cuts, back to the concurrency at which the congestion began, and the limit does not
///   grow from there until 32 rounds have passed. Alone in front of a dependency that got
///   slower, that concurrency is about the dependency's own, so holding it costs nothing. In a
///   fleet, a queue the others built at once reads the same way (one instance's cut leaves their
///   calls queued), and the raise takes that queue into the baseline; growing from there, the
///   instance kept the queue standing by itself beside instances cut to a permit each. Held, it
///   leaves the queue to the others' cuts, and its baseline falls back with the RTT.
/// - **A newcomer starts small, and does not take the fleet's queue for its baseline at once.**
///   The limit starts at 1 and slow start takes it up, rather than adding a burst of calls at
///   once to a queue the others share. Its first baseline, learned while their queue stands,
///   may already hold part of it; its first cut then shortens the RTT by less than its own
///   share of the queue (the rest is the others'), which reads as a slower dependency. So the
///   start counts as a raise: the first raise to a stale baseline's RTT waits a gap too. Raised
///   at once, the newcomer took the fleet's queue in, undid its cut and held 5-6 permits beside
///   three instances at 1, the least fair runs of 4 instances.
/// - **Where the instances outnumber the workers, those at their floor take the queue in.**
///   Each instance then holds at least one permit, the queue never drains, and no instance can
///   learn the unloaded RTT. Each kept the baseline its history gave it: the first instance the
///   unloaded RTT, a late joiner the RTT of its first calls behind the others' queue. With the
///   band at least a quarter of a call below 4 permits, a baseline that holds part of the queue
///   is worth several permits: the late joiner held 2-5 beside others at 1, the unloaded RTT
///   read as a queue of half a call and more. So when a trial at the floor finds the queue
///   real (the RTT rose with one call more), the instance takes its RTT at the floor, one call
///   in front of the others' queue, for its baseline, and tries again after `stale_rounds`.
///   The instances at their floor all read that RTT, so they agree on a baseline with each
///   other and with the late joiner, and share evenly. It costs about one permit more queued
///   in all than before (8 instances in front of 4 workers: limits adding up to 13.9, against
///   12.8; 6 instances: 10.1, against 9.3). Alone, a limit congested at its floor means a stale baseline
///   (the dependency got slower), which this re-learns too; where the dependency reports its
///   queue, the reports give the baseline instead.
/// - **Short windows to read the queue, so that the larger instance cuts first.** Without
///   reports, a window that reads the queue holds a quarter of `window_rounds` (an eighth of the
///   limit by default), at least `baseline_window` calls (16). With windows of half the limit,
///   an instance's reading was the steadier the larger it was: in `vegas_sim --fleet
///   --instances 2 --workers 128`, two instances that read the same queue share (6.5 % of the
///   RTT) from the same baseline saw the smaller one's windows of 16 calls cross the band in 10 %
///   of them and the larger one's of 52 in 4.6 %, so the smaller one cut about twice as often
///   per second, and it held 30 permits beside the larger one's 105 (Jain's index below 0.95 in
///   24 of 40 seeds, 0.689 at the least). With windows of 16 calls for both (up to a limit of
///   128), their readings scatter alike and the larger instance reads its queue more often per
///   round, so it is the one that cuts more often: none of 40 seeds below 0.95, 0.974 at the
///   least, and the late joiner holds 80 % of its share within 3 s in 37 of them (16 before).
///   Two things keep a lone instance where it was:
///   - the baseline is lowered only by the low percentile of `window_rounds` of calls, as before,
///     not by each short window's: the least of many lows of 16 calls sits further below a usual
///     one, and alone in front of 200 slots with a lognormal service time of 5 % spread, that gap
///     read as a queue (0.36 of the capacity at the least, against 0.93);
///   - from a limit of 16 up, a window cuts only if its queue passes `beta` by more than two
///     standard errors of its low percentile, estimated from the window's own RTTs (the spacing
///     of its lowest ones): a low percentile of 16 calls scatters more than one of 64.
///
///   The margin also spares a lone instance in front of a dependency whose service time varies
///   by 20 % either way (0.92 of the capacity at the least over seeds 1-10, against 0.52; see "A
///   service time that varies widely").
///
/// What none of this can do is tell an instance how much of the RTT it measures is the queue
/// the others keep: the instances that take part of it for their baseline hold larger shares.
/// A dependency that reports how long each call waited in its queue removes the question:
/// finish the permit with [`Permit::success_queued`](crate::vegas::Permit::success_queued) (the
/// HTTP layer and middleware do, from a `Server-Timing: flowguard-queue` metric) and
/// `rtt - queued` is the baseline (the low percentile of the last 8 reported calls, so it
/// follows a slower dependency after 8 reports), the same for every instance. While reports
/// come in, Vegas reads them as textbook Vegas flows with exact base RTTs read their queues:
///
/// - **One's own queued calls, from the reports.** The calls an instance keeps queued are its
///   calls in flight times the share of their RTT the reports say they waited (Little's law,
///   over the window's calls), rather than `limit * (1 - rtt_base / rtt)` from its least loaded
///   calls: in front of many workers a short queue comes and goes, which the low percentile
///   misses, and the service time of each call no longer adds its jitter to the reading.
/// - **A band in calls that grows as the square root of the limit.** `alpha` is the larger of
///   half a call and `sqrt(0.25 * limit * max_queue_share / 2)` calls (half a call up to a limit
///   of 20, 1.8 calls at 256), `beta` twice that, both still capped by `alpha` and `beta`. As a
///   share of the RTT that is narrower for a larger limit (3.2 % to cut at 48 permits, 6.3 % at
///   16), so of two instances that read the same queue share the larger one cuts first and the
///   smaller one grows longest, where a band that is the same share for every limit let any
///   split stand (2 instances in front of 128 workers kept about a 3:1 split).
/// - **Toward the band's middle, not anywhere in it.** Inside the band the limit moves by 5 % of
///   the distance to the middle per round, as FAST TCP moves its window: the middle is fewer
///   calls per permit for a larger limit, so two instances settle at equal limits, where a band
///   that only holds lets any split up to 4:1 stand (both inside their bands).
/// - **Growth that does not taper, and a slow start that ends above the band.** A newcomer's
///   calls wait behind the queue the others keep, so its reading nears `alpha`, and enters the
///   band, long before it holds its share: growth tapered toward `alpha`, and a slow start that
///   ended in the band, left it there for seconds. Slow start also goes on while the queue is
///   under the middle of the band that is a share of the RTT (`0.75 * max_queue_share`, 7.5 %),
///   however many calls of its own that is: in front of many workers, a newcomer's last
///   doubling queues its own calls behind the others' before they cut, and a band of a call or
///   two ended its slow start at a third of its share.
/// - **A slow start ended by one's own passing queue resumes, once.** A newcomer's doubling
///   can still queue so many of its calls at once that its slow start ends above both bands
///   (on real sockets, its first growth takes it from 1 permit to 9 after a window of 16 calls,
///   and those calls wait together behind the others'); the others cut, and the queue is gone.
///   So when a window within 4 rounds of that end reads at most a quarter of `alpha` queued,
///   slow start resumes, as HyStart++ (RFC 9406) resumes a slow start whose RTT falls back
///   during its conservative phase; the resumed slow start ends above the band in calls. A queue
///   that stays, even inside the band, ends it for good.
///
/// In `vegas_sim --fleet --reported-queue` over 50 seeds, the least fair seed for 2 instances
/// in front of 4 workers goes from 0.954 to 0.978, for 4 from 0.989 to 0.998, for 4 in front of
/// 8 workers from 0.972 to 0.983 and for 2 in front of 128 from 0.969 to 0.999, the late joiner
/// within 3 s in every seed (9 of 50 over 3 s before); in front of 64 workers at 40 ms, from
/// 0.884 to 0.956 (36 seeds below 0.95, now none), the late joiner over 3 s in 1 seed of 50
/// (48 before; 31 with a slow start that ended above the band in calls only, 15 before a slow
/// start ended by one's own passing queue resumed). The half call
/// costs a little queue where the instances outnumber the workers (8 in front of 4: limits
/// adding up to 9.4, against 8.2).
/// Without reports none of this applies: read from an instance's own baseline, whose error is
/// a few percent, the narrower band cut a lone instance far below the dependency's concurrency
/// (`vegas_sim --slots 200`: 0.12 of the capacity served, against 0.99).
///
/// **The same settings on every instance.** The instances share evenly because each reads the
/// same signal against the same band: an instance whose band is wider holds its permits while
/// the others cut, and one that reads the reports, whose band narrows as its limit grows, gives
/// way to one that does not. So `max_queue_share`, `alpha`, `beta`, `window_rounds` and the
/// reading of the reports are settings of the fleet, and a rollout that changes them leaves the
/// shares uneven until it ends: in `vegas_sim --fleet --instances 2 --workers 32
/// --vegas-instances 0 --vegas-max-queue-share 0.2`, the first instance takes 1.64 times its
/// fair share (the median over 100 seeds, each below Jain's index 0.95), and with
/// `--reported-queue --reported-instances 0` it holds 0.59 of it.
///
/// Measured in `vegas_sim --fleet` (4 workers at 10 ms, 3x overload, 2 to 8 instances, a late
/// joiner and one leaving), in `overload --fleet 4` on real sockets, and alone in front of a
/// dependency whose capacity steps (`vegas_sim --step`): see `docs/PERFORMANCE.md`. Fairness
/// holds best where every instance offers more than its share. The limits are whole permits, so
/// more instances than the dependency has workers hold at least one permit each and queue the
/// rest: then no instance ever sees the unloaded RTT, the instances agree on the RTT at their
/// floor instead, and the queue is longer than a fixed limit of 1 each would keep (8 instances
/// in front of 4 workers: Jain's index 0.934 at the least over 390 seeds, the worst p99 1.39x
/// a fixed limit of 1's at the median, 1.55x at the most), unless the dependency reports its
/// queue.
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
    /// Samples per window at the current limit: `max(baseline_window, window_rounds * current)`.
    window_len: usize,
    /// Samples between periodic probes at the current limit: `probe_interval * current`.
    probe_after: usize,
    window: SampleWindow,
    /// The RTTs of the calls since the baseline last took a low percentile, while short windows
    /// read the queue: the baseline is lowered by the low percentile of `window_rounds` of calls
    /// (see [`READING_SHARE`]).
    baseline_calls: Vec<u64>,
    /// Whether the calls are kept in `baseline_calls`: while the windows are shorter than the
    /// baseline's (steady, without reports).
    pools_calls: bool,
    baseline: Baseline,
    phase: Phase,
    probe_buffer: Vec<u64>,
    samples_since_probe: usize,
    /// The sample count at the last cut on a drop.
    cut_at: u64,
    cut_cooldown: usize,
    congested_rounds: f64,
    /// Congested rounds a stale suspicion must last at the limit's floor before the next trial
    /// of one call more; back to `stale_rounds` after a trial that re-learns the baseline,
    /// doubled after one that leaves it as it was.
    trial_after: f64,
    /// Rounds a small limit (see `holds_little`) has held its permits without a cut.
    held_rounds: f64,
    /// What undoing the cuts of a congestion that was no queue restores: the concurrency the
    /// window that began it was granted at (at most the limit then).
    limit_before_congestion: f64,
    /// Samples fed so far (the clock of the drop cooldown and the raise spacings).
    samples: u64,
    /// When the baseline may next be raised to a stale baseline's RTT.
    stale_raises: RaiseSpacing,
    /// When the baseline may next be raised a little, to an RTT that did not fall with the
    /// concurrency.
    flat_raises: RaiseSpacing,
    /// The window that caused the last RTT-based cut, until the window after it is judged.
    cut_reference: Option<CutReference>,
    /// Where slow start stands: while it runs, the limit grows by the whole limit per round,
    /// like TCP slow start.
    slow_start: SlowStart,
    /// Rounds left in which the limit does not grow, after a raise to a stale baseline's RTT
    /// (see [`HOLD_AFTER_STALE_RAISE_ROUNDS`]).
    growth_held_rounds: f64,
}

/// Where a [`Vegas`] slow start stands.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SlowStart {
    /// Running: no queue or drop seen yet.
    First,
    /// Ended above the band while reports came in, `rounds` ago: it may still resume (see
    /// [`RESUME_WITHIN_ROUNDS`]).
    Ended {
        /// Rounds since it ended.
        rounds: f64,
    },
    /// Running again, once, after the queue that ended it was gone; it ends above the band in
    /// calls.
    Resumed,
    /// Over for good.
    Over,
}

impl SlowStart {
    /// Whether slow start is running: the limit grows by the whole limit per round.
    fn runs(self) -> bool {
        matches!(self, Self::First | Self::Resumed)
    }

    /// Ends a running slow start: a first one may resume (`may_resume`: it ended above the band
    /// while reports came in). Anything else stays as it is.
    fn end(&mut self, may_resume: bool) {
        *self = match *self {
            Self::First if may_resume => Self::Ended { rounds: 0.0 },
            Self::First | Self::Resumed => Self::Over,
            other => other,
        };
    }

    /// After a window of `rounds` rounds: a slow start that ended (above the band, while
    /// reports came in) resumes if the window found the queue gone (`queue_gone`), waits while
    /// it is within [`RESUME_WITHIN_ROUNDS`] of its end, and is over after that. Anything else
    /// stays as it is.
    fn after_window(&mut self, queue_gone: bool, rounds: f64) {
        if let Self::Ended { rounds: since } = *self {
            *self = if queue_gone {
                Self::Resumed
            } else if since + rounds <= RESUME_WITHIN_ROUNDS {
                Self::Ended {
                    rounds: since + rounds,
                }
            } else {
                Self::Over
            };
        }
    }
}

impl Vegas {
    /// Starts configuring a Vegas algorithm.
    pub fn builder() -> VegasBuilder {
        VegasBuilder {
            settings: Settings::default(),
        }
    }

    /// The builder with defaults (`Vegas::builder().build()`, which cannot fail): limits in
    /// `[1, 1000]` starting at 1, `alpha` 3, `beta` 6 (capped at 5 % and 10 % of the limit),
    /// log10 scaling on.
    pub fn new() -> Self {
        Self::with(Settings::default())
    }

    /// A Vegas algorithm with validated `config`.
    fn with(config: Settings) -> Self {
        let start = config.bounds.initial();
        Self {
            estimate: start as f64,
            current: start,
            window_len: window_len(&config, start, WindowKind::SlowStart, false),
            probe_after: probe_after(&config, start),
            window: SampleWindow::with_capacity(config.baseline_window),
            baseline_calls: Vec::with_capacity(config.baseline_window),
            pools_calls: false,
            baseline: Baseline::default(),
            phase: Phase::Tracking,
            probe_buffer: Vec::with_capacity(config.probe_samples),
            samples_since_probe: 0,
            cut_at: 0,
            cut_cooldown: 0,
            congested_rounds: 0.0,
            trial_after: config.stale_rounds,
            held_rounds: 0.0,
            limit_before_congestion: start as f64,
            samples: 0,
            stale_raises: RaiseSpacing::from_start(),
            flat_raises: RaiseSpacing::default(),
            cut_reference: None,
            slow_start: SlowStart::First,
            growth_held_rounds: 0.0,
            config,
        }
    }

    /// The current unloaded-RTT estimate, once learned: the dependency's own, while it reports
    /// how long calls queued (see [`LimitAlgorithm::update_queued`]).
    pub fn rtt_base(&self) -> Option<std::time::Duration> {
        self.baseline
            .estimate()
            .map(std::time::Duration::from_nanos)
    }

    /// Whether a baseline probe is running: a reduced limit, or one call more than the floor
    /// (see [`Vegas`], "At the floor, one call more").
    pub fn is_probing(&self) -> bool {
        matches!(self.phase, Phase::Probing { .. })
    }

    /// The band (`alpha`, `beta`) in calls at the current limit; `reported`: whether the
    /// dependency reports its queue.
    fn thresholds(&self, reported: bool) -> (f64, f64) {
        // log10 is at most 1 up to 10, where the scale is 1 anyway: skip it for small limits.
        let scale = if self.config.log10_scaling && self.estimate > 10.0 {
            self.estimate.log10().max(1.0)
        } else {
            1.0
        };
        // Never tolerate a queue above a share of the limit: 3..6 queued calls are a small delay
        // in front of 100 slots but a large one in front of 10. For small limits, the band is
        // that share of the RTT, the same for every instance sharing a dependency.
        let share_alpha = self.estimate * self.config.max_queue_share / 2.0;
        // While the dependency reports how long calls queued, the geometric mean of that and a
        // quarter of a call: in calls it grows as the square root of the limit, so as a share of
        // the RTT it falls as the limit grows. Of two instances that read the same queue share,
        // the larger one is the first to cut and the smaller one the last to stop growing, and
        // their limits converge, where a band that is the same share for both lets any split
        // stand (why, in the `Vegas` docs, "In a fleet"). It is below the share band from a
        // limit of 5 up (by default), and above the floor below from a limit of 20.
        let capped = if reported {
            (MIN_ALPHA * share_alpha).sqrt()
        } else {
            share_alpha
        };
        let alpha = (self.config.alpha * scale).min(capped);
        let beta = (self.config.beta * scale).min(2.0 * capped);
        // But at least a quarter of a call of the instance's own (half a call before it cuts),
        // unless `alpha` and `beta` themselves are lower, below a limit of 4; and at any limit
        // half a call (one to cut) while the dependency reports how long calls queued, which
        // are then read as the calls' mean wait: why, in the `Vegas` docs ("In a fleet"). Not
        // from 4 up without reports: alone in front of a dependency such a limit is
        // the dependency's own concurrency, which the floor would only raise by a call at times,
        // and a window that spans that raise when the dependency slows cannot judge the cut it
        // causes.
        match self.least_calls(reported) {
            Some(least) => (
                alpha.max(least.min(self.config.alpha)),
                beta.max((2.0 * least).min(self.config.beta)),
            ),
            None => (alpha, beta),
        }
    }

    /// The middle of the band that is a share of the RTT (`0.75 * max_queue_share` of it), in
    /// calls at the current limit: while reports come in, slow start goes on below it.
    fn share_middle(&self) -> f64 {
        0.75 * self.config.max_queue_share * self.estimate
    }

    /// The least `alpha` in calls of the instance's own, if the band counts calls:
    /// [`REPORTED_MIN_ALPHA`] while the dependency reports its queue, [`MIN_ALPHA`] below a
    /// limit of [`CALLS_BELOW`], none otherwise.
    fn least_calls(&self, reported: bool) -> Option<f64> {
        if reported {
            Some(REPORTED_MIN_ALPHA)
        } else if self.estimate < CALLS_BELOW {
            Some(MIN_ALPHA)
        } else {
            None
        }
    }

    /// Whether the limit is at its floor, or below [`CALLS_BELOW`], where the band is at least a
    /// quarter of a call: there a baseline a few percent too low reads an idle dependency as
    /// inside the band, and a limit that holds its permits is tried one call higher after
    /// `HOLD_TRIAL_ROUNDS` rounds.
    fn holds_little(&self) -> bool {
        self.current <= self.config.bounds.min() || self.estimate < CALLS_BELOW
    }

    /// Growth over `rounds` rounds after slow start, while no queue is read: additive at small
    /// limits and `sqrt(limit)` at large ones (times `growth_ratio` and `smoothing`), never a
    /// share of the limit, so that instances sharing a dependency converge to equal limits.
    fn additive_growth(&self, limit: f64, rounds: f64) -> f64 {
        self.config.smoothing * self.config.growth_ratio * limit.sqrt().max(1.0) * rounds
    }

    /// Feeds a complete window to the baseline. While the calls are pooled (`pools_calls`: the
    /// steady windows that read the queue, without reports, are shorter than the baseline's
    /// own), a window only becomes the recent RTT; the calls since the baseline last took a low
    /// percentile lower it once they make up a window of its length. Any other window (slow
    /// start, one judging a cut, with reports, or at a limit whose windows are the baseline's
    /// length) lowers it itself, as it always did.
    fn observe_window(&mut self, window: &WindowSummary) {
        if !self.pools_calls {
            self.baseline_calls.clear();
            self.baseline.observe(window.low);
            return;
        }
        self.baseline.read(window.low);
        if self.baseline_calls.len() >= baseline_window_len(&self.config, self.current) {
            if let Some(low) = low_percentile(&mut self.baseline_calls) {
                self.baseline.lower_to(low);
            }
            self.baseline_calls.clear();
        }
    }

    /// How far above `beta` (in calls) a window's queue must be before it cuts: from a limit of
    /// [`MARGIN_FROM`] up, without reports, [`MARGIN_ERRORS`] standard errors of its low
    /// percentile; none otherwise.
    fn cut_margin(&self, window: &WindowSummary, reported: bool) -> f64 {
        if self.has_cut_margin(reported) {
            MARGIN_ERRORS * window.low_error * self.estimate
        } else {
            0.0
        }
    }

    /// Whether a window's cut needs a margin over `beta` (and so its low percentile's standard
    /// error): from a limit of [`MARGIN_FROM`] up, without reports.
    fn has_cut_margin(&self, reported: bool) -> bool {
        !reported && self.estimate >= MARGIN_FROM
    }

    fn set_estimate(&mut self, value: f64) {
        self.estimate = self.config.bounds.clamp_f64(value);
    }

    /// A probe of a suspected stale baseline (or of a dependency that sped up), at
    /// `probe_ratio` of the limit.
    #[inline(never)]
    fn start_probe(&mut self, stale: bool) {
        let probe_limit = self
            .config
            .bounds
            .clamp(self.estimate * self.config.probe_ratio);
        if probe_limit < self.current {
            self.enter_probe(probe_limit, stale, false);
        } else if stale && self.congested_rounds >= self.trial_after {
            self.start_trial();
        }
    }

    /// At the floor no probe goes lower. One call more tells a stale baseline (the RTT does not
    /// rise: the dependency has a free worker, it only got slower) from a queue this instance
    /// cannot shorten (the RTT rises by one call's share of it). Answers whether it started.
    fn start_trial(&mut self) -> bool {
        if self.current >= self.config.bounds.max() {
            return false;
        }
        self.enter_probe(self.current + 1, true, true);
        true
    }

    /// A periodic probe: down to the concurrency at which the last window would not have queued
    /// (`current * rtt_base / rtt`, rounded up), at least `probe_ratio` of the limit, and none
    /// when nothing queued. Alone in front of a dependency, that concurrency is the dependency's
    /// own, so the probe does not leave it idle; in a fleet, the instances read the same queue
    /// share and remove it together.
    #[inline(never)]
    fn start_periodic_probe(&mut self) {
        self.samples_since_probe = 0;
        let (Some(base), Some(recent)) = (self.baseline.estimate(), self.baseline.last_window())
        else {
            return;
        };
        let unqueued = self.current as f64 * base as f64 / recent.max(1) as f64;
        // The tolerance keeps a window a hair slower than the baseline (jitter) from counting as
        // a whole call queued.
        let unqueued = (unqueued - 0.05).ceil();
        let probe_limit = self
            .config
            .bounds
            .clamp(unqueued.max(self.estimate * self.config.probe_ratio));
        if probe_limit < self.current {
            self.enter_probe(probe_limit, false, false);
        }
    }

    fn enter_probe(&mut self, probe_limit: usize, stale: bool, up: bool) {
        self.probe_buffer.clear();
        self.phase = Phase::Probing {
            restore: self.estimate,
            probe_limit,
            skip: self.config.bounds.clamp(self.estimate),
            seen: 0,
            stale,
            up,
        };
    }

    #[inline(never)]
    fn end_probe(&mut self, restore: f64, learned: Option<u64>) {
        if let Some(rtt) = learned {
            self.baseline.relearn(rtt);
        }
        self.phase = Phase::Tracking;
        self.window.clear();
        self.baseline_calls.clear();
        self.samples_since_probe = 0;
        self.congested_rounds = 0.0;
        self.set_estimate(restore);
    }

    /// The most a single raise may take the baseline `base` to: `base` plus the band
    /// (`max_queue_share`), for the raises that one instance cannot tell from a fleet's queue.
    fn band_above(&self, base: u64) -> u64 {
        (base as f64 * (1.0 + self.config.max_queue_share)) as u64
    }

    /// Whether the baseline may be raised to a stale baseline's RTT now (see `RaiseSpacing`).
    fn may_raise(&mut self) -> bool {
        self.stale_raises.allow(self.samples, self.current)
    }

    /// Whether the baseline may be raised by at most the band now: the small raises (an RTT that
    /// did not fall with the concurrency, a probe's capped raise), spaced on their own.
    fn may_raise_by_band(&mut self) -> bool {
        self.flat_raises.allow(self.samples, self.current)
    }

    /// Re-learns the baseline as `rtt` after a cut showed the RTT above it was no queue, and
    /// undoes the cuts made since the congestion began.
    #[inline(never)]
    fn raise_baseline_and_undo_cuts(&mut self, rtt: u64) {
        self.baseline.relearn(rtt);
        self.congested_rounds = 0.0;
        self.set_estimate(self.estimate.max(self.limit_before_congestion));
    }

    /// Ends a trial of one call more at the limit's floor, with the low percentile of the RTTs
    /// at the higher concurrency (`None`: the caller did not use it).
    #[inline(never)]
    fn end_trial(&mut self, restore: f64, learned: Option<u64>) {
        let recent = self.baseline.last_window();
        match (learned, recent) {
            // One call more did not lengthen the RTT: a worker was free, so the RTT at the floor
            // was no queue but a slower dependency. Re-learn it and undo the cuts.
            (Some(learned), Some(recent))
                if INSENSITIVE * learned as f64 <= recent as f64 && self.may_raise() =>
            {
                self.trial_after = self.config.stale_rounds;
                self.end_probe(
                    restore.max(self.limit_before_congestion),
                    Some(learned.min(recent)),
                );
            }
            // A real queue (the RTT rose with the extra call) that the instance, at its floor,
            // cannot shorten: the others'. Take the floor's RTT for the baseline, as the others
            // at their floor do, so that instances that outnumber the workers agree on one
            // baseline instead of each keeping what its history made it.
            (Some(learned), Some(recent))
                if INSENSITIVE * learned as f64 > recent as f64
                    && !self.baseline.is_reported()
                    && self.config.bounds.clamp(restore) <= self.config.bounds.min()
                    && self.baseline.estimate().is_some_and(|base| recent > base) =>
            {
                self.trial_after = self.config.stale_rounds;
                self.end_probe(restore, Some(recent));
            }
            // No answer, or a queue above the floor: keep the baseline, and wait twice as long
            // before the next trial.
            _ => {
                self.trial_after = (self.trial_after * 2.0).min(TRIAL_AFTER_MAX);
                self.end_probe(restore, None);
            }
        }
    }

    #[inline(never)]
    fn on_drop(&mut self) {
        self.slow_start = SlowStart::Over;
        self.congested_rounds = 0.0;
        self.cut_reference = None;
        if let Phase::Probing { restore, .. } = self.phase {
            self.end_probe(restore, None);
        }
        if self.samples - self.cut_at >= self.cut_cooldown as u64 {
            self.cut_cooldown = self.config.bounds.clamp(self.estimate);
            self.cut_at = self.samples;
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
            up,
        } = &mut self.phase
        else {
            return;
        };
        *seen += 1;
        // A trial keeps the calls granted with the extra call in flight; a probe those granted
        // at no more than its reduced limit.
        let counts = if *up {
            in_flight >= *probe_limit
        } else {
            in_flight <= *probe_limit
        };
        if *skip > 0 {
            *skip -= 1;
        } else if counts {
            self.probe_buffer.push(rtt);
        }
        let wanted = self.config.probe_samples.max(*probe_limit / 2);
        let (mut restore, stale, up) = (*restore, *stale, *up);
        let give_up = *seen > 8 * (restore as usize + wanted);
        if up {
            if self.probe_buffer.len() >= wanted {
                let learned = low_percentile(&mut self.probe_buffer);
                self.end_trial(restore, learned);
            } else if give_up {
                self.end_trial(restore, None);
            }
        } else if self.probe_buffer.len() >= wanted {
            let learned = low_percentile(&mut self.probe_buffer);
            // RTT did not fall when concurrency did: the congestion was a stale baseline, not a
            // queue, so the cuts made since it began were wrong and are undone.
            let insensitive = match (learned, self.baseline.last_window()) {
                (Some(learned), Some(recent)) => learned as f64 >= INSENSITIVE * recent as f64,
                _ => false,
            };
            // A raise capped at the band is one of the small raises, spaced with them: spaced as
            // a stale baseline's, it held back the trial at the floor that re-learns a slower
            // dependency whole.
            let insensitive = insensitive && (!stale || self.may_raise_by_band());
            if stale && insensitive {
                restore = restore.max(self.limit_before_congestion);
            }
            // A probe lowers the baseline; it raises it only when the RTT did not fall with the
            // concurrency (a stale baseline). Otherwise a probe run alone in a fleet, whose RTT
            // still holds the others' queue, would take that queue for the baseline. Even then
            // by at most the band: one instance that halves its concurrency in front of a queue
            // the others keep shortens it by its own share only, which can leave the RTT within
            // 5 % of where it was, and an uncapped raise took the whole queue in (9.5 ms raised
            // to 14-19 ms in `vegas_sim --fleet`). A dependency that really got slower is
            // re-learned whole by the window after a cut, or by the trial at the floor.
            match (learned, self.baseline.estimate()) {
                (Some(rtt), Some(base)) if stale && insensitive => {
                    self.baseline.relearn(rtt.min(self.band_above(base)));
                }
                (Some(rtt), _) => self.baseline.lower_to(rtt),
                (None, _) => {}
            }
            self.end_probe(restore, None);
        } else if give_up {
            self.end_probe(restore, None);
        }
    }

    /// Feeds a successful sample while tracking; answers whether the estimate or the phase may
    /// have changed. Most samples only join the current window, so that path is kept minimal.
    #[inline]
    fn on_success(&mut self, in_flight: usize, rtt: u64, queued: Option<u64>) -> bool {
        self.samples_since_probe += 1;
        let mut changed = false;
        // A call granted with more in flight than the limit allows now was granted before a cut:
        // its RTT describes the old concurrency, so it joins no window.
        if self.pools_calls && in_flight <= self.current {
            self.baseline_calls.push(rtt);
        }
        if in_flight <= self.current
            && let Some(window) = self.window.push(rtt, in_flight, queued, self.window_len)
        {
            self.on_window(&window);
            changed = true;
        }
        // Not while a cut is being judged: that window is a probe already.
        if self.samples_since_probe >= self.probe_after && self.cut_reference.is_none() {
            self.start_periodic_probe();
            changed = true;
        }
        changed
    }

    #[inline(never)]
    fn on_window(&mut self, window: &WindowSummary) {
        // A much faster window means the dependency sped up; the windows that follow are loaded
        // by the limit that suited the slower dependency, so re-learn at reduced concurrency.
        // Not while reports come in: the reported baseline follows a faster dependency by itself
        // within 8 reports and no probe moves it, and as the low percentile of only 8 service
        // times it scatters with them, so that a window's low percentile fell below 0.8 of it
        // now and then and each such window halved the limit for a probe that could learn
        // nothing (a service time that varies by 30 % either way: a lone instance's limit below
        // 64 workers 18 % of the time on real sockets, 0 % without those probes).
        let sped_up = !self.baseline.is_reported()
            && self
                .baseline
                .estimate()
                .is_some_and(|base| (window.low as f64) < 0.8 * base as f64);
        let rounds = window.samples as f64 / window.mean_in_flight.max(1.0);
        self.observe_window(window);
        let Some(base) = self.baseline.estimate() else {
            return;
        };
        if let Some(reference) = self.cut_reference.take() {
            // The cut did not shorten the RTT: the dependency got slower, it is not queueing.
            // Adopt the RTT after the cut (taken at reduced concurrency) as the baseline.
            let stale = reference.reveals_stale(base, window);
            if stale && self.may_raise() {
                self.raise_baseline_and_undo_cuts(window.low);
                self.growth_held_rounds = HOLD_AFTER_STALE_RAISE_ROUNDS;
                return;
            }
            // The RTT did not fall with the concurrency, by too little to reveal a slower
            // dependency: what the band read as a queue is an RTT that grows with the load below
            // the dependency's concurrency (a busy host, say). Raise the baseline by at most the
            // band.
            if !stale && reference.is_flat(base, window) && self.may_raise_by_band() {
                self.raise_baseline_and_undo_cuts(window.low.min(self.band_above(base)));
                return;
            }
        }
        let limit = self.estimate;
        let reported = self.baseline.is_reported();
        let queue = match window.queued_share {
            // The dependency says how long each call waited: the calls of this instance queued
            // at once, on average, are its calls in flight times the share of their RTT spent
            // waiting (Little's law), whatever the others keep queued and however the service
            // time of each call varies.
            Some(share) if reported => window.mean_in_flight * share,
            _ => limit * (1.0 - base as f64 / window.low as f64).max(0.0),
        };
        let (alpha, beta) = self.thresholds(reported);
        let target = (alpha + beta) / 2.0;
        let used = window.mean_in_flight * 2.0 >= limit;
        // A slow start that ended above the band (below) resumes, once, when a window soon after
        // finds the queue gone: that queue was the newcomer's own last doubling, waiting behind
        // the others' calls until they cut, not a sign of its share (`vegas_sim --fleet
        // --reported-queue --service-ms 40`, 2 instances in front of 64 workers: the late joiner
        // over 3 s in 1 seed of 50, against 15; in front of 128, 3 against 32).
        self.slow_start
            .after_window(queue <= RESUME_BELOW * alpha, rounds);
        // While reports come in, slow start goes on through the band and ends above it: a
        // newcomer's own calls wait behind the queue the others keep, so its reading enters the
        // band long before it holds its share (`vegas_sim --fleet --reported-queue --service-ms
        // 40`, 2 instances in front of 64 workers: Jain's index below 0.95 in 2 seeds of 50,
        // against 18, when slow start ended in the band). Nor does a first slow start end while
        // the queue is under the middle of the band that is a share of the RTT (7.5 % by
        // default), however many calls of its own that is: the last doubling of a newcomer in
        // front of many workers queues its own calls behind the others' before they cut, and a
        // band of one call or two ended its slow start at a third of its share (the late joiner
        // over 3 s in 31 seeds of 50 there, against 15). A resumed one ends above the band.
        let slow_start_edge = if self.slow_start == SlowStart::Resumed {
            beta
        } else {
            beta.max(self.share_middle())
        };
        let starting = reported && self.slow_start.runs() && queue <= slow_start_edge;
        let change = if queue < alpha || starting {
            self.congested_rounds = 0.0;
            if used {
                // Without reports, the growth slows down as the queue read nears `alpha`, so
                // that a noisy reading does not overshoot. With them, the reading is exact and
                // the growth is whole up to `alpha`: tapered, it held a newcomer whose reading
                // sat just below its `alpha` at a fraction of its growth (`vegas_sim --fleet
                // --reported-queue`, 2 instances in front of 128 workers: the late joiner over
                // 3 s in 20 seeds of 20, against none).
                let headroom = if reported {
                    1.0
                } else {
                    (alpha - queue) / alpha
                };
                if self.slow_start.runs() {
                    self.config.smoothing * (target - queue).max(limit * headroom) * rounds
                } else {
                    // Tapered no further than the growth inside the band, which goes on.
                    self.additive_growth(limit, rounds) * headroom.max(self.config.band_growth)
                }
            } else {
                0.0
            }
        } else if queue > beta + self.cut_margin(window, reported) {
            self.slow_start.end(reported);
            if self.congested_rounds == 0.0 {
                // What an undo of the cuts restores: the concurrency this window's calls were
                // granted at, not a limit they never reached. A slow start's last doubling sets
                // a limit its calls queue long before they fill, and restoring it sent a
                // newcomer from 2 permits back to 20 in front of 4 workers (`vegas_sim --fleet
                // --seed 6`: worst p99 96 ms, against 78 restoring the concurrency).
                self.limit_before_congestion = limit.min(window.mean_in_flight.max(1.0));
            }
            self.congested_rounds += rounds;
            // Multiplicative: down to the concurrency that leaves `alpha` queued, at most by
            // `backoff_ratio`. Every instance in front of the dependency cuts in proportion,
            // which empties the shared queue in one step.
            let cut = (queue - alpha).min(limit * (1.0 - self.config.backoff_ratio));
            // A cut judges the baseline by the window after it, if it lowers the concurrency;
            // at the limit's floor it cannot, and a trial does instead.
            self.cut_reference = if self.current > self.config.bounds.min() {
                CutReference::of(window)
            } else {
                None
            };
            -cut
        } else {
            self.slow_start.end(false);
            self.congested_rounds = 0.0;
            if reported {
                // Exact readings: move toward the band's middle (as FAST TCP does), so that the
                // instances sharing the dependency settle at equal limits rather than anywhere
                // in the band.
                (REPORTED_MOVE_GAIN * (target - queue) * rounds).clamp(alpha - beta, beta - alpha)
            } else if used {
                // Without reports, on through the band at `band_growth` of the additive rate,
                // up to `beta` and the proportional cut above it: the instances sharing the
                // dependency keep cutting together, and additive increase with multiplicative
                // decrease evens out their shares (Chiu and Jain), where a band that holds lets
                // any split stand (why, in the `Vegas` docs, "In a fleet").
                self.additive_growth(limit, rounds) * self.config.band_growth
            } else {
                0.0
            }
        };
        // Soon after a raise to a stale baseline's RTT, cuts only (see
        // `HOLD_AFTER_STALE_RAISE_ROUNDS`).
        let change = if self.growth_held_rounds > 0.0 {
            change.min(0.0)
        } else {
            change
        };
        self.growth_held_rounds = (self.growth_held_rounds - rounds).max(0.0);
        self.set_estimate(limit + change);
        // Held: not cut, and the limit in permits did not move (growth that slows down as the
        // queue read nears `alpha` never reaches the next permit).
        if change >= 0.0
            && self.config.bounds.clamp(self.estimate) == self.current
            && self.holds_little()
        {
            self.held_rounds += rounds;
        } else {
            self.held_rounds = 0.0;
        }
        // Held at a small limit: one call more tells a baseline a little too low
        // (the RTT does not rise: re-learned, and the limit grows) from a queue of others.
        // (`start_trial` comes last: it starts the trial when the rest holds.)
        if self.held_rounds >= self.trial_after.max(HOLD_TRIAL_ROUNDS)
            && self.cut_reference.is_none()
            && self.start_trial()
        {
            // No congestion to undo: a trial that finds a free worker restores the estimate.
            self.limit_before_congestion = self.estimate;
            self.held_rounds = 0.0;
            return;
        }
        // A pending cut check is the better probe: it judges the stale-baseline question at the
        // concurrency the cut chose, with no further reduction.
        let stale =
            self.congested_rounds >= self.config.stale_rounds && self.cut_reference.is_none();
        if sped_up || stale {
            self.start_probe(self.congested_rounds > 0.0);
        }
    }
}

impl Vegas {
    /// Feeds one completed call, its RTT in nanoseconds (no `Duration` round trip): both
    /// [`LimitAlgorithm`] methods land here.
    #[inline]
    fn feed(
        &mut self,
        rtt_nanos: u64,
        in_flight: usize,
        outcome: Outcome,
        queued: Option<u64>,
    ) -> usize {
        self.samples += 1;
        let rtt = rtt_nanos.max(1);
        match (outcome, &self.phase) {
            // Nothing the limit depends on changed.
            (Outcome::Ignored, _) => return self.current,
            (Outcome::Success, Phase::Tracking) => {
                if !self.on_success(in_flight, rtt, queued) {
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
        let kind = if self.cut_reference.is_some() {
            WindowKind::JudgingCut
        } else if self.slow_start.runs() {
            WindowKind::SlowStart
        } else {
            WindowKind::Steady
        };
        let reported = self.baseline.is_reported();
        self.window_len = window_len(&self.config, current, kind, reported);
        // The work the short windows that read the queue need, only where they do: pooling the
        // calls for the baseline, and the low percentile's standard error for the cut's margin.
        self.pools_calls = kind == WindowKind::Steady
            && !reported
            && self.window_len < baseline_window_len(&self.config, current);
        self.window.estimate_error(self.has_cut_margin(reported));
        if current != self.current {
            self.current = current;
            self.probe_after = probe_after(&self.config, current);
        }
        current
    }
}

/// The least rounds a small limit holds its permits, uncut, before a trial of one call more.
/// Fewer (4, as after congestion) made every instance of 8 at one permit each try again and
/// again, and the trials that happened not to lengthen the RTT re-learned the others' queue
/// (`vegas_sim --fleet --instances 8`: 0.727 at the least over 130 seeds, against 0.825).
const HOLD_TRIAL_ROUNDS: f64 = 64.0;

/// Rounds after a raise to a stale baseline's RTT (the window after a cut did not shorten the
/// RTT as a queue would) in which the limit does not grow, though it may be cut: it holds the
/// concurrency the raise restored. Alone in front of a dependency that got slower, that is
/// about the dependency's own concurrency. In a fleet, the raise may have taken a queue the
/// others built at once into the baseline: on real sockets, 4 instances in front of 4 workers,
/// one instance raised its baseline from 10.6 to 21.9 ms, was restored to 4.75 permits, grew to
/// 6-8 from there and kept the queue standing by itself beside three instances at about 1.5.
/// Held, it leaves the queue to the others' cuts, the next windows read the RTT below the raised
/// baseline, and the baseline falls back with it. Over 26-27 runs each (`overload --fleet 4`), the
/// raises to 1.5x the baseline or more came back within 1.2x of it after 1.05 s at the 90th
/// percentile and 2.1 s at the most, against 2.9 s and 5.5 s without the hold; Jain's index
/// 0.980-1.000, against 0.916-1.000 (two runs below 0.95).
const HOLD_AFTER_STALE_RAISE_ROUNDS: f64 = 32.0;

/// The most congested rounds between two trials of one call more at the limit's floor.
const TRIAL_AFTER_MAX: f64 = 256.0;

/// Samples per window at limit `current`: at least `baseline_window`, at least `window_rounds`
/// times the limit (half of it by default) while the dependency reports its queue (`reported`),
/// a quarter of that without reports ([`READING_SHARE`]: an eighth of the limit by default).
/// The window that judges a cut takes half as many (at least 4): at a small limit it is the one
/// spent at reduced concurrency, and its low percentile still skips its fastest sample. A running
/// slow start's windows hold at most [`SLOW_START_ROUNDS`] rounds.
fn window_len(config: &Settings, current: usize, window: WindowKind, reported: bool) -> usize {
    let (least, rounds) = match window {
        WindowKind::Steady if reported => (config.baseline_window, config.window_rounds),
        WindowKind::Steady => (config.baseline_window, config.window_rounds * READING_SHARE),
        WindowKind::JudgingCut => ((config.baseline_window / 2).max(4), config.window_rounds),
        WindowKind::SlowStart => (
            config.baseline_window,
            config.window_rounds.min(SLOW_START_ROUNDS),
        ),
    };
    calls_in_rounds(least, rounds, current)
}

/// Calls in the window of `window_rounds` that lowers the baseline at limit `current` (at least
/// `baseline_window`): without reports, the windows that read the queue hold a quarter of that
/// (see [`READING_SHARE`]).
fn baseline_window_len(config: &Settings, current: usize) -> usize {
    calls_in_rounds(config.baseline_window, config.window_rounds, current)
}

/// Calls in `rounds` rounds at limit `current`, at least `least`. Truncated, so half the limit at
/// the default `window_rounds`.
fn calls_in_rounds(least: usize, rounds: f64, current: usize) -> usize {
    least.max((rounds * current as f64) as usize)
}

/// What the next window is for (see [`window_len`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowKind {
    /// Reading the queue at the limit.
    Steady,
    /// Judging the cut just made, at the reduced concurrency.
    JudgingCut,
    /// A running slow start's growth.
    SlowStart,
}

/// The most rounds a running slow start's windows hold, whatever `window_rounds` (the default's
/// half a round is below it): slow start grows the limit by half of it per round and learns of
/// the queue its growth built only when the window closes, so windows of 3 rounds let that queue
/// stand three times as long as windows of one round (`vegas_sim --fleet
/// --vegas-window-rounds 3`, 4 instances in front of 4 workers: the worst p99 over 30 seeds
/// 119 ms, against 83 with windows of at most one round in slow start; fixed 1: 64 ms).
const SLOW_START_ROUNDS: f64 = 1.0;

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
        self.update_nanos(duration_nanos(sample.rtt), sample.in_flight, sample.outcome)
    }

    #[inline]
    fn update_nanos(&mut self, rtt_nanos: u64, in_flight: usize, outcome: Outcome) -> usize {
        if outcome == Outcome::Success {
            self.baseline.unreported();
        }
        self.feed(rtt_nanos, in_flight, outcome, None)
    }

    /// Takes `rtt_nanos - queued_nanos` as a sample of the dependency's unloaded RTT: while
    /// reports come in, the baseline is the low percentile of each window of 8 of them (it
    /// follows a slower dependency after 8 reports), and neither a fleet's queue nor a probe
    /// moves it. Reports that stop for 64 successful calls are forgotten. A report of a wait as
    /// long as the whole RTT or longer cannot be true (the wait is part of the RTT: a report in
    /// the wrong unit, say) and counts as no report: taken as it is, it would put the baseline
    /// at nothing and every call's RTT in the queue, and cut the limit to its floor.
    fn update_queued(&mut self, rtt_nanos: u64, in_flight: usize, queued_nanos: u64) -> usize {
        if queued_nanos >= rtt_nanos {
            return self.update_nanos(rtt_nanos, in_flight, Outcome::Success);
        }
        self.baseline.report(rtt_nanos - queued_nanos);
        self.feed(rtt_nanos, in_flight, Outcome::Success, Some(queued_nanos))
    }

    /// [`Vegas::rtt_base`].
    fn rtt_base(&self) -> Option<std::time::Duration> {
        Vegas::rtt_base(self)
    }
}
