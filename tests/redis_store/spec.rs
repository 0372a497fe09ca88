//! The GCRA spec table through a real Redis, plus keys, TTLs and typed errors.
#![cfg(feature = "redis")]

use std::time::Duration;

use crate::support::RedisServer;
use flowguard::clock::ManualClock;
use flowguard::gcra::redis::{ConnectError, MAX_KEY_LEN, RedisStore};
use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter, RemoteStore, StoreError};
use flowguard::gcra::{CheckError, ConfigError, GcraError, Quota};

async fn explicit(
    server: &RedisServer,
    quota: Quota,
    clock: &ManualClock,
) -> RemoteRateLimiter<RedisStore> {
    let store = crate::support::redis_builder(server.url())
        .explicit_time(clock.clone())
        .connect()
        .await
        .unwrap();
    RemoteRateLimiter::builder(store, quota).build().unwrap()
}

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn cost_n_spends_exactly_n_tokens() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = explicit(&server, Quota::per_second(10).unwrap(), &clock).await;
    let d = limiter.check_key_n(b"k", 1).await.unwrap();
    assert!(d.allowed && d.degraded.is_none());
    assert_eq!(
        (
            d.limit,
            d.remaining().unwrap(),
            d.reset_after().unwrap(),
            d.retry_after
        ),
        (10, 9, Duration::from_millis(100), None)
    );
    let d = limiter.check_key_n(b"k", 2).await.unwrap();
    assert!(d.allowed);
    assert_eq!(
        (d.remaining().unwrap(), d.reset_after().unwrap()),
        (7, Duration::from_millis(300))
    );
    let d = limiter.check_key_n(b"k", 7).await.unwrap();
    assert!(d.allowed);
    assert_eq!(
        (d.remaining().unwrap(), d.reset_after().unwrap()),
        (0, Duration::from_secs(1))
    );
    let d = limiter.check_key_n(b"k", 1).await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
    assert_eq!(d.retry_after_secs(), Some(1));
}

#[tokio::test]
async fn five_per_second_refills_exactly() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = explicit(&server, Quota::per_second(5).unwrap(), &clock).await;
    for i in 0..5 {
        assert!(
            limiter.check_key(b"k").await.unwrap().allowed,
            "request {i}"
        );
    }
    let denied = limiter.check_key(b"k").await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(Duration::from_millis(200)));
    clock.advance(Duration::from_secs(2));
    for i in 0..5 {
        assert!(
            limiter.check_key(b"k").await.unwrap().allowed,
            "request {i} after 2 s"
        );
    }
    assert!(!limiter.check_key(b"k").await.unwrap().allowed);
    // Waiting exactly retry_after is enough; a microsecond less is not.
    let denied = limiter.check_key_n(b"k", 2).await.unwrap();
    let wait = denied.retry_after.unwrap();
    clock.advance(wait - Duration::from_micros(1));
    assert!(!limiter.check_key_n(b"k", 2).await.unwrap().allowed);
    clock.advance(Duration::from_micros(1));
    assert!(limiter.check_key_n(b"k", 2).await.unwrap().allowed);
}

#[tokio::test]
async fn cost_above_burst_is_an_error_without_a_round_trip() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = explicit(&server, Quota::per_second(5).unwrap(), &clock).await;
    assert_eq!(
        limiter.check_key_n(b"k", 6).await,
        Err(GcraError::InsufficientCapacity { cost: 6, burst: 5 }.into())
    );
    assert_eq!(server.cli(&["dbsize"]), "0");
    // Killed server: still an error, not a degraded decision, since nothing is asked.
    let mut server = server;
    server.kill();
    assert_eq!(
        limiter.check_key_n(b"k", 6).await,
        Err(GcraError::InsufficientCapacity { cost: 6, burst: 5 }.into())
    );
}

#[tokio::test]
async fn peeks_and_denials_change_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = explicit(&server, Quota::per_second(10).unwrap(), &clock).await;
    let peek = limiter.check_key_n(b"k", 0).await.unwrap();
    assert!(peek.allowed);
    assert_eq!(peek.remaining(), Some(10));
    assert_eq!(server.cli(&["dbsize"]), "0", "a peek stores nothing");
    let _ = limiter.check_key_n(b"k", 9).await.unwrap();
    let key = limiter.store().key(b"k");
    let mut conn = raw(&server).await;
    let before: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!limiter.check_key_n(b"k", 2).await.unwrap().allowed);
    assert_eq!(
        limiter
            .check_key_n(b"k", 0)
            .await
            .unwrap()
            .remaining()
            .unwrap(),
        1
    );
    let after: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(before, after);
}

