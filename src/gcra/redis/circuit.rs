//! [`Circuit`]: after the store fails to answer, skip it for a probe interval, then let one call
//! through to see whether it is back.
//!
//! Without this, every request during an outage would wait the full timeout before its failure
//! policy applies. With it, one call per probe interval pays that; the others are answered by the
//! policy at once, and the first successful probe closes the circuit (automatic recovery).
//!
//! A standalone store has one circuit. A cluster store has one per group of
//! [`SLOTS_PER_GROUP`] consecutive slots (nodes own contiguous slot ranges), so a master that fails
//! over only degrades the keys it serves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::slot::{SLOTS, slot};

/// Consecutive cluster slots sharing one circuit: 64 groups in all.
pub(crate) const SLOTS_PER_GROUP: u16 = 256;

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
    /// Per group: `CLOSED`, or nanoseconds since `origin` (+1) until which calls skip the store.
    open_until: Box<[AtomicU64]>,
    probe_interval: Duration,
}

impl Circuit {
    /// One circuit for the whole store.
    pub(crate) fn single(probe_interval: Duration) -> Circuit {
        Circuit::with_groups(1, probe_interval)
    }

    /// One circuit per group of cluster slots.
    pub(crate) fn per_slot_group(probe_interval: Duration) -> Circuit {
        Circuit::with_groups(usize::from(SLOTS / SLOTS_PER_GROUP), probe_interval)
    }

    fn with_groups(groups: usize, probe_interval: Duration) -> Circuit {
        Circuit {
            origin: Instant::now(),
            open_until: (0..groups).map(|_| AtomicU64::new(CLOSED)).collect(),
            probe_interval,
        }
    }

    /// The circuit `key` (a store key) belongs to.
    pub(crate) fn group(&self, key: &[u8]) -> usize {
        if self.open_until.len() == 1 {
            0
        } else {
            usize::from(slot(key) / SLOTS_PER_GROUP)
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    fn next_probe(&self, now: u64) -> u64 {
        now.saturating_add(u64::try_from(self.probe_interval.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(crate) fn gate(&self, group: usize) -> Gate {
        let cell = &self.open_until[group];
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

    /// Records an answer; returns whether the circuit was open (the store just recovered).
    pub(crate) fn answered(&self, group: usize) -> bool {
        let cell = &self.open_until[group];
        cell.load(Ordering::Acquire) != CLOSED && cell.swap(CLOSED, Ordering::AcqRel) != CLOSED
    }

    /// Records a failure: skip the store for one probe interval.
    pub(crate) fn failed(&self, group: usize) {
        self.open_until[group].store(self.next_probe(self.now()), Ordering::Release);
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
        let c = Circuit::single(Duration::from_millis(100));
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
    async fn cluster_groups_fail_independently() {
        let c = Circuit::per_slot_group(Duration::from_millis(100));
        let (a, b) = (c.group(b"foo"), c.group(b"bar")); // slots 12182 and 5061
        assert_ne!(a, b);
        c.failed(a);
        assert_eq!(c.gate(a), Gate::Open);
        assert_eq!(c.gate(b), Gate::Pass);
    }
}
