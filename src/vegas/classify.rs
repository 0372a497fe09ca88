//! How a finished outbound call counts for the limit: [`OutcomeClassifier`], and the default for
//! HTTP, [`HttpClassifier`].

use std::convert::Infallible;
use std::error::Error;
use std::io;
use std::time::Duration;

use http::{HeaderMap, StatusCode};

use super::algorithms::Outcome;
use super::queue_timing::QueueTiming;
use crate::backoff::{BoxError, is_transient};

/// Decides the [`Outcome`] of a finished call from its result: what the tower layer in
/// `vegas::layer` and the reqwest middleware in `vegas::reqwest` report on the call's permit.
///
/// - [`Outcome::Success`]: the dependency answered; the round-trip time is a latency sample.
/// - [`Outcome::Dropped`]: the dependency is overloaded (it refused, or did not answer in time):
///   a congestion signal that cuts the limit.
/// - [`Outcome::Ignored`]: the result says nothing about the dependency's load (e.g. a request
///   that could not be built); the permit is released without a sample.
///
/// Implemented by [`HttpClassifier`] (the default) and by any `Fn(&Result<R, E>) -> Outcome`:
///
/// ```
/// use flowguard::vegas::{OutcomeClassifier, Outcome};
///
/// // A gRPC-style client whose errors carry a code: "unavailable" is overload.
/// let classify = |result: &Result<u32, &str>| match result {
///     Ok(_) => Outcome::Success,
///     Err("unavailable") => Outcome::Dropped,
///     Err(_) => Outcome::Ignored,
/// };
/// assert_eq!(classify.classify(&Err("unavailable")), Outcome::Dropped);
/// ```
pub trait OutcomeClassifier<R, E> {
    /// The outcome of a call that ended with `result`.
    fn classify(&self, result: &Result<R, E>) -> Outcome;

    /// For a call [`classify`](Self::classify) calls a success: how long the dependency says
    /// it waited in its queue before it was served, if the result says so. The layer and the
    /// middleware then finish its permit with
    /// [`success_queued`](crate::vegas::Permit::success_queued) instead of
    /// [`success`](crate::vegas::Permit::success). By default `None`: no report is read.
    /// [`HttpClassifier`] reads one from the `Server-Timing` metric `flowguard-queue` (another
    /// with [`queue_timing`](HttpClassifier::queue_timing), none with
    /// [`without_queue_timing`](HttpClassifier::without_queue_timing)).
    fn queued(&self, result: &Result<R, E>) -> Option<Duration> {
        let _ = result;
        None
    }
}

impl<R, E, F: Fn(&Result<R, E>) -> Outcome> OutcomeClassifier<R, E> for F {
    fn classify(&self, result: &Result<R, E>) -> Outcome {
        self(result)
    }
}

/// The classifier for HTTP calls. By default ([`HttpClassifier::new`]):
///
/// | result | outcome |
/// |---|---|
/// | `503 Service Unavailable`, `504 Gateway Timeout` | [`Dropped`](Outcome::Dropped) |
/// | `429 Too Many Requests` | [`Ignored`](Outcome::Ignored) |
/// | any other response (`2xx`, `3xx`, `4xx`, other `5xx`) | [`Success`](Outcome::Success) |
/// | an error that is a timeout or a connection failure (see [`is_transient`]) | [`Dropped`](Outcome::Dropped) |
/// | any other error | [`Ignored`](Outcome::Ignored) |
///
/// A success whose response reports how long the call queued at the dependency, in the
/// `Server-Timing` metric [`QueueTiming::default()`] (`flowguard-queue`, what
/// [`WorkerQueueLayer`](crate::vegas::worker_queue::WorkerQueueLayer) writes), finishes its permit
/// with that report (see [`queue_timing`](Self::queue_timing)); a response without it is a plain
/// success.
///
/// A `500` counts as a success: the dependency answered, at the speed it answers, so its
/// round-trip time is a fair latency sample; only the statuses that say "too busy" cut the limit.
///
/// A `429` says "your quota is spent, come back later", not "you send too many calls at once":
/// a rate limiter in front of the dependency answers it at once, whatever the concurrency, and
/// its `Retry-After` is for the retry policy to honour. Counted as a drop, a burst of them would
/// halve the limit round after round and shed calls that the quota would have let through once
/// it refills; counted as a success, its fast answer would read as an idle dependency and grow
/// the limit. So it is ignored: the permit is released without a sample. A `503` stays a drop,
/// with or without `Retry-After`: it is what load shedders (Envoy's adaptive concurrency filter
/// among them) answer when the dependency is overloaded, the signal this limit exists for. A
/// dependency whose `429` does mean "too busy" says so with [`with_statuses`](Self::with_statuses).
///
/// It classifies `http::Response<B>` with the errors a tower HTTP client usually has: `BoxError`
/// (what `tower::timeout` and most stacks produce), [`io::Error`], [`Infallible`], and, with
/// the feature `reqwest`, `reqwest::Error`; and `reqwest::Response` with `reqwest::Error` or
/// `reqwest_middleware::Error`. For another error type, map it into a `BoxError`
/// (`ServiceBuilder::map_err`) or write a classifier on top of [`HttpClassifier::status`] and
/// [`HttpClassifier::error`].
///
/// ```
/// use flowguard::vegas::{HttpClassifier, Outcome, OutcomeClassifier};
/// use flowguard::backoff::BoxError;
/// use http::{Response, StatusCode};
///
/// let busy: Result<Response<()>, BoxError> = Ok(Response::builder().status(503).body(())?);
/// assert_eq!(HttpClassifier::new().classify(&busy), Outcome::Dropped);
/// let quota: Result<Response<()>, BoxError> = Ok(Response::builder().status(429).body(())?);
/// assert_eq!(HttpClassifier::new().classify(&quota), Outcome::Ignored);
/// let refused: Result<Response<()>, std::io::Error> =
///     Err(std::io::ErrorKind::ConnectionRefused.into());
/// assert_eq!(HttpClassifier::new().classify(&refused), Outcome::Dropped);
/// assert_eq!(HttpClassifier::status(StatusCode::NOT_FOUND), Outcome::Success);
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct HttpClassifier {
    statuses: fn(StatusCode) -> Outcome,
    queue: Option<QueueTiming>,
}

