//! [`Guard`]: the three protections behind one API — a quota for inbound requests, an adaptive
//! concurrency limit for outbound calls, and polite retries for those calls.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::{AttemptEnd, AttemptHook, Classification, RetryError, RetryPolicy};
use crate::gcra::{CheckError, Decision, KeyedLimit};
use crate::vegas::{AcquireError, DEFAULT_ACQUIRE_TIMEOUT, Limiter, Permit};

/// Overload protection for one service: admit inbound requests by quota, and make outbound calls
/// under an adaptive concurrency limit with retries that back off and honour `Retry-After`.
///
/// Every part is optional; [`Guard::admit`] needs a [rate limit](GuardBuilder::rate_limit),
/// [`Guard::call`] uses the [concurrency limiter](GuardBuilder::concurrency) and
/// [retry policy](GuardBuilder::retry) when configured. Cheap to clone.
///
/// ```
/// use flowguard::backoff::{Classification, RetryPolicy};
/// use flowguard::gcra::{KeyedRateLimiter, Quota};
/// use flowguard::vegas::{Limiter, Vegas};
/// use flowguard::Guard;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let guard = Guard::builder()
///     .rate_limit(KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(100)?))
///     .concurrency(Limiter::builder(Vegas::new()).build()?)
///     .retry(RetryPolicy::builder().max_attempts(3).build()?)
///     .build();
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
    admission: Option<Arc<dyn KeyedLimit>>,
    concurrency: Option<Arc<Limiter>>,
    retry: Option<RetryPolicy>,
    /// The policy used without a configured one: a single attempt.
    once: RetryPolicy,
    acquire_timeout: Duration,
}

/// Configures a [`Guard`].
#[derive(Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct GuardBuilder {
    admission: Option<Arc<dyn KeyedLimit>>,
    concurrency: Option<Arc<Limiter>>,
    retry: Option<RetryPolicy>,
    acquire_timeout: Option<Duration>,
}

impl GuardBuilder {
    /// The quota inbound requests are admitted by: an in-memory
    /// [`KeyedRateLimiter`](crate::gcra::KeyedRateLimiter) with byte-string keys (`Vec<u8>`,
    /// `String`, …), the [remote](crate::gcra::remote) limiter over Redis (feature `redis`), a
    /// [two-tier](crate::gcra::two_tier) limiter, or any [`KeyedLimit`].
    pub fn rate_limit(mut self, store: impl KeyedLimit + 'static) -> Self {
        self.admission = Some(Arc::new(store));
        self
    }

    /// The same, sharing a limiter that other parts of the service also use.
    pub fn shared_rate_limit(mut self, store: Arc<dyn KeyedLimit>) -> Self {
        self.admission = Some(store);
        self
    }

    /// The adaptive concurrency limit outbound calls run under.
    pub fn concurrency(mut self, limiter: Limiter) -> Self {
        self.concurrency = Some(Arc::new(limiter));
        self
    }

    /// How long an outbound call waits for a permit before it is shed (default [`DEFAULT_ACQUIRE_TIMEOUT`](crate::vegas::DEFAULT_ACQUIRE_TIMEOUT)).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = Some(timeout);
        self
    }

    /// How failed outbound calls are retried. Without one, each call is made once.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// The guard.
    pub fn build(self) -> Guard {
        Guard {
            admission: self.admission,
            concurrency: self.concurrency,
            retry: self.retry,
            once: RetryPolicy::once(),
            acquire_timeout: self.acquire_timeout.unwrap_or(DEFAULT_ACQUIRE_TIMEOUT),
        }
    }
}

/// Why [`Guard::admit`] returned no decision.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdmitError {
    /// The guard has no rate limit: configure one with [`GuardBuilder::rate_limit`].
    NoRateLimit,
    /// The rate limit returned no decision: see [`CheckError`].
    Check(CheckError),
}

