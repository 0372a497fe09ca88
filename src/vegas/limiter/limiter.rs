//! The limiter: hands out permits up to the algorithm's current limit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::acquire::{WaitForPermit, Waiter};
use super::clock::LimiterClock;
use super::occupancy::{Occupancy, Take};
use super::partitions::{PartitionId, Partitions};
use super::permit::{OwnedPermit, Permit};
use super::stats::{LimiterMetrics, LimiterSnapshot, RttWindow};
use crate::clock::{Clock, MonotonicClock};
use crate::vegas::algorithms::{LimitAlgorithm, Outcome, Sample, Vegas, check_limit};
use crate::vegas::error::{AcquireError, ConfigError};

/// Which queued caller gets the next free permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueOrder {
    /// First come, first served (default).
    #[default]
    Fifo,
    /// Newest caller first: under sustained overload the callers served are the ones least likely
    /// to have given up already.
    Lifo,
}

/// The limiter's algorithm: a [`Vegas`] is called directly (its per-sample path inlined into
/// the release, the RTT passed in nanoseconds), any other algorithm through a trait object.
enum Algorithm {
    Vegas(Box<Vegas>),
    Dyn(Box<dyn LimitAlgorithm>),
}

impl Algorithm {
    /// Wraps `algorithm`, recognising [`Vegas`].
    fn of<A: LimitAlgorithm>(algorithm: A) -> Self {
        let any: &dyn std::any::Any = &algorithm;
        match any.downcast_ref::<Vegas>() {
            // Cloned once, at construction; the original is dropped.
            Some(vegas) => Self::Vegas(Box::new(vegas.clone())),
            None => Self::Dyn(Box::new(algorithm)),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Vegas(vegas) => vegas.name(),
            Self::Dyn(algorithm) => algorithm.name(),
        }
    }

    fn limit(&self) -> usize {
        match self {
            Self::Vegas(vegas) => vegas.limit(),
            Self::Dyn(algorithm) => algorithm.limit(),
        }
    }

    /// Feeds one completed call; answers the new limit.
    #[inline]
    fn update(&mut self, rtt_nanos: u64, in_flight: usize, outcome: Outcome) -> usize {
        match self {
            Self::Vegas(vegas) => vegas.update_nanos(rtt_nanos, in_flight, outcome),
            Self::Dyn(algorithm) => algorithm.update(&Sample {
                rtt: Duration::from_nanos(rtt_nanos),
                in_flight,
                outcome,
            }),
        }
    }
}

/// Configures and builds a [`Limiter`].
pub struct LimiterBuilder {
    algorithm: Algorithm,
    clock: LimiterClock,
    order: QueueOrder,
    name: String,
    partitions: Vec<(String, f64)>,
    stats_window: Duration,
    unfinished: Outcome,
}

impl std::fmt::Debug for LimiterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("algorithm", &self.algorithm.name())
            .field("order", &self.order)
            .field("name", &self.name)
            .field("partitions", &self.partitions)
            .field("stats_window", &self.stats_window)
            .field("unfinished", &self.unfinished)
            .finish()
    }
}

impl LimiterBuilder {
    /// What a permit dropped without an outcome reports (default [`Outcome::Ignored`]).
    ///
    /// The default suits code that finishes every permit and drops one only when its call was
    /// abandoned (an early return, a cancelled future): such a call says nothing about the
    /// dependency, so its permit is released without a sample. Code that relies on dropping
    /// permits when calls complete should choose [`Outcome::Success`]: with the default, its
    /// permits feed no sample and the limit never moves from its initial value. A permit can
    /// still say otherwise, with [`Permit::finish`] or [`Permit::set_unfinished`].
    ///
    /// ```
    /// use flowguard::vegas::{Limiter, Outcome, Vegas, VegasConfig};
    ///
    /// let limiter = Limiter::builder(Vegas::new(VegasConfig::default())?)
    ///     .unfinished(Outcome::Success)
    ///     .build()?;
    /// {
    ///     let _permit = limiter.try_acquire()?;
    ///     // ... call the dependency; the permit reports success when it goes out of scope ...
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unfinished(mut self, outcome: Outcome) -> Self {
        self.unfinished = outcome;
        self
    }

