//! What every handle and permit of one limiter shares: the occupancy word, the locked state,
//! the clock and the metrics. Granting and releasing happen here; the handle ([`Limiter`]) and
//! the permits sit on top.
//!
//! [`Limiter`]: super::Limiter

use std::fmt;
use std::sync::Arc;
use std::task::Waker;

use parking_lot::Mutex;

use super::clock::LimiterClock;
use super::grant::Grant;
use super::occupancy::{Occupancy, Take};
use super::partitions::PartitionId;
use super::queue::Waiter;
use super::state::State;
use super::stats::{LimiterMetrics, LimiterSnapshot};
use crate::vegas::algorithms::Outcome;
use crate::vegas::error::AcquireError;

/// The limiter proper, shared by its handles and permits.
pub(super) struct Shared {
    occupancy: Occupancy,
    state: Mutex<State>,
    clock: LimiterClock,
    /// What a permit dropped without an outcome reports.
    unfinished: Outcome,
    metrics: LimiterMetrics,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Limiter")
            .field("algorithm", &state.algorithm_name())
            .field("limit", &state.limit())
            .field("in_flight", &self.occupancy.in_flight())
            .field("waiting", &state.waiting())
            .finish()
    }
}

impl Shared {
    /// Assembles a limiter from its validated parts.
    pub(super) fn new(
        occupancy: Occupancy,
        state: State,
        clock: LimiterClock,
        unfinished: Outcome,
        metrics: LimiterMetrics,
    ) -> Self {
        Self {
            occupancy,
            state: Mutex::new(state),
            clock,
            unfinished,
            metrics,
        }
    }

    /// Nanoseconds on the limiter's clock.
    #[inline]
    pub(super) fn now_nanos(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// What a permit dropped without an outcome reports.
    #[inline]
    pub(super) fn unfinished(&self) -> Outcome {
        self.unfinished
    }

    /// The current limit.
    pub(super) fn limit(&self) -> usize {
        self.state.lock().limit()
    }

    /// Permits held now.
    pub(super) fn in_flight(&self) -> usize {
        self.occupancy.in_flight()
    }

    /// The partition called `name`, if declared.
    pub(super) fn partition(&self, name: &str) -> Option<PartitionId> {
        self.state.lock().partition(name)
    }

    /// Counts a caller refused a permit (it sheds its call).
    #[cold]
    pub(super) fn shed(&self) {
        self.metrics.shed();
    }

    /// Takes a permit for `partition` now, or says why not.
    #[inline]
    pub(super) fn try_grant(&self, partition: PartitionId) -> Result<Grant, AcquireError> {
        // Uncontended: one compare-and-swap, no lock; the round trip starts once granted.
        match self.occupancy.take_uncontended() {
            Take::Granted { in_flight, limit } => {
                return Ok(Grant {
                    partition,
                    in_flight,
                    limit,
                    start_nanos: self.clock.now_nanos(),
                });
            }
            Take::Full { in_flight, limit } => {
                return Err(AcquireError::Full { limit, in_flight });
            }
            Take::Arbitrated => {}
        }
        let now = self.clock.now_nanos();
        let mut state = self.state.lock();
        state
            .grant(&self.occupancy, partition, now)
            .ok_or_else(|| AcquireError::Full {
                limit: state.limit(),
                in_flight: self.occupancy.in_flight(),
            })
    }

    /// Takes a permit for `partition` now, or queues a caller to be woken through `waker` and
    /// answers its queue entry.
    pub(super) fn grant_or_enqueue(
        &self,
        partition: PartitionId,
        waker: &Waker,
    ) -> Result<Grant, Arc<Waiter>> {
        let now = self.clock.now_nanos();
        let mut state = self.state.lock();
        if let Some(grant) = state.grant(&self.occupancy, partition, now) {
            return Ok(grant);
        }
        let waiter = Arc::new(Waiter::new(partition, waker.clone()));
        state.enqueue(&self.occupancy, Arc::clone(&waiter));
        Err(waiter)
    }

    /// The permit handed to a queued caller, if any; otherwise `waker` is the one to wake.
    pub(super) fn claim(&self, waiter: &Waiter, waker: &Waker) -> Option<Grant> {
        // Queue entries are only touched under the state lock.
        let _state = self.state.lock();
        waiter.claim(waker)
    }

    /// A queued caller leaves: out of the queue, or, if a permit was handed to it meanwhile,
    /// that permit is released unused (never leaked).
    pub(super) fn leave(&self, waiter: &Arc<Waiter>) {
        let now = self.clock.now_nanos();
        let mut state = self.state.lock();
        match waiter.take_grant() {
            Some(grant) => {
                let (_, changed) =
                    state.release(&self.occupancy, &grant, Outcome::Ignored, None, now);
                let limit = changed.then(|| (state.limit(), state.rtt_base()));
                drop(state);
                if let Some((limit, rtt_base)) = limit {
                    self.metrics.limit_changed(limit, rtt_base);
                }
            }
            None => state.dequeue(&self.occupancy, waiter),
        }
    }

    /// Counts a permit handed to its caller.
    #[inline]
    pub(super) fn granted(&self) {
        self.metrics.granted();
    }

    /// Returns a permit with `outcome` and feeds the algorithm.
    #[inline]
    pub(super) fn release(&self, grant: &Grant, outcome: Outcome) {
        self.release_queued(grant, outcome, None);
    }

    /// [`release`](Self::release), with the time the dependency reports the call queued, in
    /// nanoseconds, if it does.
    pub(super) fn release_queued(&self, grant: &Grant, outcome: Outcome, queued: Option<u64>) {
        let now = self.clock.now_nanos();
        let mut state = self.state.lock();
        let (rtt, changed) = state.release(&self.occupancy, grant, outcome, queued, now);
        let limit = changed.then(|| (state.limit(), state.rtt_base()));
        drop(state);
        self.metrics.released(outcome, rtt, limit);
    }

    /// Limit, in-flight, queue length, RTT percentiles and per-partition usage.
    pub(super) fn snapshot(&self) -> LimiterSnapshot {
        let now = self.clock.now_nanos();
        let mut state = self.state.lock();
        // Read under the lock: no release (decrement) can interleave.
        let in_flight = self.occupancy.in_flight();
        state.snapshot(now, in_flight)
    }
}
