//! The limiter and its permits: admission, queueing, cancellation, RTT measurement, metrics.

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::Scripted;
use flowguard::clock::ManualClock;
use flowguard::vegas::{AcquireError, Fixed, Limiter, Outcome, OwnedPermit, QueueOrder};
use tokio::sync::mpsc;

/// Polls `future` once with a no-op waker.
fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

fn fixed(limit: usize) -> Limiter {
    Limiter::builder(Fixed::new(limit).unwrap())
        .build()
        .unwrap()
}

fn scripted(initial: usize, then: &[usize]) -> (Limiter, Scripted, ManualClock) {
    let algorithm = Scripted::new(initial, then);
    let clock = ManualClock::new();
    let limiter = Limiter::builder(algorithm.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    (limiter, algorithm, clock)
}

#[test]
fn try_acquire_rejects_at_once_when_the_limit_is_reached() {
    let limiter = fixed(2);
    let a = limiter.try_acquire().unwrap();
    let _b = limiter.try_acquire().unwrap();
    assert_eq!(
        limiter.try_acquire().unwrap_err(),
        AcquireError::Full {
            limit: 2,
            in_flight: 2
        }
    );
    a.success();
    assert!(limiter.try_acquire().is_ok());
}

#[test]
fn a_permit_measures_its_rtt_on_the_limiter_clock_and_reports_its_outcome() {
    let (limiter, algorithm, clock) = scripted(3, &[]);
    let first = limiter.try_acquire().unwrap();
    let second = limiter.try_acquire().unwrap();
    clock.advance(Duration::from_millis(7));
    assert_eq!(first.elapsed(), Duration::from_millis(7));
    first.success();
    clock.advance(Duration::from_millis(2));
    second.dropped();
    limiter.try_acquire().unwrap().ignore();
    let samples = algorithm.samples.lock().clone();
    let seen: Vec<_> = samples
        .iter()
        .map(|s| (s.rtt, s.in_flight, s.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            (Duration::from_millis(7), 1, Outcome::Success),
            (Duration::from_millis(9), 2, Outcome::Dropped),
            (Duration::ZERO, 1, Outcome::Ignored),
        ]
    );
}

#[test]
fn a_permit_dropped_without_an_outcome_is_released_and_ignored() {
    let (limiter, algorithm, _clock) = scripted(1, &[]);
    let permit = limiter.try_acquire().unwrap();
    assert_eq!(limiter.in_flight(), 1);
    drop(permit);
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(algorithm.samples.lock()[0].outcome, Outcome::Ignored);
}

#[test]
fn a_limiter_built_for_raii_callers_reports_dropped_permits_as_successes_with_their_rtt() {
    let algorithm = Scripted::new(2, &[]);
    let clock = ManualClock::new();
    let limiter = Limiter::builder(algorithm.clone())
        .clock(clock.clone())
        .unfinished(Outcome::Success)
        .build()
        .unwrap();
    let permit = limiter.try_acquire().unwrap();
    clock.advance(Duration::from_millis(4));
    drop(permit);
    // Finishing explicitly still wins.
    limiter.try_acquire().unwrap().ignore();
    let seen: Vec<_> = algorithm
        .samples
        .lock()
        .iter()
        .map(|s| (s.rtt, s.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            (Duration::from_millis(4), Outcome::Success),
            (Duration::ZERO, Outcome::Ignored)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_permit_told_its_outcome_early_reports_it_when_dropped_even_if_moved_or_owned() {
    let (limiter, algorithm, clock) = scripted(2, &[]);
    let mut permit = limiter.try_acquire().unwrap();
    assert_eq!(permit.unfinished(), Outcome::Ignored);
    permit.set_unfinished(Outcome::Dropped); // a timeout layer's deadline passed
    let owned = permit.into_owned();
    assert_eq!(owned.unfinished(), Outcome::Dropped);
    clock.advance(Duration::from_millis(3));
    tokio::spawn(async move { drop(owned) }).await.unwrap();
    let mut second = limiter.try_acquire().unwrap();
    second.set_unfinished(Outcome::Success); // the response arrived
    drop(second);
    let outcomes: Vec<_> = algorithm
        .samples
        .lock()
        .iter()
        .map(|s| (s.rtt, s.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            (Duration::from_millis(3), Outcome::Dropped),
            (Duration::ZERO, Outcome::Success)
        ]
    );
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn acquire_times_out_and_leaves_the_queue() {
    let limiter = fixed(1);
    let _held = limiter.try_acquire().unwrap();
    let error = limiter
        .acquire(Duration::from_millis(50))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        AcquireError::Timeout {
            waited: Duration::from_millis(50)
        }
    );
    assert_eq!(limiter.snapshot().waiting, 0);
}

/// Spawns `count` tasks that queue for a permit in order; each sends its index and its permit
/// through the returned channel when served, so the test decides when permits are released.
async fn queue_tasks(
    limiter: &Limiter,
    count: usize,
) -> mpsc::UnboundedReceiver<(usize, OwnedPermit)> {
    let (served, receiver) = mpsc::unbounded_channel();
    for index in 0..count {
        let limiter = limiter.clone();
        let served = served.clone();
        tokio::spawn(async move {
            let permit = limiter
                .acquire_owned(Duration::from_secs(60))
                .await
                .unwrap();
            served.send((index, permit)).unwrap();
        });
        // Let the task enqueue before the next one.
        tokio::task::yield_now().await;
    }
    assert_eq!(limiter.snapshot().waiting, count);
    receiver
}

async fn serve_order(order: QueueOrder) -> Vec<usize> {
    let limiter = Limiter::builder(Fixed::new(1).unwrap())
        .order(order)
        .build()
        .unwrap();
    let held = limiter.try_acquire().unwrap();
    let mut served = queue_tasks(&limiter, 3).await;
    held.success();
    let mut order = Vec::new();
    for _ in 0..3 {
        let (index, permit) = served.recv().await.unwrap();
        order.push(index);
        permit.success();
    }
    order
}

#[tokio::test(start_paused = true)]
async fn queued_callers_are_served_fifo_by_default() {
    assert_eq!(serve_order(QueueOrder::Fifo).await, [0, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn lifo_serves_the_newest_caller_first() {
    assert_eq!(serve_order(QueueOrder::Lifo).await, [2, 1, 0]);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_pending_acquire_leaves_the_queue() {
    let limiter = fixed(1);
    let held = limiter.try_acquire().unwrap();
    let mut pending = Box::pin(limiter.acquire(Duration::from_secs(1)));
    assert!(poll_once(pending.as_mut()).is_pending());
    assert_eq!(limiter.snapshot().waiting, 1);
    drop(pending);
    assert_eq!(limiter.snapshot().waiting, 0);
    held.success();
    assert_eq!(
        limiter.in_flight(),
        0,
        "nothing granted to the cancelled caller"
    );
}

#[tokio::test(start_paused = true)]
async fn a_permit_granted_to_a_cancelled_acquire_is_released_not_leaked() {
    let (limiter, algorithm, _clock) = scripted(1, &[]);
    let held = limiter.try_acquire().unwrap();
    let mut pending = Box::pin(limiter.acquire(Duration::from_secs(1)));
    assert!(poll_once(pending.as_mut()).is_pending());
    held.success();
    assert_eq!(limiter.in_flight(), 1, "granted to the queued caller");
    drop(pending); // never polled again
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(algorithm.samples.lock()[1].outcome, Outcome::Ignored);
}

#[tokio::test(start_paused = true)]
async fn aborting_a_task_releases_its_permit_or_its_place() {
    let limiter = fixed(1);
    let holder = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let _permit = limiter.acquire(Duration::from_secs(1)).await.unwrap();
            std::future::pending::<()>().await;
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(limiter.in_flight(), 1);
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move { limiter.acquire(Duration::from_secs(60)).await.map(drop) })
    };
    tokio::task::yield_now().await;
    assert_eq!(limiter.snapshot().waiting, 1);
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    assert_eq!(limiter.snapshot().waiting, 0);
    holder.abort();
    assert!(holder.await.unwrap_err().is_cancelled());
    assert_eq!(limiter.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_grown_limit_wakes_as_many_waiters_as_it_allows() {
    let (limiter, _algorithm, _clock) = scripted(1, &[3]);
    let held = limiter.try_acquire().unwrap();
    let mut served = queue_tasks(&limiter, 4).await;
    held.success(); // the limit grows from 1 to 3
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(served.recv().await.unwrap().1);
    }
    assert_eq!(limiter.in_flight(), 3);
    assert_eq!(limiter.snapshot().waiting, 1, "the fourth still waits");
}

#[tokio::test(start_paused = true)]
async fn no_permit_is_granted_while_in_flight_exceeds_a_shrunk_limit() {
    // Four held; the first release shrinks the limit to 2.
    let (limiter, _algorithm, _clock) = scripted(4, &[2]);
    let mut held: Vec<_> = (0..4).map(|_| limiter.try_acquire().unwrap()).collect();
    let mut served = queue_tasks(&limiter, 1).await;
    held.pop().unwrap().success();
    assert_eq!((limiter.limit(), limiter.in_flight()), (2, 3));
    assert!(limiter.try_acquire().is_err());
    held.pop().unwrap().success();
    tokio::task::yield_now().await;
    assert!(
        served.try_recv().is_err(),
        "2 in flight of 2: the waiter still waits"
    );
    held.pop().unwrap().success();
    let (_, permit) = served.recv().await.unwrap();
    assert_eq!(permit.in_flight_at_grant(), 2);
    assert_eq!(limiter.in_flight(), 2);
}

#[test]
fn snapshot_reports_rtt_percentiles_from_the_window() {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(Fixed::new(1).unwrap())
        .clock(clock.clone())
        .stats_window(Duration::from_secs(10))
        .build()
        .unwrap();
    for ms in 1..=100 {
        let permit = limiter.try_acquire().unwrap();
        clock.advance(Duration::from_millis(ms));
        permit.success();
    }
    let snapshot = limiter.snapshot();
    assert_eq!(
        (snapshot.limit, snapshot.in_flight, snapshot.samples),
        (1, 0, 100)
    );
    let p50 = snapshot.rtt_p50.unwrap().as_millis();
    let p99 = snapshot.rtt_p99.unwrap().as_millis();
    assert!((49..=51).contains(&p50), "p50 {p50}");
    assert!((98..=100).contains(&p99), "p99 {p99}");
}

#[test]
fn the_limiter_is_shared_across_threads_without_exceeding_its_limit() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Limiter>();
    fn assert_send<T: Send + 'static>() {}
    assert_send::<OwnedPermit>();

    let limiter = Arc::new(fixed(3));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                let mut granted = 0;
                for _ in 0..5_000 {
                    if let Ok(permit) = limiter.try_acquire() {
                        assert!(permit.in_flight_at_grant() <= 3);
                        granted += 1;
                        permit.success();
                    }
                }
                granted
            })
        })
        .collect();
    let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(granted > 0);
    assert_eq!(limiter.in_flight(), 0);
}

#[test]
fn invalid_limiter_settings_are_typed_errors() {
    let error = Limiter::builder(Fixed::new(1).unwrap())
        .stats_window(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(error.to_string().contains("stats_window"), "{error}");
}

#[tokio::test]
async fn an_owned_permit_outlives_its_borrow_and_keeps_its_grant_time() {
    let (limiter, algorithm, clock) = scripted(2, &[]);
    let permit = limiter.try_acquire().unwrap();
    clock.advance(Duration::from_millis(3));
    // The conversion hands the same permit over: nothing is released, nothing granted.
    let owned: OwnedPermit = permit.into_owned();
    assert_eq!(limiter.in_flight(), 1);
    assert!(algorithm.samples.lock().is_empty());
    let task_clock = clock.clone();
    tokio::spawn(async move {
        task_clock.advance(Duration::from_millis(4));
        owned.success();
    })
    .await
    .unwrap();
    assert_eq!(limiter.in_flight(), 0);
    let samples = algorithm.samples.lock().clone();
    assert_eq!(samples.len(), 1, "released exactly once");
    assert_eq!(
        samples[0].rtt,
        Duration::from_millis(7),
        "RTT from the original grant"
    );
    assert_eq!(samples[0].outcome, Outcome::Success);

    // The owned forms of both acquire calls.
    let a = limiter.try_acquire_owned().unwrap();
    let b = limiter.acquire_owned(Duration::from_secs(1)).await.unwrap();
    assert!(limiter.try_acquire_owned().is_err());
    drop((a, b));
    assert_eq!(limiter.in_flight(), 0);
}
