//! A robust estimate of the unloaded round-trip time ("rtt_base").
//!
//! Known failure: implementations that keep the single smallest RTT ever seen let one lucky
//! sample (a cache hit, a fast error) poison the baseline, after which every normal sample looks
//! queued and the limit collapses. Here the baseline is the low percentile of a window of
//! successful samples, so it ignores a single outlier, and it only falls window by window.
//! Raising it is the caller's job (see [`Vegas`](super::Vegas) probing): it is only raised to
//! the low percentile of samples taken at reduced concurrency, never to one loaded sample.

/// Index of the low percentile (p10) in a sorted slice of `len` samples. It always skips the
/// smallest sample when there are two or more, so a single outlier never becomes the baseline.
pub(crate) fn low_percentile_index(len: usize) -> usize {
    if len < 2 { 0 } else { (len / 10).max(1) }
}

/// Sorts `samples` in place and returns their low percentile, or `None` if empty.
pub(crate) fn low_percentile(samples: &mut [u64]) -> Option<u64> {
    samples.sort_unstable();
    samples.get(low_percentile_index(samples.len())).copied()
}

/// Windowed low-percentile estimate of the unloaded RTT, in nanoseconds.
#[derive(Debug, Clone)]
pub(crate) struct Baseline {
    window: Vec<u64>,
    window_len: usize,
    estimate: Option<u64>,
}

impl Baseline {
    /// A tracker that summarises every `window_len` (>= 2) samples.
    pub(crate) fn new(window_len: usize) -> Self {
        Self {
            window: Vec::with_capacity(window_len),
            window_len,
            estimate: None,
        }
    }

    /// The current estimate; `None` until the first window is complete.
    pub(crate) fn estimate(&self) -> Option<u64> {
        self.estimate
    }

    /// Adds a successful sample; when a window completes, the estimate falls to the window's low
    /// percentile if that is lower (or is set from it, for the first window).
    pub(crate) fn observe(&mut self, rtt_nanos: u64) {
        self.window.push(rtt_nanos.max(1));
        if self.window.len() < self.window_len {
            return;
        }
        if let Some(low) = low_percentile(&mut self.window) {
            self.estimate = Some(self.estimate.map_or(low, |current| current.min(low)));
        }
        self.window.clear();
    }

    /// Replaces the estimate with a re-learned value (from a probe) and starts a fresh window.
    pub(crate) fn relearn(&mut self, rtt_nanos: u64) {
        self.estimate = Some(rtt_nanos.max(1));
        self.window.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_outlier_does_not_become_the_baseline() {
        let mut baseline = Baseline::new(10);
        baseline.observe(1_000); // 1 us
        for _ in 0..9 {
            baseline.observe(10_000_000);
        }
        assert_eq!(baseline.estimate(), Some(10_000_000));
    }

    #[test]
    fn estimate_falls_window_by_window_and_relearns_upward_only_on_request() {
        let mut baseline = Baseline::new(4);
        for rtt in [30, 30, 30, 30] {
            baseline.observe(rtt);
        }
        assert_eq!(baseline.estimate(), Some(30));
        for rtt in [10, 10, 10, 10] {
            baseline.observe(rtt);
        }
        assert_eq!(baseline.estimate(), Some(10));
        for rtt in [50, 50, 50, 50] {
            baseline.observe(rtt);
        }
        assert_eq!(
            baseline.estimate(),
            Some(10),
            "a loaded window never raises it"
        );
        baseline.relearn(40);
        assert_eq!(baseline.estimate(), Some(40));
    }

    #[test]
    fn no_estimate_before_the_first_window() {
        let mut baseline = Baseline::new(3);
        baseline.observe(5);
        baseline.observe(5);
        assert_eq!(baseline.estimate(), None);
    }
}
