//! The tower policy and the reqwest middleware against a real HTTP/1.1 server on loopback.
//!
//! The server records when each request arrives (its own wall clock) and the earliest time it
//! allowed the next one; tests assert only "not earlier than", never an upper bound on time.
#![cfg(all(feature = "tower", feature = "reqwest"))]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use flowguard::backoff::tower::{ClonableBody, HttpRetry};
use flowguard::backoff::{
    BackoffBounds, BackoffStrategy, BoxError, HttpRetryPolicy, RetryBudget, RetryPolicy,
    reqwest::RetryMiddleware,
};
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

/// What the server answers to its n-th request.
#[derive(Clone, Copy, Debug)]
enum Reply {
    /// 429 with `Retry-After: <seconds>`.
    TooManySeconds(u64),
    /// 429 with `Retry-After: <HTTP-date one second ahead>`.
    TooManyDate,
    /// 503 without `Retry-After`.
    Unavailable,
    /// 413 without `Retry-After`: final.
    TooLarge,
    /// 200.
    Ok,
}

#[derive(Debug)]
struct Hit {
    method: String,
    arrived: SystemTime,
    /// The earliest time the server allowed the next request, if it said so.
    not_before: Option<SystemTime>,
}

struct Server {
    url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Server {
    /// Serves `script[n]` to the n-th request (the last entry forever after).
    async fn start(script: Vec<Reply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/resource", listener.local_addr().unwrap());
        let hits = Arc::new(Mutex::new(Vec::<Hit>::new()));
        let log = hits.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (log, script) = (log.clone(), script.clone());
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    let mut line = String::new();
                    if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let arrived = SystemTime::now();
                    let method = line.split(' ').next().unwrap_or_default().to_owned();
                    let mut content_length = 0usize;
                    loop {
                        let mut header = String::new();
                        if read.read_line(&mut header).await.unwrap_or(0) == 0 || header == "\r\n" {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            content_length = value.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; content_length];
                    let _ = read.read_exact(&mut body).await;
                    let now = SystemTime::now();
                    let reply = {
                        let mut hits = log.lock();
                        let reply = script[hits.len().min(script.len() - 1)];
                        let (status, extra, not_before) = match reply {
                            Reply::TooManySeconds(s) => (
                                "429 Too Many Requests",
                                format!("Retry-After: {s}\r\n"),
                                Some(now + Duration::from_secs(s)),
                            ),
                            Reply::TooManyDate => {
                                let date = now + Duration::from_secs(1);
                                // HTTP-dates have whole seconds: the announced time is the
                                // formatted one (rounded down), which is what we check against.
                                let text = httpdate::fmt_http_date(date);
                                let announced = httpdate::parse_http_date(&text).unwrap();
                                (
                                    "429 Too Many Requests",
                                    format!("Retry-After: {text}\r\n"),
                                    Some(announced),
                                )
                            }
                            Reply::Unavailable => ("503 Service Unavailable", String::new(), None),
                            Reply::TooLarge => ("413 Content Too Large", String::new(), None),
                            Reply::Ok => ("200 OK", String::new(), None),
                        };
                        hits.push(Hit {
                            method,
                            arrived,
                            not_before,
                        });
                        format!(
                            "HTTP/1.1 {status}\r\n{extra}Content-Length: 2\r\nConnection: close\r\n\r\nok"
                        )
                    };
                    let _ = write.write_all(reply.as_bytes()).await;
                    let _ = write.shutdown().await;
                });
            }
        });
        Self { url, hits }
    }

    fn calls(&self) -> usize {
        self.hits.lock().len()
    }

    /// No request arrived before the time the previous response allowed.
    fn assert_never_early(&self) {
        let hits = self.hits.lock();
        for pair in hits.windows(2) {
            if let Some(not_before) = pair[0].not_before {
                assert!(
                    pair[1].arrived >= not_before,
                    "retry arrived {:?} before the server's time",
                    not_before
                        .duration_since(pair[1].arrived)
                        .unwrap_or_default()
                );
            }
        }
    }

    /// Some retries happened, but no more than the budget allows.
    fn assert_within_budget(&self) {
        let calls = self.calls();
        assert!(calls > REQUESTS, "the budget allowed some retries: {calls}");
        assert!(
            calls <= BUDGET_CALLS,
            "{calls} calls, budget allows {BUDGET_CALLS}"
        );
    }

    fn methods(&self) -> Vec<String> {
        self.hits.lock().iter().map(|h| h.method.clone()).collect()
    }
}

