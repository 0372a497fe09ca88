//! RTT statistics (windowed percentiles) and exported metrics.
//!
//! Metric names and labels are listed in the `vegas` module docs ("Metrics").

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::vegas::algorithms::{Outcome, duration_nanos};

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
    /// The algorithm's estimate of the dependency's unloaded RTT ([`LimitAlgorithm::rtt_base`]):
    /// the baseline a [`Vegas`](crate::vegas::Vegas) limit reads its queue against, `None`
    /// before it is learned and for algorithms that keep none.
    ///
    /// [`LimitAlgorithm::rtt_base`]: crate::vegas::LimitAlgorithm::rtt_base
    pub rtt_base: Option<Duration>,
    /// Per-partition permits held, in declaration order, with each partition's name.
    pub partitions: Vec<(String, usize)>,
}

/// The bucket layout of `Histogram::new_with_bounds(1, MAX_RTT_MICROS, 2)`: 256 sub-buckets per
/// power of two (half of them used after the first), so every value is kept to within 1/128.
/// Recording computes a value's bucket with a shift and counts it; the counts are handed to
/// hdrhistogram (`record_n`, one call per used bucket) when a summary is asked for. This is
/// hdrhistogram's own layout, so the summary is exactly what recording each value into the
/// histogram would give (a unit test checks the two against each other).
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 7;
const SUB_BUCKET_HALF: u64 = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = 2 * SUB_BUCKET_HALF - 1;
const LEADING_ZERO_BASE: u32 = u64::BITS - SUB_BUCKET_HALF_MAGNITUDE - 1;

/// Bucket of `micros` (in `1..=MAX_RTT_MICROS`).
#[inline]
fn bucket_index(micros: u64) -> usize {
    // `micros | SUB_BUCKET_MASK` has at most LEADING_ZERO_BASE leading zeros.
    let magnitude = LEADING_ZERO_BASE - (micros | SUB_BUCKET_MASK).leading_zeros();
    let sub_bucket = micros >> magnitude;
    ((u64::from(magnitude + 1) << SUB_BUCKET_HALF_MAGNITUDE) + sub_bucket - SUB_BUCKET_HALF)
        as usize
}

/// The lowest value that falls into bucket `index` (hdrhistogram's `value_from_index`).
fn bucket_value(index: usize) -> u64 {
    let index = index as u64;
    if index < 2 * SUB_BUCKET_HALF {
        return index;
    }
    let magnitude = (index >> SUB_BUCKET_HALF_MAGNITUDE) - 1;
    ((index & (SUB_BUCKET_HALF - 1)) + SUB_BUCKET_HALF) << magnitude
}

/// RTT counts of one window, per bucket.
#[derive(Debug, Clone)]
struct BucketCounts {
    counts: Vec<u64>,
}

impl BucketCounts {
    fn new() -> Self {
        Self {
            counts: vec![0; bucket_index(MAX_RTT_MICROS) + 1],
        }
    }

    #[inline]
    fn record(&mut self, micros: u64) {
        // In range for every value in 1..=MAX_RTT_MICROS, which callers clamp to.
        if let Some(count) = self.counts.get_mut(bucket_index(micros)) {
            *count = count.saturating_add(1);
        }
    }

    fn reset(&mut self) {
        self.counts.fill(0);
    }
}

/// RTTs of successful calls over the last one to two windows.
#[derive(Debug, Clone)]
pub(crate) struct RttWindow {
    current: BucketCounts,
    previous: BucketCounts,
    /// An empty histogram with the window's bounds, cloned for each summary.
    empty: Histogram<u64>,
    window_nanos: u64,
    window_start: u64,
    /// `window_start + window_nanos` (saturating): a sample at or after it may rotate.
    window_end: u64,
}

impl RttWindow {
    /// Statistics over windows of `window` (non-zero).
    pub(crate) fn new(window: Duration) -> Self {
        // Constant bounds that hdrhistogram accepts (low >= 1, high >= 2 * low, sigfig <= 5):
        // this does not depend on any input.
        let empty = Histogram::new_with_bounds(1, MAX_RTT_MICROS, 2)
            .expect("constant histogram bounds are valid");
        let window_nanos = duration_nanos(window).max(1);
        Self {
            current: BucketCounts::new(),
            previous: BucketCounts::new(),
            empty,
            window_nanos,
            window_start: 0,
            window_end: window_nanos,
        }
    }

    #[inline(never)]
    fn rotate(&mut self, now_nanos: u64) {
        let elapsed = now_nanos.saturating_sub(self.window_start);
        if elapsed < self.window_nanos {
            return;
        }
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
        self.current
            .record((rtt_nanos / 1_000).clamp(1, MAX_RTT_MICROS));
    }

