//! How a middleware takes its permits (from which limiter and partition, and how long it waits
//! for one) and finishes them. Shared by the tower layer and the reqwest middleware, which differ
//! only in how they carry the permit through a call.

use std::time::Duration;

use super::algorithms::Outcome;
use super::classify::OutcomeClassifier;
use super::error::{AcquireError, ConfigError};
use super::limiter::{DEFAULT_ACQUIRE_TIMEOUT, Limiter, PartitionId, Permit};

/// A limiter, the partition calls count against, and the wait bound.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    limiter: Limiter,
    partition: PartitionId,
    max_wait: Duration,
}

impl Admission {
    /// Permits from `limiter`'s default partition, waiting up to
    /// [`DEFAULT_ACQUIRE_TIMEOUT`](crate::vegas::DEFAULT_ACQUIRE_TIMEOUT) for one.
    pub(crate) fn new(limiter: Limiter) -> Self {
        Self {
            limiter,
            partition: PartitionId::DEFAULT,
            max_wait: DEFAULT_ACQUIRE_TIMEOUT,
        }
    }

    /// The limiter permits come from.
    pub(crate) fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// How long a call waits for a permit before it is shed.
    pub(crate) fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// A permit now, or why not.
    #[inline]
    pub(crate) fn try_acquire(&self) -> Result<Permit<'_>, AcquireError> {
        self.limiter.try_acquire_in(self.partition)
    }

    /// A permit, waiting up to the bound for one (without a bound, one now or none).
    pub(crate) async fn acquire(&self) -> Result<Permit<'_>, AcquireError> {
        if self.max_wait.is_zero() {
            self.try_acquire()
        } else {
            self.limiter.acquire_in(self.partition, self.max_wait).await
        }
    }
}

/// Finishes `permit` with the outcome `classifier` gives `result`; a success the dependency says
/// queued (its [`queued`](OutcomeClassifier::queued)) finishes with
/// [`success_queued`](Permit::success_queued).
#[inline]
pub(crate) fn finish<R, E, C>(permit: Permit<'_>, classifier: &C, result: &Result<R, E>)
where
    C: OutcomeClassifier<R, E> + ?Sized,
{
    match classifier.classify(result) {
        Outcome::Success => match classifier.queued(result) {
            Some(queued) => permit.success_queued(queued),
            None => permit.success(),
        },
        outcome => permit.finish(outcome),
    }
}

/// The settings a middleware's builder collects: the partition is named, and resolved (or
/// refused) when it builds.
#[derive(Debug)]
pub(crate) struct AdmissionBuilder {
    limiter: Limiter,
    partition: Option<String>,
    max_wait: Duration,
}

impl AdmissionBuilder {
    /// [`Admission::new`]'s defaults for `limiter`.
    pub(crate) fn new(limiter: Limiter) -> Self {
        Self {
            limiter,
            partition: None,
            max_wait: DEFAULT_ACQUIRE_TIMEOUT,
        }
    }

    /// Waits up to `max_wait` for a permit (`Duration::ZERO`: not at all).
    pub(crate) fn max_wait(&mut self, max_wait: Duration) {
        self.max_wait = max_wait;
    }

    /// Takes permits in the partition called `name`.
    pub(crate) fn partition(&mut self, name: String) {
        self.partition = Some(name);
    }

    /// The admission, or [`ConfigError::UnknownPartition`] for a partition the limiter lacks.
    pub(crate) fn build(self) -> Result<Admission, ConfigError> {
        let partition = match self.partition {
            None => PartitionId::DEFAULT,
            Some(name) => self
                .limiter
                .partition(&name)
                .ok_or(ConfigError::UnknownPartition { name })?,
        };
        Ok(Admission {
            limiter: self.limiter,
            partition,
            max_wait: self.max_wait,
        })
    }
}
