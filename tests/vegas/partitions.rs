//! Partitions: guaranteed minimum shares that may borrow idle capacity.

use std::time::Duration;

use flowguard::vegas::{ConfigError, Fixed, Limiter, PartitionId, Permit};

fn limiter() -> (Limiter, PartitionId, PartitionId) {
    let limiter = Limiter::builder(Fixed::new(10).unwrap())
        .partition("live", 0.6)
        .partition("batch", 0.4)
        .build()
        .unwrap();
    let live = limiter.partition("live").unwrap();
    let batch = limiter.partition("batch").unwrap();
    (limiter, live, batch)
}

#[test]
fn an_idle_partition_lends_its_share() {
    let (limiter, _live, batch) = limiter();
    let borrowed: Vec<_> = (0..10)
        .map(|_| limiter.try_acquire_in(batch).unwrap())
        .collect();
    assert_eq!(
        limiter.in_flight(),
        10,
        "batch borrowed all of live's idle share"
    );
    assert!(
        limiter.try_acquire_in(batch).is_err(),
        "never beyond the limit"
    );
    drop(borrowed);
    assert_eq!(limiter.in_flight(), 0);
}

#[test]
fn snapshots_show_per_partition_usage() {
    let (limiter, live, batch) = limiter();
    let _a = limiter.try_acquire_in(live).unwrap();
    let _b = limiter.try_acquire_in(batch).unwrap();
    let _c = limiter.try_acquire_in(batch).unwrap();
    let _d = limiter.try_acquire().unwrap();
    assert_eq!(
        limiter.snapshot().partitions,
        [
            ("default".to_owned(), 1),
            ("live".to_owned(), 1),
            ("batch".to_owned(), 2)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_partition_below_its_guarantee_is_served_before_borrowers() {
    let (limiter, live, batch) = limiter();
    let mut borrowed: Vec<_> = (0..10)
        .map(|_| limiter.try_acquire_in(batch).unwrap())
        .collect();
    // A batch caller queues first, then a live caller (live holds 0 of its 6).
    let batch_waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter
                .acquire_in(batch, Duration::from_secs(60))
                .await
                .map(Permit::into_owned)
        })
    };
    tokio::task::yield_now().await;
    let live_waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter
                .acquire_in(live, Duration::from_secs(60))
                .await
                .map(Permit::into_owned)
        })
    };
    tokio::task::yield_now().await;
    assert_eq!(limiter.snapshot().waiting, 2);

    borrowed.pop().unwrap().success();
    let live_permit = live_waiter.await.unwrap().unwrap();
    assert_eq!(live_permit.partition(), live);
    assert_eq!(
        limiter.snapshot().waiting,
        1,
        "the earlier batch caller still waits"
    );

    borrowed.pop().unwrap().success();
    let batch_permit = batch_waiter.await.unwrap().unwrap();
    assert_eq!(batch_permit.partition(), batch);
    assert_eq!(limiter.in_flight(), 10);
}

#[test]
fn a_partition_at_its_guarantee_does_not_jump_the_queue() {
    let (limiter, live, batch) = limiter();
    let _live: Vec<_> = (0..6)
        .map(|_| limiter.try_acquire_in(live).unwrap())
        .collect();
    let _batch: Vec<_> = (0..4)
        .map(|_| limiter.try_acquire_in(batch).unwrap())
        .collect();
    assert!(limiter.try_acquire_in(live).is_err());
    assert!(limiter.try_acquire_in(batch).is_err());
}

#[test]
fn partition_settings_are_validated() {
    let build = |shares: &[(&str, f64)]| {
        shares
            .iter()
            .fold(
                Limiter::builder(Fixed::new(4).unwrap()),
                |b, (name, share)| b.partition(*name, *share),
            )
            .build()
            .map(drop)
    };
    assert!(matches!(
        build(&[("a", 0.7), ("b", 0.5)]),
        Err(ConfigError::SharesExceedOne { .. })
    ));
    assert!(matches!(
        build(&[("a", 0.5), ("a", 0.1)]),
        Err(ConfigError::DuplicatePartition { .. })
    ));
    assert!(matches!(
        build(&[("a", -0.1)]),
        Err(ConfigError::OutOfRange { .. })
    ));
    assert!(build(&[("a", 0.3), ("b", 0.7)]).is_ok());
}
