//! [`RetryPolicy`]: backoff strategy, attempt cap, overall deadline and retry budget; and
//! [`RetryState`], the pure per-call state machine that decides each wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

use super::budget::RetryBudget;
use super::error::{ConfigError, GiveUp};
use super::jitter::BackoffBounds;
use super::metrics::{GaveUpLabel, RetryMetrics};
use super::strategy::{Backoff, BackoffStrategy};
use crate::headers::MAX_RETRY_AFTER;

/// How calls are retried. Cheap to clone; clones share the budget and the seed sequence.
///
/// Defaults: [`BackoffStrategy::CapAware`] from 100 ms to 20 s, 4 attempts, no deadline,
/// a fresh [`RetryBudget::default`] (10 s window, 10 retries/s, 20% of requests), named
/// `"default"`.
///
/// # Metrics
///
/// Registered once per policy with the recorder installed when it is built (install your
/// `metrics` recorder first), labelled `policy = <name>` ([`RetryPolicyBuilder::name`]), and
/// counted by the one retry engine ([`RetryPolicy::run`]) and the `tower` policy alike:
///
/// | metric | kind | meaning |
/// |---|---|---|
/// | `flowguard_retry_retries_total` | counter | attempts after the first, counted when the wait before them starts |
/// | `flowguard_retry_give_ups_total` | counter, label `reason` | calls whose last outcome was retryable but that were not tried again: `attempts_exhausted`, `budget_exhausted`, `deadline_exceeded` (the wait would pass the deadline), `retry_after_too_large`, `deadline_elapsed` (an attempt still running at the deadline was cancelled) |
///
/// Calls shed by a concurrency limit are counted by the limiter
/// (`flowguard_vegas_shed_total`, see [`vegas`](crate::vegas#metrics)).
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use flowguard::backoff::{BackoffBounds, BackoffStrategy, RetryBudget, RetryPolicy};
///
/// let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 1, 0.1)?);
/// let policy = RetryPolicy::builder()
///     .backoff(BackoffStrategy::Decorrelated(BackoffBounds::new(
///         Duration::from_millis(50),
///         Duration::from_secs(5),
///     )?))
///     .max_attempts(5)
///     .deadline(Duration::from_secs(30))
///     .budget(budget)
///     .seed(7)
///     .build()?;
/// assert_eq!(policy.max_attempts(), 5);
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    strategy: BackoffStrategy,
    max_attempts: u32,
    deadline: Option<Duration>,
    budget: Option<Arc<RetryBudget>>,
    seeds: Arc<SeedSequence>,
    metrics: Arc<RetryMetrics>,
}

/// Builder of a [`RetryPolicy`]; [`build`](Self::build) validates.
#[derive(Debug)]
pub struct RetryPolicyBuilder {
    strategy: Option<BackoffStrategy>,
    max_attempts: u32,
    deadline: Option<Duration>,
    budget: Option<Arc<RetryBudget>>,
    seed: Option<u64>,
    name: String,
}

impl RetryPolicy {
    /// A policy that makes one attempt and never retries (no budget, no deadline): what
    /// [`Guard::call`](crate::Guard::call) uses when no retry policy is configured.
    pub fn once() -> RetryPolicy {
        RetryPolicy::builder()
            .max_attempts(1)
            .without_budget()
            .build()
            .unwrap_or_else(|_| unreachable!("one attempt without a budget is a valid policy"))
    }

    /// Starts a builder with the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder {
            strategy: None,
            max_attempts: 4,
            deadline: None,
            budget: Some(Arc::new(RetryBudget::default())),
            seed: None,
            name: "default".to_owned(),
        }
    }

    /// Maximum number of attempts per call, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The overall deadline of a call, measured from its first attempt.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The shared retry budget, if any.
    pub fn budget(&self) -> Option<&Arc<RetryBudget>> {
        self.budget.as_ref()
    }

    /// The backoff strategy.
    pub fn strategy(&self) -> BackoffStrategy {
        self.strategy
    }

    /// Records a first attempt in the budget.
    pub fn record_request(&self, now: Instant) {
        if let Some(b) = &self.budget {
            b.deposit(now);
        }
    }

    /// Starts a call whose first attempt is made at `now`: records it in the budget and
    /// returns its state.
    pub fn begin(&self, now: Instant) -> RetryState {
        self.record_request(now);
        self.state_since(now)
    }

    /// The state of a call that started at `started` and was already recorded with
    /// [`record_request`](Self::record_request).
    pub fn state_since(&self, started: Instant) -> RetryState {
        RetryState {
            policy: self.clone(),
            attempts: 1,
            started,
            backoff: self.strategy.sequence(self.seeds.next()),
        }
    }

    /// Counts a call given up without [`next_delay`](RetryState::next_delay) (a `Retry-After`
    /// beyond the bound seen by the classifier, or an attempt cancelled at the deadline).
    pub(crate) fn gave_up(&self, why: GaveUpLabel) {
        self.metrics.gave_up(why);
    }

    /// Counts a retry.
    pub(crate) fn retried(&self) {
        self.metrics.retried();
    }
}