impl Default for HttpClassifier {
    /// [`HttpClassifier::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl HttpClassifier {
    /// The default rules: statuses by [`HttpClassifier::status`], errors by
    /// [`HttpClassifier::error`].
    pub const fn new() -> Self {
        Self::with_statuses(Self::status)
    }

    /// Responses classified by `statuses` instead of [`HttpClassifier::status`]; errors as by
    /// default. Give it to a guard with
    /// [`GuardBuilder::outbound_classifier`](crate::GuardBuilder::outbound_classifier), or to a
    /// layer or middleware builder's `classifier`.
    ///
    /// ```
    /// use flowguard::vegas::{HttpClassifier, Outcome};
    /// use http::StatusCode;
    ///
    /// // A dependency that answers 429 when it is too busy, not over a quota.
    /// let classifier = HttpClassifier::with_statuses(|status| match status {
    ///     StatusCode::TOO_MANY_REQUESTS => Outcome::Dropped,
    ///     other => HttpClassifier::status(other),
    /// });
    /// assert_eq!(classifier.outcome(StatusCode::TOO_MANY_REQUESTS), Outcome::Dropped);
    /// assert_eq!(classifier.outcome(StatusCode::OK), Outcome::Success);
    /// ```
    pub const fn with_statuses(statuses: fn(StatusCode) -> Outcome) -> Self {
        Self {
            statuses,
            queue: Some(QueueTiming::DEFAULT),
        }
    }

