//! [`Lanes`]: which [`Lane`] (group commit) a key's decision takes.
//!
//! * Standalone: one lane, the store's connection.
//! * Redis Cluster: one lane per master, as the store's slot map says. A lane's calls go to the
//!   master of their first key's slot (as the cluster client knows it) and name their keys as
//!   arguments, under the script's `allow-cross-slot-keys` flag. A key that node does not serve
//!   (the slot moved: resharding, failover) is decided alone, by the usual routed call. Without a
//!   slot map yet, and on servers that cannot run the flagged script (Redis before 7.0), every
//!   decision is a call of its own.
//! * Coalescing off (a bound of one decision per call): no lanes.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::RwLock;

use super::batch::Lane;
use super::slot::{Node, SlotMap, slot};

pub(crate) enum Lanes {
    /// Every decision is a call of its own.
    Off,
    /// A standalone store's one lane.
    One(Arc<Lane>),
    /// A cluster store's lanes, by master address.
    PerMaster {
        max_batch: usize,
        masters: RwLock<HashMap<Node, Arc<Lane>>>,
        /// Cleared when a node cannot run the flagged script: then calls go one key at a time.
        cross_slot: AtomicBool,
    },
}

impl Lanes {
    /// The lanes of a store sending at most `max_batch` decisions per call.
    pub(crate) fn new(max_batch: usize, cluster: bool) -> Lanes {
        if max_batch <= 1 {
            Lanes::Off
        } else if cluster {
            Lanes::PerMaster {
                max_batch,
                masters: RwLock::new(HashMap::new()),
                cross_slot: AtomicBool::new(true),
            }
        } else {
            Lanes::One(Arc::new(Lane::new(max_batch)))
        }
    }

    /// The lane of `key` (a store key), given the cluster's slot map; `None`: a call of its own.
    pub(crate) fn lane(&self, key: &[u8], map: Option<&SlotMap>) -> Option<Arc<Lane>> {
        match self {
            Lanes::Off => None,
            Lanes::One(lane) => Some(lane.clone()),
            Lanes::PerMaster {
                max_batch,
                masters,
                cross_slot,
            } => {
                if !cross_slot.load(Ordering::Relaxed) {
                    return None;
                }
                let node = map?.master_of(slot(key))?;
                if let Some(lane) = masters.read().get(node) {
                    return Some(lane.clone());
                }
                let lane = masters
                    .write()
                    .entry(node.clone())
                    .or_insert_with(|| Arc::new(Lane::new(*max_batch)))
                    .clone();
                Some(lane)
            }
        }
    }

    /// A cluster node could not run the flagged script: from now on every decision is a call of
    /// its own. Returns whether this turned coalescing off (so it is reported once).
    pub(crate) fn without_cross_slot(&self) -> bool {
        match self {
            Lanes::PerMaster { cross_slot, .. } => cross_slot.swap(false, Ordering::Relaxed),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::redis::slot::tests::two_masters;

    #[test]
    fn a_cluster_has_a_lane_per_master() {
        let lanes = Lanes::new(32, true);
        let map = two_masters();
        // "foo" (12182) and "a" (15495) are the second master's, "bar" (5061) the first's.
        let (foo, a, bar) = (
            lanes.lane(b"foo", Some(&map)).unwrap(),
            lanes.lane(b"a", Some(&map)).unwrap(),
            lanes.lane(b"bar", Some(&map)).unwrap(),
        );
        assert!(Arc::ptr_eq(&foo, &a));
        assert!(!Arc::ptr_eq(&foo, &bar));
        assert!(lanes.lane(b"foo", None).is_none(), "no map, no lane");
        assert!(lanes.without_cross_slot());
        assert!(!lanes.without_cross_slot(), "reported once");
        assert!(lanes.lane(b"foo", Some(&map)).is_none());
    }

    #[test]
    fn one_decision_per_call_needs_no_lane() {
        assert!(Lanes::new(1, false).lane(b"k", None).is_none());
        assert!(Lanes::new(2, false).lane(b"k", None).is_some());
    }
}
