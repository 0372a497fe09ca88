//! The reqwest client a [`Guard`] hands out (feature `reqwest`): its retry policy and its
//! concurrency limit as `reqwest-middleware` middleware, in the one order that works.

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};

use super::guard::Guard;
use crate::backoff::reqwest::RetryMiddleware;

impl Guard {
    /// `client` with the guard's retries and concurrency limit: every request is retried by the
    /// guard's retry policy (a single attempt without one) with the default HTTP rules of
    /// [`HttpRetryPolicy`](crate::backoff::HttpRetryPolicy) (reading `X-RateLimit-Reset` too with
    /// [`legacy_reset`](crate::GuardBuilder::legacy_reset)), and each attempt holds a permit of the guard's
    /// [`concurrency`](Self::concurrency) limiter (none while waiting to retry), waiting up to the
    /// guard's [`acquire_timeout`](Self::acquire_timeout) before it is shed with
    /// [`Shed`](crate::vegas::Shed). Feature `reqwest`.
    ///
    /// Set timeouts on `client`: a timed-out attempt is then a drop for the limit and a
    /// transient error for the retries.
    ///
    /// ```
    /// use std::time::Duration;
    /// use flowguard::backoff::RetryPolicy;
    /// use flowguard::Guard;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let guard = Guard::builder()
    ///     .retry(RetryPolicy::builder().max_attempts(3).build()?)
    ///     .build()
    ///     .await?;
    /// let client = guard.reqwest_client(
    ///     reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?,
    /// );
    /// # let _ = client;
    /// # Ok(())
    /// # }
    /// ```
    pub fn reqwest_client(&self, client: reqwest::Client) -> ClientWithMiddleware {
        self.reqwest_middleware(ClientBuilder::new(client)).build()
    }

    /// [`reqwest_client`](Self::reqwest_client)'s two middleware added to `builder`, the retry
    /// middleware first (outside) and the concurrency middleware after it (inside): add
    /// middleware of your own before (around every call) or after (around every attempt).
    /// Feature `reqwest`.
    pub fn reqwest_middleware(&self, builder: ClientBuilder) -> ClientBuilder {
        builder
            .with(RetryMiddleware::new(self.http_retry_rules()))
            .with(self.concurrency_middleware.clone())
    }
}
