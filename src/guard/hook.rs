//! [`PermitPerAttempt`]: the attempt hook of [`Guard::call`](super::Guard::call), one
//! concurrency permit per attempt, its outcome from the classification.

use std::time::Duration;

use crate::backoff::{AttemptEnd, AttemptHook, Classification};
use crate::vegas::{AcquireError, Limiter, Permit};

/// Takes a permit of `limiter` (waiting up to `timeout`) before each attempt and reports the
/// attempt's outcome to it: retryable outcomes (overload signals) and cancelled attempts are
/// drops, other errors are ignored, successes succeed.
pub(super) struct PermitPerAttempt<'a> {
    pub(super) limiter: &'a Limiter,
    pub(super) timeout: Duration,
}

impl<'a, T, E> AttemptHook<T, E> for PermitPerAttempt<'a> {
    type Ticket = Permit<'a>;
    type Refusal = AcquireError;

    async fn before(&mut self, _attempt: u32) -> Result<Permit<'a>, AcquireError> {
        self.limiter.acquire(self.timeout).await
    }

    fn after(&mut self, permit: Permit<'a>, end: AttemptEnd<'_, T, E>) {
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
