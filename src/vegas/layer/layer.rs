//! [`AdaptiveConcurrencyLayer`]: the limiter, partition, wait bound and classifier; wraps services
//! in [`AdaptiveConcurrencyService`].

use std::time::Duration;

use tower::Layer;

use super::service::AdaptiveConcurrencyService;
use crate::vegas::admission::{Admission, AdmissionBuilder};
use crate::vegas::classify::HttpClassifier;
use crate::vegas::error::ConfigError;
use crate::vegas::limiter::Limiter;

/// Runs every call of the wrapped service under a permit of a [`Limiter`]. See the
/// [module docs](super) for where it goes in a stack and an example.
///
/// Cheap to clone; every service it wraps shares the one limiter.
#[derive(Debug, Clone)]
pub struct AdaptiveConcurrencyLayer<C = HttpClassifier> {
    admission: Admission,
    classifier: C,
}

impl AdaptiveConcurrencyLayer {
    /// The [builder](Self::builder) with defaults: permits from `limiter`'s default partition,
    /// waiting up to [`DEFAULT_ACQUIRE_TIMEOUT`](crate::vegas::DEFAULT_ACQUIRE_TIMEOUT) (50 ms) for
    /// one, outcomes from [`HttpClassifier`].
    pub fn new(limiter: Limiter) -> Self {
        Self {
            admission: Admission::new(limiter),
            classifier: HttpClassifier::new(),
        }
    }

    /// Starts configuring a layer whose calls hold permits of `limiter` (a clone of the handle:
    /// keep one to read [`Limiter::snapshot`]).
    pub fn builder(limiter: Limiter) -> AdaptiveConcurrencyLayerBuilder {
        AdaptiveConcurrencyLayerBuilder {
            admission: AdmissionBuilder::new(limiter),
            classifier: HttpClassifier::new(),
        }
    }
}

impl<C> AdaptiveConcurrencyLayer<C> {
    /// The limiter calls take their permits from.
    pub fn limiter(&self) -> &Limiter {
        self.admission.limiter()
    }

    /// How long a call waits for a permit before it is shed (`Duration::ZERO`: not at all).
    pub fn max_wait(&self) -> Duration {
        self.admission.max_wait()
    }
}

impl<S, C: Clone> Layer<S> for AdaptiveConcurrencyLayer<C> {
    type Service = AdaptiveConcurrencyService<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        AdaptiveConcurrencyService::new(inner, self.admission.clone(), self.classifier.clone())
    }
}

/// Configures an [`AdaptiveConcurrencyLayer`]; from [`AdaptiveConcurrencyLayer::builder`].
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct AdaptiveConcurrencyLayerBuilder<C = HttpClassifier> {
    admission: AdmissionBuilder,
    classifier: C,
}

impl<C> AdaptiveConcurrencyLayerBuilder<C> {
    /// How long a call waits for a permit when the limit is reached before it is shed with
    /// [`Shed`](crate::vegas::Shed) (default
    /// [`DEFAULT_ACQUIRE_TIMEOUT`](crate::vegas::DEFAULT_ACQUIRE_TIMEOUT), 50 ms). Waiting callers are
    /// served in the limiter's [`QueueOrder`](crate::vegas::QueueOrder). `Duration::ZERO` sheds
    /// at once, without queueing or a timer; a positive bound needs a tokio runtime with time
    /// enabled.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.admission.max_wait(max_wait);
        self
    }

    /// Counts calls against the limiter's partition called `name` (declared with
    /// [`LimiterBuilder::partition`](crate::vegas::LimiterBuilder::partition)) instead of its
    /// default partition: e.g. one layer per class of traffic, each with its guaranteed share.
    pub fn partition(mut self, name: impl Into<String>) -> Self {
        self.admission.partition(name.into());
        self
    }

    /// Decides each call's [`Outcome`](crate::vegas::Outcome) from its result (default
    /// [`HttpClassifier`]): any [`OutcomeClassifier`](crate::vegas::OutcomeClassifier) for the
    /// inner service's response and error types, e.g. a closure.
    pub fn classifier<C2>(self, classifier: C2) -> AdaptiveConcurrencyLayerBuilder<C2> {
        AdaptiveConcurrencyLayerBuilder {
            admission: self.admission,
            classifier,
        }
    }

    /// The layer, or [`ConfigError::UnknownPartition`] when the limiter declares no partition of
    /// the given name.
    pub fn build(self) -> Result<AdaptiveConcurrencyLayer<C>, ConfigError> {
        Ok(AdaptiveConcurrencyLayer {
            admission: self.admission.build()?,
            classifier: self.classifier,
        })
    }
}
