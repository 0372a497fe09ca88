//! [`GuardBuilder`]: one builder for the three protections — the inbound quota and where it is
//! kept, the outbound concurrency limit, the retry policy — validated together.

use std::sync::Arc;
use std::time::Duration;

use super::error::BuildError;
use super::guard::Guard;
use super::store::{Kept, StoreSettings};
use crate::backoff::RetryPolicy;
use crate::gcra::observe::{Counters, SINGLE};
use crate::gcra::{KeyedLimit, Quota};
use crate::vegas::{DEFAULT_ACQUIRE_TIMEOUT, HttpClassifier, Limiter, Vegas};

/// Configures a [`Guard`]; from [`Guard::builder`]. Every part is optional:
///
/// | part | default | set with |
/// |---|---|---|
/// | inbound quota | none ([`Guard::admit`] answers [`NoRateLimit`](super::NoRateLimit)) | [`quota`](Self::quota), kept in memory, or in Redis with `redis` (feature `redis`); or a limiter of your own with [`rate_limit`](Self::rate_limit) |
/// | outbound concurrency | a [`Vegas`] limiter with its defaults, named `"default"` | [`concurrency`](Self::concurrency): any [`LimitAlgorithm`](crate::vegas::LimitAlgorithm) |
/// | wait for a permit | [`DEFAULT_ACQUIRE_TIMEOUT`] (50 ms), then the call is shed | [`acquire_timeout`](Self::acquire_timeout) |
/// | outcome of an outbound HTTP call | [`HttpClassifier::new`] (a `429` is ignored, `503`, `504` and transport failures are drops) | [`outbound_classifier`](Self::outbound_classifier) |
/// | retries | none: each call is made once | [`retry`](Self::retry) |
/// | legacy `X-RateLimit-Reset` | not read by the retries | `legacy_reset` (feature `tower` or `reqwest`) |
///
/// [`build`](Self::build) checks that the parts fit together and opens the quota's store
/// (connecting to Redis, if configured), so a guard that builds is ready to use; anything that
/// cannot work is a [`BuildError`] saying what to change.
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::RetryPolicy;
/// use flowguard::gcra::Quota;
/// use flowguard::vegas::{Aimd, Limiter};
/// use flowguard::{BuildError, Guard};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let guard = Guard::builder()
///     .quota(Quota::per_minute(600)?.with_burst(20)?)
///     .concurrency(Limiter::builder(Aimd::new()).name("inventory").build()?)
///     .acquire_timeout(Duration::from_millis(20))
///     .retry(RetryPolicy::builder().max_attempts(3).name("inventory").build()?)
///     .build()
///     .await?;
/// assert_eq!(guard.concurrency().snapshot().limit, guard.concurrency().limit());
///
/// // A limiter brings its own quota: giving both is an error that says so.
/// let both = Guard::builder()
///     .quota(Quota::per_second(1)?)
///     .rate_limit(flowguard::gcra::KeyedRateLimiter::<String>::new(Quota::per_second(2)?))
///     .build()
///     .await;
/// assert_eq!(both.unwrap_err(), BuildError::QuotaAndRateLimit);
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct GuardBuilder {
    quota: Option<Quota>,
    rate_limit: Option<Arc<dyn KeyedLimit>>,
    store: StoreSettings,
    concurrency: Option<Limiter>,
    acquire_timeout: Option<Duration>,
    outbound_classifier: Option<HttpClassifier>,
    retry: Option<RetryPolicy>,
    #[cfg(any(feature = "tower", feature = "reqwest"))]
    legacy_reset: Option<crate::backoff::LegacyReset>,
}

impl Guard {
    /// Starts configuring a guard.
    pub fn builder() -> GuardBuilder {
        GuardBuilder::default()
    }
}

