//! Building a `Guard`: every misconfiguration is a typed `BuildError` whose message says what to
//! change; store URLs (`redis://`, `rediss://`, `redis+cluster://`) are read into a target; a
//! guard built from a Redis URL keeps its quota in a real `redis-server` (one of its own).

use flowguard::gcra::{KeyedRateLimiter, Quota};
use flowguard::{BuildError, Guard, NoRateLimit};

fn quota() -> Quota {
    Quota::per_second(10).unwrap()
}

#[tokio::test]
async fn a_quota_and_a_limiter_of_ones_own_are_refused_together() {
    let error = Guard::builder()
        .quota(quota())
        .rate_limit(KeyedRateLimiter::<Vec<u8>>::new(quota()))
        .build()
        .await
        .unwrap_err();
    assert_eq!(error, BuildError::QuotaAndRateLimit);
    let message = error.to_string();
    assert!(message.contains("keep one of them"), "{message}");
}

/// Reading `X-RateLimit-Reset` is a setting of the retries: without a retry policy (each call
/// made once) it would do nothing, and says so.
#[cfg(any(feature = "tower", feature = "reqwest"))]
#[tokio::test]
async fn legacy_reset_needs_a_retry_policy() {
    use flowguard::backoff::RetryPolicy;
    use flowguard::headers::LegacyReset;

    let error = Guard::builder()
        .legacy_reset(LegacyReset::DelaySeconds)
        .build()
        .await
        .unwrap_err();
    assert_eq!(
        error,
        BuildError::NeedsRetry {
            setting: "legacy_reset"
        }
    );
    let message = error.to_string();
    assert!(
        message.contains("add GuardBuilder::retry(policy)"),
        "{message}"
    );
    let retry = RetryPolicy::builder().max_attempts(2).build().unwrap();
    let built = Guard::builder()
        .retry(retry)
        .legacy_reset(LegacyReset::UnixSeconds)
        .build()
        .await;
    assert!(built.is_ok());
}

#[tokio::test]
async fn a_guard_without_a_quota_admits_nothing_and_has_no_inbound_layer() {
    let guard = Guard::builder().build().await.unwrap();
    assert!(guard.rate_limit().is_none());
    let error = guard.admit(b"k").await.unwrap_err();
    assert!(error.to_string().contains("GuardBuilder::quota"), "{error}");
    #[cfg(feature = "tower")]
    {
        let key = |_: &http::Request<()>| Some(b"k".to_vec());
        assert_eq!(guard.inbound_layer(key).err(), Some(NoRateLimit));
    }
    assert!(NoRateLimit.to_string().contains("GuardBuilder::rate_limit"));
}

#[tokio::test]
async fn the_default_outbound_limiter_is_vegas_and_the_default_wait_is_the_crates() {
    let guard = Guard::builder().build().await.unwrap();
    assert!(format!("{:?}", guard.concurrency()).contains("vegas"));
    assert_eq!(
        guard.acquire_timeout(),
        flowguard::vegas::DEFAULT_ACQUIRE_TIMEOUT
    );
}

#[cfg(feature = "redis")]
mod redis {
    use flowguard::gcra::redis::ConnectError;
    use flowguard::gcra::remote::FailurePolicy;
    use flowguard::gcra::{ConfigError, KeyedRateLimiter};
    use flowguard::{BuildError, Guard, RedisTarget, RedisUrlError};

    use super::quota;

