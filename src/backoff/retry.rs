//! The one retry engine: [`RetryPolicy::run`] drives the attempts of a call, with an
//! [`AttemptHook`] around each attempt; [`RetryPolicy::retry`], [`Guard::call`](crate::Guard::call),
//! the reqwest middleware and the tower policy all decide through it.

use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, Instant as StdInstant};

use tokio::time::Instant;
use tracing::Instrument;

use super::error::{GiveUp, RetryError};
use super::metrics::GaveUpLabel;
use super::policy::{RetryPolicy, RetryState};

/// What a classifier decides about one attempt's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Classification {
    /// Worth another attempt, not before `retry_after` (the server's requested wait) if given.
    Retryable {
        /// The wait the server asked for; the policy never waits less.
        retry_after: Option<Duration>,
    },
    /// Worth another attempt in principle, but the server asked for a wait beyond
    /// [`MAX_RETRY_AFTER`](crate::headers::MAX_RETRY_AFTER): the policy gives up at once with
    /// [`GiveUp::RetryAfterTooLarge`] (keeping this outcome) rather than come back early.
    RetryAfterTooLarge,
    /// Final: success, or an error that a retry cannot fix.
    NotRetryable,
}

/// How one attempt ended, as an [`AttemptHook`] is told.
#[derive(Debug)]
pub enum AttemptEnd<'a, T, E> {
    /// The attempt finished with `outcome`, which the classifier judged `class`.
    Finished {
        /// The attempt's outcome.
        outcome: &'a Result<T, E>,
        /// The classifier's verdict on it.
        class: Classification,
    },
    /// The overall deadline passed while the attempt ran; it was cancelled.
    Cancelled,
}

/// What runs around each attempt of a retried call: the seam for anything that must hold for
/// exactly one attempt, such as a concurrency permit.
///
/// [`before`](Self::before) runs before every attempt and hands out a ticket (e.g. a permit) or
/// refuses, which ends the call with [`RetryError::Shed`]; [`after`](Self::after) gets the
/// ticket back with how the attempt ended. A ticket is never held across the wait between
/// attempts. When the caller drops the call's future during an attempt, the ticket is dropped
/// without `after` (a permit's drop releases it).
pub trait AttemptHook<T, E> {
    /// Held while one attempt runs.
    type Ticket;
    /// Why an attempt could not start.
    type Refusal;

    /// Called before attempt `attempt` (1 for the first) starts.
    fn before(&mut self, attempt: u32)
    -> impl Future<Output = Result<Self::Ticket, Self::Refusal>>;

    /// Called once attempt's outcome is classified, or it was cancelled at the deadline.
    fn after(&mut self, ticket: Self::Ticket, end: AttemptEnd<'_, T, E>);
}

/// The hook that does nothing: plain retries.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl<T, E> AttemptHook<T, E> for NoHook {
    type Ticket = ();
    type Refusal = Infallible;

    fn before(&mut self, _attempt: u32) -> impl Future<Output = Result<(), Infallible>> {
        std::future::ready(Ok(()))
    }

    fn after(&mut self, _ticket: (), _end: AttemptEnd<'_, T, E>) {}
}

impl RetryPolicy {
    /// Runs `op` until `classify` says an outcome is final or the policy gives up.
    ///
    /// `op` receives the attempt number (1 for the first). Waits use `tokio::time`, so tests
    /// can run them on paused time. A final `Ok` is returned as is; a final `Err` becomes
    /// [`RetryError::NotRetryable`]; giving up yields [`RetryError::GaveUp`] with the last
    /// outcome; an attempt still running at the deadline is dropped
    /// ([`RetryError::DeadlineElapsed`]). Dropping the returned future cancels the call
    /// (nothing is left behind). This is [`run`](Self::run) with no hook.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use flowguard::backoff::{Classification, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder().max_attempts(3).seed(1).build()?;
    /// let result = policy
    ///     .retry(
    ///         |attempt| async move { if attempt < 3 { Err("busy") } else { Ok(attempt) } },
    ///         |outcome: &Result<u32, &str>| match outcome {
    ///             Err(_) => Classification::Retryable { retry_after: Some(Duration::from_secs(1)) },
    ///             Ok(_) => Classification::NotRetryable,
    ///         },
    ///     )
    ///     .await;
    /// assert_eq!(result.unwrap(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn retry<T, E, Op, Fut, C>(&self, op: Op, classify: C) -> Result<T, RetryError<T, E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: FnMut(&Result<T, E>) -> Classification,
    {
        self.run(op, classify, &mut NoHook).await
    }

