//! A decision made without the store's state reports no numbers: a Redis store whose server was
//! killed, failing open or closed, answers `remaining()` and `reset_after()` with `None` through
//! the remote limiter (one check and several), through `Guard::admit`, and through the decision
//! the inbound layer hands the service (and its refusal). A local fallback reports real numbers:
//! its share's.
#![cfg(feature = "redis")]

use std::time::Duration;

use crate::support::RedisServer;
use flowguard::Guard;
use flowguard::gcra::redis::{DEFAULT_PROBE_INTERVAL, RedisStore};
use flowguard::gcra::remote::{FailurePolicy, QuotaCheck, RemoteRateLimiter};
use flowguard::gcra::{Decision, Degradation, Quota};

fn quota() -> Quota {
    Quota::per_second(10).unwrap()
}

/// What a decision read no state for must look like: `how`, and no numbers anywhere a caller
/// reads them.
fn assert_no_numbers(d: &Decision, how: Degradation) {
    assert_eq!(d.degraded, Some(how));
    assert_eq!(d.allowed, how == Degradation::FailOpen);
    assert_eq!(
        (d.remaining(), d.reset_after(), d.reset_after_secs()),
        (None, None, None),
        "{how:?}: no made-up numbers"
    );
    assert_eq!(d.limit, 10, "the burst is configuration, known");
    let shown = format!("{d:?}");
    assert!(
        shown.contains("remaining: None") && shown.contains("reset_after: None"),
        "{shown}"
    );
    match how {
        Degradation::FailClosed => assert_eq!(d.retry_after, Some(DEFAULT_PROBE_INTERVAL)),
        _ => assert_eq!(d.retry_after, None),
    }
}

/// Limiters failing open, failing closed and falling back to a local share of 5 (one of two
/// instances), each under its own prefix of `server`'s store.
async fn limiters(server: &RedisServer) -> [RemoteRateLimiter<RedisStore>; 3] {
    let store = RedisStore::builder(server.url()).connect().await.unwrap();
    let limiter = |prefix: &str, policy| {
        RemoteRateLimiter::builder(store.with_prefix(prefix).unwrap(), quota())
            .failure_policy(policy)
            .build()
            .unwrap()
    };
    [
        limiter("open:", FailurePolicy::FailOpen),
        limiter("closed:", FailurePolicy::FailClosed),
        limiter("local:", FailurePolicy::local_instances(2)),
    ]
}

#[tokio::test]
async fn the_remote_limiter_reports_no_numbers_failing_open_or_closed() {
    let mut server = RedisServer::start();
    let [open, closed, local] = limiters(&server).await;
    let d = open.check_key(b"k").await.unwrap();
    assert_eq!(
        (d.degraded, d.remaining()),
        (None, Some(9)),
        "Redis answers"
    );
    server.kill();
    // The first checks meet the dead connection, later ones the open circuit: neither knows.
    for _ in 0..3 {
        assert_no_numbers(&open.check_key(b"k").await.unwrap(), Degradation::FailOpen);
        assert_no_numbers(
            &closed.check_key_n(b"k", 3).await.unwrap(),
            Degradation::FailClosed,
        );
        let both = RemoteRateLimiter::check_all(&[
            QuotaCheck {
                limiter: &open,
                key: b"k",
                cost: 1,
            },
            QuotaCheck {
                limiter: &closed,
                key: b"k",
                cost: 1,
            },
        ])
        .await
        .unwrap();
        assert_no_numbers(&both[0], Degradation::FailOpen);
        assert_no_numbers(&both[1], Degradation::FailClosed);
    }

    // The local fallback decides with its share's state: real numbers, of that share.
    let spend = |cost| QuotaCheck {
        limiter: &local,
        key: b"k",
        cost,
    };
    let d = RemoteRateLimiter::check_all(&[spend(4)]).await.unwrap();
    assert_eq!(
        (d[0].allowed, d[0].degraded),
        (true, Some(Degradation::LocalFallback))
    );
    assert_eq!((d[0].limit, d[0].remaining()), (5, Some(1)));
    // Two do not fit the one left: denied, with the share's numbers as they are.
    let d = RemoteRateLimiter::check_all(&[spend(1), spend(1)])
        .await
        .unwrap();
    // The request is denied; the first fits alone (allowed, unspent), the second does not fit
    // with it (as every `LimitSet` reports a key named twice).
    assert_eq!(
        d.iter().map(|d| d.allowed).collect::<Vec<_>>(),
        [true, false]
    );
    for d in &d {
        assert_eq!(d.degraded, Some(Degradation::LocalFallback));
        assert_eq!((d.limit, d.remaining()), (5, Some(1)));
        assert!(d.reset_after().is_some_and(|t| t > Duration::ZERO));
    }
}