    /// Reads time from `clock` to measure round trips (default: [`MonotonicClock`]).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = LimiterClock::of(clock);
        self
    }

    /// Serves queued callers in `order` (default FIFO).
    pub fn order(mut self, order: QueueOrder) -> Self {
        self.order = order;
        self
    }

    /// Names the limiter in its metrics (label `limiter`, default `"default"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Declares a partition guaranteed `share` (in `(0, 1]`) of the limit; see
    /// [`partition`](crate::vegas::partition).
    pub fn partition(mut self, name: impl Into<String>, share: f64) -> Self {
        self.partitions.push((name.into(), share));
        self
    }

    /// Length of the RTT statistics window; snapshots cover the last one to two windows
    /// (default 10 s).
    pub fn stats_window(mut self, window: Duration) -> Self {
        self.stats_window = window;
        self
    }

    /// Builds the limiter, or says which setting cannot work.
    pub fn build(self) -> Result<Limiter, ConfigError> {
        if self.stats_window.is_zero() {
            return Err(ConfigError::ZeroDuration {
                field: "stats_window",
            });
        }
        let partitions = Partitions::new(&self.partitions)?;
        let limit = self.algorithm.limit();
        check_limit("algorithm limit", limit)?;
        let metrics = LimiterMetrics::register(&self.name);
        metrics.start(limit);
        let occupancy = Occupancy::new(limit);
        let mut state = State {
            algorithm: self.algorithm,
            limit,
            partitions,
            waiters: VecDeque::new(),
            arbitrated: false,
            rtts: RttWindow::new(self.stats_window),
        };
        state.sync_arbitration(&occupancy);
        Ok(Limiter {
            shared: Arc::new(Shared {
                occupancy,
                state: Mutex::new(state),
                clock: self.clock,
                order: self.order,
                unfinished: self.unfinished,
                metrics,
            }),
        })
    }
}

/// What a queued caller or a `try_acquire` was granted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(crate) partition: PartitionId,
    pub(crate) in_flight: usize,
    pub(crate) limit: usize,
    pub(crate) start_nanos: u64,
}

/// Limiter state behind the lock. The permit count lives in [`Occupancy`] beside it: it is
/// incremented without the lock by uncontended grants, and only ever decremented under it.
pub(crate) struct State {
    algorithm: Algorithm,
    limit: usize,
    partitions: Partitions,
    waiters: VecDeque<Arc<Waiter>>,
    /// Whether the occupancy word's arbitration flag is set (partitions declared or waiters).
    arbitrated: bool,
    rtts: RttWindow,
}

impl State {
    /// Whether `partition` may take a permit now, with `in_flight` held: room under the limit,
    /// and no queued caller with a better claim (anyone queued, unless `partition` is below its
    /// guarantee and no queued caller is).
    fn may_grant(&self, partition: PartitionId, in_flight: usize) -> bool {
        if in_flight >= self.limit {
            return false;
        }
        if self.waiters.is_empty() {
            return true;
        }
        // Without declared partitions every caller has the same claim, and the queue was first.
        self.partitions.declared()
            && self.partitions.below_guarantee(partition, self.limit)
            && !self
                .waiters
                .iter()
                .any(|w| self.partitions.below_guarantee(w.partition(), self.limit))
    }

