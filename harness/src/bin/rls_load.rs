//! rls_load: load generator for `flowguard-rls` (what it sends and prints is described on
//! [`Args`], which `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-rls -- --config harness/rls_load.yaml &
//! cargo run --release -p flowguard-harness --bin rls_load -- \
//!     --addr 127.0.0.1:8081 --concurrency 64 --seconds 10 --json \
//!     [--connections 4] [--domain load] [--keys 10000] [--threads 1]
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use flowguard_harness::cli::{positive, seconds};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::transport::Channel;

/// Load generator for `flowguard-rls`: `--concurrency` tasks send `ShouldRateLimit` calls (one
/// descriptor `client=<random of --keys>` in `--domain`) as fast as the service answers, for
/// `--seconds`, over `--connections` HTTP/2 connections.
///
/// Prints a summary and, with `--json`, a JSON object as the last stdout line.
#[derive(Parser)]
#[command(verbatim_doc_comment, args_override_self = true)]
struct Args {
    /// The service's gRPC address.
    #[arg(long, default_value = "127.0.0.1:8081", value_name = "HOST:PORT")]
    addr: String,
    /// Tasks sending calls concurrently.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = positive::<usize>)]
    concurrency: usize,
    /// HTTP/2 connections the tasks share (task i uses connection i mod N).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = positive::<usize>)]
    connections: usize,
    /// How long the tasks run, in seconds.
    #[arg(long, default_value_t = 10.0, value_name = "S", value_parser = seconds)]
    seconds: f64,
    /// Print a JSON object as the last stdout line.
    ///
    /// Its fields: `decisions`, `over_limit`, `errors`, `decisions_per_sec`, latency percentiles
    /// `p50_us`, `p90_us`, `p99_us`, `max_us` (hdrhistogram, per call, client side),
    /// `concurrency`, `connections` and `seconds`.
    #[arg(long)]
    json: bool,
    /// The rate limit domain of every call.
    #[arg(long, default_value = "load", value_name = "D")]
    domain: String,
    /// Client values the tasks pick from at random.
    #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = positive::<u64>)]
    keys: u64,
    /// Worker threads of the client's runtime.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = positive::<usize>)]
    threads: usize,
}

#[derive(Default)]
struct Tally {
    decisions: u64,
    over_limit: u64,
    errors: u64,
    first_error: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
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
