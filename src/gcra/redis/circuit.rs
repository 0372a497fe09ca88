//! [`Circuit`]: after the store fails to answer, skip it for a probe interval, then let one call
//! through to see whether it is back.
//!
//! Without this, every request during an outage would wait the full timeout before its failure
//! policy applies. With it, one call per probe interval pays that; the others are answered by the
//! policy at once, and the first successful probe closes the circuit (automatic recovery).
//!
//! A standalone store has one circuit. A cluster store has one per master: the slots a master
//! serves (as the last [`SlotMap`] read says) share a circuit, and no circuit holds slots of two
//! masters, so a master in trouble only degrades the keys it serves. Until a slot map has been
//! read, the whole cluster shares one circuit.

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::slot::{SLOTS, SlotMap, slot};

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
    /// Cluster only: per slot, the group (index into `open_until`) its keys belong to.
    groups: Option<Box<[AtomicU16]>>,
    probe_interval: Duration,
}

impl Circuit {
    /// One circuit for the whole store.
    pub(crate) fn single(probe_interval: Duration) -> Circuit {
        Circuit::with_groups(1, None, probe_interval)
    }

    /// One circuit per cluster master; all slots share one until [`regroup`](Self::regroup).
    pub(crate) fn per_master(probe_interval: Duration) -> Circuit {
        let groups = (0..SLOTS).map(|_| AtomicU16::new(0)).collect();
        Circuit::with_groups(usize::from(SLOTS), Some(groups), probe_interval)
    }

    fn with_groups(
        cells: usize,
        groups: Option<Box<[AtomicU16]>>,
        probe_interval: Duration,
    ) -> Circuit {
        Circuit {
            origin: Instant::now(),
            open_until: (0..cells).map(|_| AtomicU64::new(CLOSED)).collect(),
            groups,
            probe_interval,
        }
    }

    /// The circuit `key` (a store key) belongs to.
    pub(crate) fn group(&self, key: &[u8]) -> usize {
        match &self.groups {
            None => 0,
            Some(groups) => usize::from(groups[usize::from(slot(key))].load(Ordering::Relaxed)),
        }
    }

    /// Groups the slots of a cluster store by the master serving them in `map`. A slot moving to
    /// another group takes that group's state (a promoted replica inherits its master's group).
    pub(crate) fn regroup(&self, map: &SlotMap) {
        if let Some(groups) = &self.groups {
            for (cell, group) in groups.iter().zip(map.groups()) {
                cell.store(group, Ordering::Relaxed);
            }
        }
    }

    /// Lets every open circuit probe at its next call (the connection was just rebuilt).
    pub(crate) fn probe_now(&self) {
        let now = self.now();
        for cell in self.open_until.iter() {
            let until = cell.load(Ordering::Acquire);
            if until != CLOSED && until > now {
                let _ = cell.compare_exchange(until, now, Ordering::AcqRel, Ordering::Acquire);
            }
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

    fn two_masters() -> SlotMap {
        let node = |port| {
            ::redis::Value::Array(vec![
                ::redis::Value::BulkString(b"127.0.0.1".to_vec()),
                ::redis::Value::Int(port),
            ])
        };
        let range = |start, end, port| {
            ::redis::Value::Array(vec![
                ::redis::Value::Int(start),
                ::redis::Value::Int(end),
                node(port),
            ])
        };
        let reply = ::redis::Value::Array(vec![range(0, 8191, 7000), range(8192, 16383, 7001)]);
        SlotMap::parse(&reply, "127.0.0.1").unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn cluster_groups_are_masters() {
        let c = Circuit::per_master(Duration::from_millis(100));
        // Before a slot map is known, the cluster is one group.
        assert_eq!(c.group(b"foo"), c.group(b"bar"));
        c.regroup(&two_masters());
        // "foo" is slot 12182 (second master), "bar" 5061, "a" 15495 and "b" 3300.
        let (foo, bar) = (c.group(b"foo"), c.group(b"bar"));
        assert_eq!((foo, bar), (8192, 0));
        assert_eq!((c.group(b"a"), c.group(b"b")), (foo, bar));
        c.failed(foo);
        assert_eq!(c.gate(foo), Gate::Open);
        assert_eq!(
            c.gate(bar),
            Gate::Pass,
            "the other master's keys are not degraded"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn probe_now_lets_open_circuits_probe_at_once() {
        let c = Circuit::single(Duration::from_secs(10));
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
