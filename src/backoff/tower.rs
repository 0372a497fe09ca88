//! A `tower` retry [`Policy`] for `http` requests (feature `tower`).
//!
//! Use it with [`tower::retry::RetryLayer`]:
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
use std::time::SystemTime;

use ::tower::retry::Policy;
use http::{Request, Response};
use tokio::time::{Instant, Sleep};

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
        Some(copy)
    }
}