    /// The retry engine: [`retry`](Self::retry) with `hook` run around every attempt.
    ///
    /// Per attempt: `hook.before`, then `op`, bounded by the policy's deadline; the outcome is
    /// classified and handed to `hook.after`; a retryable outcome waits
    /// `max(backoff, Retry-After)` and goes again while attempts, budget and deadline allow.
    /// Every decision to retry or give up is logged at debug level and counted in the policy's
    /// [metrics](RetryPolicy#metrics) here, once for all callers, and each attempt (with its
    /// `hook.before`) runs in a `tracing` span `attempt` (debug level, field `attempt`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::future::Future;
    /// use flowguard::backoff::{AttemptEnd, AttemptHook, Classification, RetryPolicy};
    ///
    /// /// Counts attempts that ended retryable.
    /// struct Count(u32);
    /// impl<T, E> AttemptHook<T, E> for Count {
    ///     type Ticket = ();
    ///     type Refusal = std::convert::Infallible;
    ///     fn before(&mut self, _: u32) -> impl Future<Output = Result<(), Self::Refusal>> {
    ///         std::future::ready(Ok(()))
    ///     }
    ///     fn after(&mut self, _: (), end: AttemptEnd<'_, T, E>) {
    ///         if let AttemptEnd::Finished { class: Classification::Retryable { .. }, .. } = end {
    ///             self.0 += 1;
    ///         }
    ///     }
    /// }
    ///
    /// let policy = RetryPolicy::builder().max_attempts(3).seed(1).build()?;
    /// let mut count = Count(0);
    /// let result = policy
    ///     .run(
    ///         |attempt| async move { if attempt < 3 { Err("busy") } else { Ok(attempt) } },
    ///         |outcome: &Result<u32, &str>| match outcome {
    ///             Err(_) => Classification::Retryable { retry_after: None },
    ///             Ok(_) => Classification::NotRetryable,
    ///         },
    ///         &mut count,
    ///     )
    ///     .await;
    /// assert_eq!(result.unwrap(), 3);
    /// assert_eq!(count.0, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run<T, E, H, Op, Fut, C>(
        &self,
        mut op: Op,
        mut classify: C,
        hook: &mut H,
    ) -> Result<T, RetryError<T, E, H::Refusal>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: FnMut(&Result<T, E>) -> Classification,
        H: AttemptHook<T, E>,
    {
        let mut call = self.begin(Instant::now().into_std());
        loop {
            let attempts = call.attempts();
            let span = tracing::debug_span!("attempt", attempt = attempts);
            let ticket = match hook.before(attempts).instrument(span.clone()).await {
                Ok(ticket) => ticket,
                Err(error) => {
                    tracing::debug!(attempt = attempts, "attempt refused by its hook: call shed");
                    return Err(RetryError::Shed {
                        attempts: attempts - 1,
                        error,
                    });
                }
            };
            let attempt = op(attempts).instrument(span);
            let outcome = match call.deadline_at() {
                None => attempt.await,
                Some(at) => match tokio::time::timeout_at(at.into(), attempt).await {
                    Ok(outcome) => outcome,
                    Err(_elapsed) => {
                        hook.after(ticket, AttemptEnd::Cancelled);
                        tracing::debug!(attempt = attempts, "deadline passed during the attempt");
                        self.gave_up(GaveUpLabel::DeadlineElapsed);
                        return Err(RetryError::DeadlineElapsed { attempts });
                    }
                },
            };
            let class = classify(&outcome);
            hook.after(
                ticket,
                AttemptEnd::Finished {
                    outcome: &outcome,
                    class,
                },
            );
            let retry_after = match class {
                Classification::NotRetryable => {
                    return outcome.map_err(|error| RetryError::NotRetryable { attempts, error });
                }
                Classification::RetryAfterTooLarge => {
                    tracing::debug!(
                        attempt = attempts,
                        "not retrying: the server asked to wait beyond the Retry-After bound"
                    );
                    self.gave_up(GaveUpLabel::RetryAfterTooLarge);
                    return Err(RetryError::GaveUp {
                        reason: GiveUp::RetryAfterTooLarge,
                        attempts,
                        last: outcome,
                    });
                }
                Classification::Retryable { retry_after } => retry_after,
            };
            match call.next_wait(Instant::now().into_std(), retry_after) {
                Ok(wait) => tokio::time::sleep(wait).await,
                Err(reason) => {
                    return Err(RetryError::GaveUp {
                        reason,
                        attempts,
                        last: outcome,
                    });
                }
            }
        }
    }
}

impl RetryState {
    /// [`next_delay`](Self::next_delay), logged and counted: the step every retry loop (and the
    /// tower policy, whose loop tower drives) takes after a retryable outcome.
    pub(crate) fn next_wait(
        &mut self,
        now: StdInstant,
        retry_after: Option<Duration>,
    ) -> Result<Duration, GiveUp> {
        let attempt = self.attempts();
        let next = self.next_delay(now, retry_after);
        match &next {
            Ok(wait) => {
                tracing::debug!(attempt, ?wait, ?retry_after, "retrying");
                self.policy().retried();
            }
            Err(reason) => {
                tracing::debug!(attempt, %reason, "not retrying");
                self.policy().gave_up(reason.into());
            }
        }
        next
    }
}
