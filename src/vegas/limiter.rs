//! The limiter: hands out permits up to the algorithm's current limit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::acquire::{WaitForPermit, Waiter};
use super::algorithm::{LimitAlgorithm, Outcome, Sample};
use super::clock::{Clock, SystemClock};
use super::error::{AcquireError, ConfigError};
use super::partition::{PartitionId, Partitions};
use super::permit::Permit;
use super::stats::{LimiterMetrics, LimiterSnapshot, RttWindow};

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

/// Configures and builds a [`Limiter`].
pub struct LimiterBuilder {
    algorithm: Box<dyn LimitAlgorithm>,
    clock: Arc<dyn Clock>,
    order: QueueOrder,
    name: String,
    partitions: Vec<(String, f64)>,
    stats_window: Duration,
}

impl std::fmt::Debug for LimiterBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("algorithm", &self.algorithm.name())
            .field("order", &self.order)
            .field("name", &self.name)
            .field("partitions", &self.partitions)
            .field("stats_window", &self.stats_window)
            .finish()
    }
}

impl LimiterBuilder {
    /// Reads time from `clock` to measure round trips (default: [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
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
    /// [`partition`](super::partition).
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
        if limit == 0 {
            return Err(ConfigError::ZeroLimit {
                field: "algorithm limit",
            });
        }
        let metrics = LimiterMetrics::register(&self.name);
        metrics.publish(limit, 0);
        Ok(Limiter {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    algorithm: self.algorithm,
                    limit,
                    in_flight: 0,
                    partitions,
                    waiters: VecDeque::new(),
                    rtts: RttWindow::new(self.stats_window),
                }),
                clock: self.clock,
                order: self.order,
                metrics,
            }),
        })
    }
}

/// What a queued caller or a `try_acquire` was granted, under the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(crate) partition: PartitionId,
    pub(crate) in_flight: usize,
    pub(crate) limit: usize,
    pub(crate) start_nanos: u64,
}

pub(crate) struct State {
    algorithm: Box<dyn LimitAlgorithm>,
    limit: usize,
    in_flight: usize,
    partitions: Partitions,
    pub(crate) waiters: VecDeque<Arc<Waiter>>,
    rtts: RttWindow,
}

impl State {
    /// Whether `partition` may take a permit now: room under the limit, and no queued caller with
    /// a better claim (anyone queued, unless `partition` is below its guarantee and no queued
    /// caller is).
    fn may_grant(&self, partition: PartitionId) -> bool {
        if self.in_flight >= self.limit {
            return false;
        }
        if self.waiters.is_empty() {
            return true;
        }
        self.partitions.below_guarantee(partition, self.limit)
            && !self
                .waiters
                .iter()
                .any(|w| self.partitions.below_guarantee(w.partition(), self.limit))
    }

    /// Takes a permit; callers have checked `in_flight < limit`.
    fn grant(&mut self, partition: PartitionId, now_nanos: u64) -> Grant {
        debug_assert!(self.in_flight < self.limit, "grant beyond the limit");
        self.in_flight += 1;
        self.partitions.take(partition);
        Grant {
            partition,
            in_flight: self.in_flight,
            limit: self.limit,
            start_nanos: now_nanos,
        }
    }

    /// Grants queued callers while there is room: first those below their guarantee, in queue
    /// order, then the rest in queue order.
    fn grant_waiters(&mut self, now_nanos: u64) {
        while self.in_flight < self.limit {
            let below = self
                .waiters
                .iter()
                .position(|w| self.partitions.below_guarantee(w.partition(), self.limit));
            let next = below.or_else(|| (!self.waiters.is_empty()).then_some(0));
            let Some(waiter) = next.and_then(|index| self.waiters.remove(index)) else {
                return;
            };
            let grant = self.grant(waiter.partition(), now_nanos);
            waiter.fulfil(grant);
        }
    }

