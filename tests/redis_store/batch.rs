//! Several decisions in one script call, on a real Redis: coalesced independent decisions (one
//! bad key fails only its own decision; keys keep their TTL) and all-or-nothing groups
//! (`RemoteStore::decide_all`, `RemoteRateLimiter::check_all`), also under contention and with
//! the store down. Each test starts its own `redis-server` on a free loopback port.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::Duration;

use crate::support::RedisServer;
use flowguard::clock::ManualClock;
use flowguard::gcra::redis::{DEFAULT_MAX_BATCH, RedisStore};
use flowguard::gcra::remote::{
    FailurePolicy, QuotaCheck, RemoteRateLimiter, RemoteStore, StoreError, StoreItem,
};
use flowguard::gcra::{CheckError, ConfigError, Decision, Degradation, Quota};

/// The script of coalesced calls.
const GENERAL: &str = include_str!("../../src/gcra/redis/gcra.lua");

/// Spawns `check_key_n(key, cost)` on `limiter` and lets it send (or queue) its call.
async fn spawn_check(
    limiter: &RemoteRateLimiter<RedisStore>,
    key: &[u8],
    cost: u32,
) -> tokio::task::JoinHandle<Result<Decision, CheckError>> {
    let (limiter, key) = (limiter.clone(), key.to_vec());
    let task = tokio::spawn(async move { limiter.check_key_n(&key, cost).await });
    tokio::task::yield_now().await;
    task
}

/// A store at `url` (prefix `fg:`, up to `max_batch` decisions per call) and a fail-closed
/// limiter of 10 per minute over it, with the script loaded, and the script calls sent so far:
/// the counts after it are the decisions' calls.
async fn warm_limiter(
    server: &RedisServer,
    url: String,
    max_batch: usize,
) -> (RedisStore, RemoteRateLimiter<RedisStore>, u64) {
    // The warm-up check is a call of its own (the lone script); the coalesced calls' script is
    // cached too (connect loads it, but a user without the SCRIPT permission cannot), so the
    // counts below are the scenario's calls without a first NOSCRIPT retry.
    let sha = server.cli(&["script", "load", GENERAL]);
    assert_eq!(sha.len(), 40, "{sha}");
    let store = crate::support::redis_builder(url)
        .prefix("fg:")
        .timeout(Duration::from_secs(5))
        .max_batch(max_batch)
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store.clone(), Quota::per_minute(10).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    assert!(limiter.check_key(b"warm").await.unwrap().allowed);
    let before = store.script_calls();
    (store, limiter, before)
}

#[tokio::test(flavor = "current_thread")]
async fn a_bad_key_fails_only_its_own_decision_in_a_coalesced_call() {
    let mut server = RedisServer::start();
    server.cli(&["rpush", "fg:=list", "x"]);
    server.cli(&["set", "fg:=foreign", "1e308"]);
    let (store, limiter, before) = warm_limiter(&server, server.url(), DEFAULT_MAX_BATCH).await;
    // The first call is held by the stopped server; the others queue and go together.
    server.pause();
    let first = spawn_check(&limiter, b"a", 1).await;
    let good = spawn_check(&limiter, b"b", 2).await;
    let wrong = spawn_check(&limiter, b"list", 1).await;
    let foreign = spawn_check(&limiter, b"foreign", 1).await;
    let again = spawn_check(&limiter, b"b", 3).await;
    server.resume();
    assert_eq!(first.await.unwrap().unwrap().remaining(), Some(9));
    assert_eq!(good.await.unwrap().unwrap().remaining(), Some(8));
    assert_eq!(
        wrong.await.unwrap(),
        Err(CheckError::Store(StoreError::WrongType {
            key: "fg:=list".into()
        }))
    );
    assert_eq!(
        foreign.await.unwrap(),
        Err(CheckError::Store(StoreError::CorruptState {
            key: "fg:=foreign".into()
        }))
    );
    assert_eq!(
        again.await.unwrap().unwrap().remaining().unwrap(),
        5,
        "decided after its neighbour on the same key"
    );
    // The first alone, the four others together, and the list key again alone (to report its
    // own error); the foreign value was reported by the coalesced call itself.
    assert_eq!(store.script_calls() - before, 3);
    assert_eq!(server.cli(&["get", "fg:=foreign"]), "1e308", "left alone");
    assert_eq!(server.cli(&["lrange", "fg:=list", "0", "-1"]), "x");
}

