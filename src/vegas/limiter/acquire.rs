//! Waiting for a permit: the queue entry and the future that owns it.
//!
//! Cancellation is part of the contract: dropping the future (timeout, `select!`, task abort)
//! removes its queue entry, and a permit granted to it in the meantime is released at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use super::limiter::{Grant, Limiter};
use super::partitions::PartitionId;
use super::permit::Permit;

/// A queued caller. Only touched while the limiter's state lock is held.
#[derive(Debug)]
pub(crate) struct Waiter {
    partition: PartitionId,
    slot: Mutex<Slot>,
}

#[derive(Debug)]
struct Slot {
    grant: Option<Grant>,
    waker: Waker,
}

impl Waiter {
    /// The partition the caller acquires for.
    pub(crate) fn partition(&self) -> PartitionId {
        self.partition
    }

    /// Hands the caller its permit and wakes it.
    pub(crate) fn fulfil(&self, grant: Grant) {
        let mut slot = self.slot.lock();
        slot.grant = Some(grant);
        slot.waker.wake_by_ref();
    }
}

/// Resolves to a permit once one is granted; see the module docs for cancellation.
#[derive(Debug)]
pub(crate) struct WaitForPermit<'a> {
    limiter: &'a Limiter,
    partition: PartitionId,
    waiter: Option<Arc<Waiter>>,
}

impl<'a> WaitForPermit<'a> {
    pub(crate) fn new(limiter: &'a Limiter, partition: PartitionId) -> Self {
        Self {
            limiter,
            partition,
            waiter: None,
        }
    }
}

impl<'a> Future for WaitForPermit<'a> {
    type Output = Permit<'a>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Permit<'a>> {
        let this = self.get_mut();
        let now = this.limiter.now_nanos();
        let mut state = this.limiter.shared.state.lock();
        let Some(waiter) = &this.waiter else {
            if let Some(grant) = this.limiter.grant_now(&mut state, this.partition, now) {
                drop(state);
                return Poll::Ready(this.limiter.permit(grant));
            }
            let waiter = Arc::new(Waiter {
                partition: this.partition,
                slot: Mutex::new(Slot {
                    grant: None,
                    waker: cx.waker().clone(),
                }),
            });
            state.enqueue(
                this.limiter.occupancy(),
                Arc::clone(&waiter),
                this.limiter.shared.order,
            );
            this.waiter = Some(waiter);
            return Poll::Pending;
        };
        let mut slot = waiter.slot.lock();
        if let Some(grant) = slot.grant.take() {
            drop(slot);
            drop(state);
            this.waiter = None;
            return Poll::Ready(this.limiter.permit(grant));
        }
        if !slot.waker.will_wake(cx.waker()) {
            slot.waker = cx.waker().clone();
        }
        Poll::Pending
    }
}

impl Drop for WaitForPermit<'_> {
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        let now = self.limiter.now_nanos();
        let mut state = self.limiter.shared.state.lock();
        let granted = waiter.slot.lock().grant.take();
        match granted {
            Some(grant) => self.limiter.release_unclaimed(state, &grant, now),
            None => state.dequeue(self.limiter.occupancy(), &waiter),
        }
    }
}
