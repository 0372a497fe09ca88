//! Both HTTP sides on loopback: a server that answers `429 Too Many Requests` with `Retry-After`
//! through [`QuotaLayer`], and a `reqwest` client whose [`RetryMiddleware`] waits what the
//! server asked before it retries. Takes about four seconds.
//!
//! Run: `cargo run --example http --features tower,reqwest`

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use flowguard::backoff::reqwest::RetryMiddleware;
use flowguard::backoff::{HttpRetryPolicy, RetryPolicy};
use flowguard::gcra::layer::QuotaLayer;
use flowguard::gcra::{KeyedRateLimiter, Quota};
use http::{Request, Response};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server: 2 requests per second per API key, burst 2.
    let store = Arc::new(KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(2)?));
    let hits = Arc::new(AtomicU32::new(0));
    let counted = hits.clone();
    let service = ServiceBuilder::new()
        .layer(QuotaLayer::new(store, |req: &Request<()>| {
            req.headers()
                .get("x-api-key")
                .map(|v| v.as_bytes().to_vec())
        }))
        .service_fn(move |_req: Request<()>| {
            counted.fetch_add(1, Ordering::Relaxed);
            async { Ok::<_, Infallible>(Response::new("hello\n".to_string())) }
        });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hello", listener.local_addr()?);
    let arrivals = Arc::new(AtomicU32::new(0));
    tokio::spawn(serve(listener, service, arrivals.clone()));

    // The client: retries 429/503 of idempotent requests, never before Retry-After.
    let rules = HttpRetryPolicy::new(
        RetryPolicy::builder()
            .max_attempts(4)
            .deadline(Duration::from_secs(10))
            .build()?,
    );
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(rules))
        .build();

    let start = Instant::now();
    for i in 1..=5 {
        let before = arrivals.load(Ordering::Relaxed);
        let response = client.get(&url).header("x-api-key", "demo").send().await?;
        let headers = response.headers().clone();
        println!(
            "request {i}: {} after {:>4} ms, {} attempt(s), ratelimit: {}",
            response.status(),
            start.elapsed().as_millis(),
            arrivals.load(Ordering::Relaxed) - before,
            headers
                .get("ratelimit")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-"),
        );
    }
    println!(
        "\nthe server saw {} requests and served {}; the rest were answered 429 with Retry-After",
        arrivals.load(Ordering::Relaxed),
        hits.load(Ordering::Relaxed)
    );
    Ok(())
}

/// A minimal HTTP/1.1 server (one request per connection) in front of a tower service.
async fn serve<S>(listener: TcpListener, service: S, arrivals: Arc<AtomicU32>)
where
    S: Service<Request<()>, Response = Response<String>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    while let Ok((stream, _)) = listener.accept().await {
        let (service, arrivals) = (service.clone(), arrivals.clone());
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut line = String::new();
            if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            arrivals.fetch_add(1, Ordering::Relaxed);
            let mut parts = line.split_whitespace();
            let mut request = Request::builder()
                .method(parts.next().unwrap_or("GET"))
                .uri(parts.next().unwrap_or("/"));
            loop {
                let mut header = String::new();
                if read.read_line(&mut header).await.unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
                if let Some((name, value)) = header.split_once(':') {
                    request = request.header(name.trim(), value.trim());
                }
            }
            let Ok(request) = request.body(()) else {
                return;
            };
            let Ok(response) = service.oneshot(request).await;
            let mut head = format!("HTTP/1.1 {}\r\n", response.status());
            for (name, value) in response.headers() {
                head.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap_or("")));
            }
            let body = response.into_body();
            head.push_str(&format!(
                "content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            ));
            let _ = write.write_all(head.as_bytes()).await;
            let _ = write.shutdown().await;
        });
    }
}
