//! Calls an API through a `Guard`: each attempt holds a Vegas concurrency permit, and `429` or
//! `503` answers are retried, never before the server's `Retry-After`. Prints how the calls went:
//! ok, retried (needed more than one attempt), shed (no permit in time, not sent), failed, and
//! the time spent waiting to retry.
//!
//! Start the server (`cargo run --example axum_server --features axum`), then run:
//! `cargo run --example reqwest_client --features reqwest -- --url http://127.0.0.1:3000/api
//! [--requests N] [--concurrency C] [--key K]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowguard::Guard;
use flowguard::backoff::RetryPolicy;
use flowguard::backoff::reqwest::Attempts;
use flowguard::vegas::Shed;
use tokio::sync::Mutex;

const USAGE: &str =
    "usage: reqwest_client --url URL [--requests N] [--concurrency C] [--key API_KEY]";

struct Args {
    url: String,
    requests: u32,
    concurrency: u32,
    key: String,
}

fn parse_args() -> Result<Args, lexopt::Error> {
    use lexopt::prelude::*;
    let (mut url, mut requests, mut concurrency, mut key) = (None, 20, 4, "demo".to_owned());
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("url") => url = Some(parser.value()?.string()?),
            Long("requests") => requests = parser.value()?.parse()?,
            Long("concurrency") => concurrency = parser.value()?.parse()?,
            Long("key") => key = parser.value()?.string()?,
            Long("help") => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    let url = url.ok_or("missing --url")?;
    Ok(Args {
        url,
        requests,
        concurrency,
        key,
    })
}

/// How the calls went.
#[derive(Debug, Default)]
struct Tally {
    ok: u32,
    retried: u32,
    shed: u32,
    failed: u32,
    waited: Duration,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().map_err(|e| format!("{e}\n{USAGE}"))?;
    let guard = Guard::builder()
        .retry(RetryPolicy::builder().max_attempts(5).name("api").build()?)
        // An API that says how long each call queued (`Server-Timing: flowguard-queue;dur=3.2`,
        // what the `worker_queue` example answers) lets the instances of a fleet share it
        // evenly, with no setting here; without the header, nothing changes.
        .build()
        .await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let client = guard.reqwest_client(http);

    let tally = Arc::new(Mutex::new(Tally::default()));
    let next = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency.max(1) {
        let (client, tally, next) = (client.clone(), tally.clone(), next.clone());
        let (url, key, requests) = (args.url.clone(), args.key.clone(), args.requests);
        workers.spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < requests {
                let answer = client.get(&url).header("x-api-key", &key).send().await;
                let mut tally = tally.lock().await;
                match answer {
                    Ok(response) => {
                        let attempts = response.extensions().get::<Attempts>().copied();
                        let attempts = attempts.unwrap_or_default();
                        tally.waited += attempts.waited;
                        tally.retried += u32::from(attempts.count > 1);
                        match response.status().is_success() {
                            true => tally.ok += 1,
                            false => tally.failed += 1,
                        }
                    }
                    Err(error) if error_is_shed(&error) => tally.shed += 1,
                    Err(_) => tally.failed += 1,
                }
            }
        });
    }
    workers.join_all().await;

    let tally = tally.lock().await;
    println!(
        "{} calls in {:.1} s: {} ok, {} retried, {} shed, {} failed; {:.1} s spent waiting to retry (summed over calls)",
        args.requests,
        started.elapsed().as_secs_f64(),
        tally.ok,
        tally.retried,
        tally.shed,
        tally.failed,
        tally.waited.as_secs_f64()
    );
    let limiter = guard.concurrency();
    println!("concurrency limit now {}", limiter.limit());
    Ok(())
}

/// Whether the call was shed by the concurrency limit (never sent).
fn error_is_shed(error: &reqwest_middleware::Error) -> bool {
    match error {
        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Shed>().is_some(),
        reqwest_middleware::Error::Reqwest(_) => false,
    }
}
