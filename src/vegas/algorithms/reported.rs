//! The dependency's unloaded RTT from its own reports of how long each call queued.
//!
//! In a fleet, the RTT an instance measures holds the queue that every instance keeps at the
//! dependency, and no instance can tell, by changing its own concurrency, how much of that
//! queue is its own. A dependency that reports how long each call waited in its queue before it
//! was served removes the question: `rtt - queued` is the unloaded RTT, the same for every
//! instance whatever the others do. Vegas then takes it as its baseline.

use super::percentile::low_percentile;

/// Reported samples per window, whose low percentile is the estimate. A report is a direct
/// measurement, not an upper bound loaded by a queue, so the last window alone is the estimate:
/// it follows a dependency that got slower after 8 reports. Held for longer (the least of the
/// last 4 windows of 16), it lagged 64 reports behind a slower dependency, and since a lower
/// limit brings reports more slowly, a limit cut to 1 waited 1.6 s for them after a 10 -> 25 ms
/// step (in simulation, half of what a fixed limit served in the first second after it).
const WINDOW: usize = 8;
/// Successful calls without a report after which the reports are forgotten (the dependency
/// stopped sending them) and the baseline is the algorithm's own again.
const SILENCE: u64 = 64;

/// The unloaded RTT the dependency's reports give.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReportedBaseline {
    samples: Vec<u64>,
    estimate: Option<u64>,
    unreported: u64,
}

impl ReportedBaseline {
    /// The estimate, once a whole window of reports came in.
    pub(crate) fn estimate(&self) -> Option<u64> {
        self.estimate
    }

    /// A successful call's RTT minus the time the dependency reports it queued, in nanoseconds.
    pub(crate) fn report(&mut self, unloaded: u64) {
        self.unreported = 0;
        self.samples.push(unloaded.max(1));
        if self.samples.len() < WINDOW {
            return;
        }
        if let Some(low) = low_percentile(&mut self.samples) {
            self.estimate = Some(low);
        }
        self.samples.clear();
    }

    /// A successful call without a report. Every successful call of a limiter whose dependency
    /// never reports comes here, so that case is one branch and no write.
    pub(crate) fn unreported(&mut self) {
        if self.estimate.is_none() {
            return;
        }
        self.unreported += 1;
        if self.unreported > SILENCE {
            *self = Self::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_window_of_reports_gives_its_low_percentile() {
        let mut reported = ReportedBaseline::default();
        for i in 0..WINDOW as u64 - 1 {
            reported.report(10 * MS + i * MS / 10);
        }
        assert_eq!(reported.estimate(), None);
        reported.report(1); // one lucky sample is skipped by the low percentile
        assert_eq!(reported.estimate(), Some(10 * MS));
    }

    #[test]
    fn follows_a_slower_dependency_and_a_faster_one_after_one_window() {
        let mut reported = ReportedBaseline::default();
        for _ in 0..WINDOW * 4 {
            reported.report(10 * MS);
        }
        for i in 1..=WINDOW {
            reported.report(25 * MS);
            let expected = if i < WINDOW { 10 * MS } else { 25 * MS };
            assert_eq!(reported.estimate(), Some(expected), "report {i}");
        }
        for _ in 0..WINDOW {
            reported.report(8 * MS);
        }
        assert_eq!(reported.estimate(), Some(8 * MS));
    }

    #[test]
    fn reports_that_stop_are_forgotten() {
        let mut reported = ReportedBaseline::default();
        for _ in 0..WINDOW {
            reported.report(10 * MS);
        }
        for _ in 0..SILENCE {
            reported.unreported();
        }
        assert_eq!(reported.estimate(), Some(10 * MS));
        reported.unreported();
        assert_eq!(reported.estimate(), None);
    }
}
