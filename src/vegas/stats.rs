//! RTT statistics (windowed percentiles) and exported metrics.
//!
//! Metrics are registered once per limiter with the recorder installed at construction time
//! (install your `metrics` recorder first), labelled `limiter = <name>`:
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `flowguard_vegas_limit` | gauge | current concurrency limit |
//! | `flowguard_vegas_in_flight` | gauge | permits held |
//! | `flowguard_vegas_rtt_seconds` | histogram | RTT of successful calls |
//! | `flowguard_vegas_outcomes_total` | counter, label `outcome` | completed permits by outcome |

use std::time::Duration;

use hdrhistogram::Histogram;

use super::algorithm::{Outcome, duration_nanos};

/// Largest recordable RTT, in microseconds (one hour); longer samples are recorded as this.
const MAX_RTT_MICROS: u64 = 3_600_000_000;

/// A point-in-time view of a limiter.
#[derive(Debug, Clone, PartialEq)]
pub struct LimiterSnapshot {
    /// The current limit.
    pub limit: usize,
    /// Permits held.
    pub in_flight: usize,
    /// Callers queued in `acquire`.
    pub waiting: usize,
    /// Successful RTT samples in the statistics window.
    pub samples: u64,
    /// Median RTT of successful calls in the window (`None` without samples).
    pub rtt_p50: Option<Duration>,
    /// 99th percentile RTT of successful calls in the window (`None` without samples).
    pub rtt_p99: Option<Duration>,
    /// Per-partition permits held, in declaration order, with each partition's name.
    pub partitions: Vec<(String, usize)>,
}

/// RTTs recorded but not yet added to the histogram. Adding a value to an hdrhistogram is the
/// dearest step of recording; buffering lets a permit's release only store a number, and the
/// values are added in one tight loop (under the same lock) every `PENDING` samples, before the
/// window rotates, and before a summary.
const PENDING: usize = 64;

/// RTTs of successful calls over the last one to two windows.
#[derive(Debug, Clone)]
pub(crate) struct RttWindow {
    current: Histogram<u64>,
    previous: Histogram<u64>,
    window_nanos: u64,
    window_start: u64,
    /// `window_start + window_nanos` (saturating): a sample at or after it may rotate.
    window_end: u64,
    /// Microsecond RTTs of the current window not yet in `current`.
    pending: [u64; PENDING],
    pending_len: usize,
}

impl RttWindow {
    /// Statistics over windows of `window` (non-zero).
    pub(crate) fn new(window: Duration) -> Self {
        // Constant bounds that hdrhistogram accepts (low >= 1, high >= 2 * low, sigfig <= 5):
        // this does not depend on any input.
        let histogram = Histogram::new_with_bounds(1, MAX_RTT_MICROS, 2)
            .expect("constant histogram bounds are valid");
        let window_nanos = duration_nanos(window).max(1);
        Self {
            previous: histogram.clone(),
            current: histogram,
            window_nanos,
            window_start: 0,
            window_end: window_nanos,
            pending: [0; PENDING],
            pending_len: 0,
        }
    }

    /// Adds the pending RTTs to the current window's histogram.
    #[inline(never)]
    fn flush(&mut self) {
        for &micros in self.pending.iter().take(self.pending_len) {
            self.current.saturating_record(micros);
        }
        self.pending_len = 0;
    }

    #[inline(never)]
    fn rotate(&mut self, now_nanos: u64) {
        let elapsed = now_nanos.saturating_sub(self.window_start);
        if elapsed < self.window_nanos {
            return;
        }
        // Pending samples belong to the window that is ending.
        self.flush();
        if elapsed >= self.window_nanos.saturating_mul(2) {
            self.previous.reset();
        } else {
            std::mem::swap(&mut self.previous, &mut self.current);
        }
        self.current.reset();
        self.window_start = now_nanos;
        self.window_end = now_nanos.saturating_add(self.window_nanos);
    }

    /// Records one successful RTT (nanoseconds) at time `now_nanos`.
    #[inline]
    pub(crate) fn record(&mut self, now_nanos: u64, rtt_nanos: u64) {
        if now_nanos >= self.window_end {
            self.rotate(now_nanos);
        }
        if self.pending_len >= PENDING {
            self.flush();
        }
        if let Some(slot) = self.pending.get_mut(self.pending_len) {
            *slot = (rtt_nanos / 1_000).clamp(1, MAX_RTT_MICROS);
            self.pending_len += 1;
        }
    }

