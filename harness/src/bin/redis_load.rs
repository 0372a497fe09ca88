//! redis_load: load generator for the Redis store, through one `RemoteRateLimiter<RedisStore>` (what it runs and prints is described on
//! [`Args`], which `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin redis_load -- \
//!     --redis redis://127.0.0.1:6379 --tasks 64 --seconds 3 --json [--prefix P] [--keys N] \
//!     [--rate R --burst B --cost C] [--cluster URL,URL,...] [--threads N (default 1)]
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{ArgAction, Parser};
use flowguard::gcra::Quota;
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::RemoteRateLimiter;
use flowguard_harness::cli::{positive, seconds};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Load generator for the Redis store: `--tasks` tasks check random keys as fast as they can for
/// `--seconds`, through one `RedisRateLimiter` (one multiplexed connection, or the cluster client).
///
/// Prints a summary and, with `--json`, a JSON object as the last stdout line.
#[derive(Parser)]
#[command(verbatim_doc_comment, args_override_self = true)]
struct Args {
    /// The Redis server (standalone).
    #[arg(long, default_value = "redis://127.0.0.1:6379", value_name = "URL")]
    redis: String,
    /// Redis Cluster nodes, comma-separated; replaces --redis.
    #[arg(long, value_delimiter = ',', action = ArgAction::Set, value_name = "URL,URL,...")]
    cluster: Option<Vec<String>>,
    /// Tasks checking keys concurrently.
    #[arg(long, default_value_t = 64, value_name = "N", value_parser = positive::<usize>)]
    tasks: usize,
    /// How long the tasks run, in seconds.
    #[arg(long, default_value_t = 3.0, value_name = "S", value_parser = seconds)]
    seconds: f64,
    /// Print a JSON object as the last stdout line.
    ///
    /// Its fields: `topology`, `tasks`, `seconds`, `keys`, `prefix`, `decisions`, `allowed`,
    /// `denied`, `degraded`, `errors`, `decisions_per_sec`, and latency percentiles `p50_us`,
    /// `p90_us`, `p99_us`, `p999_us`, `max_us` (hdrhistogram).
    #[arg(long)]
    json: bool,
    /// Key prefix in Redis.
    #[arg(long, default_value = "flowguard-load:", value_name = "P")]
    prefix: String,
    /// Keys the tasks pick from at random.
    #[arg(long, default_value_t = 100_000, value_name = "N", value_parser = positive::<u64>)]
    keys: u64,
    /// The quota of every key, in decisions per second.
    #[arg(long, default_value_t = 100, value_name = "R")]
    rate: u32,
    /// The quota's burst.
    #[arg(long, default_value_t = 100, value_name = "B")]
    burst: u32,
    /// Tokens each check takes.
    #[arg(long, default_value_t = 1, value_name = "C")]
    cost: u32,
    /// Client threads (0 or 1: one thread, so the Redis server keeps the other cores).
    #[arg(long, default_value_t = 1, value_name = "N")]
    threads: usize,
}

#[derive(Default)]
struct Tally {
    decisions: u64,
    allowed: u64,
    degraded: u64,
    errors: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(flags: &[&str]) -> Option<Vec<String>> {
        let argv = std::iter::once("redis_load").chain(flags.iter().copied());
        Args::try_parse_from(argv).unwrap().cluster
    }

    #[test]
    fn cluster_nodes_are_comma_separated_and_the_last_flag_wins() {
        let nodes = |urls: &[&str]| Some(urls.iter().map(|u| u.to_string()).collect());
        assert_eq!(cluster(&[]), None);
        assert_eq!(
            cluster(&["--cluster", "redis://a:1"]),
            nodes(&["redis://a:1"])
        );
        assert_eq!(
            cluster(&[
                "--cluster",
                "redis://a:1",
                "--cluster",
                "redis://b:2,redis://c:3"
            ]),
            nodes(&["redis://b:2", "redis://c:3"])
        );
    }
}
