//! The async retry loop on tokio's paused (virtual) clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use flowguard::backoff::{
    BackoffBounds, BackoffStrategy, Classification, GiveUp, RetryBudget, RetryError, RetryPolicy,
};
use tokio::time::Instant;

fn policy(max_attempts: u32) -> flowguard::backoff::RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(BackoffStrategy::CapAware(
            BackoffBounds::new(Duration::from_millis(100), Duration::from_secs(1)).unwrap(),
        ))
        .max_attempts(max_attempts)
        .without_budget()
        .seed(11)
}

/// Every error is retryable and asks for `retry_after`.
fn asks(retry_after: Option<Duration>) -> impl FnMut(&Result<u32, &'static str>) -> Classification {
    move |outcome| match outcome {
        Ok(_) => Classification::NotRetryable,
        Err(_) => Classification::Retryable { retry_after },
    }
}

#[tokio::test(start_paused = true)]
async fn never_retries_before_retry_after() {
    let p = policy(4).build().unwrap();
    let mut times = Vec::new();
    let result = p
        .retry(
            |attempt| {
                times.push(Instant::now());
                async move {
                    if attempt < 4 {
                        Err("busy")
                    } else {
                        Ok(attempt)
                    }
                }
            },
            asks(Some(Duration::from_secs(5))),
        )
        .await;
    assert_eq!(result.unwrap(), 4);
    assert_eq!(times.len(), 4);
    for pair in times.windows(2) {
        // Backoff is at most 1 s here, so the server's 5 s is exactly the wait.
        assert_eq!(pair[1] - pair[0], Duration::from_secs(5));
    }
}

#[tokio::test(start_paused = true)]
async fn backoff_applies_without_retry_after() {
    let p = policy(6).build().unwrap();
    let mut times = Vec::new();
    let _ = p
        .retry(
            |_| {
                times.push(Instant::now());
                async { Err::<u32, _>("down") }
            },
            asks(None),
        )
        .await;
    assert_eq!(times.len(), 6);
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(100) && gap <= Duration::from_secs(1),
            "{gap:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn deadline_fails_fast_when_retry_after_is_beyond_it() {
    let p = policy(10)
        .deadline(Duration::from_secs(10))
        .build()
        .unwrap();
    let start = Instant::now();
    let calls = AtomicU32::new(0);
    let result = p
        .retry(
            |_| {
                calls.fetch_add(1, Ordering::Relaxed);
                async { Err::<u32, _>("rate limited") }
            },
            asks(Some(Duration::from_secs(30))),
        )
        .await;
    let err = result.unwrap_err();
    assert!(matches!(
        err.give_up_reason(),
        Some(GiveUp::DeadlineExceeded { wait, .. }) if *wait == Duration::from_secs(30)
    ));
    assert_eq!(err.into_last(), Some(Err("rate limited")));
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    // Failed at once: no virtual time passed.
    assert_eq!(Instant::now(), start);
}

#[tokio::test(start_paused = true)]
async fn attempts_exhausted_carries_the_last_error() {
    let p = policy(3).build().unwrap();
    let err = p
        .retry(
            |n| async move { Err::<u32, _>(["a", "b", "c", "d"][n as usize - 1]) },
            asks(None),
        )
        .await
        .unwrap_err();
    assert_eq!(err.attempts(), 3);
    assert_eq!(
        err.give_up_reason(),
        Some(&GiveUp::AttemptsExhausted { max: 3 })
    );
    assert_eq!(
        err.to_string(),
        "gave up after 3 attempt(s): all 3 attempts failed (last error: c)"
    );
    assert_eq!(err.into_last(), Some(Err("c")));
}

#[tokio::test(start_paused = true)]
async fn not_retryable_outcomes_return_at_once() {
    let p = policy(5).build().unwrap();
    let err = p
        .retry(
            |_| async { Err::<u32, _>("bad request") },
            |_: &Result<u32, &str>| Classification::NotRetryable,
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        RetryError::NotRetryable {
            attempts: 1,
            error: "bad request"
        }
    ));
    // A retryable *response* (Ok) that runs out of attempts is returned inside the error.
    let err = p
        .retry(
            |_| async { Ok::<u32, &str>(429) },
            |_: &Result<u32, &str>| Classification::Retryable { retry_after: None },
        )
        .await
        .unwrap_err();
    assert_eq!(err.into_last(), Some(Ok(429)));
}

