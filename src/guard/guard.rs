//! [`Guard`]: admits inbound requests by quota and makes outbound calls under the adaptive
//! concurrency limit, retried by the one retry engine.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::error::AdmitError;
use super::hook::PermitPerAttempt;
use crate::backoff::{Classification, RetryError, RetryPolicy};
use crate::gcra::observe::{self, Counters, Outcome, SINGLE};
use crate::gcra::{CheckError, Decision, KeyedLimit};
use crate::vegas::{AcquireError, Limiter};

/// Overload protection for one service: admit inbound requests by quota, and make outbound calls
/// under an adaptive concurrency limit with retries that back off and honour `Retry-After`.
/// Built with [`Guard::builder`]; cheap to clone (clones share the quota, the limiter and the
/// retry budget).
///
/// * Inbound: [`admit`](Self::admit), or `inbound_layer` (feature
///   `tower`) for `http` services such as an axum `Router`.
/// * Outbound: [`call`](Self::call) for any async call, `outbound_layer`
///   and `retry_layer` for tower clients (feature `tower`),
///   `reqwest_client` for reqwest (feature `reqwest`). All of them take
///   their permits from the one [`concurrency`](Self::concurrency) limiter.
///
/// ```
/// use flowguard::backoff::{Classification, RetryPolicy};
/// use flowguard::gcra::Quota;
/// use flowguard::Guard;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let guard = Guard::builder()
///     .quota(Quota::per_second(100)?)
///     .retry(RetryPolicy::builder().max_attempts(3).build()?)
///     .build()
///     .await?;
///
/// // Inbound: is this client within its quota?
/// assert!(guard.admit(b"client-42").await?.allowed);
///
/// // Outbound: a call under the concurrency limit, retried while it is retryable.
/// let answer = guard
///     .call(
///         |attempt| async move {
///             if attempt < 2 { Err(std::io::Error::other("503")) } else { Ok("200 OK") }
///         },
///         |outcome: &Result<&str, std::io::Error>| match outcome {
///             Err(_) => Classification::Retryable { retry_after: None },
///             Ok(_) => Classification::NotRetryable,
///         },
///     )
///     .await?;
/// assert_eq!(answer, "200 OK");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Guard {
    pub(super) admission: Option<Arc<dyn KeyedLimit>>,
    /// What [`admit`](Self::admit) counts its decisions in: the labels of a single quota, as
    /// `inbound_layer` (feature `tower`) counts them.
    pub(super) decisions: Arc<Counters>,
    /// Where the quota is kept, for the layers `quota_layer` builds on the same store.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(super) kept: super::store::Kept,
    pub(super) concurrency: Limiter,
    pub(super) retry: Option<RetryPolicy>,
    /// How the HTTP retries read `X-RateLimit-Reset`, if at all.
    #[cfg(any(feature = "tower", feature = "reqwest"))]
    pub(super) legacy_reset: Option<crate::backoff::LegacyReset>,
    /// The policy used without a configured one: a single attempt.
    pub(super) once: RetryPolicy,
    pub(super) acquire_timeout: Duration,
    /// The outbound tower layer, built (and validated) with the guard.
    #[cfg(feature = "tower")]
    pub(super) outbound: crate::vegas::layer::AdaptiveConcurrencyLayer,
    /// The reqwest concurrency middleware, built (and validated) with the guard.
    #[cfg(feature = "reqwest")]
    pub(super) concurrency_middleware: crate::vegas::reqwest::AdaptiveConcurrencyMiddleware,
}

/// Why [`Guard::call`] returned no success: the retry engine's [`RetryError`], whose
/// [`Shed`](RetryError::Shed) variant carries the concurrency limiter's [`AcquireError`] (no
/// permit was free within the acquire timeout, so the attempt was not made).
pub type GuardError<T, E> = RetryError<T, E, AcquireError>;