fn rules(max_attempts: u32, budget: Option<Arc<RetryBudget>>) -> HttpRetryPolicy {
    let b = RetryPolicy::builder()
        .backoff(BackoffStrategy::CapAware(
            BackoffBounds::new(Duration::from_millis(5), Duration::from_millis(20)).unwrap(),
        ))
        .max_attempts(max_attempts)
        .seed(5);
    let b = match budget {
        Some(budget) => b.budget(budget),
        None => b.without_budget(),
    };
    HttpRetryPolicy::new(b.build().unwrap())
}

/// A `tower` HTTP client: `reqwest` as the transport behind the retry policy.
fn tower_client<B>(
    rules: HttpRetryPolicy,
) -> impl Service<http::Request<B>, Response = http::Response<reqwest::Body>, Error = BoxError> + Clone
where
    B: ClonableBody + Into<reqwest::Body> + Send + 'static,
{
    let transport = reqwest::Client::new();
    ServiceBuilder::new()
        .retry(HttpRetry::new(rules))
        .service(service_fn(move |req: http::Request<B>| {
            let transport = transport.clone();
            async move {
                let req = reqwest::Request::try_from(req)?;
                let res = transport.execute(req).await?;
                Ok::<_, BoxError>(http::Response::from(res))
            }
        }))
}

fn reqwest_client(rules: HttpRetryPolicy) -> reqwest_middleware::ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(rules))
        .build()
}

fn honour_script() -> Vec<Reply> {
    vec![Reply::TooManySeconds(1), Reply::TooManyDate, Reply::Ok]
}

#[tokio::test]
async fn tower_policy_honours_retry_after_seconds_and_date() {
    let server = Server::start(honour_script()).await;
    let client = tower_client::<String>(rules(4, None));
    let req = http::Request::get(&server.url).body(String::new()).unwrap();
    let res = client.oneshot(req).await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(server.calls(), 3);
    server.assert_never_early();
}

#[tokio::test]
async fn reqwest_middleware_honours_retry_after_seconds_and_date() {
    let server = Server::start(honour_script()).await;
    let res = reqwest_client(rules(4, None))
        .get(&server.url)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(server.calls(), 3);
    server.assert_never_early();
}

/// 20 sequential requests to a server that always answers 503, with a 25% budget and no
/// per-second floor over a 60 s window: at most 20 + 5 calls (the budget), not 20 * 4.
const REQUESTS: usize = 20;
const BUDGET_CALLS: usize = 25;

fn small_budget() -> Arc<RetryBudget> {
    Arc::new(RetryBudget::new(Duration::from_secs(60), 0, 0.25).unwrap())
}

#[tokio::test]
async fn tower_policy_respects_the_budget_against_a_dead_server() {
    let server = Server::start(vec![Reply::Unavailable]).await;
    let mut client = tower_client::<String>(rules(4, Some(small_budget())));
    for _ in 0..REQUESTS {
        let req = http::Request::get(&server.url).body(String::new()).unwrap();
        let res = client.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(res.status(), 503);
    }
    server.assert_within_budget();
}

#[tokio::test]
async fn reqwest_middleware_respects_the_budget_against_a_dead_server() {
    let server = Server::start(vec![Reply::Unavailable]).await;
    let client = reqwest_client(rules(4, Some(small_budget())));
    for _ in 0..REQUESTS {
        let res = client.get(&server.url).send().await.unwrap();
        assert_eq!(res.status(), 503);
    }
    server.assert_within_budget();
}

#[tokio::test]
async fn non_idempotent_requests_are_not_retried_unless_opted_in() {
    let server = Server::start(vec![Reply::TooManySeconds(0), Reply::Ok]).await;
    let res = reqwest_client(rules(4, None))
        .post(&server.url)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    let req = http::Request::post(&server.url)
        .body(String::from("x"))
        .unwrap();
    let res = tower_client(rules(4, None)).oneshot(req).await.unwrap();
    assert_eq!(res.status(), 200, "the server's second reply");
    assert_eq!(server.methods(), ["POST", "POST"]);

    let server = Server::start(vec![Reply::TooManySeconds(0), Reply::Ok]).await;
    let opted_in = rules(4, None).retry_non_idempotent(true);
    let res = reqwest_client(opted_in)
        .post(&server.url)
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(server.calls(), 2);
}

