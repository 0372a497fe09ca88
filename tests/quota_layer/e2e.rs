//! The inbound layer end to end: real axum servers on loopback (`axum::serve` with
//! `ConnectInfo<SocketAddr>`) called by a real reqwest client, for what `gcra_layer_axum.rs`
//! does not cover over the wire: tiers chosen per key from one store; several quotas denying
//! atomically in a private `redis-server`, alone and under concurrent clients; the address keys
//! behind trusted proxies (`XForwardedForKey`, `ForwardedKey`: what the client wrote left of the
//! trusted entries is never read), `GlobalKey`, `PeerIpKey` over IPv4 and IPv6 loopback; and a
//! Redis-backed layer while Redis is up. Clocks that stand still make every wait exact.
#![cfg(all(feature = "tower", feature = "axum", feature = "reqwest"))]

use std::net::IpAddr;
use std::sync::Arc;

use crate::support::serve::{serve, serve_on};
use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use flowguard::clock::ManualClock;
use flowguard::gcra::layer::{
    ForwardedKey, GlobalKey, HeaderKey, KeyExtractor, MissingKey, PeerIpKey, Policy, QuotaLayer,
    XForwardedForKey,
};
use flowguard::gcra::{
    ConfigError, Decision, Demand, KeyedRateLimiter, LimitSet, LimitSpec, MemoryLimitSet, Quota,
};
use flowguard::headers::{QuotaPolicy, ServiceLimit};
use http::{HeaderMap, StatusCode};

async fn remaining(Extension(decision): Extension<Decision>) -> String {
    decision
        .remaining()
        .map_or_else(|| "unknown".to_owned(), |left| left.to_string())
}