impl fmt::Display for AdmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmitError::NoRateLimit => f.write_str(
                "this Guard has no rate limit: configure one with GuardBuilder::rate_limit",
            ),
            AdmitError::Check(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for AdmitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdmitError::NoRateLimit => None,
            AdmitError::Check(e) => Some(e),
        }
    }
}

/// Why [`Guard::call`] returned no success: the retry engine's [`RetryError`], whose
/// [`Shed`](RetryError::Shed) variant carries the concurrency limiter's [`AcquireError`] (no
/// permit was free within the acquire timeout, so the attempt was not made).
pub type GuardError<T, E> = RetryError<T, E, AcquireError>;

impl Guard {
    /// Starts configuring a guard.
    pub fn builder() -> GuardBuilder {
        GuardBuilder::default()
    }

    /// Checks one token of `key`'s quota for an inbound request.
    /// Without a configured rate limit this is [`AdmitError::NoRateLimit`].
    pub async fn admit(&self, key: &[u8]) -> Result<Decision, AdmitError> {
        self.admit_n(key, 1).await
    }

    /// Checks `cost` tokens of `key`'s quota.
    pub async fn admit_n(&self, key: &[u8], cost: u32) -> Result<Decision, AdmitError> {
        match &self.admission {
            Some(limit) => limit.check(key, cost).await.map_err(AdmitError::Check),
            None => Err(AdmitError::NoRateLimit),
        }
    }

    /// Makes an outbound call: each attempt holds a concurrency permit (if configured) whose
    /// outcome feeds the limit, and retryable outcomes are retried by the policy (if configured;
    /// without one, each call is made once).
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
            limiter: self.concurrency.as_deref(),
            timeout: self.acquire_timeout,
        };
        let policy = self.retry.as_ref().unwrap_or(&self.once);
        policy.run(op, classify, &mut permits).await
    }

    /// The inbound rate limit, if configured.
    pub fn rate_limit(&self) -> Option<&Arc<dyn KeyedLimit>> {
        self.admission.as_ref()
    }

    /// The outbound concurrency limiter, if configured.
    pub fn concurrency(&self) -> Option<&Arc<Limiter>> {
        self.concurrency.as_ref()
    }

    /// The retry policy, if configured.
    pub fn retry(&self) -> Option<&RetryPolicy> {
        self.retry.as_ref()
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("rate_limit", &self.admission.as_ref().map(|s| s.quota()))
            .field("concurrency", &self.concurrency.as_ref().map(|l| l.limit()))
            .field("retry", &self.retry)
            .field("acquire_timeout", &self.acquire_timeout)
            .finish()
    }
}

/// The attempt hook of [`Guard::call`]: one concurrency permit per attempt, its outcome from the
/// classification.
struct PermitPerAttempt<'a> {
    limiter: Option<&'a Limiter>,
    timeout: Duration,
}

impl<'a, T, E> AttemptHook<T, E> for PermitPerAttempt<'a> {
    type Ticket = Option<Permit<'a>>;
    type Refusal = AcquireError;

    async fn before(&mut self, _attempt: u32) -> Result<Option<Permit<'a>>, AcquireError> {
        match self.limiter {
            None => Ok(None),
            Some(limiter) => limiter.acquire(self.timeout).await.map(Some),
        }
    }

    fn after(&mut self, permit: Option<Permit<'a>>, end: AttemptEnd<'_, T, E>) {
        let Some(permit) = permit else { return };
        match end {
            AttemptEnd::Cancelled
            | AttemptEnd::Finished {
                class: Classification::Retryable { .. } | Classification::RetryAfterTooLarge,
                ..
            } => permit.dropped(),
            AttemptEnd::Finished {
                outcome: Ok(_),
                class: Classification::NotRetryable,
            } => permit.success(),
            AttemptEnd::Finished {
                outcome: Err(_),
                class: Classification::NotRetryable,
            } => permit.ignore(),
        }
    }
}
