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
//! policy gives up, the last response (e.g. the final 429) or error is returned unchanged.

use std::time::SystemTime;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Middleware, Next, Result};
use tokio::time::Instant;

use super::classify::{ErrorClassifier, TransientErrors, is_transient};
use super::http_policy::HttpRetryPolicy;
use super::retry::Classification;

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
            Error::Reqwest(e) => is_transient(e),
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
        let started = Instant::now().into_std();
        let policy = self.rules.policy();
        policy.record_request(started);
        if !self.rules.allows(req.method(), req.headers()) {
            tracing::debug!(method = %req.method(), url = %req.url(), "request will not be retried: method is not idempotent (no Idempotency-Key, no opt-in)");
            return next.run(req, extensions).await;
        }
        let mut call = policy.state_since(started);
        loop {
            let Some(attempt) = req.try_clone() else {
                tracing::debug!(method = %req.method(), url = %req.url(), "request will not be retried: its body is a stream and cannot be cloned");
                return next.run(req, extensions).await;
            };
            let outcome = next.clone().run(attempt, extensions).await;
            let classification = match &outcome {
                Ok(res) => {
                    self.rules
                        .classify_response(res.status(), res.headers(), SystemTime::now())
                }
                Err(e) => self.rules.classify_error(e),
            };
            let Classification::Retryable { retry_after } = classification else {
                return outcome;
            };
            match call.next_delay(Instant::now().into_std(), retry_after) {
                Ok(wait) => {
                    tracing::debug!(method = %req.method(), url = %req.url(), attempt = call.attempts(), ?wait, "retrying request");
                    tokio::time::sleep(wait).await;
                }
                Err(reason) => {
                    tracing::debug!(method = %req.method(), url = %req.url(), attempts = call.attempts(), %reason, "not retrying request");
                    return outcome;
                }
            }
        }
    }
}
