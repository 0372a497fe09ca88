//! Outbound `reqwest` calls under an adaptive concurrency limit, as a `reqwest-middleware`
//! [`Middleware`] (feature `reqwest`).
//!
//! Every request that reaches [`AdaptiveConcurrencyMiddleware`] holds a
//! [`Permit`](crate::vegas::Permit) of its [`Limiter`] until the response head (or an error)
//! comes back; how it ended, from an [`OutcomeClassifier`] (by default [`HttpClassifier`]: 503,
//! 504, timeouts and connection errors are drops, a 429 is ignored), feeds the limit. When no permit is free
//! within the wait bound the request is **not sent** and fails with a middleware error holding a
//! [`Shed`] (`error.downcast_ref::<Shed>()` on the `anyhow` error).
//!
//! # With retries
//!
//! Register the [retry middleware](crate::backoff::reqwest::RetryMiddleware) **first** (outside)
//! and this one after it (inside): each attempt then passes through this middleware and holds a
//! permit of its own, released when its response arrives, before the retry middleware sleeps. No
//! permit is held across a retry's wait. A shed attempt is not retried (see [`Shed`]). Set the
//! request timeout on the `reqwest::Client` (inside both): a timed-out attempt is then an error
//! this middleware sees, a drop.
//!
//! ```
//! use std::time::Duration;
//! use flowguard::backoff::{HttpRetryPolicy, RetryPolicy, reqwest::RetryMiddleware};
//! use flowguard::vegas::reqwest::AdaptiveConcurrencyMiddleware;
//! use flowguard::vegas::{Limiter, Vegas};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Limiter::builder(Vegas::new()).name("payments").build()?;
//! let client = reqwest_middleware::ClientBuilder::new(
//!     reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?,
//! )
//! .with(RetryMiddleware::new(HttpRetryPolicy::new(RetryPolicy::builder().build()?)))
//! .with(
//!     AdaptiveConcurrencyMiddleware::builder(limiter.clone())
//!         .max_wait(Duration::from_millis(20))
//!         .build()?,
//! )
//! .build();
//! # let _ = client;
//! # Ok(())
//! # }
//! ```
//!
//! Dropping the request's future (a timeout around `send`, an aborted task) releases the
//! permit, which reports its limiter's [`unfinished`](crate::vegas::LimiterBuilder::unfinished)
//! outcome (by default ignored): never leaked.

use std::time::Duration;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Middleware, Next, Result};

use super::admission::{Admission, AdmissionBuilder, finish};
use super::classify::{HttpClassifier, OutcomeClassifier};
use super::error::{ConfigError, Shed};
use super::limiter::Limiter;

/// Holds a concurrency permit for every request passing through; see the
/// [module docs](self) for the order with retries and an example.
#[derive(Debug, Clone)]
pub struct AdaptiveConcurrencyMiddleware<C = HttpClassifier> {
    admission: Admission,
    classifier: C,
}

impl AdaptiveConcurrencyMiddleware {
    /// The [builder](Self::builder) with defaults: permits from `limiter`'s default partition,
    /// waiting up to [`DEFAULT_ACQUIRE_TIMEOUT`](crate::vegas::DEFAULT_ACQUIRE_TIMEOUT) (50 ms) for
    /// one, outcomes from [`HttpClassifier`].
    pub fn new(limiter: Limiter) -> Self {
        Self {
            admission: Admission::new(limiter),
            classifier: HttpClassifier::new(),
        }
    }

    /// Starts configuring a middleware whose requests hold permits of `limiter` (a clone of
    /// the handle: keep one to read [`Limiter::snapshot`]).
    pub fn builder(limiter: Limiter) -> AdaptiveConcurrencyMiddlewareBuilder {
        AdaptiveConcurrencyMiddlewareBuilder {
            admission: AdmissionBuilder::new(limiter),
            classifier: HttpClassifier::new(),
        }
    }
}

impl<C> AdaptiveConcurrencyMiddleware<C> {
    /// The limiter requests take their permits from.
    pub fn limiter(&self) -> &Limiter {
        self.admission.limiter()
    }

    /// How long a request waits for a permit before it is shed (`Duration::ZERO`: not at all).
    pub fn max_wait(&self) -> Duration {
        self.admission.max_wait()
    }
}

#[async_trait::async_trait]
impl<C> Middleware for AdaptiveConcurrencyMiddleware<C>
where
    C: OutcomeClassifier<Response, Error> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let permit = match self.admission.acquire().await {
            Ok(permit) => permit,
            Err(cause) => {
                tracing::debug!(%cause, method = %req.method(), url = %req.url(), "outbound call shed by the concurrency limit");
                return Err(Error::middleware(Shed::from(cause)));
            }
        };
        let result = next.run(req, extensions).await;
        finish(permit, &self.classifier, &result);
        result
    }
}

/// Configures an [`AdaptiveConcurrencyMiddleware`]; from
/// [`AdaptiveConcurrencyMiddleware::builder`].
#[derive(Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct AdaptiveConcurrencyMiddlewareBuilder<C = HttpClassifier> {
    admission: AdmissionBuilder,
    classifier: C,
}

impl<C> AdaptiveConcurrencyMiddlewareBuilder<C> {
    /// How long a request waits for a permit when the limit is reached before it is shed with
    /// [`Shed`] (default [`DEFAULT_ACQUIRE_TIMEOUT`](crate::vegas::DEFAULT_ACQUIRE_TIMEOUT), 50 ms),
    /// served in the limiter's [`QueueOrder`](crate::vegas::QueueOrder). `Duration::ZERO`
    /// sheds at once, without queueing.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.admission.max_wait(max_wait);
        self
    }

    /// Counts requests against the limiter's partition called `name` (declared with
    /// [`LimiterBuilder::partition`](crate::vegas::LimiterBuilder::partition)) instead of its
    /// default partition.
    pub fn partition(mut self, name: impl Into<String>) -> Self {
        self.admission.partition(name.into());
        self
    }

    /// Decides each request's [`Outcome`](crate::vegas::Outcome) from its result (default
    /// [`HttpClassifier`]): any `OutcomeClassifier<reqwest::Response, reqwest_middleware::Error>`,
    /// e.g. a closure.
    pub fn classifier<C2>(self, classifier: C2) -> AdaptiveConcurrencyMiddlewareBuilder<C2> {
        AdaptiveConcurrencyMiddlewareBuilder {
            admission: self.admission,
            classifier,
        }
    }

    /// The middleware, or [`ConfigError::UnknownPartition`] when the limiter declares no
    /// partition of the given name.
    pub fn build(self) -> std::result::Result<AdaptiveConcurrencyMiddleware<C>, ConfigError> {
        Ok(AdaptiveConcurrencyMiddleware {
            admission: self.admission.build()?,
            classifier: self.classifier,
        })
    }
}