    /// Takes a permit for `partition` if it may have one (see [`may_grant`](Self::may_grant)).
    fn grant(
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

    /// Queues a caller: first in line (LIFO) or last (FIFO).
    pub(crate) fn enqueue(
        &mut self,
        occupancy: &Occupancy,
        waiter: Arc<Waiter>,
        order: QueueOrder,
    ) {
        match order {
            QueueOrder::Fifo => self.waiters.push_back(waiter),
            QueueOrder::Lifo => self.waiters.push_front(waiter),
        }
        self.sync_arbitration(occupancy);
    }

    /// Removes a caller that left the queue.
    pub(crate) fn dequeue(&mut self, occupancy: &Occupancy, waiter: &Arc<Waiter>) {
        self.waiters.retain(|queued| !Arc::ptr_eq(queued, waiter));
        self.sync_arbitration(occupancy);
    }

    /// Sets the occupancy's arbitration flag iff partitions are declared or callers wait.
    fn sync_arbitration(&mut self, occupancy: &Occupancy) {
        let arbitrated = self.partitions.declared() || !self.waiters.is_empty();
        if arbitrated != self.arbitrated {
            self.arbitrated = arbitrated;
            occupancy.set_arbitrated(arbitrated);
        }
    }

    /// Grants queued callers while there is room: first those below their guarantee, in queue
    /// order, then the rest in queue order.
    #[inline(never)]
    fn grant_waiters(&mut self, occupancy: &Occupancy, now_nanos: u64) {
        while !self.waiters.is_empty() && occupancy.in_flight() < self.limit {
            let below = if self.partitions.declared() {
                self.waiters
                    .iter()
                    .position(|w| self.partitions.below_guarantee(w.partition(), self.limit))
            } else {
                None
            };
            let index = below.unwrap_or(0);
            let Some(partition) = self.waiters.get(index).map(|w| w.partition()) else {
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
            if let Some(waiter) = self.waiters.remove(index) {
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

    /// Returns a permit and feeds its sample to the algorithm; answers the RTT in nanoseconds and
    /// whether the limit changed.
    #[inline]
    fn release(
        &mut self,
        occupancy: &Occupancy,
        grant: &Grant,
        outcome: Outcome,
        now_nanos: u64,
    ) -> (u64, bool) {
        let rtt_nanos = now_nanos.saturating_sub(grant.start_nanos);
        occupancy.give_back();
        if self.partitions.declared() {
            self.partitions.give_back(grant.partition);
        }
        let limit = self
            .algorithm
            .update(rtt_nanos, grant.in_flight, outcome)
            .max(1);
        let changed = limit != self.limit;
        if changed {
            self.limit = limit;
            occupancy.set_limit(limit);
        }
        if outcome == Outcome::Success {
            self.rtts.record(now_nanos, rtt_nanos);
        }
        if !self.waiters.is_empty() {
            self.grant_waiters(occupancy, now_nanos);
        }
        (rtt_nanos, changed)
    }
}

pub(crate) struct Shared {
    occupancy: Occupancy,
    pub(crate) state: Mutex<State>,
    clock: LimiterClock,
    pub(crate) order: QueueOrder,
    /// What a permit dropped without an outcome reports.
    unfinished: Outcome,
    metrics: LimiterMetrics,
}

/// An adaptive concurrency limiter: at most `limit` permits are held at once, and the limit
/// follows a [`LimitAlgorithm`] fed by every completed permit.
///
/// Cheap to clone (all clones share one limiter), `Send + Sync`. A permit is granted only while
/// fewer than `limit` are held, so in-flight never exceeds the limit; when the limit shrinks
/// below the permits already held, no new permit is granted until enough complete. When the
/// limit grows, queued callers are woken at once.
///
/// Cost: while nobody is queued and no partitions are declared, a grant is one compare-and-swap
/// on a word holding both the count and the limit (no lock); every release takes a short lock to
/// feed its sample to the algorithm and the RTT statistics, and to serve queued callers.
///
/// ```
/// use flowguard::vegas::{Limiter, Vegas, VegasConfig};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::new(Vegas::new(VegasConfig::default())?)?;
/// let permit = limiter.acquire(std::time::Duration::from_millis(50)).await?;
/// // ... call the dependency ...
/// permit.success();
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Limiter {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("Limiter")
            .field("algorithm", &state.algorithm.name())
            .field("limit", &state.limit)
            .field("in_flight", &self.shared.occupancy.in_flight())
            .field("waiting", &state.waiters.len())
            .finish()
    }
}

impl Limiter {
    /// A limiter with default settings (real clock, FIFO, no partitions).
    pub fn new(algorithm: impl LimitAlgorithm) -> Result<Self, ConfigError> {
        Self::builder(algorithm).build()
    }

    /// Starts configuring a limiter driven by `algorithm`.
    pub fn builder(algorithm: impl LimitAlgorithm) -> LimiterBuilder {
        LimiterBuilder {
            algorithm: Algorithm::of(algorithm),
            clock: LimiterClock::System(MonotonicClock::new()),
            order: QueueOrder::Fifo,
            name: "default".to_owned(),
            partitions: Vec::new(),
            stats_window: Duration::from_secs(10),
            unfinished: Outcome::Ignored,
        }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.shared.state.lock().limit
    }

    /// Permits held now.
    pub fn in_flight(&self) -> usize {
        self.shared.occupancy.in_flight()
    }

    /// The partition called `name`, if declared (`"default"` always exists).
    pub fn partition(&self, name: &str) -> Option<PartitionId> {
        self.shared.state.lock().partitions.find(name)
    }

    /// Takes a permit now, or fails at once with [`AcquireError::Full`]. The permit borrows this
    /// handle; see [`try_acquire_owned`](Self::try_acquire_owned) for one that does not.
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'_>, AcquireError> {
        self.try_acquire_in(PartitionId::DEFAULT)
    }

    /// [`try_acquire`](Self::try_acquire), answering a permit that holds its own handle on the
    /// limiter (`'static`: it can be moved into a spawned task).
    pub fn try_acquire_owned(&self) -> Result<OwnedPermit, AcquireError> {
        self.try_acquire().map(Permit::into_owned)
    }

    /// [`try_acquire`](Self::try_acquire) on behalf of `partition`.
    #[inline]
    pub fn try_acquire_in(&self, partition: PartitionId) -> Result<Permit<'_>, AcquireError> {
        let shared = &*self.shared;
        // Uncontended: one compare-and-swap, no lock; the round trip starts once granted.
        match shared.occupancy.take_uncontended() {
            Take::Granted { in_flight, limit } => {
                return Ok(self.permit(Grant {
                    partition,
                    in_flight,
                    limit,
                    start_nanos: shared.clock.now_nanos(),
                }));
            }
            Take::Full { in_flight, limit } => {
                return Err(AcquireError::Full { limit, in_flight });
            }
            Take::Arbitrated => {}
        }
        let now = shared.clock.now_nanos();
        let mut state = shared.state.lock();
        match state.grant(&shared.occupancy, partition, now) {
            Some(grant) => {
                drop(state);
                Ok(self.permit(grant))
            }
            None => Err(AcquireError::Full {
                limit: state.limit,
                in_flight: shared.occupancy.in_flight(),
            }),
        }
    }

    /// Waits up to `timeout` for a permit (queued in the configured [`QueueOrder`]). Dropping the
    /// future leaves the queue; a permit granted to a dropped future is released, never leaked.
    /// The permit borrows this handle; see [`acquire_owned`](Self::acquire_owned) for one that
    /// does not.
    pub async fn acquire(&self, timeout: Duration) -> Result<Permit<'_>, AcquireError> {
        // The fast path inline here rather than through `acquire_in`'s future: one future less
        // on the uncontended round trip.
        if let Ok(permit) = self.try_acquire_in(PartitionId::DEFAULT) {
            return Ok(permit);
        }
        self.wait(PartitionId::DEFAULT, timeout).await
    }

    /// [`acquire`](Self::acquire), answering a permit that holds its own handle on the limiter
    /// (`'static`: it can be moved into a spawned task).
    pub async fn acquire_owned(&self, timeout: Duration) -> Result<OwnedPermit, AcquireError> {
        self.acquire(timeout).await.map(Permit::into_owned)
    }

    /// [`acquire`](Self::acquire) on behalf of `partition`.
    pub async fn acquire_in(
        &self,
        partition: PartitionId,
        timeout: Duration,
    ) -> Result<Permit<'_>, AcquireError> {
        // Uncontended fast path: no timer needed.
        if let Ok(permit) = self.try_acquire_in(partition) {
            return Ok(permit);
        }
        self.wait(partition, timeout).await
    }

