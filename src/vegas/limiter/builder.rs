//! Configuring a limiter: the algorithm it follows, its clock, queue order, partitions,
//! statistics window and what unfinished permits report.

use std::time::Duration;

use super::clock::LimiterClock;
use super::limiter::Limiter;
use super::occupancy::Occupancy;
use super::partitions::Partitions;
use super::queue::{Queue, QueueOrder};
use super::shared::Shared;
use super::state::State;
use super::stats::LimiterMetrics;
use crate::clock::Clock;
use crate::vegas::algorithms::{LimitAlgorithm, Outcome, check_limit};
use crate::vegas::error::ConfigError;

impl Limiter {
    /// Starts configuring a limiter driven by `algorithm`. With no other setting, `build` gives
    /// a limiter on its own monotonic clock, FIFO, without partitions; it fails only if the
    /// algorithm's starting limit is 0 or above [`MAX_LIMIT`](crate::vegas::MAX_LIMIT) (never
    /// for the built-in algorithms, whose bounds are checked when they are built).
    pub fn builder(algorithm: impl LimitAlgorithm) -> LimiterBuilder {
        LimiterBuilder {
            algorithm: Box::new(algorithm),
            clock: LimiterClock::default(),
            order: QueueOrder::Fifo,
            name: "default".to_owned(),
            partitions: Vec::new(),
            stats_window: Duration::from_secs(10),
            unfinished: Outcome::Ignored,
        }
    }
}

/// Configures and builds a [`Limiter`].
pub struct LimiterBuilder {
    algorithm: Box<dyn LimitAlgorithm>,
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
    /// still say otherwise, with [`Permit::finish`](super::Permit::finish) or
    /// [`Permit::set_unfinished`](super::Permit::set_unfinished).
    ///
    /// ```
    /// use flowguard::vegas::{Limiter, Outcome, Vegas};
    ///
    /// let limiter = Limiter::builder(Vegas::new())
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

    /// Reads time from `clock` to measure round trips (default: a
    /// [`MonotonicClock`](crate::clock::MonotonicClock) of the limiter's own, read without
    /// dynamic dispatch; a clock given here is read through a trait object).
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = LimiterClock::custom(clock);
        self
    }

    /// Serves queued callers in `order` (default FIFO).
    pub fn order(mut self, order: QueueOrder) -> Self {
        self.order = order;
        self
    }

    /// Names the limiter in its [metrics](crate::vegas#metrics) (label `limiter`, default
    /// `"default"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Declares a partition called `name`, guaranteed `share` (in `(0, 1]`) of the limit.
    ///
    /// Each partition is guaranteed `floor(share * limit)` permits: while it holds fewer, it is
    /// served before any partition that is borrowing, both on `try_acquire` and when queued
    /// callers are granted. Capacity nobody else is waiting for may be borrowed by any
    /// partition, so an idle partition's share is not wasted. Borrowed permits are never
    /// revoked: a partition below its guarantee gets the next permits that complete. The total
    /// never exceeds the limit.
    ///
    /// Calls made without a partition use the implicit [`DEFAULT_PARTITION`], whose share is
    /// what the declared partitions leave (1 minus their sum). Find a partition's
    /// [`PartitionId`] with [`Limiter::partition`], and acquire for it with
    /// [`Limiter::try_acquire_in`] / [`Limiter::acquire_in`].
    ///
    /// ```
    /// use flowguard::vegas::{Fixed, Limiter};
    ///
    /// let limiter = Limiter::builder(Fixed::new(10)?)
    ///     .partition("live", 0.6)
    ///     .partition("batch", 0.2)
    ///     .build()?;
    /// let live = limiter.partition("live").expect("declared");
    /// let permit = limiter.try_acquire_in(live)?;
    /// assert_eq!(permit.partition(), live);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`DEFAULT_PARTITION`]: crate::vegas::DEFAULT_PARTITION
    /// [`PartitionId`]: crate::vegas::PartitionId
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
        let state = State::new(
            self.algorithm,
            limit,
            partitions,
            Queue::new(self.order),
            self.stats_window,
            &occupancy,
        );
        let shared = Shared::new(occupancy, state, self.clock, self.unfinished, metrics);
        Ok(Limiter::from_shared(shared))
    }
}