    #[test]
    fn standalone_urls_are_kept_as_they_are() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://user:p%40ss@host:6380/2",
            "rediss://host:6380",
        ] {
            assert_eq!(
                RedisTarget::parse(url),
                Ok(RedisTarget::Standalone { url: url.into() })
            );
        }
    }

    #[test]
    fn cluster_urls_become_one_url_per_node_with_the_credentials_and_scheme() {
        assert_eq!(
            RedisTarget::parse("redis+cluster://a:7000,b:7001"),
            Ok(RedisTarget::Cluster {
                nodes: vec!["redis://a:7000".into(), "redis://b:7001".into()]
            })
        );
        assert_eq!(
            RedisTarget::parse("rediss+cluster://app:s%2Cecret@a:7000, b:7001/0"),
            Ok(RedisTarget::Cluster {
                nodes: vec![
                    "rediss://app:s%2Cecret@a:7000/0".into(),
                    "rediss://app:s%2Cecret@b:7001/0".into()
                ]
            })
        );
        assert_eq!(
            RedisTarget::parse("redis+cluster://only:7000"),
            Ok(RedisTarget::Cluster {
                nodes: vec!["redis://only:7000".into()]
            })
        );
    }

    #[test]
    fn other_schemes_and_empty_node_lists_are_refused_with_the_forms_to_use() {
        for (url, error) in [
            (
                "http://host:6379",
                RedisUrlError::UnknownScheme {
                    scheme: "http".into(),
                },
            ),
            (
                "host:6379",
                RedisUrlError::UnknownScheme {
                    scheme: String::new(),
                },
            ),
            ("redis+cluster://", RedisUrlError::MissingNode),
            ("redis+cluster://a:1,,b:2", RedisUrlError::MissingNode),
            ("redis+cluster://user:secret@", RedisUrlError::MissingNode),
        ] {
            assert_eq!(RedisTarget::parse(url), Err(error.clone()), "{url}");
            let message = error.to_string();
            assert!(message.contains("redis+cluster://"), "{message}");
            assert!(!message.contains("secret"), "{message}");
        }
    }

    #[tokio::test]
    async fn store_settings_need_redis_no_limiter_of_ones_own_and_two_tier_a_quota() {
        let own = || KeyedRateLimiter::<Vec<u8>>::new(quota());
        let cases = [
            // Refused before connecting: nothing listens on port 1.
            (
                Guard::builder().redis("redis://127.0.0.1:1").two_tier(5),
                BuildError::NeedsQuota {
                    setting: "two_tier",
                },
                "add GuardBuilder::quota",
            ),
            (
                Guard::builder().redis_prefix("app:"),
                BuildError::NeedsRedis {
                    setting: "redis_prefix",
                },
                "add GuardBuilder::redis(url) or remove redis_prefix",
            ),
            (
                Guard::builder()
                    .quota(quota())
                    .redis_timeout(std::time::Duration::from_secs(1)),
                BuildError::NeedsRedis {
                    setting: "redis_timeout",
                },
                "remove redis_timeout",
            ),
            (
                Guard::builder().quota(quota()).two_tier(5),
                BuildError::NeedsRedis {
                    setting: "two_tier",
                },
                "add GuardBuilder::redis(url) or remove two_tier",
            ),
            (
                Guard::builder()
                    .quota(quota())
                    .failure_policy(FailurePolicy::FailClosed),
                BuildError::NeedsRedis {
                    setting: "failure_policy",
                },
                "remove failure_policy",
            ),
            (
                Guard::builder().rate_limit(own()).redis_prefix("app:"),
                BuildError::SettingWithRateLimit {
                    setting: "redis_prefix",
                },
                "configure that limiter instead",
            ),
        ];
        for (builder, expected, fix) in cases {
            let error = builder.build().await.unwrap_err();
            assert_eq!(error, expected);
            assert!(error.to_string().contains(fix), "{error}");
        }
    }

    #[tokio::test]
    async fn a_bad_url_or_an_unreachable_server_fails_the_build() {
        let error = Guard::builder()
            .quota(quota())
            .redis("memcached://127.0.0.1:11211")
            .build()
            .await
            .unwrap_err();
        assert!(matches!(
            error,
            BuildError::RedisUrl(RedisUrlError::UnknownScheme { .. })
        ));

        // A port nothing listens on (a fresh server's, stopped).
        let mut server = crate::support::RedisServer::start();
        let url = server.url();
        server.kill();
        let error = Guard::builder()
            .quota(quota())
            .redis(url)
            .build()
            .await
            .unwrap_err();
        assert!(
            matches!(error, BuildError::Redis(ConnectError::Unreachable { .. })),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("check the host, port"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_quota_lives_in_redis_and_two_tier_batches_are_checked_against_the_burst() {
        let server = crate::support::RedisServer::start();
        let guard = Guard::builder()
            .quota(flowguard::gcra::Quota::per_minute(2).unwrap())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix("guard-test:")
            .failure_policy(FailurePolicy::FailClosed)
            .build()
            .await
            .unwrap();
        assert!(guard.admit(b"k").await.unwrap().allowed);
        assert!(guard.admit(b"k").await.unwrap().allowed);
        assert!(!guard.admit(b"k").await.unwrap().allowed);
        // The state is in Redis, under the prefix.
        let keys = server.cli(&["KEYS", "guard-test:*"]);
        assert_eq!(keys.lines().count(), 1, "{keys}");

        let two_tier = |batch| {
            Guard::builder()
                .quota(quota())
                .redis(server.url())
                .redis_timeout(crate::support::STORE_TIMEOUT)
                .two_tier(batch)
                .build()
        };
        let error = two_tier(11).await.unwrap_err();
        assert_eq!(
            error,
            BuildError::Store(ConfigError::BatchAboveBurst {
                batch: 11,
                burst: 10
            })
        );
        assert!(error.to_string().contains("use a batch of at most 10"));
        let two_tier = two_tier(5).await.unwrap();
        assert!(two_tier.admit(b"t").await.unwrap().allowed);
    }
    #[cfg(feature = "tower")]
    #[tokio::test]
    async fn redis_without_a_quota_keeps_the_quota_layers_there_and_admit_says_no_quota() {
        let server = crate::support::RedisServer::start();
        let guard = Guard::builder()
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_prefix("bare:")
            .build()
            .await
            .unwrap();
        let error = guard.admit(b"k").await.unwrap_err();
        assert!(error.to_string().contains("GuardBuilder::quota"), "{error}");

        let layer = guard
            .quota_layer(
                flowguard::gcra::layer::QuotaLayer::builder(
                    flowguard::gcra::layer::HeaderKey::new("x-api-key").unwrap(),
                )
                .policy(flowguard::gcra::layer::Policy::per_key("minute", quota())),
            )
            .unwrap();
        let demand = [flowguard::gcra::Demand {
            limit: 0,
            key: b"k",
            cost: 1,
        }];
        assert!(layer.set().check_all(&demand).await.unwrap().allowed());
        let keys = server.cli(&["KEYS", "bare:*"]);
        assert_eq!(keys.trim(), "bare:default:minute:={k}");
    }

    #[tokio::test]
    async fn a_zero_redis_timeout_is_refused_with_what_to_change() {
        let server = crate::support::RedisServer::start();
        let error = Guard::builder()
            .quota(quota())
            .redis(server.url())
            .redis_timeout(crate::support::STORE_TIMEOUT)
            .redis_timeout(std::time::Duration::ZERO)
            .build()
            .await
            .unwrap_err();
        assert!(matches!(error, BuildError::Redis(_)), "{error:?}");
        assert!(error.to_string().contains("timeout"), "{error}");
    }
}
