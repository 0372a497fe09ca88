//! Windows of RTT samples and a robust estimate of the unloaded RTT ("rtt_base").
//!
//! Known failure: implementations that keep the single smallest RTT ever seen let one lucky
//! sample (a cache hit, a fast error) poison the baseline, after which every normal sample looks
//! queued and the limit collapses. Here both sides of the Vegas comparison use the same robust
//! statistic, the low percentile of a window of successful samples: the baseline is the lowest
//! window low of a horizon of time, the recent RTT is the current window's low. A single outlier never counts,
//! and service-time jitter does not read as a queue. Raising the baseline is the caller's job
//! (see [`Vegas`](super::Vegas) probing): it is only raised to the low percentile of samples
//! taken at reduced concurrency, never to one loaded sample.

use super::percentile::{low_percentile, low_percentile_error};
use super::reported::ReportedBaseline;

/// A summary of one complete window of successful samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WindowSummary {
    /// Low percentile of the window's RTTs, in nanoseconds.
    pub(crate) low: u64,
    /// The standard error of `low`, as a share of it, estimated from the window's own RTTs (see
    /// `low_percentile_error`): how far `low` may scatter from one window to the next with
    /// nothing queued. 0 unless the window was asked for it (`SampleWindow::estimate_error`).
    pub(crate) low_error: f64,
    /// Samples in the window.
    pub(crate) samples: usize,
    /// Mean in-flight count (at grant) of the window's samples.
    pub(crate) mean_in_flight: f64,
    /// Lowest in-flight count (at grant) of the window's samples.
    pub(crate) min_in_flight: usize,
    /// The share of their RTT the window's calls spent in the dependency's queue, as the
    /// dependency reported it (the sum of the waits over the sum of the RTTs of the calls that
    /// carried a report); `None` unless at least half the window's calls did.
    pub(crate) queued_share: Option<f64>,
}

/// Collects successful samples until a window is complete. The buffer is reused.
#[derive(Debug, Clone)]
pub(crate) struct SampleWindow {
    rtts: Vec<u64>,
    in_flight_sum: u64,
    in_flight_min: usize,
    /// The waits the dependency reported, summed, in nanoseconds.
    queued_sum: u64,
    /// The RTTs of the calls that carried those reports, summed.
    reported_rtt_sum: u64,
    /// How many calls carried a report.
    reported: usize,
    /// Whether a summary estimates its low percentile's standard error (`low_error`; 0
    /// otherwise): a selection per window, paid only where a reader uses it.
    with_error: bool,
}

impl SampleWindow {
    /// An empty window with room for `capacity` samples.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            rtts: Vec::with_capacity(capacity),
            in_flight_sum: 0,
            in_flight_min: usize::MAX,
            queued_sum: 0,
            reported_rtt_sum: 0,
            reported: 0,
            with_error: false,
        }
    }

    /// Whether the summaries to come estimate their low percentile's standard error.
    pub(crate) fn estimate_error(&mut self, on: bool) {
        self.with_error = on;
    }

    /// Adds a sample, with the wait in the dependency's queue that it reported, if it did; once
    /// the window holds `len` (>= 2) samples, summarises and empties it. Most samples only
    /// accumulate, so that path is kept minimal.
    #[inline]
    pub(crate) fn push(
        &mut self,
        rtt_nanos: u64,
        in_flight: usize,
        queued_nanos: Option<u64>,
        len: usize,
    ) -> Option<WindowSummary> {
        if let Some(queued) = queued_nanos {
            self.queued_sum = self.queued_sum.saturating_add(queued);
            self.reported_rtt_sum = self.reported_rtt_sum.saturating_add(rtt_nanos.max(1));
            self.reported += 1;
        }
        self.rtts.push(rtt_nanos.max(1));
        self.in_flight_sum = self.in_flight_sum.saturating_add(in_flight as u64);
        self.in_flight_min = self.in_flight_min.min(in_flight);
        if self.rtts.len() < len.max(2) {
            return None;
        }
        self.summarise()
    }

    /// Summarises the complete window and empties it.
    #[inline(never)]
    fn summarise(&mut self) -> Option<WindowSummary> {
        let samples = self.rtts.len();
        let mean_in_flight = self.in_flight_sum as f64 / samples as f64;
        let min_in_flight = self.in_flight_min;
        let queued_share = (self.reported * 2 >= samples && self.reported_rtt_sum > 0)
            .then(|| self.queued_sum as f64 / self.reported_rtt_sum as f64);
        let low = low_percentile(&mut self.rtts);
        let low_error = match low {
            Some(low) if self.with_error => low_percentile_error(&mut self.rtts, low),
            _ => 0.0,
        };
        self.clear();
        low.map(|low| WindowSummary {
            low,
            low_error,
            samples,
            mean_in_flight,
            min_in_flight,
            queued_share,
        })
    }

    /// Drops the samples collected so far.
    pub(crate) fn clear(&mut self) {
        self.rtts.clear();
        self.in_flight_sum = 0;
        self.in_flight_min = usize::MAX;
        self.queued_sum = 0;
        self.reported_rtt_sum = 0;
        self.reported = 0;
    }
}

