//! The `Guard` facade: admission by quota, outbound calls under the concurrency limit with
//! retries that honour `Retry-After`, shedding, and cancellation. Time is tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use flowguard::backoff::{BackoffBounds, BackoffStrategy, Classification, GiveUp, RetryPolicy};
use flowguard::clock::ManualClock;
use flowguard::gcra::{KeyedRateLimiter, Quota};
use flowguard::vegas::{Aimd, Fixed, LimitBounds, Limiter};
use flowguard::{AdmitError, Guard, GuardError};
use tokio::time::Instant;

fn retry_on_err<T>(
    retry_after: Option<Duration>,
) -> impl FnMut(&Result<T, &'static str>) -> Classification {
    move |outcome| match outcome {
        Err(_) => Classification::Retryable { retry_after },
        Ok(_) => Classification::NotRetryable,
    }
}

fn policy(max_attempts: u32) -> RetryPolicy {
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(100)).unwrap();
    RetryPolicy::builder()
        .backoff(BackoffStrategy::Decorrelated(bounds))
        .max_attempts(max_attempts)
        .without_budget()
        .seed(7)
        .build()
        .unwrap()
}

#[tokio::test]
async fn admit_applies_the_quota_and_needs_one() {
    let store = KeyedRateLimiter::<String>::builder(Quota::per_minute(2).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let guard = Guard::builder().rate_limit(store).build().await.unwrap();
    assert!(guard.admit(b"a").await.unwrap().allowed);
    assert!(guard.admit(b"a").await.unwrap().allowed);
    let denied = guard.admit(b"a").await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after_secs(), Some(30));

    let bare = Guard::builder().build().await.unwrap();
    let err = bare.admit(b"a").await.unwrap_err();
    assert_eq!(err, AdmitError::NoRateLimit);
    assert!(err.to_string().contains("GuardBuilder::rate_limit"));
}

#[tokio::test(start_paused = true)]
async fn retries_never_come_back_before_retry_after() {
    let guard = Guard::builder().retry(policy(4)).build().await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let mut arrivals = vec![];
    let result = guard
        .call(
            |attempt| {
                calls.fetch_add(1, Ordering::SeqCst);
                arrivals.push(start.elapsed());
                async move { if attempt < 3 { Err("429") } else { Ok(attempt) } }
            },
            retry_on_err(Some(Duration::from_secs(2))),
        )
        .await;
    assert_eq!(result.unwrap(), 3);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    for pair in arrivals.windows(2) {
        assert!(pair[1] - pair[0] >= Duration::from_secs(2), "{arrivals:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_the_attempts_and_returns_the_last_outcome() {
    let guard = Guard::builder().retry(policy(3)).build().await.unwrap();
    let result: Result<u32, _> = guard
        .call(|_| async { Err("503") }, retry_on_err(None))
        .await;
    match result {
        Err(GuardError::GaveUp {
            reason: GiveUp::AttemptsExhausted { max: 3 },
            attempts: 3,
            last: Err("503"),
        }) => {}
        other => panic!("{other:?}"),
    }
    // Without a retry policy a call is made once.
    let once = Guard::builder().build().await.unwrap();
    let result: Result<u32, _> = once
        .call(|_| async { Err("503") }, retry_on_err(None))
        .await;
    assert!(matches!(
        result,
        Err(GuardError::GaveUp { attempts: 1, .. })
    ));
    // A final error is not retried.
    let result: Result<u32, _> = guard
        .call(|_| async { Err("400") }, |_| Classification::NotRetryable)
        .await;
    assert!(matches!(
        result,
        Err(GuardError::NotRetryable {
            attempts: 1,
            error: "400"
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn calls_are_shed_when_no_permit_frees_up() {
    let limiter = Limiter::builder(Fixed::new(1).unwrap()).build().unwrap();
    let guard = Guard::builder()
        .concurrency(limiter)
        .acquire_timeout(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let held = guard.concurrency().try_acquire().unwrap();
    let result: Result<u32, _> = guard
        .call(|_| async { Ok::<_, &str>(1) }, retry_on_err(None))
        .await;
    assert!(
        matches!(result, Err(GuardError::Shed { attempts: 0, .. })),
        "{result:?}"
    );
    held.success();
    assert_eq!(
        guard
            .call(|_| async { Ok::<_, &str>(1) }, retry_on_err(None))
            .await
            .unwrap(),
        1
    );
    assert_eq!(guard.concurrency().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn overload_signals_shrink_the_limit_and_cancelled_calls_release_their_permit() {
    let aimd = Aimd::builder()
        .bounds(LimitBounds::new(1, 100, 20).unwrap())
        .build()
        .unwrap();
    let guard = Guard::builder()
        .concurrency(Limiter::builder(aimd).build().unwrap())
        .retry(policy(2))
        .build()
        .await
        .unwrap();
    let before = guard.concurrency().limit();
    let _: Result<u32, _> = guard
        .call(|_| async { Err("503") }, retry_on_err(None))
        .await;
    let after = guard.concurrency().limit();
    assert!(
        after < before,
        "two dropped attempts must shrink the limit: {before} -> {after}"
    );

    // A call cancelled mid-flight (its future dropped) leaves no permit behind.
    let pending = guard.call(
        |_| std::future::pending::<Result<u32, &str>>(),
        retry_on_err(None),
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(1), pending)
            .await
            .is_err()
    );
    assert_eq!(guard.concurrency().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_permit_is_never_held_while_waiting_to_retry() {
    let limiter = Limiter::builder(Fixed::new(1).unwrap()).build().unwrap();
    let guard = Guard::builder()
        .concurrency(limiter)
        .retry(policy(2))
        .build()
        .await
        .unwrap();
    let waiting = guard.clone();
    let call = tokio::spawn(async move {
        waiting
            .call(
                |attempt| async move { if attempt < 2 { Err("429") } else { Ok(attempt) } },
                retry_on_err(Some(Duration::from_secs(10))),
            )
            .await
    });
    // The first attempt has failed and the call sleeps 10 s before its retry.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let other = guard.concurrency().try_acquire();
    assert!(other.is_ok(), "the sleeping call still holds its permit");
    drop(other);
    assert_eq!(call.await.unwrap().unwrap(), 2);
    assert_eq!(guard.concurrency().in_flight(), 0);
}

#[tokio::test]
async fn guard_calls_are_send_so_they_can_be_spawned() {
    fn assert_send<F: Send>(_: &F) {}
    let guard = Guard::builder()
        .concurrency(Limiter::builder(Fixed::new(4).unwrap()).build().unwrap())
        .retry(policy(3))
        .build()
        .await
        .unwrap();
    let call = guard.call(|_| async { Ok::<_, &str>(1) }, retry_on_err(None));
    assert_send(&call);
}
