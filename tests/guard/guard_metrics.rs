//! What the outbound side reports through `metrics`: retries and give-ups per retry policy
//! (counted by the one retry engine, for `Guard::call` and the tower policy alike) and calls shed
//! by the concurrency limit. (The attempt spans are in `guard_spans.rs`.)

use crate::support::recorder;

use std::time::Duration;

use flowguard::backoff::{BackoffBounds, BackoffStrategy, Classification, GiveUp, RetryPolicy};
use flowguard::vegas::{Fixed, Limiter};
use flowguard::{Guard, GuardError};
use recorder::TestRecorder;

fn policy(name: &str, max_attempts: u32) -> RetryPolicy {
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(50)).unwrap();
    RetryPolicy::builder()
        .backoff(BackoffStrategy::Decorrelated(bounds))
        .max_attempts(max_attempts)
        .without_budget()
        .name(name)
        .seed(3)
        .build()
        .unwrap()
}

fn retry_errors(outcome: &Result<u32, &'static str>) -> Classification {
    match outcome {
        Err(_) => Classification::Retryable { retry_after: None },
        Ok(_) => Classification::NotRetryable,
    }
}

#[tokio::test(start_paused = true)]
async fn retries_give_ups_and_sheds_are_counted_once_each() {
    let (recorder, store) = TestRecorder::new();
    let (retry, limiter) = metrics::with_local_recorder(&recorder, || {
        let limiter = Limiter::builder(Fixed::new(1).unwrap())
            .name("inventory")
            .build()
            .unwrap();
        (policy("inventory", 3), limiter)
    });
    let guard = Guard::builder()
        .concurrency(limiter)
        .retry(retry)
        .acquire_timeout(Duration::from_millis(5))
        .build()
        .await
        .unwrap();
    let value = |key: &str| store.get(key).unwrap_or(0.0);

    // Fails twice, then succeeds: two retries, no give-up.
    let ok = guard
        .call(
            |attempt| async move { if attempt < 3 { Err("503") } else { Ok(attempt) } },
            retry_errors,
        )
        .await;
    assert_eq!(ok.unwrap(), 3);
    assert_eq!(
        value("flowguard_retry_retries_total{policy=inventory}"),
        2.0
    );

    // Always fails: two more retries, then one give-up for the attempts.
    let gave_up = guard.call(|_| async { Err("503") }, retry_errors).await;
    assert!(matches!(
        gave_up,
        Err(GuardError::GaveUp {
            reason: GiveUp::AttemptsExhausted { max: 3 },
            ..
        })
    ));
    assert_eq!(
        value("flowguard_retry_retries_total{policy=inventory}"),
        4.0
    );
    let give_ups = "flowguard_retry_give_ups_total{policy=inventory,reason=attempts_exhausted}";
    assert_eq!(value(give_ups), 1.0);

    // The limiter is full: the call is shed once, counted by the limiter, and not a give-up.
    let held = guard.concurrency().try_acquire().unwrap();
    let shed = guard.call(|_| async { Ok(1) }, retry_errors).await;
    assert!(matches!(shed, Err(GuardError::Shed { attempts: 0, .. })));
    assert_eq!(value("flowguard_vegas_shed_total{limiter=inventory}"), 1.0);
    assert_eq!(value(give_ups), 1.0);
    held.success();

    // The limiter's own metrics saw every attempt (3 + 3: 1 success, 5 drops) and the permit
    // held by hand (a success).
    let outcomes = |o: &str| {
        value(&format!(
            "flowguard_vegas_outcomes_total{{limiter=inventory,outcome={o}}}"
        ))
    };
    assert_eq!((outcomes("success"), outcomes("dropped")), (2.0, 5.0));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passed_mid_attempt_is_a_give_up_of_its_own() {
    let (recorder, store) = TestRecorder::new();
    let retry = metrics::with_local_recorder(&recorder, || {
        let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(50));
        RetryPolicy::builder()
            .backoff(BackoffStrategy::Decorrelated(bounds.unwrap()))
            .deadline(Duration::from_millis(100))
            .name("slow")
            .build()
            .unwrap()
    });
    let guard = Guard::builder().retry(retry).build().await.unwrap();
    let result = guard
        .call(
            |_| std::future::pending::<Result<u32, &str>>(),
            retry_errors,
        )
        .await;
    assert!(matches!(
        result,
        Err(GuardError::DeadlineElapsed { attempts: 1 })
    ));
    assert_eq!(
        store.get("flowguard_retry_give_ups_total{policy=slow,reason=deadline_elapsed}"),
        Some(1.0)
    );
}