    /// Reads how long each successful call queued at the dependency from the response's
    /// `Server-Timing` metric `queue` names (see [`QueueTiming`]) instead of the default
    /// `flowguard-queue`: for a dependency that reports its queue under a name of its own. A
    /// response without it is a plain success. For a dependency that reports its queue, this
    /// evens out the shares of a fleet of instances, each with its own limiter.
    ///
    /// ```
    /// use flowguard::vegas::{HttpClassifier, OutcomeClassifier, QueueTiming};
    /// use flowguard::backoff::BoxError;
    /// use std::time::Duration;
    ///
    /// let answer: Result<http::Response<()>, BoxError> = Ok(http::Response::builder()
    ///     .header("server-timing", "queue;dur=12.5, app;dur=10")
    ///     .body(())?);
    /// // The default reads `flowguard-queue`, which this answer does not have:
    /// assert_eq!(HttpClassifier::new().queued(&answer), None);
    ///
    /// let classifier = HttpClassifier::new().queue_timing(QueueTiming::server_timing("queue")?);
    /// assert_eq!(classifier.queued(&answer), Some(Duration::from_micros(12_500)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn queue_timing(mut self, queue: QueueTiming) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Reads no report of the dependency's queueing: every success is a plain one, and Vegas
    /// learns the dependency's unloaded round-trip time from the lowest round-trip times it
    /// sees. For a dependency whose `flowguard-queue` metric cannot be trusted (it times
    /// something other than the call's whole wait for a worker), or to measure the limiter
    /// without the reports.
    ///
    /// ```
    /// use flowguard::vegas::{HttpClassifier, OutcomeClassifier};
    /// use flowguard::backoff::BoxError;
    ///
    /// let answer: Result<http::Response<()>, BoxError> = Ok(http::Response::builder()
    ///     .header("server-timing", "flowguard-queue;dur=12.5")
    ///     .body(())?);
    /// assert!(HttpClassifier::new().queued(&answer).is_some());
    /// let classifier = HttpClassifier::new().without_queue_timing();
    /// assert_eq!(classifier.queued(&answer), None);
    /// assert!(classifier.queue().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn without_queue_timing(mut self) -> Self {
        self.queue = None;
        self
    }

    /// Where this classifier reads the dependency's queueing, if it does (by default
    /// [`QueueTiming::default()`]).
    pub fn queue(&self) -> Option<&QueueTiming> {
        self.queue.as_ref()
    }

    /// The queueing reported in `headers`, if this classifier reads it.
    fn queued_in(&self, headers: &HeaderMap) -> Option<Duration> {
        self.queue.as_ref()?.read(headers)
    }

    /// The outcome this classifier gives a response with `status`.
    pub fn outcome(&self, status: StatusCode) -> Outcome {
        (self.statuses)(status)
    }

    /// The default outcome of a call answered with `status`: [`Outcome::Dropped`] for 503 and
    /// 504, [`Outcome::Ignored`] for 429 (a quota, not a concurrency signal: see
    /// [`HttpClassifier`]), [`Outcome::Success`] otherwise.
    pub fn status(status: StatusCode) -> Outcome {
        match status {
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT => Outcome::Dropped,
            StatusCode::TOO_MANY_REQUESTS => Outcome::Ignored,
            _ => Outcome::Success,
        }
    }

    /// The outcome of a call that failed with `error` before any response:
    /// [`Outcome::Dropped`] when it (or one of its sources) is a timeout or a connection failure
    /// ([`is_transient`]), [`Outcome::Ignored`] otherwise.
    pub fn error(error: &(dyn Error + 'static)) -> Outcome {
        if is_transient(error) {
            Outcome::Dropped
        } else {
            Outcome::Ignored
        }
    }
}

/// `HttpClassifier` for `http::Response<B>` with the error types listed (each given as
/// `|error| the error as a &dyn Error`).
macro_rules! http_responses_with {
    ($($error:ty => |$e:ident| $as_error:expr;)*) => {$(
        impl<B> OutcomeClassifier<http::Response<B>, $error> for HttpClassifier {
            fn classify(&self, result: &Result<http::Response<B>, $error>) -> Outcome {
                match result {
                    Ok(response) => self.outcome(response.status()),
                    Err($e) => HttpClassifier::error($as_error),
                }
            }

            fn queued(&self, result: &Result<http::Response<B>, $error>) -> Option<Duration> {
                self.queued_in(result.as_ref().ok()?.headers())
            }
        }
    )*};
}

http_responses_with! {
    BoxError => |e| e.as_ref();
    io::Error => |e| e;
}

#[cfg(feature = "reqwest")]
http_responses_with! {
    ::reqwest::Error => |e| e;
}

impl<B> OutcomeClassifier<http::Response<B>, Infallible> for HttpClassifier {
    fn classify(&self, result: &Result<http::Response<B>, Infallible>) -> Outcome {
        match result {
            Ok(response) => self.outcome(response.status()),
            Err(never) => match *never {},
        }
    }

    fn queued(&self, result: &Result<http::Response<B>, Infallible>) -> Option<Duration> {
        self.queued_in(result.as_ref().ok()?.headers())
    }
}

#[cfg(feature = "reqwest")]
impl OutcomeClassifier<::reqwest::Response, ::reqwest::Error> for HttpClassifier {
    fn classify(&self, result: &Result<::reqwest::Response, ::reqwest::Error>) -> Outcome {
        match result {
            Ok(response) => self.outcome(response.status()),
            Err(error) => HttpClassifier::error(error),
        }
    }

    fn queued(&self, result: &Result<::reqwest::Response, ::reqwest::Error>) -> Option<Duration> {
        self.queued_in(result.as_ref().ok()?.headers())
    }
}

#[cfg(feature = "reqwest")]
impl OutcomeClassifier<::reqwest::Response, reqwest_middleware::Error> for HttpClassifier {
    fn classify(&self, result: &Result<::reqwest::Response, reqwest_middleware::Error>) -> Outcome {
        match result {
            Ok(response) => self.outcome(response.status()),
            Err(reqwest_middleware::Error::Reqwest(error)) => HttpClassifier::error(error),
            Err(reqwest_middleware::Error::Middleware(error)) => {
                let error: &(dyn Error + 'static) = error.as_ref();
                HttpClassifier::error(error)
            }
        }
    }

    fn queued(
        &self,
        result: &Result<::reqwest::Response, reqwest_middleware::Error>,
    ) -> Option<Duration> {
        self.queued_in(result.as_ref().ok()?.headers())
    }
}
