//! ACL users: a user limited to exactly the commands the store needs works, removing any one of
//! them is a clear typed error, and a wrong password is a clear error at connect.
#![cfg(feature = "redis")]

use crate::support::RedisServer;
use flowguard::gcra::redis::ConnectError;
use flowguard::gcra::remote::{Rejection, RemoteRateLimiter, StoreError};
use flowguard::gcra::{CheckError, Quota};

const NEEDED: [&str; 5] = ["evalsha", "eval", "get", "set", "time"];

fn create_user(server: &RedisServer, name: &str, commands: &[&str]) {
    let mut args = vec![
        "acl",
        "setuser",
        name,
        "reset",
        "on",
        ">s3cret",
        "~flowguard:*",
        "-@all",
    ];
    let grants: Vec<String> = commands.iter().map(|c| format!("+{c}")).collect();
    args.extend(grants.iter().map(String::as_str));
    assert_eq!(server.cli(&args), "OK");
}

fn url(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}", server.port)
}

#[tokio::test]
async fn a_user_with_only_the_needed_commands_works() {
    let server = RedisServer::start();
    create_user(&server, "limiter", &NEEDED);
    let store = crate::support::redis_builder(url(&server, "limiter", "s3cret"))
        .connect()
        .await
        .unwrap();
    // 5 per minute: no token comes back between the two checks, however slow the machine.
    let limiter = RemoteRateLimiter::builder(store, Quota::per_minute(5).unwrap())
        .build()
        .unwrap();
    let d = limiter.check_key_n(b"k", 2).await.unwrap();
    assert!(d.allowed && d.degraded.is_none());
    assert_eq!(d.remaining(), Some(3));
    // Flushed script cache: the user can still load it through EVAL.
    assert_eq!(server.cli(&["script", "flush"]), "OK");
    assert_eq!(limiter.check_key(b"k").await.unwrap().remaining(), Some(2));
}

#[tokio::test]
async fn every_needed_command_is_needed() {
    let server = RedisServer::start();
    for missing in NEEDED {
        let name = format!("without-{missing}");
        let granted: Vec<&str> = NEEDED.iter().copied().filter(|c| *c != missing).collect();
        create_user(&server, &name, &granted);
        // Start from an empty script cache, as after a restart.
        assert_eq!(server.cli(&["script", "flush"]), "OK");
        let store = crate::support::redis_builder(url(&server, &name, "s3cret"))
            .connect()
            .await
            .unwrap();
        let limiter = RemoteRateLimiter::builder(store, Quota::per_second(5).unwrap())
            .build()
            .unwrap();
        let err = limiter.check_key(b"k").await.expect_err(missing);
        match &err {
            CheckError::Store(StoreError::Rejected(Rejection::Permission { answer })) => {
                let reason = err.to_string();
                if missing.starts_with("eval") {
                    assert!(answer.contains(missing), "names the command: {answer}");
                }
                assert!(
                    reason.contains("+evalsha +eval +get +set +time"),
                    "says what to grant: {reason}"
                );
            }
            other => panic!("without +{missing}: expected a refused permission, got {other:?}"),
        }
    }
    // Keys outside the user's pattern are refused too.
    create_user(&server, "other-keys", &NEEDED);
    let store = crate::support::redis_builder(url(&server, "other-keys", "s3cret"))
        .prefix("elsewhere:")
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(5).unwrap())
        .build()
        .unwrap();
    assert!(matches!(
        limiter.check_key(b"k").await,
        Err(CheckError::Store(StoreError::Rejected(
            Rejection::Permission { .. }
        )))
    ));
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error() {
    let server = RedisServer::start();
    create_user(&server, "limiter", &NEEDED);
    let err = crate::support::redis_builder(url(&server, "limiter", "wrong"))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::AuthFailed { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("check the user name and password"), "{msg}");
    let err = crate::support::redis_builder(url(&server, "nobody", "s3cret"))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::AuthFailed { .. }), "{err:?}");
}

#[tokio::test]
async fn requirepass_auth_works_and_a_missing_password_is_a_clear_error() {
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    let store = crate::support::redis_builder(format!("redis://:pw@127.0.0.1:{}", server.port))
        .connect()
        .await
        .unwrap();
    let limiter = RemoteRateLimiter::builder(store, Quota::per_second(5).unwrap())
        .build()
        .unwrap();
    assert!(limiter.check_key(b"k").await.unwrap().allowed);
    for url in [
        format!("redis://:nope@127.0.0.1:{}", server.port),
        server.url(),
    ] {
        let err = crate::support::redis_builder(&url)
            .connect()
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(err, ConnectError::AuthFailed { .. }),
            "{url}: {err:?}"
        );
    }
}
