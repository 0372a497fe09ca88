//! redis_load: load generator for the Redis store, through one `RemoteRateLimiter<RedisStore>` (what it runs and prints is described on
//! [`Args`], which `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin redis_load -- \
//!     --redis redis://127.0.0.1:6379 --tasks 64 --seconds 3 --json [--prefix P] [--keys N] \
//!     [--rate R --burst B --cost C] [--cluster URL,URL,...] [--threads N (default 1)] \
//!     [--coalesce on|off] [--max-batch N] [--two-tier BATCH] [--script flowguard|naive]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{ArgAction, Parser, ValueEnum};
use flowguard::gcra::redis::{DEFAULT_MAX_BATCH, RedisStore};
use flowguard::gcra::remote::RemoteRateLimiter;
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{KeyedLimit, Quota};
use flowguard_harness::cli::{positive, seconds};
use flowguard_harness::naive;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Load generator for the Redis store: `--tasks` tasks check random keys as fast as they can for
/// `--seconds`, through one `RedisRateLimiter` (one multiplexed connection, or the cluster client).
///
/// Prints a summary and, with `--json`, a JSON object as the last stdout line.
///
/// Redis CPU: on a standalone server, `INFO commandstats` is read before and after the run, and
/// the growth of the script commands' time (`usec` of `evalsha` and `eval`) is divided by the
/// decisions. Run it against a server nobody else uses, or other clients' scripts are counted too.
///
/// `--script naive` runs the same load through the naive reference script instead (client time,
/// GET then SET EX, one EVALSHA per decision on one multiplexed connection), so that the Redis CPU
/// of a decision can be compared with the naive script's on the same keys, the same server and the
/// same working set in one run.
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
    /// Its fields: `topology`, `tasks`, `seconds`, `keys`, `prefix`, `script`, `coalesce`, `max_batch`,
    /// `two_tier_batch`, `decisions`, `calls` (script calls the store sent), `allowed`, `denied`,
    /// `degraded`, `errors`, `decisions_per_sec`, latency percentiles `p50_us`, `p90_us`,
    /// `p99_us`, `p999_us`, `max_us` (hdrhistogram), and from `INFO commandstats` (standalone;
    /// `null` when unavailable) `redis_script_usec`, `redis_script_calls`,
    /// `redis_us_per_decision` and `redis_us_per_call`.
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
    /// Coalescing: decisions waiting for the connection go together in one script call (on), or
    /// every decision is a call of its own (off: `max_batch(1)`).
    #[arg(long, value_enum, default_value_t = Switch::On, value_name = "on|off")]
    coalesce: Switch,
    /// The most decisions one script call carries when coalescing.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH, value_name = "N", value_parser = positive::<usize>)]
    max_batch: usize,
    /// Two-tier mode: reserve this many tokens per Redis call and spend them locally.
    #[arg(long, value_name = "BATCH", value_parser = positive::<u32>)]
    two_tier: Option<u32>,
    /// What decides: flowguard's store (`flowguard`), or the naive reference script
    /// (`naive`: standalone only; `--coalesce`, `--max-batch` and `--two-tier` do not apply).
    #[arg(long, value_enum, default_value_t = Script::Flowguard, value_name = "flowguard|naive")]
    script: Script,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Script {
    Flowguard,
    Naive,
}

/// What the tasks decide with.
#[derive(Clone)]
enum Decider {
    /// flowguard's limiter (one-tier or two-tier) on its store.
    Flowguard(Arc<dyn KeyedLimit>),
    /// The naive script: one EVALSHA per decision, keys `<prefix>naive:<n>`.
    Naive(Arc<Naive>),
}

struct Naive {
    con: redis::aio::MultiplexedConnection,
    /// The script's SHA1, loaded when the run starts.
    sha: String,
    prefix: String,
    interval_s: f64,
    burst: u32,
}

/// A decision's outcome: allowed, degraded; `Err` for an error.
type Outcome = Result<(bool, bool), ()>;