/// A window that led to an RTT-based cut, kept to judge the window after the cut.
///
/// Vegas reads a queue from `rtt > rtt_base`, but the same reading follows from a dependency that
/// got slower (same concurrency, longer service time) while `rtt_base` still holds the old, faster
/// RTT. From the RTT alone the two cannot be told apart; from the RTT at two concurrencies they
/// can. Below the dependency's concurrency no call queues, so the RTT stays at the service time
/// whatever the concurrency; above it the calls beyond it queue, so the RTT grows in proportion
/// to the concurrency (Little's law at constant throughput). A cut lowers the concurrency: if the
/// queue was real, the RTT falls with it, at least in proportion down to `rtt_base`; if the RTT
/// falls clearly less than that (and does not rise), the calls after the cut no longer queue, and
/// their low percentile is the unloaded RTT, taken at reduced concurrency rather than from a
/// loaded sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CutReference {
    /// Low percentile of the window that caused the cut, in nanoseconds.
    pub(crate) low: u64,
    /// Its mean in-flight count.
    pub(crate) in_flight: f64,
    /// Its lowest in-flight count: the concurrency of its least loaded calls, whose RTTs its
    /// low percentile reads.
    pub(crate) least_in_flight: usize,
}

/// How much slower than a queue predicts the window after a cut must be to reveal a stale
/// baseline.
const STALE_MARGIN: f64 = 1.25;
/// How much the RTT may rise after a cut and still count as "did not rise" (service-time noise).
const RISE_TOLERANCE: f64 = 1.05;
/// A probe reveals a stale baseline only if the RTT at reduced concurrency stays at least this
/// share of the RTT before it: the concurrency fell and the RTT did not. In a fleet, one
/// instance's probe shortens a shared queue by its share only (an eighth of it when one of four
/// halves its limit): the RTT falls a little, but far less than the instance's own concurrency
/// predicts, and that must not raise its baseline to the others' queue.
pub(crate) const INSENSITIVE: f64 = 0.95;
/// The RTT after a cut must stay at least this share of the RTT before it to count as flat.
const FLAT: f64 = 0.98;
/// The concurrency after the cut must be at most this share of the reference's.
const CONCURRENCY_FALL: f64 = 0.9;
/// A reference's calls must all have been granted with at least this share of its mean
/// in-flight count.
const STEADY_IN_FLIGHT: f64 = 0.8;

impl CutReference {
    /// `window` as a reference, if its calls were granted at about one concurrency. A window
    /// spanning a ramp (in-flight rising from a few calls to the limit) has the low percentile of
    /// its least loaded calls and the mean concurrency of all of them: it would understate the
    /// RTT at its concurrency, and the next window would look too slow for a queue.
    pub(crate) fn of(window: &WindowSummary) -> Option<Self> {
        (window.min_in_flight as f64 >= STEADY_IN_FLIGHT * window.mean_in_flight).then_some(Self {
            low: window.low,
            in_flight: window.mean_in_flight,
            least_in_flight: window.min_in_flight,
        })
    }

    /// Whether `after`, the window after the cut, kept the RTT where it was although the
    /// concurrency fell: the RTT above `base` was no queue (a queue shortens with the
    /// concurrency), though by too little to reveal a stale baseline.
    pub(crate) fn is_flat(&self, base: u64, after: &WindowSummary) -> bool {
        self.concurrency_fell_and_rtt_did_not_rise(after)
            && after.low as f64 >= FLAT * self.low as f64
            && after.low > base
    }

    /// Whether the concurrency of `after` fell clearly below the reference's while its RTT did
    /// not rise (beyond service-time noise): the window after the cut can judge it.
    fn concurrency_fell_and_rtt_did_not_rise(&self, after: &WindowSummary) -> bool {
        after.mean_in_flight <= CONCURRENCY_FALL * self.in_flight
            && after.low as f64 <= RISE_TOLERANCE * self.low as f64
    }