impl GuardBuilder {
    /// The quota every key of an inbound request gets, kept in memory (a bounded
    /// [`KeyedRateLimiter`](crate::gcra::KeyedRateLimiter) with byte keys) unless
    /// `redis` (feature `redis`) says where else.
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quota = Some(quota);
        self
    }

    /// Keeps the [`quota`](Self::quota), and the quotas of the guard's
    /// [`quota_layer`](Guard::quota_layer)s, in Redis, shared by every instance: `redis://` (or
    /// `rediss://` for TLS, feature `redis-tls`) for one server, `redis+cluster://h1:p1,h2:p2`
    /// (`rediss+cluster://`) for a Redis Cluster; see `RedisTarget`. Without a `quota`, the
    /// guard's store serves its quota layers only.
    /// [`build`](Self::build) connects, and a server it cannot reach or credentials it refuses
    /// are a [`BuildError::Redis`]. Feature `redis`.
    #[cfg(feature = "redis")]
    pub fn redis(mut self, url: impl Into<String>) -> Self {
        self.store.url = Some(url.into());
        self
    }

    /// The prefix of the quota's Redis keys (default `"flowguard:"`); services that share a
    /// quota use the same one. Needs [`redis`](Self::redis). Feature `redis`.
    #[cfg(feature = "redis")]
    pub fn redis_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.store.prefix = Some(prefix.as_ref().to_vec());
        self
    }

    /// The most one Redis decision may take before the failure policy answers for it (default
    /// [`DEFAULT_TIMEOUT`](crate::gcra::redis::DEFAULT_TIMEOUT), 50 ms): a round trip to a
    /// server further away, or a cluster that may be failing over, may want more. Needs
    /// [`redis`](Self::redis); zero is a [`BuildError::Redis`]. Feature `redis`.
    #[cfg(feature = "redis")]
    pub fn redis_timeout(mut self, timeout: Duration) -> Self {
        self.store.timeout = Some(timeout);
        self
    }

    /// What the quota answers while Redis does not (default
    /// [`FailOpen`](crate::gcra::remote::FailurePolicy::FailOpen)). Needs [`redis`](Self::redis).
    /// Feature `redis`.
    #[cfg(feature = "redis")]
    pub fn failure_policy(mut self, policy: crate::gcra::remote::FailurePolicy) -> Self {
        self.store.failure_policy = Some(policy);
        self
    }

    /// Two-tier mode: reserve `batch` tokens from Redis at a time and spend them locally
    /// ([`TwoTierLimiter`](crate::gcra::two_tier::TwoTierLimiter)), cutting Redis calls about
    /// `batch` times; the fleet may overshoot the quota by up to instances x `batch`. The batch
    /// must lie in `1..=burst`. Needs [`redis`](Self::redis). Feature `redis`.
    #[cfg(feature = "redis")]
    pub fn two_tier(mut self, batch: u32) -> Self {
        self.store.two_tier_batch = Some(batch);
        self
    }

    /// A limiter of your own for inbound requests, instead of [`quota`](Self::quota): an
    /// in-memory [`KeyedRateLimiter`](crate::gcra::KeyedRateLimiter) with your settings (a
    /// clock, `max_keys`), keyed by bytes or by a fixed-size type such as `IpAddr` or `u64`
    /// that reads the keys' bytes ([`BytesKey`](crate::gcra::BytesKey)), a
    /// [remote](crate::gcra::remote) or [two-tier](crate::gcra::two_tier) limiter you
    /// configured, or any [`KeyedLimit`].
    pub fn rate_limit(self, limit: impl KeyedLimit + 'static) -> Self {
        self.shared_rate_limit(Arc::new(limit))
    }

    /// [`rate_limit`](Self::rate_limit), sharing a limiter that other parts of the service also
    /// use.
    pub fn shared_rate_limit(mut self, limit: Arc<dyn KeyedLimit>) -> Self {
        self.rate_limit = Some(limit);
        self
    }

    /// The concurrency limiter outbound calls take their permits from (default: [`Vegas`] with
    /// its defaults): built with [`Limiter::builder`] from any
    /// [`LimitAlgorithm`](crate::vegas::LimitAlgorithm), and shared with anything else holding
    /// a clone of it. The default needs no setting when every instance of the service runs a
    /// guard in front of the same dependency: the instances share it fairly with a short queue
    /// (see [`Vegas`], section "In a fleet").
    pub fn concurrency(mut self, limiter: Limiter) -> Self {
        self.concurrency = Some(limiter);
        self
    }

    /// How long an outbound call waits for a permit before it is shed (default
    /// [`DEFAULT_ACQUIRE_TIMEOUT`], 50 ms; `Duration::ZERO`: not at all).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = Some(timeout);
        self
    }

    /// How the outcome of an outbound HTTP call feeds the concurrency limit, in the guard's
    /// `outbound_layer` (feature `tower`) and `reqwest_client` (feature `reqwest`): default
    /// [`HttpClassifier::new`], under which a `429` is ignored (a quota, not a concurrency
    /// signal) and `503`, `504`, timeouts and connection failures are drops. It also reads how
    /// long each call waited in the dependency's queue, when the answer reports it in the
    /// `Server-Timing` metric `flowguard-queue` (what a dependency served behind
    /// [`WorkerQueueLayer`](crate::vegas::worker_queue::WorkerQueueLayer) writes): for the
    /// instances of a fleet, the way to even shares. [`HttpClassifier::queue_timing`] reads a
    /// metric of another name, [`HttpClassifier::without_queue_timing`] none.
    ///
    /// ```
    /// use flowguard::vegas::{HttpClassifier, Outcome};
    /// use flowguard::Guard;
    /// use http::StatusCode;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // This dependency answers 429 when it is too busy.
    /// let guard = Guard::builder()
    ///     .outbound_classifier(HttpClassifier::with_statuses(|status| match status {
    ///         StatusCode::TOO_MANY_REQUESTS => Outcome::Dropped,
    ///         other => HttpClassifier::status(other),
    ///     }))
    ///     .build()
    ///     .await?;
    /// # let _ = guard;
    /// # Ok(())
    /// # }
    /// ```
    pub fn outbound_classifier(mut self, classifier: HttpClassifier) -> Self {
        self.outbound_classifier = Some(classifier);
        self
    }

    /// How failed outbound calls are retried. Without one, each call is made once.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Lets the guard's retries of HTTP calls (`retry_layer`, `reqwest_client`) also read the
    /// legacy `X-RateLimit-Reset` field, in the way `reset` says, when neither `Retry-After`
    /// nor `RateLimit` asks for a wait: never before it, as for `Retry-After` (see
    /// [`HttpRetryPolicy::legacy_reset`](crate::backoff::HttpRetryPolicy::legacy_reset)). Off
    /// by default: servers write it in two incompatible ways (seconds to wait, as flowguard's
    /// own layer does, or a Unix time), so only you know which yours uses. Needs
    /// [`retry`](Self::retry); without it, [`BuildError::NeedsRetry`]. Feature `tower` or
    /// `reqwest`.
    ///
    /// ```
    /// use flowguard::backoff::RetryPolicy;
    /// use flowguard::backoff::LegacyReset;
    /// use flowguard::{BuildError, Guard};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let guard = Guard::builder()
    ///     .retry(RetryPolicy::builder().max_attempts(3).build()?)
    ///     .legacy_reset(LegacyReset::UnixSeconds) // e.g. GitHub's API
    ///     .build()
    ///     .await?;
    /// # let _ = guard;
    /// let alone = Guard::builder().legacy_reset(LegacyReset::DelaySeconds).build().await;
    /// assert_eq!(alone.unwrap_err(), BuildError::NeedsRetry { setting: "legacy_reset" });
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(any(feature = "tower", feature = "reqwest"))]
    pub fn legacy_reset(mut self, reset: crate::backoff::LegacyReset) -> Self {
        self.legacy_reset = Some(reset);
        self
    }

    /// Checks the configuration, opens the quota's store (connecting to Redis, if configured)
    /// and returns the guard.
    ///
    /// # Errors
    /// A [`BuildError`] saying what to change: both a quota and a limiter
    /// ([`QuotaAndRateLimit`](BuildError::QuotaAndRateLimit)), a store setting beside a limiter
    /// of your own or without Redis, two-tier without a quota, a Redis URL that cannot be read or a server that cannot be reached, a
    /// two-tier batch or failure policy the quota does not allow, a retry setting without a
    /// retry policy.
    pub async fn build(self) -> Result<Guard, BuildError> {
        #[cfg(any(feature = "tower", feature = "reqwest"))]
        if self.legacy_reset.is_some() && self.retry.is_none() {
            return Err(BuildError::NeedsRetry {
                setting: "legacy_reset",
            });
        }
        let concurrency = match self.concurrency {
            Some(limiter) => limiter,
            None => Limiter::builder(Vegas::new())
                .build()
                .map_err(BuildError::Concurrency)?,
        };
        let acquire_timeout = self.acquire_timeout.unwrap_or(DEFAULT_ACQUIRE_TIMEOUT);
        #[cfg_attr(
            not(any(feature = "tower", feature = "reqwest")),
            allow(unused_variables)
        )]
        let classifier = self.outbound_classifier.unwrap_or_default();
        #[cfg(feature = "tower")]
        let outbound = crate::vegas::layer::AdaptiveConcurrencyLayer::builder(concurrency.clone())
            .max_wait(acquire_timeout)
            .classifier(classifier.clone())
            .build()
            .map_err(BuildError::Concurrency)?;
        #[cfg(feature = "reqwest")]
        let concurrency_middleware =
            crate::vegas::reqwest::AdaptiveConcurrencyMiddleware::builder(concurrency.clone())
                .max_wait(acquire_timeout)
                .classifier(classifier)
                .build()
                .map_err(BuildError::Concurrency)?;
        let (admission, kept) = match (self.quota, self.rate_limit) {
            (Some(_), Some(_)) => return Err(BuildError::QuotaAndRateLimit),
            (None, Some(limit)) => {
                if let Some(setting) = self.store.first_setting() {
                    return Err(BuildError::SettingWithRateLimit { setting });
                }
                (Some(limit), Kept::Own)
            }
            (quota, None) => self.store.open(quota).await?,
        };
        Ok(Guard {
            admission,
            decisions: Arc::new(Counters::new(SINGLE, SINGLE)),
            kept,
            concurrency,
            retry: self.retry,
            #[cfg(any(feature = "tower", feature = "reqwest"))]
            legacy_reset: self.legacy_reset,
            once: RetryPolicy::once(),
            acquire_timeout,
            #[cfg(feature = "tower")]
            outbound,
            #[cfg(feature = "reqwest")]
            concurrency_middleware,
        })
    }
}
