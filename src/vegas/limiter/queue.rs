//! Callers waiting for a permit: their queue entries, and the order they are served in.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::Waker;

use parking_lot::Mutex;

use super::grant::Grant;
use super::partitions::PartitionId;

/// Which queued caller gets the next free permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum QueueOrder {
    /// First come, first served (default).
    #[default]
    Fifo,
    /// Newest caller first: under sustained overload the callers served are the ones least likely
    /// to have given up already.
    Lifo,
}

/// A queued caller. Only touched while the limiter's state lock is held.
#[derive(Debug)]
pub(super) struct Waiter {
    partition: PartitionId,
    slot: Mutex<Slot>,
}

#[derive(Debug)]
struct Slot {
    grant: Option<Grant>,
    waker: Waker,
}

impl Waiter {
    /// A caller acquiring for `partition`, to be woken through `waker`.
    pub(super) fn new(partition: PartitionId, waker: Waker) -> Self {
        Self {
            partition,
            slot: Mutex::new(Slot { grant: None, waker }),
        }
    }

    /// The partition the caller acquires for.
    pub(super) fn partition(&self) -> PartitionId {
        self.partition
    }

    /// Hands the caller its permit and wakes it.
    pub(super) fn fulfil(&self, grant: Grant) {
        let mut slot = self.slot.lock();
        slot.grant = Some(grant);
        slot.waker.wake_by_ref();
    }

    /// Takes the permit handed over, if any; otherwise keeps `waker` as the one to wake.
    pub(super) fn claim(&self, waker: &Waker) -> Option<Grant> {
        let mut slot = self.slot.lock();
        let grant = slot.grant.take();
        if grant.is_none() && !slot.waker.will_wake(waker) {
            slot.waker = waker.clone();
        }
        grant
    }

    /// Takes the permit handed over, if any (for a caller that leaves).
    pub(super) fn take_grant(&self) -> Option<Grant> {
        self.slot.lock().grant.take()
    }
}

/// Queued callers, in the order they are served.
#[derive(Debug)]
pub(super) struct Queue {
    waiters: VecDeque<Arc<Waiter>>,
    order: QueueOrder,
}

impl Queue {
    /// An empty queue serving callers in `order`.
    pub(super) fn new(order: QueueOrder) -> Self {
        Self {
            waiters: VecDeque::new(),
            order,
        }
    }

    /// Whether nobody waits.
    pub(super) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Callers waiting.
    pub(super) fn len(&self) -> usize {
        self.waiters.len()
    }

    /// Queues a caller: first in line (LIFO) or last (FIFO).
    pub(super) fn push(&mut self, waiter: Arc<Waiter>) {
        match self.order {
            QueueOrder::Fifo => self.waiters.push_back(waiter),
            QueueOrder::Lifo => self.waiters.push_front(waiter),
        }
    }

    /// Removes a caller that left.
    pub(super) fn remove(&mut self, waiter: &Arc<Waiter>) {
        self.waiters.retain(|queued| !Arc::ptr_eq(queued, waiter));
    }

    /// Whether a queued caller acquires for a partition that satisfies `predicate`.
    pub(super) fn any(&self, predicate: impl Fn(PartitionId) -> bool) -> bool {
        self.waiters.iter().any(|w| predicate(w.partition()))
    }

    /// Position (in serving order) of the first caller whose partition satisfies `predicate`.
    pub(super) fn position(&self, predicate: impl Fn(PartitionId) -> bool) -> Option<usize> {
        self.waiters.iter().position(|w| predicate(w.partition()))
    }

    /// The partition of the caller at `index`.
    pub(super) fn partition_at(&self, index: usize) -> Option<PartitionId> {
        self.waiters.get(index).map(|w| w.partition())
    }

    /// Takes the caller at `index` out of the queue.
    pub(super) fn take(&mut self, index: usize) -> Option<Arc<Waiter>> {
        self.waiters.remove(index)
    }
}