/// The scenario of `a_bad_key_fails_only_its_own_decision_in_a_coalesced_call` with a peek on the
/// key of another type (a request that writes nothing), through a store connecting to `url`.
async fn coalesced_peek_on_a_list(server: &mut RedisServer, url: String) {
    server.cli(&["rpush", "fg:=list", "x"]);
    let (store, limiter, before) = warm_limiter(server, url, DEFAULT_MAX_BATCH).await;
    server.pause();
    let first = spawn_check(&limiter, b"a", 1).await;
    let good = spawn_check(&limiter, b"b", 2).await;
    let peek = spawn_check(&limiter, b"list", 0).await;
    let fresh_peek = spawn_check(&limiter, b"c", 0).await;
    let again = spawn_check(&limiter, b"b", 3).await;
    server.resume();
    assert_eq!(first.await.unwrap().unwrap().remaining(), Some(9));
    assert_eq!(good.await.unwrap().unwrap().remaining(), Some(8));
    assert_eq!(
        peek.await.unwrap(),
        Err(CheckError::Store(StoreError::WrongType {
            key: "fg:=list".into()
        }))
    );
    assert_eq!(fresh_peek.await.unwrap().unwrap().remaining(), Some(10));
    assert_eq!(again.await.unwrap().unwrap().remaining(), Some(5));
    // The first alone, the four others together, the list key again alone.
    assert_eq!(store.script_calls() - before, 3);
    assert_eq!(
        server.cli(&["exists", "fg:=c"]),
        "0",
        "a peek writes nothing"
    );
    assert_eq!(server.cli(&["lrange", "fg:=list", "0", "-1"]), "x");
}