    /// Queues for a permit for `partition`, up to `timeout`.
    async fn wait(
        &self,
        partition: PartitionId,
        timeout: Duration,
    ) -> Result<Permit<'_>, AcquireError> {
        match tokio::time::timeout(timeout, WaitForPermit::new(self, partition)).await {
            Ok(permit) => Ok(permit),
            Err(_) => Err(AcquireError::Timeout { waited: timeout }),
        }
    }

    /// Limit, in-flight, queue length, RTT percentiles and per-partition usage.
    pub fn snapshot(&self) -> LimiterSnapshot {
        let now = self.shared.clock.now_nanos();
        let mut state = self.shared.state.lock();
        let (samples, rtt_p50, rtt_p99) = state.rtts.summary(now);
        // Read under the lock: no release (decrement) can interleave.
        let in_flight = self.shared.occupancy.in_flight();
        LimiterSnapshot {
            limit: state.limit,
            in_flight,
            waiting: state.waiters.len(),
            samples,
            rtt_p50,
            rtt_p99,
            partitions: state.partitions.summary(in_flight),
        }
    }

    /// Nanoseconds on the limiter's clock.
    pub(crate) fn now_nanos(&self) -> u64 {
        self.shared.clock.now_nanos()
    }

    /// The occupancy word (permits held and the limit).
    pub(crate) fn occupancy(&self) -> &Occupancy {
        &self.shared.occupancy
    }

    /// Tries to grant `partition` at once, under the lock held by the caller.
    pub(crate) fn grant_now(
        &self,
        state: &mut State,
        partition: PartitionId,
        now_nanos: u64,
    ) -> Option<Grant> {
        state.grant(&self.shared.occupancy, partition, now_nanos)
    }

    /// Hands `grant` to its caller as a permit.
    #[inline]
    pub(crate) fn permit(&self, grant: Grant) -> Permit<'_> {
        self.shared.metrics.granted();
        Permit::borrowed(self, grant, self.shared.unfinished)
    }

    /// Returns a permit with `outcome` and feeds the algorithm.
    pub(crate) fn release(&self, grant: &Grant, outcome: Outcome) {
        let shared = &*self.shared;
        let now = shared.clock.now_nanos();
        let mut state = shared.state.lock();
        let (rtt, changed) = state.release(&shared.occupancy, grant, outcome, now);
        let limit = changed.then_some(state.limit);
        drop(state);
        shared.metrics.released(outcome, rtt, limit);
    }

    /// Returns, under the caller's lock (consumed), a permit that was granted to a caller that
    /// left before taking it.
    pub(crate) fn release_unclaimed(
        &self,
        mut state: parking_lot::MutexGuard<'_, State>,
        grant: &Grant,
        now_nanos: u64,
    ) {
        let (_, changed) =
            state.release(&self.shared.occupancy, grant, Outcome::Ignored, now_nanos);
        let limit = state.limit;
        drop(state);
        if changed {
            self.shared.metrics.limit_changed(limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Flips the limit between 1 and 4 on every sample, so lock-free grants race limit cuts.
    struct Flapping(usize);

    impl LimitAlgorithm for Flapping {
        fn name(&self) -> &'static str {
            "flapping"
        }

        fn limit(&self) -> usize {
            self.0
        }

        fn update(&mut self, _: &Sample) -> usize {
            self.0 = if self.0 == 1 { 4 } else { 1 };
            self.0
        }
    }

    #[test]
    fn lock_free_grants_race_cuts_and_queued_callers_without_exceeding_the_limit() {
        let limiter = Limiter::new(Flapping(4)).unwrap();
        let held = Arc::new(AtomicUsize::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_time()
            .build()
            .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let (limiter, held) = (limiter.clone(), Arc::clone(&held));
                runtime.spawn(async move {
                    for round in 0..2_000 {
                        let permit = if (task + round) % 2 == 0 {
                            match limiter.try_acquire() {
                                Ok(permit) => permit,
                                Err(_) => continue,
                            }
                        } else {
                            // A lost wake-up would leave this caller queued with capacity free.
                            limiter
                                .acquire(Duration::from_secs(600))
                                .await
                                .expect("a queued caller is served once capacity frees up")
                        };
                        assert!(permit.in_flight_at_grant() <= permit.limit_at_grant());
                        assert!(held.fetch_add(1, Ordering::SeqCst) < 4, "beyond the max");
                        if round % 3 == 0 {
                            tokio::task::yield_now().await;
                        }
                        held.fetch_sub(1, Ordering::SeqCst);
                        permit.success();
                    }
                })
            })
            .collect();
        runtime.block_on(async {
            for task in tasks {
                task.await.unwrap();
            }
        });
        let snapshot = limiter.snapshot();
        assert_eq!((snapshot.in_flight, snapshot.waiting), (0, 0));
    }
}
