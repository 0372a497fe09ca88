//! Windows of RTT samples and a robust estimate of the unloaded RTT ("rtt_base").
//!
//! Known failure: implementations that keep the single smallest RTT ever seen let one lucky
//! sample (a cache hit, a fast error) poison the baseline, after which every normal sample looks
//! queued and the limit collapses. Here both sides of the Vegas comparison use the same robust
//! statistic, the low percentile of a window of successful samples: the baseline is the lowest
//! window low seen, the recent RTT is the current window's low. A single outlier never counts,
//! and service-time jitter does not read as a queue. Raising the baseline is the caller's job
//! (see [`Vegas`](super::Vegas) probing): it is only raised to the low percentile of samples
//! taken at reduced concurrency, never to one loaded sample.

/// Index of the low percentile (p10) in a sorted slice of `len` samples. It always skips the
/// smallest sample when there are two or more, so a single outlier never becomes the baseline.
pub(crate) fn low_percentile_index(len: usize) -> usize {
    if len < 2 { 0 } else { (len / 10).max(1) }
}

/// Ranks up to this one are found by a single pass that keeps the lowest values seen.
const SMALL_RANK: usize = 4;

/// Returns the low percentile of `samples` (the value a sort would put at
/// [`low_percentile_index`]; the slice may be reordered), or `None` if empty.
pub(crate) fn low_percentile(samples: &mut [u64]) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let rank = low_percentile_index(samples.len());
    if rank < SMALL_RANK {
        return Some(nth_lowest_small(samples, rank));
    }
    // Selection in linear time; the rank is below the length of a non-empty slice.
    let (_, low, _) = samples.select_nth_unstable(rank);
    Some(*low)
}

/// The value at `rank` (< `SMALL_RANK`) in sorted order: one pass keeping the `rank + 1`
/// lowest values seen, in order. Windows of under 40 samples need at most the fourth lowest, so
/// this is cheaper than a general selection for them.
fn nth_lowest_small(samples: &[u64], rank: usize) -> u64 {
    let mut lowest = [u64::MAX; SMALL_RANK];
    let last = rank.min(SMALL_RANK - 1);
    for &value in samples {
        if value >= lowest[last] {
            continue;
        }
        let mut slot = last;
        while slot > 0 && lowest[slot - 1] > value {
            lowest[slot] = lowest[slot - 1];
            slot -= 1;
        }
        lowest[slot] = value;
    }
    lowest[last]
}

/// A summary of one complete window of successful samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WindowSummary {
    /// Low percentile of the window's RTTs, in nanoseconds.
    pub(crate) low: u64,
    /// Samples in the window.
    pub(crate) samples: usize,
    /// Mean in-flight count (at grant) of the window's samples.
    pub(crate) mean_in_flight: f64,
}

/// Collects successful samples until a window is complete. The buffer is reused.
#[derive(Debug, Clone)]
pub(crate) struct SampleWindow {
    rtts: Vec<u64>,
    in_flight_sum: u64,
}

impl SampleWindow {
    /// An empty window with room for `capacity` samples.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Self {
            rtts: Vec::with_capacity(capacity),
            in_flight_sum: 0,
        }
    }

    /// Adds a sample; once the window holds `len` (>= 2) samples, summarises and empties it.
    /// Most samples only accumulate, so that path is kept minimal.
    #[inline]
    pub(crate) fn push(
        &mut self,
        rtt_nanos: u64,
        in_flight: usize,
        len: usize,
    ) -> Option<WindowSummary> {
        self.rtts.push(rtt_nanos.max(1));
        self.in_flight_sum = self.in_flight_sum.saturating_add(in_flight as u64);
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
        let low = low_percentile(&mut self.rtts);
        self.clear();
        low.map(|low| WindowSummary {
            low,
            samples,
            mean_in_flight,
        })
    }

    /// Drops the samples collected so far.
    pub(crate) fn clear(&mut self) {
        self.rtts.clear();
        self.in_flight_sum = 0;
    }
}

/// The unloaded-RTT estimate, in nanoseconds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Baseline {
    estimate: Option<u64>,
    last_window: Option<u64>,
}

impl Baseline {
    /// The current estimate; `None` until the first window is complete.
    pub(crate) fn estimate(&self) -> Option<u64> {
        self.estimate
    }

    /// The low percentile of the last complete window (the recent RTT, not the baseline).
    pub(crate) fn last_window(&self) -> Option<u64> {
        self.last_window
    }

    /// Takes a complete window's low percentile: the estimate falls to it if it is lower (or is
    /// set from it, for the first window). It never rises here.
    pub(crate) fn observe(&mut self, window_low: u64) {
        self.last_window = Some(window_low);
        self.estimate = Some(
            self.estimate
                .map_or(window_low, |current| current.min(window_low)),
        );
    }

    /// Replaces the estimate with a re-learned value (from a probe).
    pub(crate) fn relearn(&mut self, rtt_nanos: u64) {
        self.estimate = Some(rtt_nanos.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_percentile_is_the_sorted_value_at_its_index() {
        let mut state = 7u64;
        for len in 1..120 {
            let mut samples: Vec<u64> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    // Few distinct values, so ties are common.
                    (state >> 40) % 50
                })
                .collect();
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            assert_eq!(
                low_percentile(&mut samples),
                Some(sorted[low_percentile_index(len)]),
                "{len}"
            );
        }
        assert_eq!(low_percentile(&mut []), None);
    }

    #[test]
    fn one_outlier_does_not_become_the_window_low() {
        let mut window = SampleWindow::with_capacity(10);
        assert_eq!(window.push(1_000, 1, 10), None); // 1 us
        for _ in 0..8 {
            assert_eq!(window.push(10_000_000, 3, 10), None);
        }
        let summary = window.push(10_000_000, 3, 10);
        assert_eq!(
            summary,
            Some(WindowSummary {
                low: 10_000_000,
                samples: 10,
                mean_in_flight: 2.8
            })
        );
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
    }
}
