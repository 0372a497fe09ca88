//! [`Groups`]: the store's [`Circuit`] and which of its groups each key belongs to.
//!
//! A standalone store has one group. A cluster store has one per master: the slots a master
//! serves (as the last [`SlotMap`] read says) share a group, and no group holds slots of two
//! masters, so a master in trouble only degrades the keys it serves. Until a slot map has been
//! read, the whole cluster shares one group.

use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use super::slot::{SLOTS, SlotMap, slot};
use crate::gcra::remote::Circuit;

#[derive(Debug)]
pub(crate) struct Groups {
    circuit: Circuit,
    /// Cluster only: per slot, the group (a cell of `circuit`) its keys belong to.
    slots: Option<Box<[AtomicU16]>>,
}

impl Groups {
    /// One group for the whole store.
    pub(crate) fn single(probe_interval: Duration) -> Groups {
        Groups {
            circuit: Circuit::new(1, probe_interval),
            slots: None,
        }
    }

    /// One group per cluster master; all slots share one until [`regroup`](Self::regroup).
    pub(crate) fn per_master(probe_interval: Duration) -> Groups {
        Groups {
            circuit: Circuit::new(usize::from(SLOTS), probe_interval),
            slots: Some((0..SLOTS).map(|_| AtomicU16::new(0)).collect()),
        }
    }

    pub(crate) fn circuit(&self) -> &Circuit {
        &self.circuit
    }

    /// The group `key` (a store key) belongs to.
    pub(crate) fn group(&self, key: &[u8]) -> usize {
        match &self.slots {
            None => 0,
            Some(slots) => usize::from(slots[usize::from(slot(key))].load(Ordering::Relaxed)),
        }
    }

    /// Groups the slots of a cluster store by the master serving them in `map`. A slot moving to
    /// another group takes that group's state (a promoted replica inherits its master's group).
    pub(crate) fn regroup(&self, map: &SlotMap) {
        if let Some(slots) = &self.slots {
            for (cell, group) in slots.iter().zip(map.groups()) {
                cell.store(group, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::redis::slot::tests::two_masters;

    #[test]
    fn cluster_groups_are_masters() {
        let g = Groups::per_master(Duration::from_millis(100));
        // Before a slot map is known, the cluster is one group.
        assert_eq!(g.group(b"foo"), g.group(b"bar"));
        g.regroup(&two_masters());
        // "foo" is slot 12182 (second master), "bar" 5061, "a" 15495 and "b" 3300.
        let (foo, bar) = (g.group(b"foo"), g.group(b"bar"));
        assert_eq!((foo, bar), (8192, 0));
        assert_eq!((g.group(b"a"), g.group(b"b")), (foo, bar));
        assert!(foo < g.circuit().groups());
    }

    #[test]
    fn a_standalone_store_is_one_group() {
        let g = Groups::single(Duration::from_millis(100));
        assert_eq!((g.group(b"foo"), g.group(b"bar")), (0, 0));
        assert_eq!(g.circuit().groups(), 1);
    }
}
