//! A `tower` retry [`Policy`] for `http` requests (feature `tower`).
//!
//! [`HttpRetryLayer`] is the policy with a `tracing` span `attempt` (its number, method, URI)
//! around each attempt; the policy also works alone with [`tower::retry::RetryLayer`]:
//!
//! ```
//! use flowguard::backoff::{HttpRetryPolicy, RetryPolicy, tower::HttpRetry};
//! use tower::{ServiceBuilder, service_fn};
//!
//! # fn main() -> Result<(), flowguard::backoff::ConfigError> {
//! let policy = HttpRetry::new(HttpRetryPolicy::new(RetryPolicy::builder().build()?));
//! let client = ServiceBuilder::new().retry(policy).service(service_fn(
//!     |req: http::Request<String>| async move {
//!         Ok::<_, flowguard::backoff::BoxError>(http::Response::new(req.into_body()))
//!     },
//! ));
//! # let _ = client;
//! # Ok(())
//! # }
//! ```
//!
//! # Cloning requests
//! A retry needs a copy of the request. The body type must implement [`ClonableBody`], whose
//! `try_clone_body` returns `None` for a body that cannot be replayed (a stream): such a
//! request is sent once and not retried, with a `tracing::debug!` event saying why. It is
//! implemented for in-memory bodies (`String`, `Vec<u8>`, `bytes::Bytes`, `&'static str`,
//! `&'static [u8]`, `()`); implement it for your own body type (e.g. an enum of "full" and
//! "streaming" variants). Method, URI, version, headers and extensions are copied.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use ::tower::retry::{Policy, Retry};
use ::tower::{Layer, Service};
use http::{Request, Response};
use tokio::time::{Instant, Sleep};
use tracing::Instrument;
use tracing::instrument::Instrumented;

use super::classify::{ErrorClassifier, TransientErrors};
use super::http_policy::HttpRetryPolicy;
use super::metrics::GaveUpLabel;
use super::policy::RetryState;
use super::retry::Classification;

/// A request body that may be copied for a retry.
pub trait ClonableBody: Sized {
    /// A copy of the body, or `None` when it cannot be replayed (then no retry happens).
    fn try_clone_body(&self) -> Option<Self>;
}

macro_rules! clonable_by_clone {
    ($($t:ty),*) => {$(
        impl ClonableBody for $t {
            fn try_clone_body(&self) -> Option<Self> {
                Some(self.clone())
            }
        }
    )*};
}

clonable_by_clone!(
    String,
    Vec<u8>,
    bytes::Bytes,
    &'static str,
    &'static [u8],
    ()
);

/// The retry [`Policy`] for `tower` HTTP clients, applying [`HttpRetryPolicy`].
///
/// Each request gets its own retry state (attempts, start time, jitter) when `tower` clones
/// the policy for it; the [`RetryBudget`](super::RetryBudget) and seed sequence are shared.
/// When the policy gives up, the last response or error is returned unchanged and the reason
/// is logged at debug level.
#[derive(Debug)]
pub struct HttpRetry<C = TransientErrors> {
    rules: Arc<HttpRetryPolicy<C>>,
    call: Option<RetryState>,
    created: Instant,
}

impl<C> HttpRetry<C> {
    /// A policy applying `rules`.
    pub fn new(rules: HttpRetryPolicy<C>) -> Self {
        Self {
            rules: Arc::new(rules),
            call: None,
            created: Instant::now(),
        }
    }
}

impl<C> Clone for HttpRetry<C> {
    /// `tower` clones the policy once per request: the clone starts a fresh call.
    fn clone(&self) -> Self {
        Self {
            rules: Arc::clone(&self.rules),
            call: None,
            created: Instant::now(),
        }
    }
}

