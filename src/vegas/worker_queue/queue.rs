//! [`Queue`]: the workers every service of one layer shares, the calls waiting for them, and how
//! their waits are timed and reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Semaphore, SemaphorePermit};

use super::bound::QueueFull;
use crate::clock::Clock;
use crate::vegas::queue_timing::QueueTiming;

/// The state every service of one layer shares.
pub(super) struct Queue {
    /// One permit per worker; tokio's semaphore serves waiters in arrival order.
    workers: Semaphore,
    /// How many workers there are.
    pub(super) capacity: usize,
    /// How many calls may wait; `None`: any number.
    pub(super) max_waiting: Option<usize>,
    /// Calls waiting for a worker now.
    waiting: AtomicUsize,
    /// The metric the wait is reported under.
    pub(super) timing: QueueTiming,
    /// Times the wait.
    pub(super) clock: Arc<dyn Clock>,
    /// The queue's metric handles.
    metrics: QueueMetrics,
}

/// Metric handles of one queue, registered once, labelled `queue = <name>`.
struct QueueMetrics {
    busy: metrics::Gauge,
    waiting: metrics::Gauge,
    wait: metrics::Histogram,
    refused: metrics::Counter,
}

impl QueueMetrics {
    fn register(name: &str) -> Self {
        let name = name.to_owned();
        let metrics = Self {
            busy: metrics::gauge!("flowguard_worker_queue_busy", "queue" => name.clone()),
            waiting: metrics::gauge!("flowguard_worker_queue_waiting", "queue" => name.clone()),
            wait: metrics::histogram!("flowguard_worker_queue_wait_seconds", "queue" => name.clone()),
            refused: metrics::counter!("flowguard_worker_queue_refused_total", "queue" => name),
        };
        metrics.busy.set(0.0);
        metrics.waiting.set(0.0);
        metrics
    }
}

impl Queue {
    /// `capacity` idle workers (at least 1, checked by the builder), no one waiting, at most
    /// `max_waiting` allowed to; metrics registered under `queue = name` with the recorder
    /// installed now.
    pub(super) fn new(
        capacity: usize,
        max_waiting: Option<usize>,
        timing: QueueTiming,
        clock: Arc<dyn Clock>,
        name: &str,
    ) -> Self {
        Self {
            workers: Semaphore::new(capacity),
            capacity,
            max_waiting,
            waiting: AtomicUsize::new(0),
            timing,
            clock,
            metrics: QueueMetrics::register(name),
        }
    }

    /// Admits a call: a worker at once when one is free (then no one waits), else a place in
    /// the queue, unless [`max_waiting`](Self::max_waiting) calls already hold one.
    pub(super) fn admit(&self) -> Admission<'_> {
        if let Ok(permit) = self.workers.try_acquire() {
            return Admission::Served(self.serve(permit));
        }
        match Waiting::join(self) {
            Some(waiting) => Admission::Queued(waiting),
            None => {
                self.metrics.refused.increment(1);
                Admission::Full(QueueFull {
                    workers: self.capacity,
                    max_waiting: self.max_waiting.unwrap_or(usize::MAX),
                })
            }
        }
    }

    /// A worker for a call that holds a place in the queue, in arrival order. Dropped while it
    /// waits, the call leaves the queue.
    pub(super) async fn worker(&self, waiting: Waiting<'_>) -> Worker<'_> {
        let permit = match self.workers.acquire().await {
            Ok(permit) => permit,
            Err(_) => unreachable!("the queue's semaphore is never closed"),
        };
        drop(waiting);
        self.serve(permit)
    }

    /// Waits in the queue whatever its length: for a full queue whose layer has no answer to
    /// give (an [`Unbounded`](super::Unbounded) one never is full).
    pub(super) async fn worker_past_bound(&self) -> Worker<'_> {
        self.worker(Waiting::count(self)).await
    }

    fn serve<'a>(&'a self, permit: SemaphorePermit<'a>) -> Worker<'a> {
        self.metrics.busy.increment(1.0);
        Worker {
            _permit: permit,
            queue: self,
        }
    }

    /// Records a call's wait, from its arrival to the moment a worker took it.
    pub(super) fn waited(&self, queued: std::time::Duration) {
        self.metrics.wait.record(queued.as_secs_f64());
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

/// A worker held by a call; dropped, it is free for the next in line.
pub(super) struct Worker<'a> {
    _permit: SemaphorePermit<'a>,
    queue: &'a Queue,
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        self.queue.metrics.busy.decrement(1.0);
    }
}

/// How [`Queue::admit`] took a call.
pub(super) enum Admission<'a> {
    /// A worker was free.
    Served(Worker<'a>),
    /// It holds a place in the queue: [`Queue::worker`] waits for a worker.
    Queued(Waiting<'a>),
    /// The queue was full.
    Full(QueueFull),
}

/// Counts a call among the [waiting](Queue::waiting) ones while it lives.
pub(super) struct Waiting<'a>(&'a Queue);

impl<'a> Waiting<'a> {
    /// Counts one more waiting call until the guard is dropped, unless
    /// [`max_waiting`](Queue::max_waiting) already wait.
    fn join(queue: &'a Queue) -> Option<Self> {
        let bound = queue.max_waiting.unwrap_or(usize::MAX);
        queue
            .waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |waiting| {
                (waiting < bound).then_some(waiting + 1)
            })
            .ok()?;
        queue.metrics.waiting.increment(1.0);
        Some(Waiting(queue))
    }

    /// Counts one more waiting call whatever the bound.
    fn count(queue: &'a Queue) -> Self {
        queue.waiting.fetch_add(1, Ordering::Relaxed);
        queue.metrics.waiting.increment(1.0);
        Waiting(queue)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
        self.0.metrics.waiting.decrement(1.0);
    }
}