    /// Whether `after`, the window after the cut, shows that `base` is stale: concurrency fell,
    /// the RTT did not rise, and it stayed clearly above what a queue predicts,
    /// `max(base, low * after.mean_in_flight / least_in_flight)`.
    pub(crate) fn reveals_stale(&self, base: u64, after: &WindowSummary) -> bool {
        if !self.concurrency_fell_and_rtt_did_not_rise(after) {
            return false;
        }
        let (low, after_low) = (self.low as f64, after.low as f64);
        // The low percentile is the RTT of the least loaded calls, so it scales from the lowest
        // concurrency, not the mean: in a window whose concurrency still rose a little (the end
        // of slow start), the mean would predict a shorter RTT than a queue gives.
        let least = self.least_in_flight.max(1) as f64;
        let queue_predicts = (base as f64).max(low * after.mean_in_flight / least);
        after_low >= STALE_MARGIN * queue_predicts
    }
}

/// The unloaded-RTT estimate, in nanoseconds: the lowest window low seen since it was last
/// re-learned.
///
/// It never rises by itself. A baseline that expired with time (a windowed minimum) would creep
/// up under any queue that stood for a whole window of time, and the band keeps a queue of a
/// few percent of the RTT standing at all times: each expiry would take that queue into the
/// baseline, and the queue would grow by as much again. It rises only when re-learned, at
/// reduced concurrency: a probe whose RTT did not fall with the concurrency, or a cut that
/// revealed a stale baseline (see [`CutReference`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Baseline {
    estimate: Option<u64>,
    last_window: Option<u64>,
    /// The dependency's own reports, which replace the estimate while they come in.
    reported: ReportedBaseline,
}

impl Baseline {
    /// The current estimate; `None` until the first window is complete. While the dependency
    /// reports how long calls queued, the unloaded RTT its reports give.
    pub(crate) fn estimate(&self) -> Option<u64> {
        self.estimate
            .map(|own| self.reported.estimate().unwrap_or(own))
    }

    /// Whether the estimate is the dependency's own reports.
    pub(crate) fn is_reported(&self) -> bool {
        self.reported.estimate().is_some()
    }

    /// A successful call's RTT minus the time the dependency reports it queued.
    pub(crate) fn report(&mut self, unloaded: u64) {
        self.reported.report(unloaded);
    }

    /// A successful call without a report.
    pub(crate) fn unreported(&mut self) {
        self.reported.unreported();
    }

    /// The low percentile of the last complete window (the recent RTT, not the baseline).
    pub(crate) fn last_window(&self) -> Option<u64> {
        self.last_window
    }

    /// Takes a complete window's low percentile: the estimate falls to it if it is lower (or is
    /// set from it, for the first window).
    pub(crate) fn observe(&mut self, window_low: u64) {
        self.last_window = Some(window_low);
        self.estimate = Some(
            self.estimate
                .map_or(window_low, |base| base.min(window_low)),
        );
    }

    /// Takes the low percentile of a window that reads the queue but is too short to lower the
    /// estimate (see `Vegas`, "Short windows to read the queue"): it becomes the recent RTT, and
    /// the estimate only if there is none yet.
    pub(crate) fn read(&mut self, window_low: u64) {
        self.last_window = Some(window_low);
        if self.estimate.is_none() {
            self.estimate = Some(window_low);
        }
    }

    /// Replaces the estimate with a re-learned value (from a probe, or a cut that revealed a
    /// stale baseline).
    pub(crate) fn relearn(&mut self, rtt_nanos: u64) {
        self.estimate = Some(rtt_nanos.max(1));
    }

