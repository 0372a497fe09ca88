//! The retry policy as a `reqwest-middleware` [`Middleware`] (feature `reqwest`).
//!
//! ```
//! use flowguard::backoff::{HttpRetryPolicy, RetryPolicy, reqwest::RetryMiddleware};
//!
//! # fn main() -> Result<(), flowguard::backoff::ConfigError> {
//! let rules = HttpRetryPolicy::new(RetryPolicy::builder().build()?);
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new(rules))
//!     .build();
//! # let _ = client;
//! # Ok(())
//! # }
//! ```
//!
//! A request whose body is a stream cannot be copied (`reqwest::Request::try_clone` returns
//! `None`): it is sent once, not retried, and a `tracing::debug!` event says so. When the
//! policy gives up, the last response (e.g. the final 429) or error is returned unchanged. The
//! attempts are driven by the crate's one retry engine ([`RetryPolicy::run`](super::RetryPolicy::run)),
//! so an attempt still running at the policy's deadline is cancelled and the call fails with
//! that [`RetryError`] as a middleware error.
//!
//! The response it returns says how it went in its extensions: [`Attempts`] (attempts made,
//! time waited between them).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::Extensions;
use parking_lot::Mutex;
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Middleware, Next, Result};
use tokio::time::Instant;

use tracing::Instrument;

use super::classify::{ErrorClassifier, TransientErrors, is_transient};
use super::error::RetryError;
use super::http_policy::HttpRetryPolicy;

/// How a request went through [`RetryMiddleware`], in the extensions of the response it returns
/// (`response.extensions().get::<Attempts>()`), whether the last attempt succeeded or the policy
/// gave up on it.
///
/// ```
/// # async fn run(client: reqwest_middleware::ClientWithMiddleware) -> reqwest_middleware::Result<()> {
/// use flowguard::backoff::reqwest::Attempts;
///
/// let response = client.get("http://127.0.0.1:3000/api").send().await?;
/// if let Some(attempts) = response.extensions().get::<Attempts>() {
///     println!("{} attempt(s), {:?} spent waiting to retry", attempts.count, attempts.waited);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempts {
    /// Attempts made, the first included.
    pub count: u32,
    /// Time spent between attempts: the backoff, or the server's `Retry-After` when longer.
    pub waited: Duration,
}

/// The attempts of one call so far, and when the last one ended.
#[derive(Debug, Default)]
struct Timeline {
    attempts: Attempts,
    last_end: Option<Instant>,
}

impl Timeline {
    fn attempt_starts(&mut self, now: Instant) {
        self.attempts.count += 1;
        if let Some(end) = self.last_end {
            self.attempts.waited += now.saturating_duration_since(end);
        }
    }
}

/// Retries requests through `reqwest-middleware`, applying [`HttpRetryPolicy`].
#[derive(Debug, Clone)]
pub struct RetryMiddleware<C = TransientErrors> {
    rules: HttpRetryPolicy<C>,
}

impl<C> RetryMiddleware<C> {
    /// A middleware applying `rules`.
    pub fn new(rules: HttpRetryPolicy<C>) -> Self {
        Self { rules }
    }
}

impl ErrorClassifier<Error> for TransientErrors {
    fn is_retryable(&self, error: &Error) -> bool {
        match error {
            Error::Reqwest(e) => self.is_retryable(e),
            Error::Middleware(e) => {
                let e: &(dyn std::error::Error + Send + Sync + 'static) = e.as_ref();
                is_transient(e)
            }
        }
    }
}

#[async_trait::async_trait]
impl<C> Middleware for RetryMiddleware<C>
where
    C: ErrorClassifier<Error> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let span = tracing::debug_span!("retry", method = %req.method(), url = %req.url());
        let policy = self.rules.policy();
        let once = if !self.rules.allows(req.method(), req.headers()) {
            Some("method is not idempotent (no Idempotency-Key, no opt-in)")
        } else if req.try_clone().is_none() {
            Some("its body is a stream and cannot be cloned")
        } else {
            None
        };
        if let Some(reason) = once {
            // Sent once, but still a request the budget's share of retries is counted against.
            policy.record_request(Instant::now().into_std());
            tracing::debug!(parent: &span, reason, "request will not be retried");
            return next.run(req, extensions).await.map(|mut response| {
                let once = Attempts {
                    count: 1,
                    waited: Duration::ZERO,
                };
                response.extensions_mut().insert(once);
                response
            });
        }
        // Each attempt runs on its own copy of the extensions, which its future owns (a future
        // borrowing them across attempts could not be `Send`); the last attempt's copy is what
        // the caller sees afterwards, as if that attempt had been the only one.
        let last_extensions = Arc::new(Mutex::new(None::<Extensions>));
        let timeline = Arc::new(Mutex::new(Timeline::default()));
        let result = policy
            .retry(
                |_attempt| {
                    timeline.lock().attempt_starts(Instant::now());
                    let attempt = req.try_clone();
                    let next = next.clone();
                    let mut attempt_extensions = extensions.clone();
                    let last_extensions = Arc::clone(&last_extensions);
                    let timeline = Arc::clone(&timeline);
                    async move {
                        let outcome = match attempt {
                            Some(attempt) => next.run(attempt, &mut attempt_extensions).await,
                            None => Err(Error::middleware(BodyNotClonable)),
                        };
                        *last_extensions.lock() = Some(attempt_extensions);
                        timeline.lock().last_end = Some(Instant::now());
                        outcome
                    }
                },
                |outcome| match outcome {
                    Ok(res) => {
                        self.rules
                            .classify_response(res.status(), res.headers(), SystemTime::now())
                    }
                    Err(e) => self.rules.classify_error(e),
                },
            )
            .instrument(span)
            .await;
        if let Some(last) = last_extensions.lock().take() {
            *extensions = last;
        }
        let attempts = timeline.lock().attempts;
        let with_attempts = |mut response: Response| {
            response.extensions_mut().insert(attempts);
            response
        };
        match result {
            Ok(response) => Ok(with_attempts(response)),
            // Giving up returns the last response (e.g. the final 429) or error unchanged.
            Err(RetryError::GaveUp { last, .. }) => last.map(with_attempts),
            Err(RetryError::NotRetryable { error, .. }) => Err(error),
            Err(e) => Err(Error::middleware(e)),
        }
    }
}

/// A request body that could be cloned for the first attempt could not be for a later one.
#[derive(Debug)]
struct BodyNotClonable;

impl std::fmt::Display for BodyNotClonable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body could not be cloned for a retry")
    }
}

impl std::error::Error for BodyNotClonable {}
