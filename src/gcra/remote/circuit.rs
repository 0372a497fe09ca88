//! [`Circuit`]: after a store fails to answer, skip it for a probe interval, then let one call
//! through to see whether it is back.
//!
//! Without this, every request during an outage would wait the full timeout before its failure
//! policy applies. With it, one call per probe interval pays that; the others are answered by the
//! policy at once, and the first successful probe closes the circuit (automatic recovery).
//!
//! A circuit has groups: keys whose calls fail together share one (a Redis Cluster store has one
//! per master, a standalone store one for everything), so a part of the store in trouble only
//! degrades the keys it serves. Which group a key belongs to is the store's to say
//! ([`RemoteStore::group`](super::RemoteStore::group)).

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

/// The health of a shared store, per group of keys: which groups failed recently and when they
/// are probed again. Owned by the store (its health is its connection's, shared by every limiter
/// over it) and driven by the [remote limiter](super::RemoteRateLimiter), which lets one call per
/// probe interval through to a failed group.
#[derive(Debug)]
pub struct Circuit {
    origin: Instant,
    /// Per group: `CLOSED`, or nanoseconds since `origin` (+1) until which calls skip the store.
    open_until: Box<[AtomicU64]>,
    probe_interval: Duration,
}

impl Circuit {
    /// A circuit with `groups` groups (at least one), all closed, probing a failed group every
    /// `probe_interval`.
    pub fn new(groups: usize, probe_interval: Duration) -> Circuit {
        Circuit {
            origin: Instant::now(),
            open_until: (0..groups.max(1)).map(|_| AtomicU64::new(CLOSED)).collect(),
            probe_interval,
        }
    }

    /// The number of groups.
    pub fn groups(&self) -> usize {
        self.open_until.len()
    }

    /// How often a failed group is probed.
    pub fn probe_interval(&self) -> Duration {
        self.probe_interval
    }

    /// Lets every open group probe at its next call (e.g. the store's connection was just rebuilt).
    pub fn probe_now(&self) {
        let now = self.now();
        for cell in self.open_until.iter() {
            let until = cell.load(Ordering::Acquire);
            if until != CLOSED && until > now {
                let _ = cell.compare_exchange(until, now, Ordering::AcqRel, Ordering::Acquire);
            }
        }
    }

    /// The cell of `group`; a group beyond the last shares the last one's.
    fn cell(&self, group: usize) -> &AtomicU64 {
        &self.open_until[group.min(self.open_until.len() - 1)]
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    fn next_probe(&self, now: u64) -> u64 {
        now.saturating_add(u64::try_from(self.probe_interval.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Whether a call for a key of `group` should go to the store.
    pub(crate) fn gate(&self, group: usize) -> Gate {
        let cell = self.cell(group);
        let until = cell.load(Ordering::Acquire);
        if until == CLOSED {
            return Gate::Pass;
        }
        let now = self.now();
        if now < until {
            return Gate::Open;
        }
        match cell.compare_exchange(
            until,
            self.next_probe(now),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Gate::Probe,
            Err(_) => Gate::Open,
        }
    }

    /// Records an answer; returns whether the group was open (the store just recovered).
    pub(crate) fn answered(&self, group: usize) -> bool {
        let cell = self.cell(group);
        cell.load(Ordering::Acquire) != CLOSED && cell.swap(CLOSED, Ordering::AcqRel) != CLOSED
    }

    /// Records a failure: skip the store for keys of `group` for one probe interval.
    pub(crate) fn failed(&self, group: usize) {
        self.cell(group)
            .store(self.next_probe(self.now()), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_probe_per_interval_and_recovery_on_answer() {
        let c = Circuit::new(1, Duration::from_millis(100));
        assert_eq!(c.gate(0), Gate::Pass);
        c.failed(0);
        assert_eq!(c.gate(0), Gate::Open);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(c.gate(0), Gate::Probe);
        assert_eq!(c.gate(0), Gate::Open, "only one probe per interval");
        c.failed(0);
        tokio::time::advance(Duration::from_millis(99)).await;
        assert_eq!(c.gate(0), Gate::Open);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(c.gate(0), Gate::Probe);
        assert!(c.answered(0), "the probe's answer closes the circuit");
        assert!(!c.answered(0));
        assert_eq!(c.gate(0), Gate::Pass);
    }

    #[tokio::test(start_paused = true)]
    async fn groups_fail_apart() {
        let c = Circuit::new(2, Duration::from_millis(100));
        c.failed(1);
        assert_eq!(c.gate(1), Gate::Open);
        assert_eq!(
            c.gate(0),
            Gate::Pass,
            "the other group's keys are not degraded"
        );
        assert_eq!(c.gate(7), Gate::Open, "a group beyond the last is the last");
        assert_eq!(Circuit::new(0, Duration::from_millis(1)).groups(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn probe_now_lets_open_circuits_probe_at_once() {
        let c = Circuit::new(1, Duration::from_secs(10));
        c.probe_now();
        assert_eq!(c.gate(0), Gate::Pass, "a closed circuit stays closed");
        c.failed(0);
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(c.gate(0), Gate::Open);
        c.probe_now();
        assert_eq!(c.gate(0), Gate::Probe);
        assert_eq!(c.gate(0), Gate::Open, "one probe, then the interval again");
    }
}
