//! [`Circuit`]: after the store fails to answer, skip it for a probe interval, then let one call
//! through to see whether it is back.
//!
//! Without this, every request during an outage would wait the full timeout before its failure
//! policy applies. With it, one call per probe interval pays that; the others are answered by the
//! policy at once, and the first successful probe closes the circuit (automatic recovery).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Whether a call should go to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// The store is healthy: call it.
    Pass,
    /// The store failed recently and this call is the one probe of this interval: call it.
    Probe,
    /// The store failed recently: answer by the failure policy without calling it.
    Open,
}

const CLOSED: u64 = 0;

#[derive(Debug)]
pub(crate) struct Circuit {
    origin: Instant,
    /// `CLOSED`, or nanoseconds since `origin` (+1) until which calls skip the store.
    open_until: AtomicU64,
    probe_interval: Duration,
}

impl Circuit {
    pub(crate) fn new(probe_interval: Duration) -> Circuit {
        Circuit { origin: Instant::now(), open_until: AtomicU64::new(CLOSED), probe_interval }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX - 1).saturating_add(1)
    }

    fn next_probe(&self, now: u64) -> u64 {
        now.saturating_add(u64::try_from(self.probe_interval.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(crate) fn gate(&self) -> Gate {
        let until = self.open_until.load(Ordering::Acquire);
        if until == CLOSED {
            return Gate::Pass;
        }
        let now = self.now();
        if now < until {
            return Gate::Open;
        }
        match self.open_until.compare_exchange(until, self.next_probe(now), Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Gate::Probe,
            Err(_) => Gate::Open,
        }
    }

    /// Records an answer; returns whether the circuit was open (the store just recovered).
    pub(crate) fn answered(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != CLOSED && self.open_until.swap(CLOSED, Ordering::AcqRel) != CLOSED
    }

    /// Records a failure: skip the store for one probe interval.
    pub(crate) fn failed(&self) {
        self.open_until.store(self.next_probe(self.now()), Ordering::Release);
    }

    pub(crate) fn probe_interval(&self) -> Duration {
        self.probe_interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_probe_per_interval_and_recovery_on_answer() {
        let c = Circuit::new(Duration::from_millis(100));
        assert_eq!(c.gate(), Gate::Pass);
        c.failed();
        assert_eq!(c.gate(), Gate::Open);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(c.gate(), Gate::Probe);
        assert_eq!(c.gate(), Gate::Open, "only one probe per interval");
        c.failed();
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_eq!(c.gate(), Gate::Open);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(c.gate(), Gate::Probe);
        assert!(c.answered(), "the probe's answer closes the circuit");
        assert!(!c.answered());
        assert_eq!(c.gate(), Gate::Pass);
    }
}