/// `GET url`, with the headers given.
async fn get_with(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut request = client.get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// `GET url` with `x-api-key: key`: the status and the headers.
async fn as_key(client: &reqwest::Client, url: &str, key: &str) -> (StatusCode, HeaderMap) {
    let response = get_with(client, url, &[("x-api-key", key)]).await;
    (response.status(), response.headers().clone())
}

/// The policies `RateLimit-Policy` advertises, as (name, quota).
fn advertised(headers: &HeaderMap) -> Vec<(String, u64)> {
    QuotaPolicy::from_headers(headers)
        .unwrap()
        .iter()
        .map(|p| (p.name().to_string(), p.quota()))
        .collect()
}

/// The policy `RateLimit` names (the one that decided) and what it has left.
fn deciding(headers: &HeaderMap) -> (String, u64) {
    let limits = ServiceLimit::from_headers(headers).unwrap();
    assert_eq!(limits.len(), 1, "one deciding policy");
    (limits[0].policy().to_string(), limits[0].remaining())
}

/// What limit `limit` of `set` has left for `key`, read with a peek that spends nothing.
async fn left(set: &impl LimitSet, limit: usize, key: &[u8]) -> u32 {
    let peek = [Demand {
        limit,
        key,
        cost: 0,
    }];
    set.check_all(&peek).await.unwrap()[0]
        .remaining()
        .expect("a peek the store answered knows what is left")
}

/// An in-memory set on a clock that stands still.
fn still(limits: &[LimitSpec]) -> Result<MemoryLimitSet<ManualClock>, ConfigError> {
    MemoryLimitSet::builder(limits.iter().map(LimitSpec::quota))
        .clock(ManualClock::new())
        .build()
}

/// A limiter keyed by address on a clock that stands still, whose keys a test can read.
fn by_address(quota: Quota) -> Arc<KeyedRateLimiter<IpAddr, ManualClock>> {
    Arc::new(
        KeyedRateLimiter::<IpAddr>::builder(quota)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    )
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A key's plan picks its tier ("free" by default, "pro" for `pro-` keys); both tiers count
/// against one global quota kept in the same store as their own.
#[tokio::test]
async fn a_keys_plan_chooses_its_tier_and_tiers_share_one_store() {
    let plan = |req: &http::Request<axum::body::Body>| {
        let key = req.headers().get("x-api-key")?.to_str().ok()?;
        key.starts_with("pro-").then_some("pro")
    };
    let global = || Policy::global("global", Quota::per_minute(6).unwrap());
    let layer = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap().with_tier(plan))
        .tier(
            "free",
            [
                Policy::per_key("per-minute", Quota::per_minute(2).unwrap()),
                global(),
            ],
        )
        .tier(
            "pro",
            [
                Policy::per_key("per-minute", Quota::per_minute(5).unwrap()),
                global(),
            ],
        )
        .build_with(still)
        .unwrap();
    let set = layer.set().clone();
    assert_eq!(set.limits(), 3, "free's, the global one, pro's");
    let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
    let client = reqwest::Client::new();

    let free = vec![("per-minute".to_owned(), 2), ("global".to_owned(), 6)];
    let pro = vec![("per-minute".to_owned(), 5), ("global".to_owned(), 6)];
    for left_after in [1, 0] {
        let (status, headers) = as_key(&client, &url, "free-1").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(advertised(&headers), free);
        assert_eq!(deciding(&headers), ("per-minute".to_owned(), left_after));
    }
    let (status, headers) = as_key(&client, &url, "free-1").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(deciding(&headers).0, "per-minute");
    assert_eq!(headers["retry-after"], "30");

    // A key of no known plan is in the default tier, the first declared.
    let (status, headers) = as_key(&client, &url, "trial-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(advertised(&headers), free);

    // The pro key has 5 a minute of its own, but the global quota (3 spent by free keys) runs
    // out after three: the denial names it and spends nothing of pro-1's own quota.
    for _ in 0..3 {
        let (status, headers) = as_key(&client, &url, "pro-1").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(advertised(&headers), pro);
    }
    let (status, headers) = as_key(&client, &url, "pro-1").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(deciding(&headers), ("global".to_owned(), 0));
    assert_eq!(headers["retry-after"], "10");
    assert_eq!(
        left(&*set, 2, b"pro-1").await,
        2,
        "pro's own quota, not free's"
    );
    assert_eq!(
        left(&*set, 0, b"pro-1").await,
        2,
        "free's quota untouched by pro-1"
    );
    assert_eq!(left(&*set, 0, b"free-1").await, 0);
}

/// A server behind proxies: its layer keys requests by `key` against a limiter by address, 1 a
/// minute, and answers requests without a key `400`.
struct BehindProxies {
    limiter: Arc<KeyedRateLimiter<IpAddr, ManualClock>>,
    client: reqwest::Client,
    url: String,
    header: &'static str,
}

impl BehindProxies {
    async fn start<K: KeyExtractor<axum::body::Body>>(key: K, header: &'static str) -> Self {
        let limiter = by_address(Quota::per_minute(1).unwrap());
        let layer = QuotaLayer::new(limiter.clone(), key)
            .missing_key(MissingKey::Reject(StatusCode::BAD_REQUEST));
        let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
        let client = reqwest::Client::new();
        BehindProxies {
            limiter,
            client,
            url,
            header,
        }
    }

    /// The status of a request whose proxies wrote `value` in the header.
    async fn send(&self, value: &str) -> StatusCode {
        get_with(&self.client, &self.url, &[(self.header, value)])
            .await
            .status()
    }

    /// What the address `client` has left.
    fn left(&self, client: &str) -> u32 {
        let peek = self.limiter.check_key_n(&ip(client), 0).unwrap();
        peek.remaining()
            .expect("an in-memory decision knows what is left")
    }
}

/// Two trusted proxies append to `X-Forwarded-For`: the entry two places from the right is the
/// client's; whatever the client wrote to its left never counts.
#[tokio::test]
async fn x_forwarded_for_behind_two_proxies_keys_by_the_outer_proxys_entry() {
    let server = BehindProxies::start(XForwardedForKey::new(2), "x-forwarded-for").await;
    let send = |chain| server.send(chain);

    assert_eq!(send("6.6.6.6, 203.0.113.9, 10.0.0.1").await, StatusCode::OK);
    assert_eq!(server.left("203.0.113.9"), 0);
    assert_eq!(
        server.limiter.len(),
        1,
        "neither the forged entry nor the proxy is a key"
    );
    // Another forged left part, another inner proxy: the same client.
    assert_eq!(
        send("1.1.1.1, 203.0.113.9, 10.0.0.2").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send("not an address, 203.0.113.9, 10.0.0.1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another client behind the same proxies.
    assert_eq!(send("203.0.113.10, 10.0.0.1").await, StatusCode::OK);
    // Fewer entries than proxies (the request bypassed the outer proxy), or a malformed entry
    // in the client's place: no key.
    assert_eq!(send("10.0.0.1").await, StatusCode::BAD_REQUEST);
    assert_eq!(
        send("203.0.113.11:x, 10.0.0.1").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(server.limiter.len(), 2);
}

/// The same behind two proxies that append `Forwarded` elements: the `for=` of the second
/// element from the right, an IPv6 client by its /64.
#[tokio::test]
async fn forwarded_behind_two_proxies_keys_by_the_outer_proxys_element() {
    let server = BehindProxies::start(ForwardedKey::new(2), "forwarded").await;
    let send = |forwarded| server.send(forwarded);

    assert_eq!(
        send(r#"for=6.6.6.6, for="[2001:db8:cafe:1::17]:4711";proto=https, for=10.0.0.1"#).await,
        StatusCode::OK
    );
    assert_eq!(server.left("2001:db8:cafe:1::"), 0, "the client's /64");
    assert_eq!(server.limiter.len(), 1);
    // Another address of the same /64, another forged element: the same client.
    assert_eq!(
        send(r#"for=_forged;by=x, For="[2001:db8:cafe:1::99]", for=10.0.0.2"#).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another /64; an IPv4 client.
    assert_eq!(
        send(r#"for="[2001:db8:cafe:2::17]", for=10.0.0.1"#).await,
        StatusCode::OK
    );
    assert_eq!(
        send("for=192.0.2.60;proto=http, for=10.0.0.1").await,
        StatusCode::OK
    );
    assert_eq!(server.left("192.0.2.60"), 0);
    // An obfuscated client, or one element only: no key.
    assert_eq!(
        send("for=unknown, for=10.0.0.1").await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(send("for=10.0.0.1").await, StatusCode::BAD_REQUEST);
    assert_eq!(server.limiter.len(), 3);
}

/// `GlobalKey`: one quota for everyone, whatever their address or API key.
#[tokio::test]
async fn the_global_key_is_one_quota_for_every_client() {
    let layer = QuotaLayer::builder(GlobalKey)
        .policy(Policy::global("everyone", Quota::per_minute(3).unwrap()))
        .build_with(still)
        .unwrap();
    let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
    let from = |last: u8| {
        reqwest::Client::builder()
            .local_address(IpAddr::from([127, 0, 0, last]))
            .build()
            .unwrap()
    };
    let (one, two) = (from(1), from(2));
    let mut statuses = vec![];
    for (client, key) in [
        (&one, "a"),
        (&two, "b"),
        (&one, "c"),
        (&two, "d"),
        (&one, "a"),
    ] {
        let (status, headers) = as_key(client, &url, key).await;
        assert_eq!(advertised(&headers), [("everyone".to_owned(), 3)]);
        statuses.push(status);
    }
    use StatusCode as S;
    assert_eq!(
        statuses,
        [
            S::OK,
            S::OK,
            S::OK,
            S::TOO_MANY_REQUESTS,
            S::TOO_MANY_REQUESTS
        ]
    );
}

/// `PeerIpKey` from `ConnectInfo`: an IPv4 peer by its address (an IPv4 peer of a dual-stack
/// socket too, as IPv4), an IPv6 peer by its /64 or, with `ipv6_prefix(128)`, its whole
/// address. IPv6 parts are skipped, with the reason printed, where the machine has no `::1`.
#[tokio::test]
async fn peer_addresses_over_ipv4_and_ipv6_loopback() {
    let layer = QuotaLayer::builder(PeerIpKey::new())
        .policy(Policy::per_key("per-client", Quota::per_minute(2).unwrap()))
        .build_with(still)
        .unwrap()
        .missing_key(MissingKey::Reject(StatusCode::BAD_REQUEST));
    let set = layer.set().clone();
    let app = Router::new().route("/", get(remaining)).layer(layer);
    let url = serve(app.clone()).await;
    let client = reqwest::Client::new();
    assert_eq!(get_with(&client, &url, &[]).await.status(), StatusCode::OK);
    assert_eq!(
        left(&*set, 0, &[127, 0, 0, 1]).await,
        1,
        "keyed by 127.0.0.1's octets"
    );

    // The same app on both stacks: an IPv4 client arrives as ::ffff:127.0.0.1, the same key.
    match serve_on(ip("::"), app.clone()).await {
        Ok(both) => {
            let port = both.rsplit(':').next().unwrap();
            match client.get(format!("http://127.0.0.1:{port}")).send().await {
                Ok(response) => {
                    assert_eq!(response.status(), StatusCode::OK);
                    assert_eq!(left(&*set, 0, &[127, 0, 0, 1]).await, 0, "mapped is IPv4");
                }
                Err(e) => println!("skipped the dual-stack part: [::] takes no IPv4 here: {e}"),
            }
        }
        Err(e) => println!("skipped the dual-stack part: [::] cannot be bound here: {e}"),
    }

    let v6 = ip("::1");
    let by_64 = by_address(Quota::per_minute(1).unwrap());
    let by_128 = by_address(Quota::per_minute(1).unwrap());
    let app = |limiter: &Arc<KeyedRateLimiter<IpAddr, ManualClock>>, key: PeerIpKey| {
        Router::new()
            .route("/", get(remaining))
            .layer(QuotaLayer::new(limiter.clone(), key))
    };
    let (url_64, url_128) = match (
        serve_on(v6, app(&by_64, PeerIpKey::new())).await,
        serve_on(v6, app(&by_128, PeerIpKey::new().ipv6_prefix(128))).await,
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            println!("skipped the IPv6 part: ::1 cannot be bound here: {e}");
            return;
        }
    };
    for (url, limiter, key) in [(&url_64, &by_64, ip("::")), (&url_128, &by_128, v6)] {
        assert_eq!(get_with(&client, url, &[]).await.status(), StatusCode::OK);
        assert_eq!(
            get_with(&client, url, &[]).await.status(),
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            limiter.check_key_n(&key, 0).unwrap().remaining(),
            Some(0),
            "{key}"
        );
        assert_eq!(limiter.len(), 1, "{key} only");
    }
}

/// The layer's quotas in a private `redis-server` that is up, over the wire.
#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::support::RedisServer;
    use flowguard::Guard;
    use flowguard::gcra::KeyedLimit;
    use flowguard::gcra::redis::RedisStore;
    use flowguard::gcra::remote::{FailurePolicy, RemoteLimitSet, RemoteRateLimiter};
    use std::time::Duration;

    /// A store on `server` deciding at the times of a clock that stands still.
    async fn still_store(server: &RedisServer, clock: &ManualClock) -> RedisStore {
        crate::support::redis_builder(server.url())
            .explicit_time(clock.clone())
            .hash_tag_keys(true)
            .connect()
            .await
            .unwrap()
    }

    /// One remote limiter per limit, each under its own prefix on `store`, failing closed.
    fn remote(
        store: &RedisStore,
    ) -> impl FnOnce(&[LimitSpec]) -> Result<RemoteLimitSet<RedisStore>, ConfigError> {
        move |limits| {
            limits
                .iter()
                .map(|limit| {
                    let own = store.with_prefix(format!("e2e:{}:", limit.name()))?;
                    RemoteRateLimiter::builder(own, limit.quota())
                        .failure_policy(FailurePolicy::FailClosed)
                        .build()
                })
                .collect()
        }
    }

    /// Per key 3 a minute, 4 a minute for everyone, in Redis: each request one script call,
    /// and a denial by either quota spends nothing from the other.
    #[tokio::test]
    async fn several_quotas_deny_atomically_in_redis() {
        let server = RedisServer::start();
        let store = still_store(&server, &ManualClock::new()).await;
        let layer = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
            .policy(Policy::per_key("per-minute", Quota::per_minute(3).unwrap()))
            .policy(Policy::global("global", Quota::per_minute(4).unwrap()))
            .build_with(remote(&store))
            .unwrap();
        let set = layer.set().clone();
        let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
        let client = reqwest::Client::new();
        // The server learns each script on its first call (a lone peek, then a peek of both
        // quotas at once); count from after them.
        assert_eq!(left(&*set, 1, b"*").await, 4);
        let both = [
            flowguard::gcra::Demand {
                limit: 0,
                key: b"warm",
                cost: 0,
            },
            flowguard::gcra::Demand {
                limit: 1,
                key: b"*",
                cost: 0,
            },
        ];
        assert!(set.check_all(&both).await.unwrap().allowed());
        let calls = store.script_calls();

        for _ in 0..3 {
            assert_eq!(as_key(&client, &url, "a").await.0, StatusCode::OK);
        }
        let (status, headers) = as_key(&client, &url, "a").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(deciding(&headers), ("per-minute".to_owned(), 0));
        assert_eq!(headers["retry-after"], "20");
        assert_eq!(
            store.script_calls() - calls,
            4,
            "each request's two quotas in one call"
        );
        assert_eq!(
            left(&*set, 1, b"*").await,
            1,
            "the denial spent no global token"
        );

        assert_eq!(as_key(&client, &url, "b").await.0, StatusCode::OK);
        let (status, headers) = as_key(&client, &url, "c").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(deciding(&headers), ("global".to_owned(), 0));
        assert_eq!(headers["retry-after"], "15");
        assert_eq!(
            left(&*set, 0, b"c").await,
            3,
            "the global denial spent none of c's"
        );
        assert_eq!(left(&*set, 0, b"b").await, 2);
        assert_eq!(left(&*set, 0, b"a").await, 0);
    }

    /// Eight clients race against a wide quota per key and a narrow global one in Redis: the
    /// global quota admits exactly its burst, and each key's own quota was spent exactly once
    /// per request of that key that got through.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn several_quotas_deny_atomically_in_redis_under_concurrent_clients() {
        let server = RedisServer::start();
        let store = still_store(&server, &ManualClock::new()).await;
        let day = Duration::from_secs(86_400);
        let layer = QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
            .policy(Policy::per_key(
                "wide",
                Quota::new(1, day).unwrap().with_burst(1000).unwrap(),
            ))
            .policy(Policy::global("narrow", Quota::new(40, day).unwrap()))
            .build_with(remote(&store))
            .unwrap();
        let set = layer.set().clone();
        let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
        let mut total = 0;
        for (key, admitted) in crate::support::serve::race_clients(&url, 8, 15).await {
            total += admitted;
            assert_eq!(
                left(&*set, 0, key.as_bytes()).await,
                1000 - admitted,
                "{key}: spent once per admitted request, never for a denied one"
            );
        }
        assert_eq!(total, 40, "the global quota admitted exactly its burst");
        assert_eq!(left(&*set, 1, b"*").await, 0);
    }

    /// One remote limiter behind `QuotaLayer::new`, and a guard's Redis quota behind
    /// `inbound_layer`, while Redis answers: exact numbers (not degraded), the state in Redis.
    #[tokio::test]
    async fn a_redis_backed_layer_that_is_up_answers_with_the_shared_numbers() {
        let server = RedisServer::start();
        let clock = ManualClock::new();
        let store = still_store(&server, &clock).await;
        let limiter = RemoteRateLimiter::builder(store, Quota::per_minute(2).unwrap())
            .failure_policy(FailurePolicy::FailClosed)
            .build()
            .unwrap();
        let layer = QuotaLayer::new(Arc::new(limiter), HeaderKey::new("x-api-key").unwrap());
        let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
        let client = reqwest::Client::new();

        for (left, reset) in [(1, 30), (0, 60)] {
            let (status, headers) = as_key(&client, &url, "a").await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(headers["ratelimit-policy"], r#""default";q=2;w=60"#);
            assert_eq!(
                headers["ratelimit"],
                format!(r#""default";r={left};t={reset}"#).as_str()
            );
        }
        let (status, headers) = as_key(&client, &url, "a").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(headers["retry-after"], "30");
        assert_eq!(headers["ratelimit"], r#""default";r=0;t=60"#);
        assert_eq!(
            server.cli(&["GET", "flowguard:={a}"]),
            "60000000",
            "Redis holds a's TAT: two tokens of 30 s ahead of 0"
        );
        assert_eq!(as_key(&client, &url, "b").await.0, StatusCode::OK);
        clock.advance(Duration::from_secs(30));
        assert_eq!(as_key(&client, &url, "a").await.0, StatusCode::OK);

        // The guard's quota in Redis, on the server's clock.
        let guard = Guard::builder()
            .quota(Quota::per_hour(2).unwrap())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix("guard:")
            .failure_policy(FailurePolicy::FailClosed)
            .build()
            .await
            .unwrap();
        let layer = guard
            .inbound_layer(HeaderKey::new("x-api-key").unwrap())
            .unwrap();
        let url = serve(Router::new().route("/", get(remaining)).layer(layer)).await;
        for left in [1, 0] {
            let (status, headers) = as_key(&client, &url, "a").await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(deciding(&headers), ("default".to_owned(), left));
        }
        let (status, headers) = as_key(&client, &url, "a").await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(deciding(&headers), ("default".to_owned(), 0));
        let wait: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
        assert!(
            (1..=1800).contains(&wait),
            "at most a token's 30 minutes: {wait}"
        );
        assert_eq!(
            server.cli(&["EXISTS", "guard:=a"]),
            "1",
            "the state is in Redis"
        );
        let peek = guard.rate_limit().unwrap().check(b"a", 0).await.unwrap();
        assert_eq!((peek.remaining(), peek.degraded), (Some(0), None));
    }
}