#[tokio::test(start_paused = true)]
async fn shared_budget_caps_calls_to_a_dead_dependency() {
    // 10% of requests plus nothing per second, over 10 s.
    let budget = Arc::new(RetryBudget::new(Duration::from_secs(10), 0, 0.1).unwrap());
    let p = policy(5).budget(budget).build().unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (p, calls) = (p.clone(), calls.clone());
        tasks.push(tokio::spawn(async move {
            p.retry(
                |_| {
                    calls.fetch_add(1, Ordering::Relaxed);
                    async { Err::<u32, _>("503") }
                },
                asks(None),
            )
            .await
        }));
    }
    let mut exhausted = 0;
    for t in tasks {
        if t.await.unwrap().unwrap_err().give_up_reason() == Some(&GiveUp::BudgetExhausted) {
            exhausted += 1;
        }
    }
    // 50 first attempts + 10% of 50 = 55 calls, not 50 * 5 = 250.
    assert_eq!(calls.load(Ordering::Relaxed), 55);
    // Every call, the 5 retried ones included, ends on the empty budget.
    assert_eq!(exhausted, 50);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_call_cancels_it() {
    let p = policy(5).build().unwrap();
    let calls = AtomicU32::new(0);
    let call = p.retry(
        |_| {
            calls.fetch_add(1, Ordering::Relaxed);
            async { Err::<u32, _>("busy") }
        },
        asks(Some(Duration::from_secs(60))),
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_running_at_the_deadline_is_cancelled() {
    let p = policy(5).deadline(Duration::from_secs(10)).build().unwrap();
    let start = Instant::now();
    let err = p
        .retry(
            |attempt| async move {
                // The first attempt fails fast; the second hangs.
                if attempt == 2 {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                }
                Err::<u32, _>("slow")
            },
            asks(Some(Duration::from_secs(4))),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RetryError::DeadlineElapsed { attempts: 2 }));
    assert_eq!(start.elapsed(), Duration::from_secs(10));
    assert_eq!(err.into_last(), None);
}

/// Records what the engine tells an attempt hook, and refuses attempt `refuse_at`.
struct Recorder {
    events: Vec<String>,
    refuse_at: u32,
}

impl flowguard::backoff::AttemptHook<u32, &'static str> for Recorder {
    type Ticket = u32;
    type Refusal = &'static str;

    async fn before(&mut self, attempt: u32) -> Result<u32, &'static str> {
        self.events.push(format!("before {attempt}"));
        if attempt == self.refuse_at {
            return Err("no permit");
        }
        Ok(attempt)
    }

    fn after(&mut self, ticket: u32, end: flowguard::backoff::AttemptEnd<'_, u32, &'static str>) {
        use flowguard::backoff::AttemptEnd;
        let what = match end {
            AttemptEnd::Finished {
                class: Classification::Retryable { .. },
                ..
            } => "retryable",
            AttemptEnd::Finished { outcome: Ok(_), .. } => "ok",
            AttemptEnd::Finished {
                outcome: Err(_), ..
            } => "final error",
            AttemptEnd::Cancelled => "cancelled",
        };
        self.events.push(format!("after {ticket} {what}"));
    }
}

#[tokio::test(start_paused = true)]
async fn the_engine_runs_the_hook_around_every_attempt_and_never_across_a_wait() {
    let mut hook = Recorder {
        events: vec![],
        refuse_at: 0,
    };
    let result = policy(4)
        .build()
        .unwrap()
        .run(
            |attempt| async move {
                if attempt < 3 {
                    Err("busy")
                } else {
                    Ok(attempt)
                }
            },
            asks(None),
            &mut hook,
        )
        .await;
    assert_eq!(result.unwrap(), 3);
    assert_eq!(
        hook.events,
        [
            "before 1",
            "after 1 retryable",
            "before 2",
            "after 2 retryable",
            "before 3",
            "after 3 ok"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_refusing_hook_sheds_the_call_and_a_deadline_cancels_the_attempt() {
    let mut hook = Recorder {
        events: vec![],
        refuse_at: 2,
    };
    let result = policy(4)
        .build()
        .unwrap()
        .run(|_| async { Err::<u32, _>("busy") }, asks(None), &mut hook)
        .await;
    assert!(
        matches!(
            result,
            Err(RetryError::Shed {
                attempts: 1,
                error: "no permit"
            })
        ),
        "{result:?}"
    );
    assert_eq!(hook.events, ["before 1", "after 1 retryable", "before 2"]);

    let mut hook = Recorder {
        events: vec![],
        refuse_at: 0,
    };
    let result = policy(4)
        .deadline(Duration::from_secs(1))
        .build()
        .unwrap()
        .run(
            |_| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<u32, &str>(1)
            },
            asks(None),
            &mut hook,
        )
        .await;
    assert!(
        matches!(result, Err(RetryError::DeadlineElapsed { attempts: 1 })),
        "{result:?}"
    );
    assert_eq!(hook.events, ["before 1", "after 1 cancelled"]);
}