#[tokio::test]
async fn server_time_keys_carry_the_tat_and_expire() {
    let server = RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .prefix("t:")
        .connect()
        .await
        .unwrap();
    assert!(store.uses_server_time());
    // 10 per minute: keys live long enough (18 s for cost 3) not to expire while the test looks.
    let limiter = RemoteRateLimiter::builder(store, Quota::per_minute(10).unwrap())
        .build()
        .unwrap();
    let d = limiter.check_key_n(b"\x00bin\xffary", 3).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining(), Some(7));
    let key = limiter.store().key(b"\x00bin\xffary");
    assert_eq!(key, b"t:=\x00bin\xffary");
    let mut conn = raw(&server).await;
    let tat: String = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        tat.bytes().all(|b| b.is_ascii_digit()),
        "integer microseconds: {tat}"
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        pttl > 17_000 && pttl <= 18_000,
        "PX TTL = reset_after: {pttl}"
    );

    // Long keys are stored under a bounded digest.
    let long = vec![b'x'; 1 << 20];
    assert!(limiter.check_key(&long).await.unwrap().allowed);
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("t:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys.iter().all(|k| k.len() <= 3 + 1 + MAX_KEY_LEN));
}

#[tokio::test]
async fn a_key_holding_something_else_is_a_typed_error() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let limiter = explicit(&server, Quota::per_second(10).unwrap(), &clock).await;
    let mut conn = raw(&server).await;
    let hash_key = limiter.store().key(b"h");
    let _: () = redis::cmd("HSET")
        .arg(&hash_key)
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = limiter.check_key(b"h").await.unwrap_err();
    assert!(
        matches!(&err, CheckError::Store(StoreError::WrongType { key }) if key == "flowguard:=h"),
        "{err:?}"
    );
    assert!(err.to_string().contains("own key prefix"), "{err}");
    let _: () = redis::cmd("SET")
        .arg(limiter.store().key(b"s"))
        .arg("hello")
        .query_async(&mut conn)
        .await
        .unwrap();
    let err = limiter.check_key(b"s").await.unwrap_err();
    assert!(
        matches!(err, CheckError::Store(StoreError::CorruptState { .. })),
        "{err:?}"
    );
    // Typed errors are not degradation: the next good key works at once.
    assert!(limiter.check_key(b"fine").await.unwrap().degraded.is_none());
}

#[tokio::test]
async fn bad_configuration_is_a_typed_error() {
    let server = RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .connect()
        .await
        .unwrap();
    // ~114 years: beyond what the script keeps exact.
    let too_long = Quota::per_hour(1).unwrap().with_burst(1_000_000).unwrap();
    assert!(matches!(
        RemoteRateLimiter::builder(store.clone(), too_long).build(),
        Err(ConfigError::StoreWindowTooLong { .. })
    ));
    // Faster than one token per microsecond is exact too (T = 1/2 µs).
    assert!(
        RemoteRateLimiter::builder(store.clone(), Quota::per_second(2_000_000).unwrap())
            .build()
            .is_ok()
    );
    let err = crate::support::redis_builder(server.url())
        .timeout(Duration::ZERO)
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err, ConnectError::Config(ConfigError::ZeroTimeout));
    let err = RemoteRateLimiter::builder(store.clone(), Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::local_share(1.5))
        .build()
        .unwrap_err();
    assert_eq!(err, ConfigError::InvalidShare { share: 1.5 });
    let err = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::local_instances(20))
        .build()
        .unwrap_err();
    assert!(matches!(err, ConfigError::LocalQuota { .. }), "{err:?}");
    let err = crate::support::redis_builder(server.url())
        .prefix("a{b")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ConnectError::Config(ConfigError::InvalidPrefix { .. })
    ));
    let err = crate::support::redis_builder("not a url")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(err, ConnectError::Config(ConfigError::InvalidUrl { .. })),
        "{err:?}"
    );
    let mut dead = RedisServer::start();
    let url = dead.url();
    dead.kill();
    let err = crate::support::redis_builder(&url)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::Unreachable { .. }), "{err:?}");
}

#[cfg(not(feature = "redis-tls"))]
#[tokio::test]
async fn tls_urls_need_the_feature() {
    let err = crate::support::redis_builder("rediss://127.0.0.1:6380")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err, ConnectError::Config(ConfigError::TlsNotEnabled));
}
