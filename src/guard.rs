//! [`Guard`]: the three protections behind one API — a quota for inbound requests, an adaptive
//! concurrency limit for outbound calls, and polite retries for those calls.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::{Classification, GiveUp, RetryPolicy};
use crate::gcra::{Decision, GcraError, RateLimitStore};
use crate::vegas::{AcquireError, Limiter, Permit};

/// Default time an outbound call waits for a concurrency permit before it is shed.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(50);

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
/// use flowguard::vegas::{Limiter, Vegas, VegasConfig};
/// use flowguard::Guard;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let guard = Guard::builder()
///     .rate_limit(KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(100)?))
///     .concurrency(Limiter::new(Vegas::new(VegasConfig::default())?)?)
///     .retry(RetryPolicy::builder().max_attempts(3).build()?)
///     .build();
///
/// // Inbound: is this client within its quota?
/// assert!(guard.admit(b"client-42").await?.allowed);
///
/// // Outbound: a call under the concurrency limit, retried while it is retryable.
/// let answer = guard
///     .call(
///         |attempt| async move { if attempt < 2 { Err("503") } else { Ok("200 OK") } },
///         |outcome: &Result<&str, &str>| match outcome {
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
    admission: Option<Arc<dyn RateLimitStore>>,
    concurrency: Option<Arc<Limiter>>,
    retry: Option<RetryPolicy>,
    acquire_timeout: Duration,
}

/// Configures a [`Guard`].
#[derive(Default)]
pub struct GuardBuilder {
    admission: Option<Arc<dyn RateLimitStore>>,
    concurrency: Option<Arc<Limiter>>,
    retry: Option<RetryPolicy>,
    acquire_timeout: Option<Duration>,
}

impl GuardBuilder {
    /// The quota inbound requests are admitted by: an in-memory
    /// [`KeyedRateLimiter<Vec<u8>>`](crate::gcra::KeyedRateLimiter), a Redis limiter (feature
    /// `redis`), a [two-tier](crate::gcra::two_tier) limiter, or any [`RateLimitStore`].
    pub fn rate_limit(mut self, store: impl RateLimitStore + 'static) -> Self {
        self.admission = Some(Arc::new(store));
        self
    }

    /// The same, sharing a store that other parts of the service also use.
    pub fn shared_rate_limit(mut self, store: Arc<dyn RateLimitStore>) -> Self {
        self.admission = Some(store);
        self
    }

    /// The adaptive concurrency limit outbound calls run under.
    pub fn concurrency(mut self, limiter: Limiter) -> Self {
        self.concurrency = Some(Arc::new(limiter));
        self
    }

    /// How long an outbound call waits for a permit before it is shed (default [`DEFAULT_ACQUIRE_TIMEOUT`]).
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
            acquire_timeout: self.acquire_timeout.unwrap_or(DEFAULT_ACQUIRE_TIMEOUT),
        }
    }
}

/// Why [`Guard::call`] returned no success.
#[derive(Debug)]
#[non_exhaustive]
pub enum GuardError<T, E> {
    /// No concurrency permit was free within the acquire timeout: the call was not made
    /// (shed it: answer 503, or degrade).
    Shed {
        /// Attempts made before this one.
        attempts: u32,
        /// The limiter's answer.
        error: AcquireError,
    },
    /// The classifier said the error is final.
    Failed {
        /// Attempts made, the failing one included.
        attempts: u32,
        /// The error of the last attempt.
        error: E,
    },
    /// The last outcome was retryable, but the policy stopped (attempts, budget, deadline).
    GaveUp {
        /// Why no further attempt was made.
        reason: GiveUp,
        /// Attempts made.
        attempts: u32,
        /// The last outcome (e.g. `Ok` of a 503 response, or a connection error).
        last: Result<T, E>,
    },
    /// The retry policy's deadline passed during an attempt, which was cancelled.
    DeadlineElapsed {
        /// Attempts made, the cancelled one included.
        attempts: u32,
    },
}

