//! A store that has just connected decides its first requests in Redis: `connect` loads the
//! scripts into the server's cache, so the first decisions, all at once, neither fall back to
//! `EVAL` after `NOSCRIPT` nor spend their call timeout while the server compiles the script.
#![cfg(feature = "redis")]

use flowguard::gcra::Quota;
use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};

use crate::support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_decisions_on_a_new_server_are_made_by_redis() {
    // A new server: its script cache is empty.
    let server = RedisServer::start();
    assert_eq!(server.command_calls("script|load"), (0, 0));
    let store = crate::support::redis_builder(server.url())
        .connect()
        .await
        .unwrap();
    // The three scripts (a lone decision's, the one-slot and the cross-slot calls'), loaded
    // before connect returned.
    assert_eq!(server.command_calls("script|load"), (3, 0));

    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(1_000).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check_key(format!("k{i}").as_bytes()).await })
        })
        .collect();
    for task in tasks {
        let decision = task.await.unwrap().unwrap();
        assert_eq!(decision.degraded, None, "decided by Redis");
        assert!(decision.allowed);
    }
    // Every call found the script: none failed with NOSCRIPT, none fell back to EVAL.
    let (evalsha, failed) = server.command_calls("evalsha");
    assert!(evalsha >= 1, "the decisions ran the cached script");
    assert_eq!(failed, 0, "no NOSCRIPT");
    assert_eq!(
        server.command_calls("eval"),
        (0, 0),
        "no EVAL of the source"
    );
}