#[tokio::test]
async fn guard_admit_reports_no_numbers_failing_open_or_closed() {
    let mut server = RedisServer::start();
    let guard = |prefix: &'static str, policy| {
        Guard::builder()
            .quota(quota())
            .redis(server.url())
            .redis_prefix(prefix)
            .failure_policy(policy)
            .build()
    };
    let open = guard("open:", FailurePolicy::FailOpen).await.unwrap();
    let closed = guard("closed:", FailurePolicy::FailClosed).await.unwrap();
    assert_eq!(open.admit(b"k").await.unwrap().remaining(), Some(9));
    server.kill();
    for _ in 0..3 {
        assert_no_numbers(&open.admit(b"k").await.unwrap(), Degradation::FailOpen);
        assert_no_numbers(
            &closed.admit_n(b"k", 2).await.unwrap(),
            Degradation::FailClosed,
        );
    }
}

/// The decision the layer puts in the request's extensions (and hands a refusal) has no
/// numbers either: failing open, and failing closed in shadow mode (which lets it through) and
/// enforced (refused).
#[cfg(feature = "tower")]
#[tokio::test]
async fn the_layer_hands_the_service_and_the_refusal_no_numbers() {
    use std::convert::Infallible;
    use std::sync::Arc;

    use flowguard::gcra::layer::{HeaderKey, QuotaLayer, Refusal};
    use http::{Request, Response, StatusCode};
    use tower::{ServiceBuilder, ServiceExt};

    /// The numbers a decision shows, as text.
    fn numbers(d: &Decision) -> String {
        format!("{:?} {:?}", d.remaining(), d.reset_after())
    }

    let mut server = RedisServer::start();
    let [open, closed, _] = limiters(&server).await;
    server.kill();
    let service = |limiter: RemoteRateLimiter<RedisStore>, shadow: bool| {
        let layer = QuotaLayer::new(Arc::new(limiter), HeaderKey::new("x-api-key").unwrap())
            .shadow(shadow)
            .refusal(|refusal: &Refusal<'_>| {
                let mut response = Response::new(numbers(refusal.decision().unwrap()));
                *response.status_mut() = refusal.status();
                response
            });
        ServiceBuilder::new()
            .layer(layer)
            .service_fn(|req: Request<()>| async move {
                let d = req.extensions().get::<Decision>().expect("a decision");
                assert!(d.degraded.is_some());
                Ok::<_, Infallible>(Response::new(numbers(d)))
            })
    };
    let request = || {
        Request::builder()
            .header("x-api-key", "k")
            .body(())
            .unwrap()
    };
    for (limiter, shadow, status) in [
        (open, false, StatusCode::OK),
        (closed.clone(), true, StatusCode::OK),
        (closed, false, StatusCode::TOO_MANY_REQUESTS),
    ] {
        let svc = service(limiter, shadow);
        for _ in 0..3 {
            let response = svc.clone().oneshot(request()).await.unwrap();
            assert_eq!(response.status(), status, "shadow {shadow}");
            assert!(response.headers().get("ratelimit").is_none());
            assert_eq!(response.body(), "None None", "shadow {shadow}, {status}");
        }
    }
}
