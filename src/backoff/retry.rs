//! The async retry loop: [`RetryPolicy::retry`] and the [`Classification`] its classifier returns.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::error::RetryError;
use super::policy::RetryPolicy;

/// What a classifier decides about one attempt's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classification {
    /// Worth another attempt, not before `retry_after` (the server's requested wait) if given.
    Retryable {
        /// The wait the server asked for; the policy never waits less.
        retry_after: Option<Duration>,
    },
    /// Final: success, or an error that a retry cannot fix.
    NotRetryable,
}

impl RetryPolicy {
    /// Runs `op` until `classify` says an outcome is final or the policy gives up.
    ///
    /// `op` receives the attempt number (1 for the first). Waits use `tokio::time`, so tests
    /// can run them on paused time. A final `Ok` is returned as is; a final `Err` becomes
    /// [`RetryError::NotRetryable`]; giving up yields [`RetryError::GaveUp`] with the last
    /// outcome; an attempt still running at the deadline is dropped
    /// ([`RetryError::DeadlineElapsed`]). Dropping the returned future cancels the call
    /// (nothing is left behind).
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
    pub async fn retry<T, E, Op, Fut, C>(
        &self,
        mut op: Op,
        mut classify: C,
    ) -> Result<T, RetryError<T, E>>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        C: FnMut(&Result<T, E>) -> Classification,
    {
        let mut call = self.begin(Instant::now().into_std());
        loop {
            let attempts = call.attempts();
            let attempt = op(attempts);
            let outcome = match call.deadline_at() {
                None => attempt.await,
                Some(at) => match tokio::time::timeout_at(at.into(), attempt).await {
                    Ok(outcome) => outcome,
                    Err(_) => return Err(RetryError::DeadlineElapsed { attempts }),
                },
            };
            let retry_after = match classify(&outcome) {
                Classification::NotRetryable => {
                    return outcome.map_err(|error| RetryError::NotRetryable { attempts, error });
                }
                Classification::Retryable { retry_after } => retry_after,
            };
            match call.next_delay(Instant::now().into_std(), retry_after) {
                Ok(wait) => {
                    tracing::debug!(attempt = attempts, ?wait, ?retry_after, "retrying");
                    tokio::time::sleep(wait).await;
                }
                Err(reason) => {
                    tracing::debug!(attempt = attempts, %reason, "not retrying");
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