/// A body that cannot be replayed, like a stream.
struct OneShot(String);

impl ClonableBody for OneShot {
    fn try_clone_body(&self) -> Option<Self> {
        None
    }
}

impl From<OneShot> for reqwest::Body {
    fn from(b: OneShot) -> Self {
        b.0.into()
    }
}

#[tokio::test]
async fn a_body_that_cannot_be_cloned_is_sent_once() {
    let server = Server::start(vec![Reply::TooManySeconds(0), Reply::Ok]).await;
    let req = http::Request::put(&server.url)
        .body(OneShot("x".into()))
        .unwrap();
    let res = tower_client(rules(4, None)).oneshot(req).await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(server.calls(), 1);
}

#[tokio::test]
async fn connection_errors_are_retried_then_reported() {
    // Bind then drop a listener: its port now refuses connections.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{addr}/");
    // One retry per request: the budget shows whether the refused connection was retried.
    let budget = || Arc::new(RetryBudget::new(Duration::from_secs(60), 0, 1.0).unwrap());
    let (b1, b2) = (budget(), budget());
    let err = reqwest_client(rules(3, Some(b1.clone())))
        .get(&url)
        .send()
        .await
        .unwrap_err();
    assert!(err.is_connect(), "{err}");
    assert_eq!(
        b1.remaining(std::time::Instant::now()),
        0,
        "one retry was taken"
    );
    let req = http::Request::get(&url).body(String::new()).unwrap();
    let err = tower_client(rules(3, Some(b2.clone())))
        .oneshot(req)
        .await
        .unwrap_err();
    assert!(flowguard::backoff::is_transient(err.as_ref()), "{err}");
    assert_eq!(
        b2.remaining(std::time::Instant::now()),
        0,
        "one retry was taken"
    );
}

/// A final answer is sent once by both clients, even when its status is listed as retried.
#[tokio::test]
async fn a_final_413_is_not_retried_by_either_client() {
    let listed = || rules(4, None).retry_statuses([http::StatusCode::PAYLOAD_TOO_LARGE]);
    let server = Server::start(vec![Reply::TooLarge]).await;
    let res = reqwest_client(listed())
        .get(&server.url)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 413);
    assert_eq!(server.calls(), 1);

    let server = Server::start(vec![Reply::TooLarge]).await;
    let req = http::Request::get(&server.url).body(String::new()).unwrap();
    let res = tower_client(listed()).oneshot(req).await.unwrap();
    assert_eq!(res.status(), 413);
    assert_eq!(server.calls(), 1);
}

/// `HttpRetry` over a bare `reqwest::Client`: the transport's own `reqwest::Error`, classified
/// by `TransientErrors`, no boxing. Counts the attempts it makes.
fn bare_tower_client(
    rules: HttpRetryPolicy,
    attempts: Arc<std::sync::atomic::AtomicU32>,
) -> impl Service<
    http::Request<String>,
    Response = http::Response<reqwest::Body>,
    Error = reqwest::Error,
> + Clone {
    let transport = reqwest::Client::new();
    ServiceBuilder::new()
        .retry(HttpRetry::new(rules))
        .service(service_fn(move |req: http::Request<String>| {
            let transport = transport.clone();
            attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                let res = transport.execute(reqwest::Request::try_from(req)?).await?;
                Ok::<_, reqwest::Error>(http::Response::from(res))
            }
        }))
}

