//! Retry policies for tests of the guard's HTTP retries.

use std::time::Duration;

use flowguard::backoff::{BackoffBounds, BackoffStrategy, RetryPolicy};

/// Two attempts at most, 10-20 ms apart unless the server asks for longer, within 30 s, without
/// a budget: a wait the server asks for beyond the deadline gives up at once.
pub fn two_attempts_within_30s() -> RetryPolicy {
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(20)).unwrap();
    RetryPolicy::builder()
        .backoff(BackoffStrategy::Decorrelated(bounds))
        .max_attempts(2)
        .deadline(Duration::from_secs(30))
        .without_budget()
        .build()
        .unwrap()
}
