//! In-memory limiters keyed by a fixed-size type (`IpAddr`, `u64`) behind the quota layer and
//! the `Guard`: the layer's byte keys are read as keys of the type (`FromKeyBytes`), so the
//! layer and code that checks the typed keys itself share one state per client; requests
//! without a key share a quota of their own; bytes that are no key of the type are a typed
//! error (`500` from the layer), never a panic or another client's key.
#![cfg(all(feature = "tower", feature = "axum", feature = "reqwest"))]

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::serve::serve;
use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use flowguard::clock::ManualClock;
use flowguard::gcra::layer::{HeaderKey, PeerIpKey, QuotaLayer, XForwardedForKey};
use flowguard::gcra::{CheckError, Decision, GcraError, KeyedLimit, KeyedRateLimiter, Quota};
use flowguard::{AdmitError, Guard};
use http::{Request, Response, StatusCode};
use tower::{Layer, ServiceExt, service_fn};

/// A limiter keyed by `K` on a clock that stands still.
fn still<K: flowguard::gcra::LimitKey>(
    quota: Quota,
) -> (Arc<KeyedRateLimiter<K, ManualClock>>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = KeyedRateLimiter::<K>::builder(quota)
        .clock(clock.clone())
        .build()
        .unwrap();
    (Arc::new(limiter), clock)
}

/// What `key` has left, read with a peek that spends nothing.
fn left<K: flowguard::gcra::LimitKey>(limiter: &KeyedRateLimiter<K, ManualClock>, key: &K) -> u32 {
    let peek = limiter.check_key_n(key, 0).unwrap();
    peek.remaining()
        .expect("an in-memory decision knows what is left")
}

async fn remaining(Extension(decision): Extension<Decision>) -> String {
    decision
        .remaining()
        .map_or_else(|| "unknown".to_owned(), |left| left.to_string())
}

/// A client whose connections come from `ip` (any address of 127.0.0.0/8 is loopback).
fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(ip))
        .build()
        .unwrap()
}

/// A `KeyedRateLimiter<IpAddr>` behind `QuotaLayer::new` with `PeerIpKey`, in axum over loopback:
/// two peers never share, and the layer spends exactly the state that `check_key(&peer)` reads.
#[tokio::test]
async fn an_address_keyed_limiter_is_the_layers_store_and_keys_peers_by_their_address() {
    let (limiter, clock) = still::<IpAddr>(Quota::per_minute(2).unwrap());
    let layer = QuotaLayer::new(limiter.clone(), PeerIpKey::new());
    let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
    let (one, two) = ([127, 0, 0, 1], [127, 0, 0, 2]);
    let (a, b) = (client_from(one), client_from(two));

    for left_after in ["1", "0"] {
        let ok = a.get(&url).send().await.unwrap();
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()["ratelimit-policy"], r#""default";q=2;w=60"#);
        assert_eq!(ok.text().await.unwrap(), left_after);
    }
    let denied = a.get(&url).send().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "30");
    assert_eq!(denied.headers()["ratelimit"], r#""default";r=0;t=60"#);
    assert_eq!(
        left(&limiter, &IpAddr::from(one)),
        0,
        "the layer spent 127.0.0.1's own typed key"
    );

    // Another peer has its own quota.
    let ok = b.get(&url).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(left(&limiter, &IpAddr::from(two)), 1);
    assert_eq!(limiter.len(), 2, "two keys, no more");

    // Code outside the layer spending the typed key is seen by the layer, and the other way.
    assert!(limiter.check_key(&IpAddr::from(two)).unwrap().allowed);
    assert_eq!(
        b.get(&url).send().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_secs(30));
    assert_eq!(a.get(&url).send().await.unwrap().status(), StatusCode::OK);
}