/// A port nobody listens on: bound, then released.
async fn closed_port() -> std::net::SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Whether `TransientErrors` retries `error`, asked as a `reqwest::Error` and as the other
/// error types it may come wrapped in; all must agree.
fn retryable(error: reqwest::Error) -> bool {
    use flowguard::backoff::{Classification, ErrorClassifier, TransientErrors};
    let bare = TransientErrors.is_retryable(&error);
    let by_rules = rules(2, None).classify_error(&error);
    let expected = if bare {
        Classification::Retryable { retry_after: None }
    } else {
        Classification::NotRetryable
    };
    assert_eq!(by_rules, expected, "{error:?}");
    let middleware = reqwest_middleware::Error::Reqwest(error);
    assert_eq!(TransientErrors.is_retryable(&middleware), bare);
    let reqwest_middleware::Error::Reqwest(error) = middleware else {
        unreachable!()
    };
    let boxed: BoxError = Box::new(error);
    assert_eq!(TransientErrors.is_retryable(&boxed), bare, "{boxed:?}");
    bare
}

/// Real reqwest errors on loopback: a refused connection and a timeout are transient; a request
/// built wrong and a response body that cannot be read are not.
#[tokio::test]
async fn reqwest_errors_are_retried_when_transient() {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();

    let refused = client
        .get(format!("http://{}/", closed_port().await))
        .send()
        .await
        .unwrap_err();
    assert!(refused.is_connect(), "{refused:?}");
    assert!(retryable(refused));

    // A server that accepts and never answers: the client's timeout ends the wait.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let timeout = client
        .get(format!("http://{address}/"))
        .send()
        .await
        .unwrap_err();
    server.abort();
    assert!(timeout.is_timeout(), "{timeout:?}");
    assert!(retryable(timeout));

    let built_wrong = client.get("not a url").send().await.unwrap_err();
    assert!(built_wrong.is_builder(), "{built_wrong:?}");
    assert!(!retryable(built_wrong));

    // A response that promises 10 bytes and sends 2 before closing: the body cannot be read
    // (its source is the connection cut short).
    let short = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = short.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut socket, _) = short.accept().await.unwrap();
        let mut request = [0; 1024];
        let _ = socket.read(&mut request).await;
        let head = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nok";
        let _ = socket.write_all(head.as_bytes()).await;
        let _ = socket.shutdown().await;
    });
    let response = client
        .get(format!("http://{address}/"))
        .send()
        .await
        .unwrap();
    let undecodable = response.bytes().await.unwrap_err();
    server.await.unwrap();
    assert!(undecodable.is_decode(), "{undecodable:?}");
    assert!(!retryable(undecodable));
}

/// `HttpRetry` and `RetryPolicy::retry` with `HttpRetryPolicy`'s rules work over a bare
/// `reqwest::Client`: its refused connections are retried up to the attempts, a request built
/// wrong is sent once, retried statuses are retried.
#[tokio::test]
async fn the_retry_policy_works_over_a_bare_reqwest_client() {
    use std::sync::atomic::{AtomicU32, Ordering};

    let refused = format!("http://{}/", closed_port().await);
    let attempts = Arc::new(AtomicU32::new(0));
    let get = |url: &str| http::Request::get(url).body(String::new()).unwrap();
    let error = bare_tower_client(rules(3, None), attempts.clone())
        .oneshot(get(&refused))
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    assert_eq!(attempts.swap(0, Ordering::SeqCst), 3, "retried");

    // A relative URI: reqwest cannot build a request from it.
    let error = bare_tower_client(rules(3, None), attempts.clone())
        .oneshot(get("/relative"))
        .await
        .unwrap_err();
    assert!(error.is_builder(), "{error:?}");
    assert_eq!(attempts.swap(0, Ordering::SeqCst), 1, "not retried");

    let server = Server::start(vec![Reply::Unavailable, Reply::Ok]).await;
    let response = bare_tower_client(rules(3, None), attempts.clone())
        .oneshot(get(&server.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(server.calls(), 2);

    // The retry engine itself, over the client's `send`.
    let rules = rules(3, None);
    let client = reqwest::Client::new();
    let made = AtomicU32::new(0);
    let result = rules
        .policy()
        .retry(
            |_attempt| {
                made.fetch_add(1, Ordering::SeqCst);
                client.get(&refused).send()
            },
            |outcome| match outcome {
                Ok(response) => rules.classify_response(
                    response.status(),
                    response.headers(),
                    SystemTime::now(),
                ),
                Err(error) => rules.classify_error(error),
            },
        )
        .await;
    assert!(result.is_err());
    assert_eq!(made.load(Ordering::SeqCst), 3);
}