impl Guard {
    /// Checks one token of `key`'s quota for an inbound request.
    /// Without a configured quota this is [`AdmitError::NoRateLimit`].
    ///
    /// Observed as the inbound layer's decisions are: counted in
    /// `flowguard_quota_decisions_total{tier="default",policy="default",outcome}` (`allowed`,
    /// `denied`, `degraded`; a cost above the burst is `denied`), and made inside a
    /// `quota_decision` tracing span (debug level) recording the policy and the outcome.
    pub async fn admit(&self, key: &[u8]) -> Result<Decision, AdmitError> {
        self.admit_n(key, 1).await
    }

    /// Checks `cost` tokens of `key`'s quota (observed as [`admit`](Self::admit) is).
    pub async fn admit_n(&self, key: &[u8], cost: u32) -> Result<Decision, AdmitError> {
        let limit = self.admission.as_ref().ok_or(AdmitError::NoRateLimit)?;
        let span = observe::span(SINGLE);
        // An in-memory limit decides in `check` itself, one that does I/O while polled.
        let check = {
            let _entered = span.enter();
            limit.check(key, cost)
        };
        let answer = tracing::Instrument::instrument(check, span.clone()).await;
        let outcome = match &answer {
            Ok(decision) => Some(Outcome::of(decision, decision.allowed, false)),
            Err(CheckError::Gcra(error)) => Outcome::of_error(error, false),
            Err(_) => None,
        };
        if let Some(outcome) = outcome {
            observe::record(&span, &self.decisions, SINGLE, outcome);
        }
        answer.map_err(AdmitError::Check)
    }

    /// Makes an outbound call: each attempt holds a permit of the guard's concurrency limiter,
    /// whose outcome feeds the limit, and retryable outcomes are retried by the retry policy (if
    /// configured; without one, each call is made once).
    ///
    /// `op` gets the attempt number (1 for the first). `classify` decides per outcome:
    /// [`Classification::Retryable`] outcomes count as *dropped* for the concurrency limit
    /// (overload signals such as 429, 503, timeouts), other errors as *ignored*, successes as
    /// *success*; an attempt cancelled at the deadline counts as dropped. A permit is held for
    /// one attempt, never across the wait before a retry. A cancelled call releases its permit.
    /// This is the retry engine ([`RetryPolicy::run`]) with the permit as its attempt hook.
    pub async fn call<T, E, Op, Fut, C>(&self, op: Op, classify: C) -> Result<T, GuardError<T, E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
        C: FnMut(&Result<T, E>) -> Classification,
    {
        let mut permits = PermitPerAttempt {
            limiter: &self.concurrency,
            timeout: self.acquire_timeout,
        };
        self.retry_policy().run(op, classify, &mut permits).await
    }

    /// The inbound quota, if configured.
    pub fn rate_limit(&self) -> Option<&Arc<dyn KeyedLimit>> {
        self.admission.as_ref()
    }

    /// The outbound concurrency limiter (a handle: clones share it).
    pub fn concurrency(&self) -> &Limiter {
        &self.concurrency
    }

    /// The retry policy, if configured.
    pub fn retry(&self) -> Option<&RetryPolicy> {
        self.retry.as_ref()
    }

    /// How long an outbound call waits for a permit before it is shed.
    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// The policy calls follow: the configured one, or a single attempt.
    pub(super) fn retry_policy(&self) -> &RetryPolicy {
        self.retry.as_ref().unwrap_or(&self.once)
    }

    /// The HTTP rules of the retry layer and the reqwest client: the default ones over the
    /// guard's policy, reading `X-RateLimit-Reset` if the builder said how.
    #[cfg(any(feature = "tower", feature = "reqwest"))]
    pub(super) fn http_retry_rules(&self) -> crate::backoff::HttpRetryPolicy {
        let rules = crate::backoff::HttpRetryPolicy::new(self.retry_policy().clone());
        match self.legacy_reset {
            Some(reset) => rules.legacy_reset(reset),
            None => rules,
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("rate_limit", &self.admission.as_ref().map(|s| s.quota()))
            .field("concurrency", &self.concurrency)
            .field("retry", &self.retry)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}
