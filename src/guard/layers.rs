//! The tower layers a [`Guard`] hands out (feature `tower`): the inbound quota for `http`
//! services, and for outbound clients the concurrency limit and the retry policy.

use std::sync::Arc;

use super::error::{NoRateLimit, QuotaLayerError};
use super::guard::Guard;
use crate::backoff::tower::HttpRetryLayer;
use crate::gcra::layer::{QuotaLayer, QuotaLayerBuilder};
use crate::gcra::{LimitSet, SeparateLimits};
use crate::vegas::layer::AdaptiveConcurrencyLayer;

impl Guard {
    /// The inbound quota as a tower layer for `http` services (an axum `Router`, a hyper
    /// service): requests are limited per the key `key` picks (see
    /// [`KeyExtractor`](crate::gcra::layer::KeyExtractor)), answered `429 Too Many Requests`
    /// with `Retry-After` over quota, and every answer carries the IETF `RateLimit-Policy` and
    /// `RateLimit` fields (see [`QuotaLayer`]). Feature `tower`.
    ///
    /// # Errors
    /// [`NoRateLimit`] when the guard has no quota.
    ///
    /// ```
    /// use flowguard::gcra::Quota;
    /// use flowguard::Guard;
    /// use http::{Request, Response, StatusCode};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let guard = Guard::builder().quota(Quota::per_minute(1)?).build().await?;
    /// let api_key = |req: &Request<String>| {
    ///     req.headers().get("x-api-key").map(|v| v.as_bytes().to_vec())
    /// };
    /// let service = ServiceBuilder::new()
    ///     .layer(guard.inbound_layer(api_key)?)
    ///     .service_fn(|_: Request<String>| async {
    ///         Ok::<_, std::convert::Infallible>(Response::new(String::from("hi")))
    ///     });
    /// let request = || Request::builder().header("x-api-key", "k1").body(String::new()).unwrap();
    /// assert_eq!(service.clone().oneshot(request()).await?.status(), StatusCode::OK);
    /// let denied = service.oneshot(request()).await?;
    /// assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert_eq!(denied.headers()["retry-after"], "60");
    /// # Ok(())
    /// # }
    /// ```
    pub fn inbound_layer<K>(&self, key: K) -> Result<QuotaLayer<SeparateLimits, K>, NoRateLimit> {
        let store = self.admission.clone().ok_or(NoRateLimit)?;
        Ok(QuotaLayer::new(store, key))
    }

    /// A quota layer with several quotas per request, kept where the guard keeps its quota:
    /// `builder` is [`QuotaLayer::builder`] with its key, [`Policy`](crate::gcra::layer::Policy)s
    /// and tiers, built here on the guard's store instead of with `build` or `build_with`.
    /// A request is allowed only if all of its tier's policies allow it, a denial spends nothing
    /// from any of them, and the rate-limit fields describe every policy and name the one that
    /// decided (see [`QuotaLayer`]). Feature `tower`.
    ///
    /// * In memory (a guard with an in-memory [`quota`](crate::GuardBuilder::quota), or none):
    ///   as `builder.build()`, a [`MemoryLimitSet`](crate::gcra::MemoryLimitSet), atomic.
    /// * In Redis or Redis Cluster (`GuardBuilder::redis`): a
    ///   [`RemoteLimitSet`](crate::gcra::remote::RemoteLimitSet) with one remote limiter per
    ///   limit over the guard's connection, with the guard's failure policy. Limit `"<tier>:<policy>"`
    ///   (`"global:<policy>"`) is kept under the prefix `<guard prefix><tier>:<policy>:` (`%`,
    ///   `{`, `}`, `=`, `#` and control characters of the name written `%XX`), so no two
    ///   policies, and no policy and the guard's own quota, share a key. Each user key is
    ///   wrapped in a hash tag, so one identity's per-key quotas share a cluster slot and are
    ///   decided in one script call, atomically; a request with a global policy has keys in two
    ///   slots of a cluster and is peeked, then spent (see
    ///   [`RemoteRateLimiter::check_all`](crate::gcra::remote::RemoteRateLimiter::check_all)).
    ///   On one Redis server every request is one atomic call. A guard prefix with a hash tag of
    ///   its own (`"rl:{api}:"`) keeps every key in its slot instead.
    ///
    /// # Errors
    /// A [`QuotaLayerError`] saying what to change: the policies refused
    /// ([`Layer`](QuotaLayerError::Layer): none, duplicate names, ...), a guard whose quota is a
    /// limiter of your own ([`OwnRateLimit`](QuotaLayerError::OwnRateLimit)) or two-tier
    /// (`TwoTier`), two limits of the same name in Redis (`SharedKeys`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
    /// use flowguard::gcra::Quota;
    /// use flowguard::Guard;
    /// use http::{Request, Response, StatusCode};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// // In memory here; with `.redis(url)` the same layer keeps its quotas in Redis.
    /// let guard = Guard::builder().build().await?;
    /// let layer = guard.quota_layer(
    ///     QuotaLayer::builder(HeaderKey::new("x-api-key")?)
    ///         .policy(Policy::per_key("per-second", Quota::per_second(10)?))
    ///         .policy(Policy::per_key("per-day", Quota::new(10_000, Duration::from_secs(86_400))?))
    ///         .policy(Policy::global("global", Quota::per_second(5_000)?)),
    /// )?;
    /// let service = ServiceBuilder::new().layer(layer).service_fn(|_: Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hi")))
    /// });
    /// let request = Request::builder().header("x-api-key", "k1").body(())?;
    /// let response = service.oneshot(request).await?;
    /// assert_eq!(response.status(), StatusCode::OK);
    /// assert!(response.headers()["ratelimit-policy"].to_str()?.contains("\"per-day\""));
    /// # Ok(())
    /// # }
    /// ```
    pub fn quota_layer<K>(
        &self,
        builder: QuotaLayerBuilder<K>,
    ) -> Result<QuotaLayer<Arc<dyn LimitSet>, K>, QuotaLayerError> {
        Ok(builder.build_with(|limits| self.kept.limit_set(limits))?)
    }