impl<T, E: fmt::Display> fmt::Display for GuardError<T, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuardError::Shed { error, .. } => write!(f, "call shed: {error}"),
            GuardError::Failed { attempts, error } => {
                write!(f, "call failed after {attempts} attempt(s): {error}")
            }
            GuardError::GaveUp {
                reason,
                attempts,
                last,
            } => match last {
                Ok(_) => write!(
                    f,
                    "gave up after {attempts} attempt(s) with a retryable response: {reason}"
                ),
                Err(e) => write!(
                    f,
                    "gave up after {attempts} attempt(s), last error {e}: {reason}"
                ),
            },
            GuardError::DeadlineElapsed { attempts } => {
                write!(
                    f,
                    "deadline passed during attempt {attempts}; the attempt was cancelled"
                )
            }
        }
    }
}

impl<T: fmt::Debug, E: fmt::Debug + fmt::Display> std::error::Error for GuardError<T, E> {}

impl Guard {
    /// Starts configuring a guard.
    pub fn builder() -> GuardBuilder {
        GuardBuilder::default()
    }

    /// Checks one token of `key`'s quota for an inbound request.
    /// Without a configured rate limit this is [`GcraError::NoRateLimit`].
    pub async fn admit(&self, key: &[u8]) -> Result<Decision, GcraError> {
        self.admit_n(key, 1).await
    }

    /// Checks `cost` tokens of `key`'s quota.
    pub async fn admit_n(&self, key: &[u8], cost: u32) -> Result<Decision, GcraError> {
        match &self.admission {
            Some(store) => store.check(key, cost).await,
            None => Err(GcraError::NoRateLimit),
        }
    }

    /// Makes an outbound call: each attempt holds a concurrency permit (if configured) whose
    /// outcome feeds the limit, and retryable outcomes are retried by the policy (if configured).
    ///
    /// `op` gets the attempt number (1 for the first). `classify` decides per outcome:
    /// [`Classification::Retryable`] outcomes count as *dropped* for the concurrency limit
    /// (overload signals such as 429, 503, timeouts), other errors as *ignored*, successes as
    /// *success*. A cancelled call releases its permit.
    pub async fn call<T, E, Op, Fut, C>(
        &self,
        mut op: Op,
        mut classify: C,
    ) -> Result<T, GuardError<T, E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: FnMut(&Result<T, E>) -> Classification,
    {
        let mut state = self
            .retry
            .as_ref()
            .map(|p| p.begin(Instant::now().into_std()));
        loop {
            let attempts = state.as_ref().map_or(1, |s| s.attempts());
            let permit = self.permit(attempts).await?;
            let attempt = op(attempts);
            let outcome = match state.as_ref().and_then(|s| s.deadline_at()) {
                None => attempt.await,
                Some(at) => match tokio::time::timeout_at(at.into(), attempt).await {
                    Ok(outcome) => outcome,
                    Err(_elapsed) => {
                        if let Some(p) = permit {
                            p.dropped();
                        }
                        return Err(GuardError::DeadlineElapsed { attempts });
                    }
                },
            };
            let class = classify(&outcome);
            if let Some(p) = permit {
                match (&outcome, class) {
                    (_, Classification::Retryable { .. }) => p.dropped(),
                    (Ok(_), Classification::NotRetryable) => p.success(),
                    (Err(_), Classification::NotRetryable) => p.ignore(),
                }
            }
            let retry_after = match class {
                Classification::NotRetryable => {
                    return outcome.map_err(|error| GuardError::Failed { attempts, error });
                }
                Classification::Retryable { retry_after } => retry_after,
            };
            let next = match state.as_mut() {
                Some(s) => s.next_delay(Instant::now().into_std(), retry_after),
                None => Err(GiveUp::AttemptsExhausted { max: 1 }),
            };
            match next {
                Ok(wait) => tokio::time::sleep(wait).await,
                Err(reason) => {
                    return Err(GuardError::GaveUp {
                        reason,
                        attempts,
                        last: outcome,
                    });
                }
            }
        }
    }

    async fn permit<T, E>(&self, attempts: u32) -> Result<Option<Permit<'_>>, GuardError<T, E>> {
        match &self.concurrency {
            None => Ok(None),
            Some(limiter) => match limiter.acquire(self.acquire_timeout).await {
                Ok(permit) => Ok(Some(permit)),
                Err(error) => Err(GuardError::Shed {
                    attempts: attempts - 1,
                    error,
                }),
            },
        }
    }

    /// The inbound rate limit, if configured.
    pub fn rate_limit(&self) -> Option<&Arc<dyn RateLimitStore>> {
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