#[tokio::test(flavor = "current_thread")]
async fn a_peek_on_a_key_of_another_type_fails_only_its_own_decision() {
    let mut server = RedisServer::start();
    let url = server.url();
    coalesced_peek_on_a_list(&mut server, url).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_user_without_mget_gets_the_same_coalesced_decisions() {
    let mut server = RedisServer::start();
    let granted = [
        "acl", "setuser", "nomget", "reset", "on", ">s3cret", "~fg:*", "-@all", "+evalsha",
        "+eval", "+get", "+set", "+time",
    ];
    assert_eq!(server.cli(&granted), "OK");
    let url = format!("redis://nomget:s3cret@127.0.0.1:{}", server.port);
    coalesced_peek_on_a_list(&mut server, url).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_call_of_more_keys_than_one_mget_reads_decides_each_in_order() {
    let mut server = RedisServer::start();
    let (store, limiter, before) = warm_limiter(&server, server.url(), 300).await;
    server.pause();
    let first = spawn_check(&limiter, b"first", 1).await;
    // 300 decisions in one call: keys 0..199, then 0..99 again (the script reads 256 keys per
    // MGET, so some repeats fall in the second read).
    let mut tasks = Vec::new();
    for i in 0..300 {
        tasks.push(spawn_check(&limiter, format!("k{}", i % 200).as_bytes(), 1).await);
    }
    server.resume();
    assert_eq!(first.await.unwrap().unwrap().remaining(), Some(9));
    for (i, task) in tasks.into_iter().enumerate() {
        let expected = if i < 200 { 9 } else { 8 };
        assert_eq!(
            task.await.unwrap().unwrap().remaining().unwrap(),
            expected,
            "decision {i}"
        );
    }
    assert_eq!(store.script_calls() - before, 2);
}

#[tokio::test(flavor = "current_thread")]
async fn coalesced_decisions_keep_the_server_clock_and_their_ttl() {
    let mut server = RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .prefix("ttl:")
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    // One token back every 6 s: a key spent by 2 lives 12 s.
    let limiter = RemoteRateLimiter::builder(store.clone(), Quota::per_minute(10).unwrap())
        .build()
        .unwrap();
    assert!(limiter.check_key(b"warm").await.unwrap().allowed);
    server.pause();
    let tasks = [
        spawn_check(&limiter, b"first", 1).await,
        spawn_check(&limiter, b"x", 2).await,
        spawn_check(&limiter, b"peek", 0).await,
        spawn_check(&limiter, b"y", 10).await,
    ];
    server.resume();
    let mut decisions = Vec::new();
    for t in tasks {
        decisions.push(t.await.unwrap().unwrap());
    }
    let remaining: Vec<u32> = decisions.iter().map(|d| d.remaining().unwrap()).collect();
    assert_eq!(remaining, [9, 8, 10, 0]);
    assert_eq!(decisions[1].reset_after(), Some(Duration::from_secs(12)));
    let ttl = |key| server.cli(&["pttl", key]).parse::<i64>().unwrap();
    assert!(
        (11_000..=12_000).contains(&ttl("ttl:=x")),
        "{}",
        ttl("ttl:=x")
    );
    assert!((59_000..=60_000).contains(&ttl("ttl:=y")));
    assert_eq!(ttl("ttl:=peek"), -2, "a peek writes nothing");
}

#[tokio::test]
async fn max_batch_of_zero_is_a_typed_error_and_one_turns_coalescing_off() {
    let server = RedisServer::start();
    let zero = crate::support::redis_builder(server.url())
        .max_batch(0)
        .connect()
        .await;
    assert!(matches!(
        zero,
        Err(flowguard::gcra::redis::ConnectError::Config(
            ConfigError::ZeroMaxBatch
        ))
    ));
    let one = crate::support::redis_builder(server.url())
        .max_batch(1)
        .connect()
        .await
        .unwrap();
    assert_eq!(one.max_batch(), 1);
    let limiter = RemoteRateLimiter::builder(one.clone(), Quota::per_second(100).unwrap())
        .build()
        .unwrap();
    assert!(limiter.check_key(b"warm").await.unwrap().allowed);
    let before = one.script_calls();
    let checks: Vec<_> = (0..20u8)
        .map(|k| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check_key(&[k]).await })
        })
        .collect();
    for c in checks {
        assert!(c.await.unwrap().unwrap().allowed);
    }
    assert_eq!(one.script_calls() - before, 20, "one call per decision");
}

/// Explicit time: a store, and three quotas over it (10/s, 100/min, 1000/h).
async fn quotas(
    server: &RedisServer,
    clock: &ManualClock,
) -> (RedisStore, [RemoteRateLimiter<RedisStore>; 3]) {
    let store = crate::support::redis_builder(server.url())
        .hash_tag_keys(true)
        .prefix("s:")
        .explicit_time(clock.clone())
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let build = |store: RedisStore, quota: Quota| {
        RemoteRateLimiter::builder(store, quota)
            .failure_policy(FailurePolicy::FailClosed)
            .build()
            .unwrap()
    };
    let limiters = [
        build(store.clone(), Quota::per_second(10).unwrap()),
        build(
            store.with_prefix("m:").unwrap(),
            Quota::per_minute(100).unwrap().with_burst(5).unwrap(),
        ),
        build(
            store.with_prefix("h:").unwrap(),
            Quota::per_hour(1000).unwrap(),
        ),
    ];
    (store, limiters)
}

fn remaining(decisions: &[Decision]) -> Vec<u32> {
    decisions.iter().map(|d| d.remaining().unwrap()).collect()
}

