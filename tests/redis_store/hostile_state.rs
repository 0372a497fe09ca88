//! Corrupt or hostile values at a limiter's key: anything the script does not write is
//! `CorruptState` and left alone; a state beyond what the quota can produce is read as a fully
//! spent key and rewritten, so no value locks a key out for longer than one window.
#![cfg(feature = "redis")]

use std::time::Duration;

use crate::support::RedisServer;
use flowguard::clock::ManualClock;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::{RemoteRateLimiter, RemoteStore, StoreError};
use flowguard::gcra::{CheckError, Quota};

/// Values no version of the script writes: exponents, infinities, hex, signs, spaces, decimals,
/// integers of 2^53 or more (not exact in Lua), fractions of den or more, empty and long strings.
const CORRUPT: &[&str] = &[
    "1e308",
    "inf",
    "-inf",
    "nan",
    "99999999999999999999",
    "0x7fffffffffffffff",
    "9223372036854775807",
    "9007199254740992",
    "-5",
    "+5",
    " 12",
    "12 ",
    "1.5",
    "",
    "hello",
    "12+3/2",
    "12+1/0",
    "12+/3",
    "12+1/3/4",
    "12+-1/3",
    "00000000000000000000000000000000000000000000000000000012",
];

async fn limiter(
    server: &RedisServer,
    prefix: &str,
    clock: Option<&ManualClock>,
) -> RemoteRateLimiter<RedisStore> {
    let builder = crate::support::redis_builder(server.url())
        .prefix(prefix)
        .timeout(Duration::from_secs(5));
    let builder = match clock {
        Some(clock) => builder.explicit_time(clock.clone()),
        None => builder,
    };
    let store = builder.connect().await.unwrap();
    // 10 per second, burst 10: T = 100 ms, a window of one second.
    RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .build()
        .unwrap()
}

/// `SET key value` through a raw connection (values are sent verbatim, spaces included).
fn set(server: &RedisServer, key: &[u8], value: &str) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut conn)
        .unwrap();
}

/// `GET key` through a raw connection.
fn get(server: &RedisServer, key: &[u8]) -> String {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("GET").arg(key).query(&mut conn).unwrap()
}

#[tokio::test]
async fn values_the_script_never_writes_are_corrupt_state_and_left_alone() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1000));
    for (mode, clock) in [("explicit", Some(&clock)), ("server", None)] {
        let limiter = limiter(&server, &format!("{mode}:"), clock).await;
        for (i, value) in CORRUPT.iter().enumerate() {
            let id = format!("k{i}");
            let key = limiter.store().key(id.as_bytes());
            set(&server, &key, value);
            for cost in [0, 1] {
                let err = limiter.check_key_n(id.as_bytes(), cost).await.unwrap_err();
                assert_eq!(
                    err,
                    CheckError::Store(StoreError::CorruptState {
                        key: String::from_utf8(key.clone()).unwrap()
                    }),
                    "{mode}: {value:?}"
                );
                assert!(err.to_string().contains("delete the key"), "{err}");
            }
            assert_eq!(get(&server, &key), *value, "{mode}: {value:?} left alone");
            // Deleting the key is the recovery: the key is then idle.
            server.cli(&["del", std::str::from_utf8(&key).unwrap()]);
            let d = limiter.check_key(id.as_bytes()).await.unwrap();
            assert!(
                d.allowed && d.remaining().unwrap() == 9,
                "{mode}: {value:?} after DEL"
            );
        }
    }
}

/// 2^53 - 1 µs is about 285 years after the epoch; i64::MAX was read as a TAT before and locked
/// the key out for about 292,000 years.
#[tokio::test]
async fn a_state_beyond_the_window_is_a_spent_key_for_one_window_at_most() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    clock.advance(Duration::from_secs(1000)); // now = 10^9 µs
    let limiter = limiter(&server, "far:", Some(&clock)).await;
    let key = limiter.store().key(b"k");
    for beyond in 0..3 {
        // now + B*T in µs, and values beyond it: far, by a microsecond, by a third of one.
        let horizon = (clock.elapsed() + Duration::from_secs(1)).as_micros();
        let value = &match beyond {
            0 => "9007199254740991".to_string(),
            1 => (horizon + 1).to_string(),
            _ => format!("{horizon}+1/3"),
        };
        set(&server, &key, value);
        // A peek reports a fully spent key and writes nothing.
        let peek = limiter.check_key_n(b"k", 0).await.unwrap();
        assert_eq!(
            (
                peek.allowed,
                peek.remaining().unwrap(),
                peek.reset_after().unwrap()
            ),
            (true, 0, Duration::from_secs(1))
        );
        assert_eq!(&get(&server, &key), value);
        // A spend is denied as from a full window, and the state is rewritten as one.
        let d = limiter.check_key(b"k").await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
        assert_eq!(d.reset_after(), Some(Duration::from_secs(1)));
        assert_eq!(get(&server, &key), horizon.to_string(), "now + B*T");
        let pttl: u64 = server
            .cli(&["pttl", std::str::from_utf8(&key).unwrap()])
            .parse()
            .unwrap();
        // One window of simulated time, plus the explicit-time slack of real time (1 h).
        assert!(pttl <= 1000 + 3_600_000, "PTTL {pttl}");
        // Waiting what the key was told is enough.
        clock.advance(d.retry_after.unwrap());
        assert!(limiter.check_key(b"k").await.unwrap().allowed, "{value}");
        clock.advance(Duration::from_secs(1));
    }
}

#[tokio::test]
async fn server_time_bounds_a_hostile_state_by_one_window_too() {
    let server = RedisServer::start();
    let limiter = limiter(&server, "srv:", None).await;
    let key = limiter.store().key(b"k");
    set(&server, &key, "9007199254740991");
    let d = limiter.check_key(b"k").await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
    let stored: u64 = get(&server, &key).parse().unwrap();
    assert!(stored < 9_007_199_254_740_991, "rewritten: {stored}");
    let pttl: u64 = server
        .cli(&["pttl", std::str::from_utf8(&key).unwrap()])
        .parse()
        .unwrap();
    assert!(
        pttl > 0 && pttl <= 1000,
        "the key expires within one window: {pttl}"
    );
}

/// A state written under another quota's denominator (the quota changed) is rounded up to the
/// next whole microsecond, never down.
#[tokio::test]
async fn a_fraction_of_another_quota_is_rounded_up() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let store = crate::support::redis_builder(server.url())
        .prefix("den:")
        .explicit_time(clock.clone())
        .connect()
        .await
        .unwrap();
    // 3 per second, burst 10: T = 333,333 1/3 µs, B*T = 3,333,333 1/3 µs.
    let quota = Quota::per_second(3).unwrap().with_burst(10).unwrap();
    let limiter = RemoteRateLimiter::builder(store, quota).build().unwrap();
    let key = limiter.store().key(b"k");
    // One token spent at 0 is 333,333 1/3 µs: nine tokens are left, exactly.
    set(&server, &key, "333333+1/3");
    let peek = limiter.check_key_n(b"k", 0).await.unwrap();
    assert_eq!(peek.reset_after(), Some(Duration::from_micros(333_334)));
    assert_eq!(peek.remaining(), Some(9));
    // 1/7 is not a fraction of this quota's: read as 333,334 µs, a little later, so only eight.
    set(&server, &key, "333333+1/7");
    let peek = limiter.check_key_n(b"k", 0).await.unwrap();
    assert_eq!(peek.reset_after(), Some(Duration::from_micros(333_334)));
    assert_eq!(peek.remaining(), Some(8));
}
