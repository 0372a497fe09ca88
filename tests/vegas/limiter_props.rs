//! Property test: random sequences of acquire, outcome, cancellation and task abort against a
//! limit that jumps around. No permit leaks, and no permit is granted beyond the limit.

use crate::common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Waker};
use std::time::Duration;

use common::Scripted;
use flowguard::clock::ManualClock;
use flowguard::vegas::{Limiter, Outcome, Permit, QueueOrder};
use proptest::prelude::*;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
enum Op {
    TryAcquire,
    /// A task that waits up to `timeout_ms` for a permit, then holds it until told the outcome.
    Spawn {
        timeout_ms: u64,
    },
    FinishHeld {
        index: usize,
        outcome: u8,
    },
    FinishTask {
        index: usize,
        outcome: u8,
    },
    AbortTask {
        index: usize,
    },
    /// An acquire polled once, then cancelled, with `release_between` permits finished between.
    CancelPending {
        release_between: bool,
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::TryAcquire),
        3 => (1u64..200).prop_map(|timeout_ms| Op::Spawn { timeout_ms }),
        3 => (any::<usize>(), 0u8..4).prop_map(|(index, outcome)| Op::FinishHeld { index, outcome }),
        3 => (any::<usize>(), 0u8..4).prop_map(|(index, outcome)| Op::FinishTask { index, outcome }),
        1 => any::<usize>().prop_map(|index| Op::AbortTask { index }),
        1 => any::<bool>().prop_map(|release_between| Op::CancelPending { release_between }),
        2 => (1u64..100).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// Outcome code 3 means "drop the permit without an outcome".
fn finish(permit: Permit, code: u8) {
    match code {
        0 => permit.success(),
        1 => permit.dropped(),
        2 => permit.finish(Outcome::Ignored),
        _ => drop(permit),
    }
}

/// Checks the admission rule for one permit and passes it on.
fn admitted(permit: Permit) -> Permit {
    assert!(
        permit.in_flight_at_grant() <= permit.limit_at_grant(),
        "granted beyond the limit: {} in flight, limit {}",
        permit.in_flight_at_grant(),
        permit.limit_at_grant()
    );
    permit
}

/// Counts permits held by tasks.
struct Holding(Arc<AtomicUsize>);

impl Holding {
    fn new(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(counter))
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Task {
    handle: JoinHandle<()>,
    outcome: Option<oneshot::Sender<u8>>,
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

async fn run(limits: Vec<usize>, ops: Vec<Op>, lifo: bool) {
    let algorithm = Scripted::new(limits[0], &limits[1..]);
    let limiter = Limiter::builder(algorithm)
        .clock(ManualClock::new())
        .order(if lifo {
            QueueOrder::Lifo
        } else {
            QueueOrder::Fifo
        })
        .build()
        .unwrap();
    let holding = Arc::new(AtomicUsize::new(0));
    let mut held: Vec<Permit> = Vec::new();
    let mut tasks: Vec<Task> = Vec::new();

    for op in ops {
        match op {
            Op::TryAcquire => {
                if let Ok(permit) = limiter.try_acquire() {
                    held.push(admitted(permit));
                }
            }
            Op::Spawn { timeout_ms } => {
                let (sender, receiver) = oneshot::channel::<u8>();
                let limiter = limiter.clone();
                let holding = Arc::clone(&holding);
                let handle = tokio::spawn(async move {
                    let Ok(permit) = limiter.acquire(Duration::from_millis(timeout_ms)).await
                    else {
                        return;
                    };
                    let permit = admitted(permit);
                    let _holding = Holding::new(&holding);
                    match receiver.await {
                        Ok(code) => finish(permit, code),
                        Err(_) => drop(permit),
                    }
                });
                tasks.push(Task {
                    handle,
                    outcome: Some(sender),
                });
            }
            Op::FinishHeld { index, outcome } => {
                if !held.is_empty() {
                    finish(held.swap_remove(index % held.len()), outcome);
                }
            }
            Op::FinishTask { index, outcome } => {
                let count = tasks.len().max(1);
                if let Some(task) = tasks.get_mut(index % count)
                    && let Some(sender) = task.outcome.take()
                {
                    // The task may have timed out already; then nobody listens.
                    let _ = sender.send(outcome);
                }
            }
            Op::AbortTask { index } => {
                if let Some(task) = tasks.get(index % tasks.len().max(1)) {
                    task.handle.abort();
                }
            }
            Op::CancelPending { release_between } => {
                let mut pending = Box::pin(limiter.acquire(Duration::from_secs(3600)));
                let polled = pending
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()));
                if let std::task::Poll::Ready(Ok(permit)) = polled {
                    held.push(admitted(permit));
                } else if release_between && !held.is_empty() {
                    // May grant the pending acquire, which is then dropped unpolled.
                    held.swap_remove(0).success();
                }
                drop(pending);
            }
            Op::Advance { ms } => tokio::time::advance(Duration::from_millis(ms)).await,
        }
        settle().await;

        let snapshot = limiter.snapshot();
        let in_flight = snapshot.in_flight;
        assert_eq!(
            in_flight,
            held.len() + holding.load(Ordering::SeqCst),
            "every permit in flight is held by someone"
        );
        if snapshot.waiting > 0 {
            assert!(
                in_flight >= snapshot.limit,
                "callers wait while capacity is free"
            );
        }
    }

    drop(held);
    for task in &mut tasks {
        task.outcome.take();
        task.handle.abort();
    }
    settle().await;
    let snapshot = limiter.snapshot();
    assert_eq!((snapshot.in_flight, snapshot.waiting), (0, 0), "leaked");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn no_leak_and_never_beyond_the_limit(
        limits in prop::collection::vec(1usize..6, 1..40),
        ops in prop::collection::vec(op(), 1..80),
        lifo: bool,
    ) {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
            .block_on(run(limits, ops, lifo));
    }
}
