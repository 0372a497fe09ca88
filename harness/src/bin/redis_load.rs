//! Load generator for the Redis store: `--tasks` tasks check random keys as fast as they can for
//! `--seconds`, through one `RemoteRateLimiter<RedisStore>` (one multiplexed connection, or the cluster client).
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin redis_load -- \
//!     --redis redis://127.0.0.1:6379 --tasks 64 --seconds 3 --json [--prefix P] [--keys N] \
//!     [--rate R --burst B --cost C] [--cluster URL,URL,...] [--threads N (default 1)]
//! ```
//!
//! Prints a summary and, as the last stdout line with `--json`, a JSON object with `decisions`,
//! `allowed`, `denied`, `degraded`, `errors`, `decisions_per_sec`, and latency percentiles
//! `p50_us`, `p90_us`, `p99_us`, `p999_us`, `max_us` (hdrhistogram).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use flowguard::gcra::Quota;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::RemoteRateLimiter;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

struct Args {
    redis: String,
    cluster: Option<Vec<String>>,
    tasks: usize,
    seconds: f64,
    json: bool,
    prefix: String,
    keys: u64,
    rate: u32,
    burst: u32,
    cost: u32,
    threads: usize,
}

const USAGE: &str = "usage: redis_load [--redis URL] [--cluster URL,URL,...] [--tasks N] [--seconds S] [--json] \
                     [--prefix P] [--keys N] [--rate R] [--burst B] [--cost C] [--threads N]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        redis: "redis://127.0.0.1:6379".into(),
        cluster: None,
        tasks: 64,
        seconds: 3.0,
        json: false,
        prefix: "flowguard-load:".into(),
        keys: 100_000,
        rate: 100,
        burst: 100,
        cost: 1,
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
            "--redis" => args.redis = value,
            "--cluster" => args.cluster = Some(value.split(',').map(str::to_string).collect()),
            "--tasks" => args.tasks = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => args.seconds = value.parse().map_err(|e| bad(&e))?,
            "--prefix" => args.prefix = value,
            "--keys" => args.keys = value.parse().map_err(|e| bad(&e))?,
            "--threads" => args.threads = value.parse().map_err(|e| bad(&e))?,
            "--rate" => args.rate = value.parse().map_err(|e| bad(&e))?,
            "--burst" => args.burst = value.parse().map_err(|e| bad(&e))?,
            "--cost" => args.cost = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    if args.tasks == 0 || args.keys == 0 || args.seconds.is_nan() || args.seconds <= 0.0 {
        return Err(format!(
            "--tasks, --keys and --seconds must be positive\n{USAGE}"
        ));
    }
    Ok(args)
}

#[derive(Default)]
struct Tally {
    decisions: u64,
    allowed: u64,
    degraded: u64,
    errors: u64,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // One client thread by default: on a small machine the Redis server needs the other cores,
    // and a single-threaded runtime drives one multiplexed connection faster.
    let runtime = match args.threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let builder = match &args.cluster {
        Some(urls) => RedisStore::cluster_builder(urls.clone()),
        None => RedisStore::builder(args.redis.clone()),
    };
    let store = builder.prefix(&args.prefix).connect().await?;
    let quota = Quota::per_second(args.rate)?.with_burst(args.burst)?;
    let limiter = RemoteRateLimiter::builder(store, quota).build()?;
    let run_for = Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.tasks);
    for seed in 0..args.tasks as u64 {
        let (limiter, keys, cost) = (limiter.clone(), args.keys, args.cost);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut hist =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let mut tally = Tally::default();
            while started.elapsed() < run_for {
                let key = rng.random_range(0..keys).to_le_bytes();
                let t0 = Instant::now();
                let result = limiter.check_key_n(&key, cost).await;
                hist.saturating_record(t0.elapsed().as_micros() as u64);
                tally.decisions += 1;
                match result {
                    Ok(d) => {
                        tally.allowed += u64::from(d.allowed);
                        tally.degraded += u64::from(d.degraded.is_some());
                    }
                    Err(_) => tally.errors += 1,
                }
            }
            (hist, tally)
        }));
    }
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut total = Tally::default();
    for task in tasks {
        let (h, t) = task.await?;
        hist.add(&h)?;
        total.decisions += t.decisions;
        total.allowed += t.allowed;
        total.degraded += t.degraded;
        total.errors += t.errors;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let per_sec = total.decisions as f64 / elapsed;
    let topology = if args.cluster.is_some() {
        "cluster"
    } else {
        "standalone"
    };
    println!(
        "{topology}: {} tasks, {:.1} s: {} decisions ({per_sec:.0}/s), {} allowed, {} degraded, {} errors; \
         latency p50 {} us, p99 {} us, max {} us",
        args.tasks,
        elapsed,
        total.decisions,
        total.allowed,
        total.degraded,
        total.errors,
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.99),
        hist.max()
    );
    if args.json {
        let json = serde_json::json!({
            "topology": topology,
            "tasks": args.tasks,
            "seconds": elapsed,
            "keys": args.keys,
            "prefix": args.prefix,
            "decisions": total.decisions,
            "allowed": total.allowed,
            "denied": total.decisions - total.allowed - total.errors,
            "degraded": total.degraded,
            "errors": total.errors,
            "decisions_per_sec": per_sec,
            "p50_us": hist.value_at_quantile(0.5),
            "p90_us": hist.value_at_quantile(0.9),
            "p99_us": hist.value_at_quantile(0.99),
            "p999_us": hist.value_at_quantile(0.999),
            "max_us": hist.max(),
        });
        println!("{json}");
    }
    Ok(())
}