    /// Sample count, p50 and p99 over the previous and current windows, as of `now_nanos`.
    pub(crate) fn summary(&mut self, now_nanos: u64) -> (u64, Option<Duration>, Option<Duration>) {
        self.rotate(now_nanos);
        let mut merged = self.empty.clone();
        let both = self.previous.counts.iter().zip(&self.current.counts);
        for (index, (previous, current)) in both.enumerate() {
            let count = previous.saturating_add(*current);
            if count > 0 {
                // Bucket values lie inside the histogram's bounds.
                let _ = merged.record_n(bucket_value(index), count);
            }
        }
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
    rtt_base: metrics::Gauge,
    in_flight: metrics::Gauge,
    rtt: metrics::Histogram,
    success: metrics::Counter,
    dropped: metrics::Counter,
    ignored: metrics::Counter,
    shed: metrics::Counter,
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
            rtt_base: metrics::gauge!("flowguard_vegas_rtt_base_seconds", "limiter" => name.clone()),
            in_flight: metrics::gauge!("flowguard_vegas_in_flight", "limiter" => name.clone()),
            rtt: metrics::histogram!("flowguard_vegas_rtt_seconds", "limiter" => name.clone()),
            success: outcome("success"),
            dropped: outcome("dropped"),
            ignored: outcome("ignored"),
            shed: metrics::counter!("flowguard_vegas_shed_total", "limiter" => name.clone()),
        }
    }

    /// Publishes the starting limit and an empty in-flight count.
    pub(crate) fn start(&self, limit: usize) {
        self.limit_changed(limit, None);
        self.in_flight.set(0.0);
    }

    /// Publishes a new limit, and the algorithm's unloaded-RTT estimate as of that change, once
    /// it has one.
    pub(crate) fn limit_changed(&self, limit: usize, rtt_base: Option<Duration>) {
        self.limit.set(limit as f64);
        if let Some(rtt_base) = rtt_base {
            self.rtt_base.set(rtt_base);
        }
    }

    /// Counts a permit handed to a caller (in-flight moves by steps, so concurrent updates
    /// cannot leave a stale count behind).
    #[inline]
    pub(crate) fn granted(&self) {
        self.in_flight.increment(1.0);
    }

    /// Counts a caller refused a permit.
    pub(crate) fn shed(&self) {
        self.shed.increment(1);
    }

    /// Counts a permit released with `outcome` after `rtt_nanos`, and the new limit (with the
    /// unloaded-RTT estimate then) if it changed.
    #[inline]
    pub(crate) fn released(
        &self,
        outcome: Outcome,
        rtt_nanos: u64,
        new_limit: Option<(usize, Option<Duration>)>,
    ) {
        self.in_flight.decrement(1.0);
        if let Some((limit, rtt_base)) = new_limit {
            self.limit_changed(limit, rtt_base);
        }
        match outcome {
            Outcome::Success => {
                self.success.increment(1);
                // Converted to seconds only if a recorder is installed.
                self.rtt.record(Duration::from_nanos(rtt_nanos));
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
    fn buckets_are_hdrhistograms_own() {
        let histogram = Histogram::<u64>::new_with_bounds(1, MAX_RTT_MICROS, 2).unwrap();
        let edges = (0..32).flat_map(|bit| {
            let power = 1u64 << bit;
            [power - 1, power, power + 1, power * 3 / 2]
        });
        for micros in (1..5_000)
            .chain(edges)
            .chain([MAX_RTT_MICROS - 1, MAX_RTT_MICROS])
        {
            let micros = micros.clamp(1, MAX_RTT_MICROS);
            let index = bucket_index(micros);
            assert!(index < BucketCounts::new().counts.len(), "{micros}");
            assert_eq!(
                bucket_value(index),
                histogram.lowest_equivalent(micros),
                "{micros}"
            );
        }
    }

    #[test]
    fn summaries_match_recording_into_hdrhistogram_directly() {
        let mut direct = Histogram::<u64>::new_with_bounds(1, MAX_RTT_MICROS, 2).unwrap();
        let mut rtts = RttWindow::new(Duration::from_secs(60));
        let mut value = 12_345u64;
        for _ in 0..10_000 {
            // A spread of RTTs from microseconds to minutes.
            value = value
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let micros = (value >> 33) % 100_000_000 + 1;
            direct.saturating_record(micros);
            rtts.record(1, micros * 1_000);
        }
        let (count, p50, p99) = rtts.summary(2);
        assert_eq!(count, direct.len());
        assert_eq!(
            p50,
            Some(Duration::from_micros(direct.value_at_quantile(0.5)))
        );
        assert_eq!(
            p99,
            Some(Duration::from_micros(direct.value_at_quantile(0.99)))
        );
    }
}
