//! Waiting for a permit: the future that owns a queue entry.
//!
//! Cancellation is part of the contract: dropping the future (timeout, `select!`, task abort)
//! removes its queue entry, and a permit granted to it in the meantime is released at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::partitions::PartitionId;
use super::permit::Permit;
use super::queue::Waiter;
use super::shared::Shared;

/// Default time an outbound call waits for a concurrency permit before it is shed: the wait bound
/// of [`Guard::call`](crate::Guard::call), the tower layer and the reqwest middleware.
pub const DEFAULT_ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(50);

/// Resolves to a permit once one is granted; see the module docs for cancellation.
#[derive(Debug)]
pub(super) struct WaitForPermit<'a> {
    limiter: &'a Arc<Shared>,
    partition: PartitionId,
    waiter: Option<Arc<Waiter>>,
}

impl<'a> WaitForPermit<'a> {
    /// Waits for a permit of `limiter` for `partition` (queued on first poll).
    pub(super) fn new(limiter: &'a Arc<Shared>, partition: PartitionId) -> Self {
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
        let Some(waiter) = &this.waiter else {
            return match this.limiter.grant_or_enqueue(this.partition, cx.waker()) {
                Ok(grant) => Poll::Ready(Permit::new(this.limiter, grant)),
                Err(waiter) => {
                    this.waiter = Some(waiter);
                    Poll::Pending
                }
            };
        };
        match this.limiter.claim(waiter, cx.waker()) {
            Some(grant) => {
                this.waiter = None;
                Poll::Ready(Permit::new(this.limiter, grant))
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for WaitForPermit<'_> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            self.limiter.leave(&waiter);
        }
    }
}
