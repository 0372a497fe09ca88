//! A connection that keeps failing while its server answers (every reply lost on the way, as
//! behind a stateful firewall that dropped the flow, or a client wedged inside) is replaced by a
//! new one; the store recovers by itself. Before, the auto-reconnecting connection only
//! reconnected on errors, and a reply that never comes is no error: the store stayed degraded
//! for good.
#![cfg(feature = "redis")]

use std::time::Duration;

use crate::support::{FreezingProxy, RedisServer};
use flowguard::gcra::Quota;
use flowguard::gcra::remote::{FailurePolicy, RemoteRateLimiter};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_failing_while_the_server_answers_is_rebuilt() {
    let server = RedisServer::start();
    let proxy = FreezingProxy::start(server.port);
    let store = crate::support::redis_builder(proxy.url())
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(1_000_000).unwrap())
        .failure_policy(FailurePolicy::FailClosed)
        .build()
        .unwrap();
    assert!(limiter.check_key(b"k").await.unwrap().degraded.is_none());

    proxy.freeze();
    let mut degraded = 0;
    let mut recovered_after = None;
    // Bounded: 500 checks 10 ms apart (plus their timeouts); recovery takes a few probes.
    for i in 0..500 {
        let d = limiter.check_key(b"k").await.unwrap();
        if d.degraded.is_some() {
            degraded += 1;
        } else {
            recovered_after = Some(i);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(degraded > 0, "the frozen connection failed first");
    let checks = recovered_after.expect("the store answered from Redis again without a restart");
    eprintln!("recovered after {checks} checks ({degraded} degraded)");
    // It stays recovered: the new connection does not go through a frozen flow.
    for _ in 0..50 {
        assert!(limiter.check_key(b"k").await.unwrap().degraded.is_none());
    }
}
