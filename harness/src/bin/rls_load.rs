//! Load generator for `flowguard-rls`: `--concurrency` tasks send `ShouldRateLimit` calls (one
//! descriptor `client=<random of --keys>` in `--domain`) as fast as the service answers, for
//! `--seconds`, over `--connections` HTTP/2 connections.
//!
//! ```text
//! cargo run --release --features rls --bin flowguard-rls -- --config harness/rls_load.yaml &
//! cargo run --release -p flowguard-harness --bin rls_load -- \
//!     --addr 127.0.0.1:8081 --concurrency 64 --seconds 10 --json \
//!     [--connections 4] [--domain load] [--keys 10000] [--threads 1]
//! ```
//!
//! Prints a summary and, as the last stdout line with `--json`, a JSON object with `decisions`,
//! `over_limit`, `errors`, `decisions_per_sec`, and latency percentiles `p50_us`, `p90_us`,
//! `p99_us`, `max_us` (hdrhistogram, per call, client side).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

struct Args {
    addr: String,
    concurrency: usize,
    connections: usize,
    seconds: f64,
    json: bool,
    domain: String,
    keys: u64,
    threads: usize,
}

const USAGE: &str = "usage: rls_load --addr HOST:PORT [--concurrency N] [--connections N] \
                     [--seconds S] [--json] [--domain D] [--keys N] [--threads N]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:8081".into(),
        concurrency: 64,
        connections: 4,
        seconds: 10.0,
        json: false,
        domain: "load".into(),
        keys: 10_000,
        threads: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            args.json = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}\n{USAGE}");
        match flag.as_str() {
            "--addr" => args.addr = value,
            "--concurrency" => args.concurrency = value.parse().map_err(|e| bad(&e))?,
            "--connections" => args.connections = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => args.seconds = value.parse().map_err(|e| bad(&e))?,
            "--domain" => args.domain = value,
            "--keys" => args.keys = value.parse().map_err(|e| bad(&e))?,
            "--threads" => args.threads = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    if args.concurrency == 0
        || args.connections == 0
        || args.keys == 0
        || args.threads == 0
        || args.seconds.is_nan()
        || args.seconds <= 0.0
    {
        return Err(format!(
            "--concurrency, --connections, --keys, --threads and --seconds must be positive\n{USAGE}"
        ));
    }
    Ok(args)
}

#[derive(Default)]
struct Tally {
    decisions: u64,
    over_limit: u64,
    errors: u64,
    first_error: Option<String>,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let endpoint = match Channel::from_shared(format!("http://{}", args.addr)) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("--addr {}: {e}", args.addr);
                return ExitCode::from(2);
            }
        };
        match endpoint.connect().await {
            Ok(c) => channels.push(c),
            Err(e) => {
                eprintln!("cannot connect to {}: {e}", args.addr);
                return ExitCode::from(1);
            }
        }
    }
    let duration = Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(args.concurrency);
    for task in 0..args.concurrency {
        let mut client = RateLimitServiceClient::new(channels[task % channels.len()].clone());
        let (domain, keys) = (args.domain.clone(), args.keys);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(task as u64);
            let mut histogram = Histogram::<u64>::new(3).expect("a histogram");
            let mut tally = Tally::default();
            while Instant::now() < deadline {
                let request = RateLimitRequest {
                    domain: domain.clone(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "client".into(),
                            value: rng.random_range(0..keys).to_string(),
                        }],
                        ..Default::default()
                    }],
                    hits_addend: 1,
                };
                let sent = Instant::now();
                let answer = client.should_rate_limit(request).await;
                let us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                let _ = histogram.record(us.max(1));
                match answer {
                    Ok(response) => {
                        tally.decisions += 1;
                        if response.into_inner().overall_code == Code::OverLimit as i32 {
                            tally.over_limit += 1;
                        }
                    }
                    Err(status) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert_with(|| status.to_string());
                    }
                }
            }
            (tally, histogram)
        }));
    }
    let mut total = Tally::default();
    let mut histogram = Histogram::<u64>::new(3).expect("a histogram");
    for task in tasks {
        let (tally, h) = task.await.expect("a load task");
        total.decisions += tally.decisions;
        total.over_limit += tally.over_limit;
        total.errors += tally.errors;
        if total.first_error.is_none() {
            total.first_error = tally.first_error;
        }
        histogram.add(&h).expect("compatible histograms");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let per_sec = total.decisions as f64 / elapsed;
    println!(
        "{} decisions in {elapsed:.2} s ({per_sec:.0}/s), {} over limit, {} errors; \
         latency p50 {} us, p90 {} us, p99 {} us, max {} us",
        total.decisions,
        total.over_limit,
        total.errors,
        histogram.value_at_quantile(0.5),
        histogram.value_at_quantile(0.9),
        histogram.value_at_quantile(0.99),
        histogram.max()
    );
    if let Some(error) = &total.first_error {
        eprintln!("first error: {error}");
    }
    if args.json {
        let json = serde_json::json!({
            "decisions": total.decisions,
            "over_limit": total.over_limit,
            "errors": total.errors,
            "decisions_per_sec": per_sec.round(),
            "p50_us": histogram.value_at_quantile(0.5),
            "p90_us": histogram.value_at_quantile(0.9),
            "p99_us": histogram.value_at_quantile(0.99),
            "max_us": histogram.max(),
            "concurrency": args.concurrency,
            "connections": args.connections,
            "seconds": elapsed,
        });
        println!("{json}");
    }
    if total.decisions == 0 {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