impl Decider {
    async fn decide(&self, key: u64, cost: u32) -> Outcome {
        match self {
            Decider::Flowguard(limiter) => match limiter.check(&key.to_le_bytes(), cost).await {
                Ok(d) => Ok((d.allowed, d.degraded.is_some())),
                Err(_) => Err(()),
            },
            Decider::Naive(n) => {
                let key = format!("{}naive:{key}", n.prefix);
                let cmd = naive::command(&n.sha, &key, n.interval_s, n.burst.into(), cost);
                let reply: redis::RedisResult<(i64, i64)> =
                    cmd.query_async(&mut n.con.clone()).await;
                reply
                    .map(|(allowed, _)| (allowed == 1, false))
                    .map_err(|_| ())
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
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
    let runtime = match flowguard_harness::client_runtime(args.threads) {
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
    let max_batch = match (args.script, args.coalesce) {
        (Script::Flowguard, Switch::On) => args.max_batch,
        _ => 1,
    };
    let quota = Quota::per_second(args.rate)?.with_burst(args.burst)?;
    let (decider, store) = match args.script {
        Script::Flowguard => {
            let builder = match &args.cluster {
                Some(urls) => RedisStore::cluster_builder(urls.clone()),
                None => RedisStore::builder(args.redis.clone()),
            };
            let store = builder
                .prefix(&args.prefix)
                .max_batch(max_batch)
                .connect()
                .await?;
            let remote = RemoteRateLimiter::builder(store.clone(), quota).build()?;
            let limiter: Arc<dyn KeyedLimit> = match args.two_tier {
                Some(batch) => Arc::new(TwoTierLimiter::builder(remote, batch).build()?),
                None => Arc::new(remote),
            };
            (Decider::Flowguard(limiter), Some(store))
        }
        Script::Naive => {
            if args.cluster.is_some() || args.two_tier.is_some() {
                return Err(
                    "--script naive runs on a standalone server (--redis), without --two-tier"
                        .into(),
                );
            }
            let mut con = redis::Client::open(args.redis.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(naive::LUA)
                .query_async(&mut con)
                .await?;
            let naive = Naive {
                con,
                sha,
                prefix: args.prefix.clone(),
                // `quota` above refused a rate of 0.
                interval_s: 1.0 / f64::from(args.rate),
                burst: args.burst,
            };
            (Decider::Naive(Arc::new(naive)), None)
        }
    };
    let mut stats = match &args.cluster {
        Some(_) => None,
        None => CommandStats::connect(&args.redis).await,
    };
    let before = match &mut stats {
        Some(s) => s.scripts().await,
        None => None,
    };
    let store_calls = || store.as_ref().map(RedisStore::script_calls);
    let calls_before = store_calls();
    let run_for = Duration::from_secs_f64(args.seconds);
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.tasks);
    for seed in 0..args.tasks as u64 {
        let (decider, keys, cost) = (decider.clone(), args.keys, args.cost);
        tasks.push(tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut hist =
                Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
            let mut tally = Tally::default();
            while started.elapsed() < run_for {
                // A check answered locally (two-tier) never waits: yield now and then, so the
                // runtime still reads Redis' replies.
                tokio::task::coop::consume_budget().await;
                let key = rng.random_range(0..keys);
                let t0 = Instant::now();
                let result = decider.decide(key, cost).await;
                hist.saturating_record(t0.elapsed().as_micros() as u64);
                tally.decisions += 1;
                match result {
                    Ok((allowed, degraded)) => {
                        tally.allowed += u64::from(allowed);
                        tally.degraded += u64::from(degraded);
                    }
                    Err(()) => tally.errors += 1,
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
    // The naive script makes one call per decision.
    let calls = match (store_calls(), calls_before) {
        (Some(now), Some(before)) => now - before,
        _ => total.decisions,
    };
    // Two-tier refills still in flight finish before the statistics are read.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let after = match &mut stats {
        Some(s) => s.scripts().await,
        None => None,
    };
    let script = before
        .zip(after)
        .map(|((c0, u0), (c1, u1))| (c1 - c0, u1 - u0));
    let per_sec = total.decisions as f64 / elapsed;
    let topology = if args.cluster.is_some() {
        "cluster"
    } else {
        "standalone"
    };
    let per_decision = script.map(|(_, usec)| usec as f64 / total.decisions.max(1) as f64);
    let per_call = script.map(|(c, usec)| usec as f64 / c.max(1) as f64);
    println!(
        "{topology}: {} tasks, {:.1} s: {} decisions ({per_sec:.0}/s) in {calls} calls, {} allowed, \
         {} degraded, {} errors; latency p50 {} us, p99 {} us, max {} us; Redis {} us per decision",
        args.tasks,
        elapsed,
        total.decisions,
        total.allowed,
        total.degraded,
        total.errors,
        hist.value_at_quantile(0.5),
        hist.value_at_quantile(0.99),
        hist.max(),
        per_decision.map_or("?".into(), |us| format!("{us:.2}")),
    );
    if args.json {
        let json = serde_json::json!({
            "topology": topology,
            "tasks": args.tasks,
            "seconds": elapsed,
            "keys": args.keys,
            "prefix": args.prefix,
            "script": match args.script {
                Script::Flowguard => "flowguard",
                Script::Naive => "naive",
            },
            "coalesce": args.script == Script::Flowguard && args.coalesce == Switch::On,
            "max_batch": max_batch,
            "two_tier_batch": args.two_tier,
            "decisions": total.decisions,
            "calls": calls,
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
            "redis_script_usec": script.map(|(_, usec)| usec),
            "redis_script_calls": script.map(|(c, _)| c),
            "redis_us_per_decision": per_decision,
            "redis_us_per_call": per_call,
        });
        println!("{json}");
    }
    Ok(())
}

/// `INFO commandstats` of a standalone server, on a connection of its own.
struct CommandStats(redis::aio::MultiplexedConnection);

impl CommandStats {
    async fn connect(url: &str) -> Option<CommandStats> {
        let client = redis::Client::open(url).ok()?;
        Some(CommandStats(
            client.get_multiplexed_async_connection().await.ok()?,
        ))
    }

    /// Calls and usec of the script commands (`evalsha` + `eval`) so far; `None` if the server
    /// does not say (e.g. an ACL user without `INFO`).
    async fn scripts(&mut self) -> Option<(u64, u64)> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut self.0)
            .await
            .ok()?;
        Some(script_stats(&info))
    }
}

/// The calls and usec of `cmdstat_evalsha` and `cmdstat_eval` in an `INFO commandstats` reply.
fn script_stats(info: &str) -> (u64, u64) {
    let mut total = (0, 0);
    for line in info.lines() {
        let Some(fields) = line
            .strip_prefix("cmdstat_evalsha:")
            .or_else(|| line.strip_prefix("cmdstat_eval:"))
        else {
            continue;
        };
        let field = |name: &str| {
            fields.split(',').find_map(|kv| {
                kv.strip_prefix(name)?
                    .strip_prefix('=')?
                    .parse::<u64>()
                    .ok()
            })
        };
        total.0 += field("calls").unwrap_or(0);
        total.1 += field("usec").unwrap_or(0);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(flags: &[&str]) -> Option<Vec<String>> {
        let argv = std::iter::once("redis_load").chain(flags.iter().copied());
        Args::try_parse_from(argv).unwrap().cluster
    }

    #[test]
    fn script_stats_add_evalsha_and_eval() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=95,usec_per_call=9.50,rejected_calls=0\r\n\
                    cmdstat_eval:calls=1,usec=40,usec_per_call=40.00\r\ncmdstat_get:calls=7,usec=3\r\n";
        assert_eq!(script_stats(info), (11, 135));
    }

    #[test]
    fn coalescing_is_on_unless_turned_off() {
        let parse = |flags: &[&str]| {
            let argv = std::iter::once("redis_load").chain(flags.iter().copied());
            Args::try_parse_from(argv).unwrap()
        };
        assert!(parse(&[]).coalesce == Switch::On);
        assert!(parse(&["--coalesce", "off"]).coalesce == Switch::Off);
        assert!(Args::try_parse_from(["redis_load", "--coalesce", "maybe"]).is_err());
        assert!(Args::try_parse_from(["redis_load", "--max-batch", "0"]).is_err());
        assert_eq!(parse(&["--two-tier", "50"]).two_tier, Some(50));
        assert!(parse(&[]).script == Script::Flowguard);
        assert!(parse(&["--script", "naive"]).script == Script::Naive);
        assert!(Args::try_parse_from(["redis_load", "--script", "cell"]).is_err());
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