impl RetryPolicyBuilder {
    /// The backoff sequence between attempts.
    pub fn backoff(mut self, strategy: BackoffStrategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// Maximum attempts per call, the first included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// An overall deadline per call, from its first attempt: no attempt starts whose wait
    /// would reach it, and [`RetryPolicy::retry`] cancels an attempt still running at the
    /// deadline. (The `tower`/`reqwest` glue leaves running attempts to the client's timeout.)
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The retry budget, usually shared by every policy talking to one dependency.
    pub fn budget(mut self, budget: Arc<RetryBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// No retry budget: retries are bounded only by attempts and deadline.
    pub fn without_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Seeds the jitter of all calls, for reproducible runs (default: from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Names the policy in its [metrics](RetryPolicy#metrics) (label `policy`; default
    /// `"default"`): e.g. the dependency it calls.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Validates the configuration.
    ///
    /// # Errors
    /// [`ConfigError::ZeroAttempts`] or [`ConfigError::ZeroDeadline`].
    pub fn build(self) -> Result<RetryPolicy, ConfigError> {
        if self.max_attempts == 0 {
            return Err(ConfigError::ZeroAttempts);
        }
        if self.deadline == Some(Duration::ZERO) {
            return Err(ConfigError::ZeroDeadline);
        }
        let strategy = match self.strategy {
            Some(s) => s,
            None => BackoffStrategy::CapAware(BackoffBounds::new(
                Duration::from_millis(100),
                Duration::from_secs(20),
            )?),
        };
        let seed = self
            .seed
            .unwrap_or_else(|| SmallRng::from_os_rng().next_u64());
        Ok(RetryPolicy {
            strategy,
            max_attempts: self.max_attempts,
            deadline: self.deadline,
            budget: self.budget,
            seeds: Arc::new(SeedSequence(AtomicU64::new(seed))),
            metrics: Arc::new(RetryMetrics::register(&self.name)),
        })
    }
}

/// Hands out distinct, well-mixed seeds (SplitMix64) so concurrent calls do not share jitter.
#[derive(Debug)]
struct SeedSequence(AtomicU64);

impl SeedSequence {
    fn next(&self) -> u64 {
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The retry state of one call. Pure: time is an argument.
///
/// ```
/// use std::time::{Duration, Instant};
/// use flowguard::backoff::{GiveUp, RetryPolicy};
///
/// let policy = RetryPolicy::builder().max_attempts(2).seed(1).build()?;
/// let t0 = Instant::now();
/// let mut call = policy.begin(t0);
/// // The server asked for 3 s: the wait is at least that.
/// let wait = call.next_delay(t0, Some(Duration::from_secs(3))).unwrap();
/// assert!(wait >= Duration::from_secs(3));
/// assert_eq!(call.attempts(), 2);
/// assert_eq!(call.next_delay(t0 + wait, None), Err(GiveUp::AttemptsExhausted { max: 2 }));
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RetryState {
    policy: RetryPolicy,
    attempts: u32,
    started: Instant,
    backoff: Backoff,
}

impl RetryState {
    /// Attempts made or in progress (1 during the first attempt).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// When the call started.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The policy this call follows.
    pub(crate) fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The instant at which the overall deadline passes, if there is one.
    pub fn deadline_at(&self) -> Option<Instant> {
        self.policy
            .deadline
            .and_then(|d| self.started.checked_add(d))
    }

    /// After a retryable failure observed at `now`, with the server's requested wait
    /// `retry_after`: how long to wait before the next attempt, or why to give up.
    ///
    /// The wait is `max(next backoff delay, retry_after)`: never earlier than the server
    /// asked. Checks, in order: attempts left, a `retry_after` within
    /// [`MAX_RETRY_AFTER`], the deadline (failing at once when the wait would reach it),
    /// and finally takes one retry from the budget. On `Ok` the attempt count grows by one.
    pub fn next_delay(
        &mut self,
        now: Instant,
        retry_after: Option<Duration>,
    ) -> Result<Duration, GiveUp> {
        let max = self.policy.max_attempts;
        if self.attempts >= max {
            return Err(GiveUp::AttemptsExhausted { max });
        }
        let server_wait = retry_after.unwrap_or(Duration::ZERO);
        if server_wait > MAX_RETRY_AFTER {
            return Err(GiveUp::RetryAfterTooLarge);
        }
        let backoff = self.backoff.next().unwrap_or(Duration::ZERO);
        let wait = backoff.max(server_wait);
        if let Some(deadline) = self.policy.deadline {
            let remaining = deadline.saturating_sub(now.saturating_duration_since(self.started));
            if wait >= remaining {
                return Err(GiveUp::DeadlineExceeded { wait, remaining });
            }
        }
        if let Some(budget) = &self.policy.budget
            && !budget.try_withdraw(now)
        {
            return Err(GiveUp::BudgetExhausted);
        }
        self.attempts += 1;
        Ok(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_attempts: u32, deadline: Option<Duration>) -> RetryPolicy {
        let b = RetryPolicy::builder()
            .backoff(BackoffStrategy::Exponential(
                BackoffBounds::new(Duration::from_secs(1), Duration::from_secs(8)).unwrap(),
            ))
            .max_attempts(max_attempts)
            .without_budget()
            .seed(3);
        match deadline {
            Some(d) => b.deadline(d),
            None => b,
        }
        .build()
        .unwrap()
    }

    #[test]
    fn config_errors() {
        assert_eq!(
            RetryPolicy::builder().max_attempts(0).build().err(),
            Some(ConfigError::ZeroAttempts)
        );
        assert_eq!(
            RetryPolicy::builder()
                .deadline(Duration::ZERO)
                .build()
                .err(),
            Some(ConfigError::ZeroDeadline)
        );
    }

    #[test]
    fn retry_after_dominates_backoff() {
        let t0 = Instant::now();
        let mut s = policy(5, None).begin(t0);
        assert_eq!(s.next_delay(t0, None), Ok(Duration::from_secs(1)));
        assert_eq!(
            s.next_delay(t0, Some(Duration::from_secs(30))),
            Ok(Duration::from_secs(30))
        );
        assert_eq!(
            s.next_delay(t0, Some(Duration::from_secs(1))),
            Ok(Duration::from_secs(4))
        );
        assert_eq!(
            s.next_delay(t0, Some(MAX_RETRY_AFTER + Duration::from_secs(1))),
            Err(GiveUp::RetryAfterTooLarge)
        );
    }

    #[test]
    fn deadline_fails_fast() {
        let t0 = Instant::now();
        let mut s = policy(10, Some(Duration::from_secs(10))).begin(t0);
        let later = t0 + Duration::from_secs(4);
        assert_eq!(
            s.next_delay(later, Some(Duration::from_secs(6))),
            Err(GiveUp::DeadlineExceeded {
                wait: Duration::from_secs(6),
                remaining: Duration::from_secs(6)
            })
        );
        assert_eq!(s.attempts(), 1);
        assert!(s.next_delay(later, Some(Duration::from_secs(5))).is_ok());
    }

    #[test]
    fn budget_is_consulted_last() {
        let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 0, 1.0).unwrap());
        let p = RetryPolicy::builder()
            .budget(budget.clone())
            .max_attempts(3)
            .seed(1)
            .build()
            .unwrap();
        let t0 = Instant::now();
        let mut a = p.begin(t0);
        assert_eq!(budget.remaining(t0), 1);
        assert!(a.next_delay(t0, None).is_ok());
        assert_eq!(a.next_delay(t0, None), Err(GiveUp::BudgetExhausted));
        assert_eq!(budget.remaining(t0), 0);
    }

    #[test]
    fn calls_get_distinct_jitter() {
        let p = RetryPolicy::builder().seed(9).build().unwrap();
        let t0 = Instant::now();
        let a: Vec<_> = (0..3)
            .map(|_| p.state_since(t0).next_delay(t0, None).unwrap())
            .collect();
        assert!(a[0] != a[1] || a[1] != a[2]);
    }
}