    /// The outbound concurrency limit as a tower layer: each call holds a permit of the guard's
    /// [`concurrency`](Self::concurrency) limiter, waiting up to the guard's
    /// [`acquire_timeout`](Self::acquire_timeout) for one before it is shed with
    /// [`Shed`](crate::vegas::Shed), and its outcome feeds the limit
    /// (the guard's [`outbound_classifier`](crate::GuardBuilder::outbound_classifier), by
    /// default [`HttpClassifier`](crate::vegas::HttpClassifier): 503, 504, timeouts and
    /// connection errors are drops, a 429 is ignored, a dependency's report of its queue in
    /// `Server-Timing: flowguard-queue` is read). Works over any service with `http` or `reqwest` responses
    /// (a `reqwest::Client` is one). See [`AdaptiveConcurrencyLayer`]. Feature `tower`.
    ///
    /// **Over a `reqwest::Client`, with retries, use
    /// [`reqwest_client`](Self::reqwest_client) instead** (feature `reqwest`): it holds a permit
    /// per attempt and retries with the same rules, while [`retry_layer`](Self::retry_layer)
    /// retries `http::Request`s only.
    ///
    /// With retries over `http` requests, put [`retry_layer`](Self::retry_layer) outside it, so
    /// that each attempt holds its own permit and none is held while waiting to retry:
    ///
    /// ```
    /// use flowguard::backoff::{BoxError, RetryPolicy};
    /// use flowguard::Guard;
    /// use tower::{ServiceBuilder, ServiceExt, service_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), BoxError> {
    /// let guard = Guard::builder()
    ///     .retry(RetryPolicy::builder().max_attempts(3).build()?)
    ///     .build()
    ///     .await?;
    /// let client = ServiceBuilder::new()
    ///     .layer(guard.retry_layer())
    ///     .layer(guard.outbound_layer())
    ///     .service(service_fn(|request: http::Request<String>| async move {
    ///         // The transport goes here (hyper, reqwest, ...).
    ///         Ok::<_, BoxError>(http::Response::new(request.into_body()))
    ///     }));
    /// let response = client.oneshot(http::Request::new("ping".to_owned())).await?;
    /// assert_eq!(response.body(), "ping");
    /// assert_eq!(guard.concurrency().in_flight(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn outbound_layer(&self) -> AdaptiveConcurrencyLayer {
        self.outbound.clone()
    }

    /// The guard's retry policy (a single attempt without one) as a tower retry layer for `http`
    /// requests, with the default HTTP rules of [`HttpRetryPolicy`](crate::backoff::HttpRetryPolicy): `429` and `503` and
    /// transient transport errors are retried, never before the server's `Retry-After` (or
    /// `X-RateLimit-Reset`, with [`legacy_reset`](crate::GuardBuilder::legacy_reset)), only
    /// for idempotent requests. Each attempt runs in a `tracing` span `attempt` and carries its
    /// [`Attempt`](crate::backoff::tower::Attempt) number (see [`HttpRetryLayer`]); see
    /// [`HttpRetry`](crate::backoff::tower::HttpRetry) for request bodies that can be copied.
    /// Place it outside [`outbound_layer`](Self::outbound_layer). Feature `tower`.
    ///
    /// It retries `http::Request`s: a service taking `reqwest::Request`s (a `reqwest::Client`)
    /// does not fit it. For reqwest, [`reqwest_client`](Self::reqwest_client) (feature
    /// `reqwest`) is the same retries and permits as a `reqwest_middleware` client.
    pub fn retry_layer(&self) -> HttpRetryLayer {
        HttpRetryLayer::new(self.http_retry_rules())
    }
}