#[tokio::test]
async fn several_quotas_are_spent_all_or_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let (_store, [second, minute, hour]) = quotas(&server, &clock).await;
    let key = b"alice";
    let check = |cost| {
        [
            QuotaCheck {
                limiter: &second,
                key,
                cost,
            },
            QuotaCheck {
                limiter: &minute,
                key,
                cost,
            },
            QuotaCheck {
                limiter: &hour,
                key,
                cost,
            },
        ]
    };
    let d = RemoteRateLimiter::check_all(&check(2)).await.unwrap();
    assert!(d.iter().all(|d| d.allowed));
    assert_eq!(remaining(&d), [8, 3, 998]);
    // The minute quota (3 left) cannot take 4: nothing is spent anywhere.
    let d = RemoteRateLimiter::check_all(&check(4)).await.unwrap();
    assert_eq!(
        d.iter().map(|d| d.allowed).collect::<Vec<_>>(),
        [true, false, true]
    );
    assert_eq!(remaining(&d), [8, 3, 998], "the unspent state");
    // 4 tokens of 100/min with 3 left: one more comes back in 0.6 s (T) minus the 0 elapsed.
    assert_eq!(d[1].retry_after, Some(Duration::from_millis(600)));
    assert_eq!(d[0].retry_after, None);
    let d = RemoteRateLimiter::check_all(&check(3)).await.unwrap();
    assert!(d.iter().all(|d| d.allowed));
    assert_eq!(remaining(&d), [5, 0, 995]);
    // The keys carry one hash tag: one slot.
    assert_eq!(server.cli(&["get", "m:={alice}"]), "3000000");
}

#[tokio::test]
async fn the_same_quota_twice_must_fit_the_sum() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let (store, [second, ..]) = quotas(&server, &clock).await;
    let key = b"bob";
    let twice = |a, b| {
        [
            QuotaCheck {
                limiter: &second,
                key,
                cost: a,
            },
            QuotaCheck {
                limiter: &second,
                key,
                cost: b,
            },
        ]
    };
    // 6 + 6 can never fit a burst of 10: denied without a retry time, nothing spent.
    let d = RemoteRateLimiter::check_all(&twice(6, 6)).await.unwrap();
    assert_eq!(
        d.iter().map(|d| d.allowed).collect::<Vec<_>>(),
        [true, false]
    );
    assert_eq!(d[1].retry_after, None);
    assert_eq!(server.cli(&["exists", "s:={bob}"]), "0", "nothing spent");
    let d = RemoteRateLimiter::check_all(&twice(4, 6)).await.unwrap();
    assert_eq!(remaining(&d), [6, 0]);
    // Full: 1 token is back in T, 1 + 1 in 2T.
    let d = RemoteRateLimiter::check_all(&twice(1, 1)).await.unwrap();
    assert_eq!(
        d.iter().map(|d| d.retry_after).collect::<Vec<_>>(),
        [
            Some(Duration::from_millis(100)),
            Some(Duration::from_millis(200))
        ]
    );
    // The store-level call says the same, item by item.
    let rule = second.rule();
    let k = store.key(b"carol");
    let items = [
        StoreItem {
            key: &k,
            rule,
            cost: 3,
        },
        StoreItem {
            key: &k,
            rule,
            cost: 0,
        },
    ];
    let answers = store.decide_all(&items).await.unwrap();
    assert_eq!(
        answers
            .iter()
            .map(|a| a.decision.remaining().unwrap())
            .collect::<Vec<_>>(),
        [7, 7]
    );
}

#[tokio::test]
async fn a_bad_key_fails_the_whole_group_and_spends_nothing() {
    let server = RedisServer::start();
    let clock = ManualClock::new();
    let (_store, [second, minute, _]) = quotas(&server, &clock).await;
    server.cli(&["set", "m:={dave}", "garbage"]);
    let d = RemoteRateLimiter::check_all(&[
        QuotaCheck {
            limiter: &second,
            key: b"dave",
            cost: 1,
        },
        QuotaCheck {
            limiter: &minute,
            key: b"dave",
            cost: 1,
        },
    ])
    .await;
    assert_eq!(
        d,
        Err(CheckError::Store(StoreError::CorruptState {
            key: "m:={dave}".into()
        }))
    );
    assert_eq!(server.cli(&["exists", "s:={dave}"]), "0");
    // A cost above a burst is final, without a round trip.
    let too_big = RemoteRateLimiter::check_all(&[QuotaCheck {
        limiter: &minute,
        key: b"dave",
        cost: 6,
    }])
    .await;
    assert!(matches!(too_big, Err(CheckError::Gcra(_))));
}

