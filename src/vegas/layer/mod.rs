//! A tower middleware for outbound calls under an adaptive concurrency limit (feature `tower`):
//! every request holds a [`Permit`](crate::vegas::Permit) of a [`Limiter`](crate::vegas::Limiter)
//! while it is in flight, and how it ended (from an
//! [`OutcomeClassifier`](crate::vegas::OutcomeClassifier), by default
//! [`HttpClassifier`](crate::vegas::HttpClassifier)) feeds the limit algorithm: Vegas, or any
//! [`LimitAlgorithm`](crate::vegas::LimitAlgorithm) the limiter was built with.
//!
//! - [`AdaptiveConcurrencyLayer`]: the configuration (limiter, partition, wait bound,
//!   classifier), built with [`AdaptiveConcurrencyLayer::builder`].
//! - [`AdaptiveConcurrencyService`]: takes the permit in `poll_ready`, as tower's
//!   `ConcurrencyLimit` does, and hands it to the call.
//! - [`ResponseFuture`]: owns the permit until the response (or error) arrives, then reports its
//!   outcome; dropped before that (a cancelled or aborted call), it releases the permit, which
//!   reports the limiter's [`unfinished`](crate::vegas::LimiterBuilder::unfinished) outcome.
//!
//! When no permit is free, a call waits up to the layer's
//! [`max_wait`](AdaptiveConcurrencyLayerBuilder::max_wait) (or not at all), then is **shed**: it
//! is not sent, and its error is a [`Shed`](crate::vegas::Shed) (downcast the `BoxError`).
//!
//! # Where it goes in a stack
//!
//! Retry **outside**, concurrency inside, timeout innermost:
//!
//! ```text
//! ServiceBuilder::new()
//!     .retry(..)                      // waits between attempts hold no permit
//!     .layer(AdaptiveConcurrencyLayer) // one permit per attempt
//!     .timeout(..)                    // a timed-out attempt is a dropped call
//!     .service(transport)
//! ```
//!
//! Each attempt then takes its own permit and releases it when its response arrives, before the
//! retry policy sleeps, so no permit is held across a retry's wait and the limit counts calls on
//! the wire, not callers waiting to retry. A timeout inside the layer fails the attempt with an
//! error the classifier sees (a timeout: [`Dropped`](crate::vegas::Outcome::Dropped)); a timeout
//! outside it cancels the attempt instead, which reports the limiter's `unfinished` outcome
//! (by default ignored). A shed attempt is not retried by flowguard's retry policy (see
//! [`Shed`](crate::vegas::Shed)).
//!
//! ```
//! use std::time::Duration;
//! use flowguard::backoff::{BoxError, HttpRetryPolicy, RetryPolicy, tower::HttpRetry};
//! use flowguard::vegas::layer::AdaptiveConcurrencyLayer;
//! use flowguard::vegas::{Limiter, Shed, Vegas};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), BoxError> {
//! let limiter = Limiter::builder(Vegas::new()).name("inventory").build()?;
//! let concurrency = AdaptiveConcurrencyLayer::builder(limiter.clone())
//!     .max_wait(Duration::from_millis(20))
//!     .build()?;
//! let retry = HttpRetry::new(HttpRetryPolicy::new(RetryPolicy::builder().max_attempts(3).build()?));
//! let client = ServiceBuilder::new()
//!     .retry(retry)
//!     .layer(concurrency)
//!     .timeout(Duration::from_secs(2))
//!     .service(service_fn(|request: http::Request<String>| async move {
//!         // The transport goes here (hyper, reqwest, ...).
//!         Ok::<_, BoxError>(http::Response::new(request.into_body()))
//!     }));
//!
//! match client.oneshot(http::Request::new("ping".to_owned())).await {
//!     Ok(response) => assert_eq!(response.body(), "ping"),
//!     Err(error) if error.is::<Shed>() => { /* not sent: answer 503, or degrade */ }
//!     Err(error) => return Err(error),
//! }
//! assert_eq!(limiter.in_flight(), 0);
//! # Ok(())
//! # }
//! ```
//!
//! # Readiness and the wait bound
//!
//! Like tower's `ConcurrencyLimit`, the service takes its permit in `poll_ready`, which is
//! pending while the caller waits for one, and the next `call` spends it. The wait is bounded:
//! once [`max_wait`](AdaptiveConcurrencyLayerBuilder::max_wait) passes without a permit (or at
//! once, with `Duration::ZERO`), `poll_ready` answers **ready** and that `call` fails with
//! [`Shed`](crate::vegas::Shed) without reaching the inner service (as tower's `LoadShed` does).
//! `poll_ready` never fails because of the limit: middleware such as `tower::buffer` and
//! `tower::balance` treat a `poll_ready` error as the service being broken for good.
//!
//! A permit taken in `poll_ready` but never spent (the service is dropped or its clone never
//! called) is released as [ignored](crate::vegas::Outcome::Ignored): it measured no call. A
//! clone of the service starts without a permit. The round-trip time runs from the grant in
//! `poll_ready` to the response head, so call promptly once ready (tower's contract anyway);
//! the response body is read after the permit is released.

mod future;
// The layer lives in `layer.rs`, as in tower's `limit/concurrency/`.
#[allow(clippy::module_inception)]
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::{AdaptiveConcurrencyLayer, AdaptiveConcurrencyLayerBuilder};
pub use service::AdaptiveConcurrencyService;