/// `Guard::builder().rate_limit(..)` with a typed limiter, and the guard's inbound layer keyed
/// by `X-Forwarded-For`: `admit` with an address's octets and the layer count against the same
/// key; keyless requests share a quota of their own (no address's); other bytes are a typed
/// error.
#[tokio::test]
async fn a_guard_with_an_address_keyed_limiter_shares_it_between_admit_and_its_layer() {
    let (limiter, _clock) = still::<IpAddr>(Quota::per_minute(2).unwrap());
    let guard = Guard::builder()
        .shared_rate_limit(limiter.clone())
        .build()
        .await
        .unwrap();
    let svc = guard
        .inbound_layer(XForwardedForKey::new(1))
        .unwrap()
        .layer(service_fn(|_: Request<()>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let send = |forwarded: Option<&'static str>| {
        let svc = svc.clone();
        async move {
            let mut request = Request::builder();
            if let Some(chain) = forwarded {
                request = request.header("x-forwarded-for", chain);
            }
            svc.oneshot(request.body(()).unwrap())
                .await
                .unwrap()
                .status()
        }
    };

    let client: IpAddr = "203.0.113.9".parse().unwrap();
    assert_eq!(send(Some("6.6.6.6, 203.0.113.9")).await, StatusCode::OK);
    let admitted = guard.admit(&[203, 0, 113, 9]).await.unwrap();
    assert_eq!(
        (admitted.allowed, admitted.remaining()),
        (true, Some(0)),
        "admit spent the layer's key"
    );
    assert_eq!(
        send(Some("7.7.7.7, 203.0.113.9")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(left(&limiter, &client), 0);

    // No X-Forwarded-For: no key; such requests share one quota, which is no address's.
    assert_eq!(send(None).await, StatusCode::OK);
    assert_eq!(send(None).await, StatusCode::OK);
    assert_eq!(send(None).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(left(&limiter, &IpAddr::from([0, 0, 0, 0])), 2);
    assert_eq!(left(&limiter, &"::".parse().unwrap()), 2);
    assert_eq!(
        limiter.len(),
        1,
        "the keyless quota is not an address in the table"
    );

    // Bytes that are no address: a typed error naming the type, nothing spent.
    match guard.admit(b"junk!").await {
        Err(AdmitError::Check(CheckError::Gcra(GcraError::UnreadableKey {
            len: 5,
            key_type,
            ..
        }))) => assert!(key_type.ends_with("IpAddr"), "{key_type}"),
        other => panic!("expected UnreadableKey, got {other:?}"),
    }
    assert_eq!(limiter.len(), 1);
}

/// A `KeyedRateLimiter<u64>` of tenants behind the layer: a closure writes the tenant id's
/// bytes; a key extractor that writes other bytes (the header's text) gets a `500` and a typed
/// error, and the service is not called.
#[tokio::test]
async fn an_integer_keyed_limiter_reads_big_endian_ids_and_refuses_other_bytes() {
    let (limiter, _clock) = still::<u64>(Quota::per_minute(1).unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = calls.clone();
        service_fn(move |_: Request<()>| {
            calls.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, Infallible>(Response::new(String::new())) }
        })
    };
    let tenant = |req: &Request<()>| {
        let id: u64 = req.headers().get("x-tenant")?.to_str().ok()?.parse().ok()?;
        Some(id.to_be_bytes().to_vec())
    };
    let by_id = QuotaLayer::new(limiter.clone(), tenant).layer(handler.clone());
    let by_text =
        QuotaLayer::new(limiter.clone(), HeaderKey::new("x-tenant").unwrap()).layer(handler);
    let request = |id: &str| Request::builder().header("x-tenant", id).body(()).unwrap();

    assert_eq!(
        by_id.clone().oneshot(request("7")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(left(&limiter, &7), 0, "tenant 7's own key");
    assert_eq!(left(&limiter, &8), 1);
    assert_eq!(
        by_id.clone().oneshot(request("7")).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        by_id.oneshot(request("8")).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(calls.load(Ordering::Relaxed), 2);

    // "9" is one byte of text, not the 8 bytes of a u64: refused as a fault of the server's
    // configuration, with nothing spent and the service not called.
    let refused = by_text.oneshot(request("9")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(refused.headers().get("retry-after").is_none());
    assert_eq!(calls.load(Ordering::Relaxed), 2);
    assert_eq!(left(&limiter, &9), 1);
    assert_eq!(limiter.len(), 2);
    assert_eq!(
        limiter.check(b"9", 1).await,
        Err(CheckError::Gcra(GcraError::UnreadableKey {
            len: 1,
            key_type: "u64",
            expected: "8 bytes, big-endian",
        }))
    );
}