    /// Lowers the estimate to `rtt_nanos` if that is lower (a drain measured it).
    pub(crate) fn lower_to(&mut self, rtt_nanos: u64) {
        if self.estimate.is_none_or(|base| rtt_nanos < base) {
            self.relearn(rtt_nanos);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_outlier_does_not_become_the_window_low() {
        let mut window = SampleWindow::with_capacity(10);
        assert_eq!(window.push(1_000, 1, None, 10), None); // 1 us
        for _ in 0..8 {
            assert_eq!(window.push(10_000_000, 3, None, 10), None);
        }
        let summary = window.push(10_000_000, 3, None, 10);
        assert_eq!(
            summary,
            Some(WindowSummary {
                low: 10_000_000,
                low_error: 0.0,
                samples: 10,
                mean_in_flight: 2.8,
                min_in_flight: 1,
                queued_share: None,
            })
        );
    }

    #[test]
    fn the_queued_share_is_the_reported_waits_over_their_rtts_once_half_the_window_reports() {
        let mut window = SampleWindow::with_capacity(4);
        // Two of four report: 2 ms of 10 and 6 ms of 20; the unreported RTTs do not count.
        assert_eq!(window.push(10_000_000, 2, Some(2_000_000), 4), None);
        assert_eq!(window.push(99_000_000, 2, None, 4), None);
        assert_eq!(window.push(20_000_000, 2, Some(6_000_000), 4), None);
        let summary = window.push(99_000_000, 2, None, 4).unwrap();
        assert_eq!(summary.queued_share, Some(8.0 / 30.0));

        // One of four: too few to say.
        window.push(10_000_000, 2, Some(5_000_000), 4);
        for _ in 0..2 {
            window.push(10_000_000, 2, None, 4);
        }
        let summary = window.push(10_000_000, 2, None, 4).unwrap();
        assert_eq!(summary.queued_share, None);
    }

    /// The reference of a window granted at `in_flight` throughout.
    fn steady(low: u64, in_flight: usize) -> CutReference {
        CutReference {
            low,
            in_flight: in_flight as f64,
            least_in_flight: in_flight,
        }
    }

    fn window(low: u64, mean_in_flight: f64) -> WindowSummary {
        WindowSummary {
            low,
            low_error: 0.0,
            samples: 16,
            mean_in_flight,
            min_in_flight: mean_in_flight as usize,
            queued_share: None,
        }
    }

    #[test]
    fn a_window_spanning_a_ramp_is_no_reference() {
        let ramp = WindowSummary {
            min_in_flight: 7,
            ..window(33_000, 18.0)
        };
        assert_eq!(CutReference::of(&ramp), None);
        assert!(CutReference::of(&window(33_000, 18.0)).is_some());
    }

    #[test]
    fn an_rtt_that_falls_with_concurrency_is_a_queue() {
        // 4 slots of 10 ms, base 10 ms: 8 in flight take 20 ms, 5 take 12.5 ms.
        let reference = steady(20_000, 8);
        assert!(!reference.reveals_stale(10_000, &window(12_500, 5.0)));
        // Down to the base: still a queue that is gone.
        assert!(!reference.reveals_stale(10_000, &window(10_000, 3.0)));
    }

    #[test]
    fn an_rtt_that_stays_put_when_concurrency_falls_reveals_a_stale_base() {
        // The dependency went from 10 ms to 25 ms at 4 slots: 6 in flight take 37.5 ms, 2 take
        // 25 ms; a queue would have predicted 12.5 ms.
        let reference = steady(37_500, 6);
        assert!(reference.reveals_stale(10_000, &window(25_000, 2.0)));
        // Not if concurrency barely fell, or the RTT rose (a queue still building).
        assert!(!reference.reveals_stale(10_000, &window(37_000, 5.8)));
        let rising = steady(20_000, 10);
        assert!(!rising.reveals_stale(10_000, &window(25_000, 5.0)));
        // An RTT that did not fall at all: 4 in flight at 25 ms, then 2 at 25 ms.
        let unqueued = steady(25_000, 4);
        assert!(unqueued.reveals_stale(10_000, &window(25_000, 2.0)));
    }

    #[test]
    fn a_queue_that_slow_start_overshot_is_no_stale_base() {
        // Slow start took the limit from 9 to 16 in front of 4 workers at 10 ms: the window
        // that caused the cut was granted at 9 to 16 in flight (mean 10.8), and its low
        // percentile is the RTT of the calls granted at 9. Cut to 8, the RTT is 19.5 ms, a
        // queue of 4: the mean would have predicted 15.3 ms and read a stale baseline.
        let overshoot = CutReference {
            low: 20_600,
            in_flight: 10.8,
            least_in_flight: 9,
        };
        assert!(!overshoot.reveals_stale(9_100, &window(19_460, 8.0)));
    }

    #[test]
    fn estimate_falls_window_by_window_and_rises_only_when_relearned() {
        let mut baseline = Baseline::default();
        assert_eq!(baseline.estimate(), None);
        baseline.observe(30);
        baseline.observe(10);
        baseline.observe(50);
        assert_eq!(
            baseline.estimate(),
            Some(10),
            "a loaded window never raises it"
        );
        assert_eq!(baseline.last_window(), Some(50));
        baseline.relearn(40);
        assert_eq!(baseline.estimate(), Some(40));
        baseline.lower_to(60);
        assert_eq!(baseline.estimate(), Some(40), "lower_to never raises it");
        baseline.lower_to(20);
        assert_eq!(baseline.estimate(), Some(20));
        // However long loaded windows last, they never raise it: no creep.
        for _ in 0..10_000 {
            baseline.observe(45);
        }
        assert_eq!(baseline.estimate(), Some(20));
    }
}