/// Tasks race requests naming {wide, narrow} against requests naming {narrow} alone, through
/// two stores (two instances) on one server. `wide` is spent exactly once per allowed pair: no
/// pair ever spends `wide` and is then denied on `narrow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_group_spends_nothing_under_contention() {
    let server = RedisServer::start();
    let mut instances = Vec::new();
    for _ in 0..2 {
        let store = crate::support::redis_builder(server.url())
            .prefix("wide:")
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        let wide = RemoteRateLimiter::builder(
            store.clone(),
            Quota::per_hour(10).unwrap().with_burst(5000).unwrap(),
        )
        .build()
        .unwrap();
        let narrow = RemoteRateLimiter::builder(
            store.with_prefix("narrow:").unwrap(),
            Quota::per_hour(200).unwrap(),
        )
        .build()
        .unwrap();
        instances.push(Arc::new((wide, narrow)));
    }
    let mut tasks = Vec::new();
    for task in 0..8usize {
        let pair = instances[task % 2].clone();
        tasks.push(tokio::spawn(async move {
            let (wide, narrow) = &*pair;
            let mut pairs_allowed = 0u32;
            for _ in 0..60 {
                let both = [
                    QuotaCheck {
                        limiter: wide,
                        key: b"w",
                        cost: 1,
                    },
                    QuotaCheck {
                        limiter: narrow,
                        key: b"n",
                        cost: 1,
                    },
                ];
                let checks = if task % 4 < 2 { &both[..] } else { &both[1..] };
                let d = RemoteRateLimiter::check_all(checks).await.unwrap();
                if task % 4 < 2 && d.iter().all(|d| d.allowed) {
                    pairs_allowed += 1;
                }
            }
            pairs_allowed
        }));
    }
    let mut pairs_allowed = 0;
    for t in tasks {
        pairs_allowed += t.await.unwrap();
    }
    let (wide, _) = &*instances[0];
    let left = wide
        .check_key_n(b"w", 0)
        .await
        .unwrap()
        .remaining()
        .unwrap();
    assert_eq!(5000 - left, pairs_allowed);
    // The narrow quota (200) ran out: some pairs were denied, and spent nothing.
    assert!(pairs_allowed < 240, "{pairs_allowed}");
}

#[tokio::test]
async fn with_the_store_down_each_quota_answers_by_its_policy_all_or_nothing() {
    let mut server = RedisServer::start();
    let store = crate::support::redis_builder(server.url())
        .timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let open = RemoteRateLimiter::builder(store.clone(), Quota::per_second(10).unwrap())
        .failure_policy(FailurePolicy::FailOpen)
        .build()
        .unwrap();
    let local = RemoteRateLimiter::builder(
        store.with_prefix("l:").unwrap(),
        Quota::per_second(10).unwrap(),
    )
    .failure_policy(FailurePolicy::local_instances(2))
    .build()
    .unwrap();
    let closed = RemoteRateLimiter::builder(
        store.with_prefix("c:").unwrap(),
        Quota::per_second(10).unwrap(),
    )
    .failure_policy(FailurePolicy::FailClosed)
    .build()
    .unwrap();
    server.kill();
    let check = |limiter, cost| QuotaCheck {
        limiter,
        key: b"k",
        cost,
    };
    // Fail open and a local share of 5: allowed, and the local share is spent.
    let d = RemoteRateLimiter::check_all(&[check(&open, 1), check(&local, 3)])
        .await
        .unwrap();
    assert!(d.iter().all(|d| d.allowed));
    assert_eq!(d[0].degraded, Some(Degradation::FailOpen));
    assert_eq!(
        (d[1].degraded, d[1].remaining().unwrap()),
        (Some(Degradation::LocalFallback), 2)
    );
    // Fail closed denies the request: the local share is not spent.
    let d = RemoteRateLimiter::check_all(&[check(&local, 2), check(&closed, 1)])
        .await
        .unwrap();
    assert!(d[0].allowed && !d[1].allowed);
    assert_eq!(d[1].degraded, Some(Degradation::FailClosed));
    let d = RemoteRateLimiter::check_all(&[check(&local, 2)])
        .await
        .unwrap();
    assert_eq!(
        (d[0].allowed, d[0].remaining().unwrap()),
        (true, 0),
        "2 were still there"
    );
}