impl<B, R, E, C> Policy<Request<B>, Response<R>, E> for HttpRetry<C>
where
    B: ClonableBody,
    C: ErrorClassifier<E>,
{
    type Future = Pin<Box<Sleep>>;

    fn retry(
        &mut self,
        req: &mut Request<B>,
        result: &mut Result<Response<R>, E>,
    ) -> Option<Self::Future> {
        let classification = match result {
            Ok(res) => self
                .rules
                .classify_response(res.status(), res.headers(), SystemTime::now()),
            Err(e) => self.rules.classify_error(e),
        };
        let retry_after = match classification {
            Classification::Retryable { retry_after } => retry_after,
            Classification::RetryAfterTooLarge => {
                tracing::debug!(method = %req.method(), uri = %req.uri(), "not retrying: the server asked to wait beyond the Retry-After bound");
                self.rules.policy().gave_up(GaveUpLabel::RetryAfterTooLarge);
                return None;
            }
            _ => return None,
        };
        let now = Instant::now().into_std();
        let (rules, created) = (&self.rules, self.created);
        let call = self
            .call
            .get_or_insert_with(|| rules.policy().state_since(created.into_std()));
        let span = tracing::debug_span!("retry", method = %req.method(), uri = %req.uri());
        let _entered = span.enter();
        call.next_wait(now, retry_after)
            .ok()
            .map(|wait| Box::pin(tokio::time::sleep(wait)))
    }

    fn clone_request(&mut self, req: &Request<B>) -> Option<Request<B>> {
        if self.call.is_none() {
            // First attempt of a request (retries happen only once `call` is set).
            self.rules
                .policy()
                .record_request(Instant::now().into_std());
        }
        if !self.rules.allows(req.method(), req.headers()) {
            tracing::debug!(method = %req.method(), uri = %req.uri(), "request will not be retried: method is not idempotent (no Idempotency-Key, no opt-in)");
            return None;
        }
        let Some(body) = req.body().try_clone_body() else {
            tracing::debug!(method = %req.method(), uri = %req.uri(), "request will not be retried: its body cannot be cloned");
            return None;
        };
        let mut copy = Request::new(body);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        copy.extensions_mut().insert(Attempt::of(req).next());
        Some(copy)
    }
}

/// Which attempt of a request this is, in the extensions of the request each attempt sends
/// (`request.extensions().get::<Attempt>()`): [`HttpRetry`] puts `2` in the copy it makes for
/// the first retry, `3` in the next, and so on; a request without it is a first attempt.
///
/// ```
/// use flowguard::backoff::tower::Attempt;
///
/// let request = http::Request::new(());
/// assert_eq!(Attempt::of(&request).number(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attempt(u32);

impl Attempt {
    /// The attempt `request` is: the one in its extensions, or the first.
    pub fn of<B>(request: &Request<B>) -> Self {
        request
            .extensions()
            .get::<Self>()
            .copied()
            .unwrap_or(Self(1))
    }

    /// Its number, from 1 for the first attempt.
    pub fn number(self) -> u32 {
        self.0
    }

    fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

/// Runs each call of the service it wraps in a `tracing` debug span `attempt`, with fields
/// `attempt` (the request's [`Attempt`] number), `method` and `uri`. [`HttpRetryLayer`] puts it
/// under the retries, so each attempt has a span of its own.
#[derive(Debug, Clone)]
pub struct AttemptSpan<S> {
    inner: S,
}

impl<S> AttemptSpan<S> {
    /// `inner`, each call in its own span.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, B> Service<Request<B>> for AttemptSpan<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Instrumented<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let attempt = Attempt::of(&request).number();
        let span = tracing::debug_span!("attempt", attempt, method = %request.method(), uri = %request.uri());
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        future.instrument(span)
    }
}

/// The retries of [`HttpRetry`] as a tower layer, each attempt in a `tracing` span of its own
/// ([`AttemptSpan`]) and carrying its [`Attempt`] number in its extensions.
///
/// ```
/// use flowguard::backoff::{HttpRetryPolicy, RetryPolicy, tower::HttpRetryLayer};
/// use tower::{ServiceBuilder, service_fn};
///
/// # fn main() -> Result<(), flowguard::backoff::ConfigError> {
/// let retries = HttpRetryLayer::new(HttpRetryPolicy::new(RetryPolicy::builder().build()?));
/// let client = ServiceBuilder::new().layer(retries).service(service_fn(
///     |req: http::Request<String>| async move {
///         Ok::<_, flowguard::backoff::BoxError>(http::Response::new(req.into_body()))
///     },
/// ));
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct HttpRetryLayer<C = TransientErrors> {
    policy: HttpRetry<C>,
}

impl<C> HttpRetryLayer<C> {
    /// A layer applying `rules`.
    pub fn new(rules: HttpRetryPolicy<C>) -> Self {
        Self {
            policy: HttpRetry::new(rules),
        }
    }
}

impl<C> Clone for HttpRetryLayer<C> {
    fn clone(&self) -> Self {
        Self {
            policy: self.policy.clone(),
        }
    }
}

impl<S, C> Layer<S> for HttpRetryLayer<C> {
    type Service = Retry<HttpRetry<C>, AttemptSpan<S>>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry::new(self.policy.clone(), AttemptSpan::new(inner))
    }
}
