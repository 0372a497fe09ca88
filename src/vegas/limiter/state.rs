//! What the limiter keeps behind its lock: the algorithm and its current limit, partitions,
//! queued callers and RTT statistics.

use std::sync::Arc;
use std::time::Duration;

use super::grant::Grant;
use super::occupancy::{Occupancy, Take};
use super::partitions::{PartitionId, Partitions};
use super::queue::{Queue, Waiter};
use super::stats::{LimiterSnapshot, RttWindow};
use crate::vegas::algorithms::{LimitAlgorithm, Outcome};

/// Limiter state behind the lock. The permit count lives in [`Occupancy`] beside it: it is
/// incremented without the lock by uncontended grants, and only ever decremented under it.
pub(super) struct State {
    algorithm: Box<dyn LimitAlgorithm>,
    limit: usize,
    partitions: Partitions,
    queue: Queue,
    /// Whether the occupancy word's arbitration flag is set (partitions declared or waiters).
    arbitrated: bool,
    rtts: RttWindow,
}

impl State {
    /// State starting at `limit` (the algorithm's, validated), with the occupancy's arbitration
    /// flag set to match.
    pub(super) fn new(
        algorithm: Box<dyn LimitAlgorithm>,
        limit: usize,
        partitions: Partitions,
        queue: Queue,
        stats_window: Duration,
        occupancy: &Occupancy,
    ) -> Self {
        let mut state = Self {
            algorithm,
            limit,
            partitions,
            queue,
            arbitrated: false,
            rtts: RttWindow::new(stats_window),
        };
        state.sync_arbitration(occupancy);
        state
    }

    /// The algorithm's name.
    pub(super) fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }

    /// The current limit.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// The algorithm's unloaded-RTT estimate ([`LimitAlgorithm::rtt_base`]).
    pub(super) fn rtt_base(&self) -> Option<Duration> {
        self.algorithm.rtt_base()
    }

    /// Callers queued.
    pub(super) fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// The partition called `name`, if declared.
    pub(super) fn partition(&self, name: &str) -> Option<PartitionId> {
        self.partitions.find(name)
    }

    /// Whether `partition` may take a permit now, with `in_flight` held: room under the limit,
    /// and no queued caller with a better claim (anyone queued, unless `partition` is below its
    /// guarantee and no queued caller is).
    fn may_grant(&self, partition: PartitionId, in_flight: usize) -> bool {
        if in_flight >= self.limit {
            return false;
        }
        if self.queue.is_empty() {
            return true;
        }
        // Without declared partitions every caller has the same claim, and the queue was first.
        self.partitions.declared()
            && self.partitions.below_guarantee(partition, self.limit)
            && !self
                .queue
                .any(|queued| self.partitions.below_guarantee(queued, self.limit))
    }

    /// Takes a permit for `partition` if it may have one (see [`may_grant`](Self::may_grant)).
    pub(super) fn grant(
        &mut self,
        occupancy: &Occupancy,
        partition: PartitionId,
        now_nanos: u64,
    ) -> Option<Grant> {
        if !self.may_grant(partition, occupancy.in_flight()) {
            return None;
        }
        let Take::Granted { in_flight, limit } = occupancy.take_arbitrated() else {
            // A lock-free grant took the last free permit meanwhile.
            return None;
        };
        if self.partitions.declared() {
            self.partitions.take(partition);
        }
        Some(Grant {
            partition,
            in_flight,
            limit,
            start_nanos: now_nanos,
        })
    }

    /// Queues a caller.
    pub(super) fn enqueue(&mut self, occupancy: &Occupancy, waiter: Arc<Waiter>) {
        self.queue.push(waiter);
        self.sync_arbitration(occupancy);
    }

    /// Removes a caller that left the queue.
    pub(super) fn dequeue(&mut self, occupancy: &Occupancy, waiter: &Arc<Waiter>) {
        self.queue.remove(waiter);
        self.sync_arbitration(occupancy);
    }

    /// Sets the occupancy's arbitration flag iff partitions are declared or callers wait.
    fn sync_arbitration(&mut self, occupancy: &Occupancy) {
        let arbitrated = self.partitions.declared() || !self.queue.is_empty();
        if arbitrated != self.arbitrated {
            self.arbitrated = arbitrated;
            occupancy.set_arbitrated(arbitrated);
        }
    }

    /// Grants queued callers while there is room: first those below their guarantee, in queue
    /// order, then the rest in queue order.
    #[inline(never)]
    fn grant_waiters(&mut self, occupancy: &Occupancy, now_nanos: u64) {
        while !self.queue.is_empty() && occupancy.in_flight() < self.limit {
            let below = if self.partitions.declared() {
                self.queue
                    .position(|queued| self.partitions.below_guarantee(queued, self.limit))
            } else {
                None
            };
            let index = below.unwrap_or(0);
            let Some(partition) = self.queue.partition_at(index) else {
                break;
            };
            // The queue is non-empty, so the arbitration flag is set: no lock-free grant
            // competes for the free permit.
            let Take::Granted { in_flight, limit } = occupancy.take_arbitrated() else {
                break;
            };
            if self.partitions.declared() {
                self.partitions.take(partition);
            }
            if let Some(waiter) = self.queue.take(index) {
                waiter.fulfil(Grant {
                    partition,
                    in_flight,
                    limit,
                    start_nanos: now_nanos,
                });
            }
        }
        self.sync_arbitration(occupancy);
    }

    /// Returns a permit and feeds its sample to the algorithm, with the time the dependency
    /// reports the call queued (nanoseconds), if it does; answers the RTT in nanoseconds and
    /// whether the limit changed.
    #[inline]
    pub(super) fn release(
        &mut self,
        occupancy: &Occupancy,
        grant: &Grant,
        outcome: Outcome,
        queued: Option<u64>,
        now_nanos: u64,
    ) -> (u64, bool) {
        let rtt_nanos = now_nanos.saturating_sub(grant.start_nanos);
        occupancy.give_back();
        if self.partitions.declared() {
            self.partitions.give_back(grant.partition);
        }
        let limit = match queued {
            Some(queued) if outcome == Outcome::Success => {
                self.algorithm
                    .update_queued(rtt_nanos, grant.in_flight, queued)
            }
            _ => self
                .algorithm
                .update_nanos(rtt_nanos, grant.in_flight, outcome),
        }
        .max(1);
        let changed = limit != self.limit;
        if changed {
            self.limit = limit;
            occupancy.set_limit(limit);
        }
        if outcome == Outcome::Success {
            self.rtts.record(now_nanos, rtt_nanos);
        }
        if !self.queue.is_empty() {
            self.grant_waiters(occupancy, now_nanos);
        }
        (rtt_nanos, changed)
    }

    /// Limit, queue length, RTT percentiles and per-partition usage as of `now_nanos`, with
    /// `in_flight` permits held (read under the lock, so exact).
    pub(super) fn snapshot(&mut self, now_nanos: u64, in_flight: usize) -> LimiterSnapshot {
        let (samples, rtt_p50, rtt_p99) = self.rtts.summary(now_nanos);
        LimiterSnapshot {
            limit: self.limit,
            in_flight,
            waiting: self.queue.len(),
            samples,
            rtt_p50,
            rtt_p99,
            rtt_base: self.rtt_base(),
            partitions: self.partitions.summary(in_flight),
        }
    }
}