    /// Sample count, p50 and p99 over the previous and current windows, as of `now_nanos`.
    pub(crate) fn summary(&mut self, now_nanos: u64) -> (u64, Option<Duration>, Option<Duration>) {
        self.rotate(now_nanos);
        self.flush();
        let mut merged = self.previous.clone();
        // Same bounds on both sides, so adding cannot overflow the range.
        let _ = merged.add(&self.current);
        if merged.is_empty() {
            return (0, None, None);
        }
        let at = |q: f64| Some(Duration::from_micros(merged.value_at_quantile(q)));
        (merged.len(), at(0.5), at(0.99))
    }
}

/// Metric handles of one limiter, registered once.
#[derive(Clone)]
pub(crate) struct LimiterMetrics {
    limit: metrics::Gauge,
    in_flight: metrics::Gauge,
    rtt: metrics::Histogram,
    success: metrics::Counter,
    dropped: metrics::Counter,
    ignored: metrics::Counter,
}

impl std::fmt::Debug for LimiterMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LimiterMetrics")
    }
}

impl LimiterMetrics {
    /// Registers the limiter's metrics under label `limiter = name`.
    pub(crate) fn register(name: &str) -> Self {
        let name = name.to_owned();
        let outcome = |outcome: &'static str| metrics::counter!("flowguard_vegas_outcomes_total", "limiter" => name.clone(), "outcome" => outcome);
        Self {
            limit: metrics::gauge!("flowguard_vegas_limit", "limiter" => name.clone()),
            in_flight: metrics::gauge!("flowguard_vegas_in_flight", "limiter" => name.clone()),
            rtt: metrics::histogram!("flowguard_vegas_rtt_seconds", "limiter" => name.clone()),
            success: outcome("success"),
            dropped: outcome("dropped"),
            ignored: outcome("ignored"),
        }
    }

    /// Publishes the starting limit and an empty in-flight count.
    pub(crate) fn start(&self, limit: usize) {
        self.limit_changed(limit);
        self.in_flight.set(0.0);
    }

    /// Publishes a new limit.
    pub(crate) fn limit_changed(&self, limit: usize) {
        self.limit.set(limit as f64);
    }

    /// Counts a permit handed to a caller (in-flight moves by steps, so concurrent updates
    /// cannot leave a stale count behind).
    #[inline]
    pub(crate) fn granted(&self) {
        self.in_flight.increment(1.0);
    }

    /// Counts a permit released with `outcome` after `rtt`, and the new limit if it changed.
    #[inline]
    pub(crate) fn released(&self, outcome: Outcome, rtt: Duration, new_limit: Option<usize>) {
        self.in_flight.decrement(1.0);
        if let Some(limit) = new_limit {
            self.limit_changed(limit);
        }
        match outcome {
            Outcome::Success => {
                self.success.increment(1);
                // Converted to seconds only if a recorder is installed.
                self.rtt.record(rtt);
            }
            Outcome::Dropped => self.dropped.increment(1),
            Outcome::Ignored => self.ignored.increment(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_cover_two_windows_then_forget() {
        let window = Duration::from_secs(1);
        let mut rtts = RttWindow::new(window);
        for ms in 1..=100 {
            rtts.record(0, ms * 1_000_000);
        }
        let (count, p50, p99) = rtts.summary(500_000_000);
        assert_eq!(count, 100);
        let p50 = p50.map(|d| d.as_millis());
        assert!(matches!(p50, Some(49..=51)), "{p50:?}");
        assert!(matches!(p99.map(|d| d.as_millis()), Some(98..=100)));
        // One window later the samples are in `previous`, still reported.
        assert_eq!(rtts.summary(1_200_000_000).0, 100);
        // Two windows later they are gone.
        assert_eq!(rtts.summary(3_500_000_000), (0, None, None));
    }

    #[test]
    fn buffered_samples_count_in_the_window_they_were_recorded_in() {
        let window = Duration::from_secs(1);
        let mut rtts = RttWindow::new(window);
        // More than one buffer's worth: some reach the histogram, the rest are pending.
        for _ in 0..(PENDING + 36) {
            rtts.record(0, 2_000_000);
        }
        // Pending samples move with their window when it rotates...
        rtts.record(1_100_000_000, 4_000_000);
        assert_eq!(rtts.summary(1_200_000_000).0, PENDING as u64 + 37);
        // ...and are forgotten with it.
        for _ in 0..10 {
            rtts.record(1_300_000_000, 8_000_000);
        }
        rtts.record(5_000_000_000, 16_000_000);
        let (count, p50, _) = rtts.summary(5_000_000_001);
        assert_eq!((count, p50.map(|d| d.as_millis())), (1, Some(16)));
    }
}
