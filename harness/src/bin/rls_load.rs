//! rls_load: load generator for `flowguard-rls` (what it sends and prints is described on
//! [`Args`], which `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-rls -- --config harness/rls_load.yaml &
//! cargo run --release -p flowguard-harness --bin rls_load -- \
//!     --addr 127.0.0.1:8081 --concurrency 64 --seconds 10 --json \
//!     [--connections 4] [--domain load] [--keys 10000] [--threads 1] [--client direct]
//! ```

use std::future::Future;
use std::pin::Pin;
use std::process::ExitCode;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use flowguard_harness::cli::{positive, seconds};
use hdrhistogram::Histogram;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tonic::body::Body;
use tonic::codegen::http::{Request, Response, Uri};
use tonic::transport::Channel;

/// Load generator for `flowguard-rls`: `--concurrency` tasks send `ShouldRateLimit` calls (one
/// descriptor `client=<random of --keys>` in `--domain`) as fast as the service answers, for
/// `--seconds`, over `--connections` HTTP/2 connections, and check every answer (an `OK` or
/// `OVER_LIMIT` overall code with one status per descriptor; anything else counts as an error).
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
    /// `concurrency`, `connections`, `client`, `threads`, `seconds`, and `client_cpu_s` (the CPU
    /// time this process used while the tasks ran, user and system).
    #[arg(long)]
    json: bool,
    /// The rate limit domain of every call.
    #[arg(long, default_value = "load", value_name = "D")]
    domain: String,
    /// Client values the tasks pick from at random.
    #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = positive::<u64>)]
    keys: u64,
    /// Threads of the client's runtime: 1 is tokio's current-thread scheduler (the tasks and the
    /// connections on one thread, so that one connection's requests leave in one write), more
    /// is its multi-thread scheduler with N workers.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = positive::<usize>)]
    threads: usize,
    /// The gRPC client stack.
    #[arg(long, value_enum, default_value = "direct")]
    client: ClientKind,
}

/// How the calls reach the connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ClientKind {
    /// tonic's generated client over hyper's HTTP/2 connection handle: each call goes straight
    /// to its connection's task.
    Direct,
    /// tonic's generated client over a `tonic::transport::Channel` (reconnecting, with a
    /// buffer task in front of each connection: one more task hop per call).
    Channel,
}

/// A hyper HTTP/2 connection handle as the service tonic's generated client calls.
#[derive(Clone)]
struct Direct(http2::SendRequest<Body>);

type Answer = Response<hyper::body::Incoming>;

impl tower::Service<Request<Body>> for Direct {
    type Response = Answer;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// One connection of either kind.
#[derive(Clone)]
enum Client {
    Direct(RateLimitServiceClient<Direct>),
    Channel(RateLimitServiceClient<Channel>),
}

impl Client {
    async fn connect(kind: ClientKind, addr: &str) -> Result<Client, String> {
        let origin: Uri = format!("http://{addr}")
            .parse()
            .map_err(|e| format!("--addr {addr}: {e}"))?;
        match kind {
            ClientKind::Channel => {
                let channel = Channel::builder(origin)
                    .connect()
                    .await
                    .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
                Ok(Client::Channel(RateLimitServiceClient::new(channel)))
            }
            ClientKind::Direct => {
                let tcp = tokio::net::TcpStream::connect(addr)
                    .await
                    .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
                tcp.set_nodelay(true)
                    .map_err(|e| format!("cannot set TCP_NODELAY: {e}"))?;
                let (send, connection) = http2::Builder::new(TokioExecutor::new())
                    .handshake(TokioIo::new(tcp))
                    .await
                    .map_err(|e| format!("HTTP/2 handshake with {addr} failed: {e}"))?;
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        eprintln!("connection to the service ended: {e}");
                    }
                });
                Ok(Client::Direct(RateLimitServiceClient::with_origin(
                    Direct(send),
                    origin,
                )))
            }
        }
    }

    async fn call(&mut self, request: RateLimitRequest) -> Result<i32, tonic::Status> {
        let response = match self {
            Client::Direct(c) => c.should_rate_limit(request).await?,
            Client::Channel(c) => c.should_rate_limit(request).await?,
        }
        .into_inner();
        if response.statuses.len() != 1 {
            return Err(tonic::Status::internal(format!(
                "{} statuses for one descriptor",
                response.statuses.len()
            )));
        }
        match Code::try_from(response.overall_code) {
            Ok(Code::Ok | Code::OverLimit) => Ok(response.overall_code),
            _ => Err(tonic::Status::internal(format!(
                "overall code {}",
                response.overall_code
            ))),
        }
    }
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
    let runtime = flowguard_harness::client_runtime(args.threads).expect("a tokio runtime");
    runtime.block_on(run(args))
}

/// The CPU time this process has used (user and system), from `/proc/self/stat`; `None` where
/// there is no procfs.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command name in parentheses: fields 3 onwards; utime and stime are 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ').skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // Clock ticks: 100 per second on every Linux configuration in use (USER_HZ).
    Some(Duration::from_millis((utime + stime) * 10))
}

async fn run(args: Args) -> ExitCode {
    let mut clients = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        match Client::connect(args.client, &args.addr).await {
            Ok(c) => clients.push(c),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(1);
            }
        }
    }
    let duration = Duration::from_secs_f64(args.seconds);
    let cpu_before = cpu_time();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::with_capacity(args.concurrency);
    for task in 0..args.concurrency {
        let mut client = clients[task % clients.len()].clone();
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
                let answer = client.call(request).await;
                let us = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                let _ = histogram.record(us.max(1));
                match answer {
                    Ok(code) => {
                        tally.decisions += 1;
                        if code == Code::OverLimit as i32 {
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
    let client_cpu = match (cpu_before, cpu_time()) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before).as_secs_f64()),
        _ => None,
    };
    let per_sec = total.decisions as f64 / elapsed;
    println!(
        "{} decisions in {elapsed:.2} s ({per_sec:.0}/s), {} over limit, {} errors; \
         latency p50 {} us, p90 {} us, p99 {} us, max {} us; client CPU {}",
        total.decisions,
        total.over_limit,
        total.errors,
        histogram.value_at_quantile(0.5),
        histogram.value_at_quantile(0.9),
        histogram.value_at_quantile(0.99),
        histogram.max(),
        client_cpu.map_or("unknown".into(), |s| format!(
            "{s:.2} s ({:.0} % of one core)",
            100.0 * s / elapsed
        )),
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
            "client": format!("{:?}", args.client).to_lowercase(),
            "threads": args.threads,
            "seconds": elapsed,
            "client_cpu_s": client_cpu,
        });
        println!("{json}");
    }
    if total.decisions == 0 {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
