//! Limiters of different quotas over one store and prefix would keep one state per key for both
//! and spend each other's tokens: the second one is refused at build, with an error that says to
//! give each quota a prefix of its own. Limiters of one quota share a prefix freely.
#![cfg(feature = "redis")]

use flowguard::gcra::remote::RemoteRateLimiter;
use flowguard::gcra::{ConfigError, Quota};

use crate::support::RedisServer;

#[tokio::test]
async fn two_quotas_on_one_prefix_are_refused_and_distinct_prefixes_are_not() {
    let server = RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .connect()
        .await
        .unwrap();
    let per_second = Quota::per_second(10).unwrap();
    let per_hour = Quota::per_hour(100).unwrap();

    let first = RemoteRateLimiter::builder(store.clone(), per_second)
        .build()
        .unwrap();
    // The same quota again (another handler, another task): one state per key, as intended.
    let again = RemoteRateLimiter::builder(store.clone(), per_second)
        .build()
        .unwrap();
    // A quota of the same rule, written another way, decides alike: no conflict either.
    let same_rule = Quota::per_minute(600).unwrap().with_burst(10).unwrap();
    assert!(
        RemoteRateLimiter::builder(store.clone(), same_rule)
            .build()
            .is_ok()
    );

    let error = RemoteRateLimiter::builder(store.clone(), per_hour)
        .build()
        .unwrap_err();
    assert_eq!(
        error,
        ConfigError::KeySpaceShared {
            key_space: "\"flowguard:\"".into(),
            held_by: Box::new(per_second),
            refused: Box::new(per_hour),
        }
    );
    let message = error.to_string();
    assert!(message.contains("a prefix of its own"), "{message}");
    assert!(message.contains("with_prefix"), "{message}");

    // Each quota under its own prefix: both build, and their keys are apart.
    let hourly = RemoteRateLimiter::builder(store.with_prefix("hour:").unwrap(), per_hour)
        .build()
        .unwrap();
    for _ in 0..10 {
        assert!(first.check_key(b"u3").await.unwrap().allowed);
    }
    assert!(!again.check_key(b"u3").await.unwrap().allowed, "one state");
    assert_eq!(hourly.check_key(b"u3").await.unwrap().remaining(), Some(99));

    // Once every limiter of the first quota is gone, the prefix may serve another (a reload).
    drop((first, again));
    assert!(
        RemoteRateLimiter::builder(store.clone(), per_hour)
            .build()
            .is_ok()
    );
}

/// Keys that name their limit themselves may share a prefix across quotas, when the limiter says
/// so: nothing is refused, and the keys stay apart because they differ.
#[tokio::test]
async fn keys_that_name_their_quota_share_a_prefix_when_declared() {
    let server = RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .connect()
        .await
        .unwrap();
    let second = RemoteRateLimiter::builder(store.clone(), Quota::per_second(1).unwrap())
        .build()
        .unwrap();
    let hour = RemoteRateLimiter::builder(store.clone(), Quota::per_hour(5).unwrap())
        .namespaced_keys()
        .build()
        .unwrap();
    assert!(second.check_key(b"second:u3").await.unwrap().allowed);
    assert!(!second.check_key(b"second:u3").await.unwrap().allowed);
    assert_eq!(
        hour.check_key(b"hour:u3").await.unwrap().remaining(),
        Some(4)
    );
}