    /// Returns a permit and feeds its sample to the algorithm.
    fn release(&mut self, grant: &Grant, outcome: Outcome, now_nanos: u64) -> Duration {
        let rtt = Duration::from_nanos(now_nanos.saturating_sub(grant.start_nanos));
        self.in_flight = self.in_flight.saturating_sub(1);
        self.partitions.give_back(grant.partition);
        self.limit = self
            .algorithm
            .update(&Sample {
                rtt,
                in_flight: grant.in_flight,
                outcome,
            })
            .max(1);
        if outcome == Outcome::Success {
            self.rtts.record(now_nanos, rtt);
        }
        self.grant_waiters(now_nanos);
        rtt
    }
}

pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    clock: Arc<dyn Clock>,
    pub(crate) order: QueueOrder,
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
            .field("in_flight", &state.in_flight)
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
            algorithm: Box::new(algorithm),
            clock: Arc::new(SystemClock::new()),
            order: QueueOrder::Fifo,
            name: "default".to_owned(),
            partitions: Vec::new(),
            stats_window: Duration::from_secs(10),
        }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.shared.state.lock().limit
    }

    /// Permits held now.
    pub fn in_flight(&self) -> usize {
        self.shared.state.lock().in_flight
    }

    /// The partition called `name`, if declared (`"default"` always exists).
    pub fn partition(&self, name: &str) -> Option<PartitionId> {
        self.shared.state.lock().partitions.find(name)
    }

    /// Takes a permit now, or fails at once with [`AcquireError::Full`].
    pub fn try_acquire(&self) -> Result<Permit, AcquireError> {
        self.try_acquire_in(PartitionId::DEFAULT)
    }

    /// [`try_acquire`](Self::try_acquire) on behalf of `partition`.
    pub fn try_acquire_in(&self, partition: PartitionId) -> Result<Permit, AcquireError> {
        let now = self.shared.clock.now_nanos();
        let mut state = self.shared.state.lock();
        if !state.may_grant(partition) {
            return Err(AcquireError::Full {
                limit: state.limit,
                in_flight: state.in_flight,
            });
        }
        let grant = state.grant(partition, now);
        let limit = state.limit;
        drop(state);
        self.shared.metrics.publish(limit, grant.in_flight);
        Ok(Permit::new(self.clone(), grant))
    }

    /// Waits up to `timeout` for a permit (queued in the configured [`QueueOrder`]). Dropping the
    /// future leaves the queue; a permit granted to a dropped future is released, never leaked.
    pub async fn acquire(&self, timeout: Duration) -> Result<Permit, AcquireError> {
        self.acquire_in(PartitionId::DEFAULT, timeout).await
    }

    /// [`acquire`](Self::acquire) on behalf of `partition`.
    pub async fn acquire_in(
        &self,
        partition: PartitionId,
        timeout: Duration,
    ) -> Result<Permit, AcquireError> {
        // Uncontended fast path: no timer needed.
        if let Ok(permit) = self.try_acquire_in(partition) {
            return Ok(permit);
        }
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
        LimiterSnapshot {
            limit: state.limit,
            in_flight: state.in_flight,
            waiting: state.waiters.len(),
            samples,
            rtt_p50,
            rtt_p99,
            partitions: state.partitions.summary(),
        }
    }

    /// Nanoseconds on the limiter's clock.
    pub(crate) fn now_nanos(&self) -> u64 {
        self.shared.clock.now_nanos()
    }

    /// Tries to grant `partition` at once, under the lock held by the caller.
    pub(crate) fn grant_now(
        state: &mut State,
        partition: PartitionId,
        now_nanos: u64,
    ) -> Option<Grant> {
        state
            .may_grant(partition)
            .then(|| state.grant(partition, now_nanos))
    }

    /// Returns a permit with `outcome` and feeds the algorithm.
    pub(crate) fn release(&self, grant: &Grant, outcome: Outcome) {
        let now = self.shared.clock.now_nanos();
        let mut state = self.shared.state.lock();
        let rtt = state.release(grant, outcome, now);
        let (limit, in_flight) = (state.limit, state.in_flight);
        drop(state);
        self.shared.metrics.publish(limit, in_flight);
        self.shared.metrics.completed(outcome, rtt);
    }

    /// Returns, under the caller's lock, a permit that was granted to a caller that left.
    pub(crate) fn release_unclaimed(state: &mut State, grant: &Grant, now_nanos: u64) {
        state.release(grant, Outcome::Ignored, now_nanos);
    }
}
