//! The `Guard` facade end to end, in one process and in real time (400 ticks of 5 ms: two
//! seconds, or a little more on a busy machine):
//!
//! * inbound: four clients send 200 requests/s each; each gets a quota of 100 requests/s (burst 20);
//! * outbound: every admitted request calls a dependency that serves 8 calls at once, 25 ms
//!   each (8 workers: 320 calls/s), and answers `503` beyond 16 calls in flight; the calls run
//!   under a Vegas concurrency limit and are retried (3 attempts at most, cap-aware jitter)
//!   inside a retry budget.
//!
//! Run: `cargo run --example guard`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use flowguard::backoff::{Classification, RetryBudget, RetryPolicy};
use flowguard::gcra::Quota;
use flowguard::vegas::{LimitBounds, Limiter, Vegas};
use flowguard::{Guard, GuardError};
use tokio::sync::Semaphore;

/// A dependency with 8 workers, 25 ms per call, which sheds (503) beyond 16 calls in flight.
struct Dependency {
    workers: Semaphore,
    in_flight: AtomicUsize,
    calls: AtomicU64,
}

impl Dependency {
    async fn call(&self) -> Result<&'static str, &'static str> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= 16 {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err("503");
        }
        let _worker = self.workers.acquire().await.map_err(|_| "closed")?;
        tokio::time::sleep(Duration::from_millis(25)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok("200")
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let vegas = Vegas::builder()
        .bounds(LimitBounds::new(2, 64, 4)?)
        .build()?;
    let guard = Guard::builder()
        .quota(Quota::per_second(100)?.with_burst(20)?)
        .concurrency(Limiter::builder(vegas).name("dependency").build()?)
        .acquire_timeout(Duration::from_millis(100))
        .retry(
            RetryPolicy::builder()
                .max_attempts(3)
                .budget(Arc::new(RetryBudget::new(Duration::from_secs(10), 5, 0.1)?))
                .build()?,
        )
        .build()
        .await?;
    let dependency = Arc::new(Dependency {
        workers: Semaphore::new(8),
        in_flight: AtomicUsize::new(0),
        calls: AtomicU64::new(0),
    });

    let (mut admitted, mut limited, mut ok, mut failed) = (0u32, 0u32, 0u32, 0u32);
    let mut handles = Vec::new();
    let start = std::time::Instant::now();
    // Two seconds: every 5 ms each of four clients sends a request (200/s each, 2x its quota).
    for tick in 0..400u32 {
        for client in 0..4u8 {
            let key = [b'c', client];
            let decision = guard.admit(&key).await?;
            if !decision.allowed {
                limited += 1; // would be HTTP 429 with decision.write_headers(..)
                continue;
            }
            admitted += 1;
            let (guard, dependency) = (guard.clone(), dependency.clone());
            handles.push(tokio::spawn(async move {
                guard
                    .call(
                        |_attempt| {
                            let dependency = dependency.clone();
                            async move { dependency.call().await }
                        },
                        |outcome: &Result<&str, &str>| match outcome {
                            Err(_) => Classification::Retryable { retry_after: None },
                            Ok(_) => Classification::NotRetryable,
                        },
                    )
                    .await
            }));
        }
        if tick % 100 == 0 {
            let limiter = guard.concurrency();
            println!(
                "t={:>4} ms  concurrency limit {:>2}, in flight {:>2}",
                tick * 5,
                limiter.limit(),
                limiter.in_flight()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for h in handles {
        match h.await? {
            Ok(_) => ok += 1,
            Err(GuardError::Shed { .. }) | Err(_) => failed += 1,
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!();
    println!(
        "inbound over {elapsed:.2} s: {admitted} admitted, {limited} answered 429 \
         (the quota allows at most 4 x (20 + 100 x {elapsed:.2}) = {:.0})",
        4.0 * (20.0 + 100.0 * elapsed)
    );
    println!(
        "outbound: {ok} succeeded, {failed} shed or failed, {} calls reached the dependency",
        dependency.calls.load(Ordering::Relaxed)
    );
    Ok(())
}
