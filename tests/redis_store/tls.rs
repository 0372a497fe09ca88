//! TLS: a `rediss://` URL connects to a TLS-only server (feature `redis-tls`).
#![cfg(feature = "redis-tls")]

use crate::support::RedisServer;
use flowguard::gcra::Quota;
use flowguard::gcra::remote::RemoteRateLimiter;

#[tokio::test]
async fn rediss_urls_speak_tls() {
    // A self-signed certificate for the loopback address, valid until 2126, kept with the tests
    // (tests/fixtures/tls), so the tests need neither openssl nor a crate to make one.
    let certificates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    let server = RedisServer::start_tls(&certificates);
    // The certificate is self-signed for this test; `#insecure` skips verifying it. In production
    // the server's certificate is verified against the system's trust store.
    let url = format!("rediss://127.0.0.1:{}/#insecure", server.port);
    let store = crate::support::redis_builder(&url).connect().await.unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(10).unwrap())
        .build()
        .unwrap();
    let d = limiter.check_key_n(b"k", 4).await.unwrap();
    assert_eq!(
        (d.allowed, d.remaining().unwrap(), d.degraded),
        (true, 6, None)
    );
    // The same server refuses plaintext: a redis:// URL does not get a working store.
    let plain = format!("redis://127.0.0.1:{}", server.port);
    assert!(
        crate::support::redis_builder(plain)
            .connect_timeout(std::time::Duration::from_millis(500))
            .connect()
            .await
            .is_err()
    );
}
