//! [`Queue`]: the workers every service of one layer shares, the calls waiting for them, and how
//! their waits are timed and reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;

use crate::clock::Clock;
use crate::vegas::queue_timing::QueueTiming;

/// The state every service of one layer shares.
pub(super) struct Queue {
    /// One permit per worker; tokio's semaphore serves waiters in arrival order.
    pub(super) workers: Arc<Semaphore>,
    /// How many workers there are.
    pub(super) capacity: usize,
    /// Calls waiting for a worker now.
    waiting: AtomicUsize,
    /// The metric the wait is reported under.
    pub(super) timing: QueueTiming,
    /// Times the wait.
    pub(super) clock: Arc<dyn Clock>,
}

impl Queue {
    /// `capacity` idle workers (at least 1, checked by the builder), no one waiting.
    pub(super) fn new(capacity: usize, timing: QueueTiming, clock: Arc<dyn Clock>) -> Self {
        Self {
            workers: Arc::new(Semaphore::new(capacity)),
            capacity,
            waiting: AtomicUsize::new(0),
            timing,
            clock,
        }
    }

    /// Calls holding a worker now.
    pub(super) fn busy(&self) -> usize {
        self.capacity - self.workers.available_permits()
    }

    /// Calls waiting for a worker now.
    pub(super) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// Counts a call among the [waiting](Queue::waiting) ones while it lives.
pub(super) struct Waiting<'a>(&'a Queue);

impl<'a> Waiting<'a> {
    /// Counts one more waiting call until the guard is dropped.
    pub(super) fn join(queue: &'a Queue) -> Self {
        queue.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(queue)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
