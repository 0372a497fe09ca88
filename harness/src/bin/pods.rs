//! pods: simulated instances of a service share one global quota through Redis (what it measures
//! and prints is described on [`Args`], which `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin pods -- \
//!     --redis redis://127.0.0.1:6379 --pods 8 --rate 1000 --burst 100 --batch 50 --seconds 3 --json
//! ```

use std::future::Future;
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::RemoteRateLimiter;
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{KeyedLimit, Quota};
use flowguard_harness::cli::{positive, seconds};
use hdrhistogram::Histogram;

/// N simulated instances ("pods") of a service enforce one global quota on one key through Redis,
/// each with its own store and connection, under more offered load than the quota.
///
/// `--mode one-tier` (or `--batch 1`) asks Redis for every decision; the default two-tier mode
/// reserves `--batch` tokens per round trip and spends them locally.
#[derive(Parser)]
#[command(verbatim_doc_comment, args_override_self = true)]
struct Args {
    /// The Redis server every pod connects to.
    #[arg(long, default_value = "redis://127.0.0.1:6379", value_name = "URL")]
    redis: String,
    /// Instances, each with its own store and connection.
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = positive::<usize>)]
    pods: usize,
    /// Callers per pod.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = positive::<usize>)]
    tasks: usize,
    /// The global quota, in decisions per second.
    #[arg(long, default_value_t = 1000, value_name = "R")]
    rate: u32,
    /// The quota's burst.
    #[arg(long, default_value_t = 100, value_name = "B")]
    burst: u32,
    /// Tokens a two-tier pod reserves per round trip to Redis.
    #[arg(long, default_value_t = 50, value_name = "N")]
    batch: u32,
    /// How long the callers run, in seconds.
    #[arg(long, default_value_t = 3.0, value_name = "S", value_parser = seconds)]
    seconds: f64,
    /// How pods decide (default: two-tier when --batch is above 1, else one-tier).
    #[arg(long, value_enum, value_name = "MODE")]
    mode: Option<Mode>,
    /// Key prefix in Redis.
    #[arg(long, default_value = "flowguard-pods:", value_name = "P")]
    prefix: String,
    /// Timeout of each Redis call, in milliseconds.
    #[arg(long, default_value_t = 50, value_name = "MS")]
    timeout_ms: u64,
    /// Print a JSON object as the last stdout line.
    ///
    /// Its fields: `mode`, `pods`, `batch`, `decisions`, `allowed`, `bound` (`burst + elapsed / T`,
    /// the most the quota allows in the run), `elapsed_s`, `p50_us`, `p99_us` (all decisions),
    /// `local_decisions` and `local_p99_us` (decisions answered on their first poll, i.e. from the
    /// reservoir without waiting on Redis), `redis_calls` and `calls_per_decision` (script runs
    /// counted by the server, `INFO commandstats`, server-wide), `degraded`, `errors`,
    /// `within_bound` (`allowed <= bound + pods * batch`).
    #[arg(long)]
    json: bool,
}

/// How a pod asks Redis.
#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    /// Every decision is a round trip to Redis.
    OneTier,
    /// Each round trip reserves --batch tokens, spent locally.
    TwoTier,
}

impl Args {
    fn two_tier(&self) -> bool {
        match self.mode {
            None => self.batch > 1,
            Some(Mode::TwoTier) => true,
            Some(Mode::OneTier) => false,
        }
    }
}

/// What one caller saw.
struct Tally {
    decisions: u64,
    allowed: u64,
    degraded: u64,
    errors: u64,
    all: Histogram<u64>,
    local: Histogram<u64>,
}

impl Tally {
    fn new() -> Tally {
        let h = || Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds");
        Tally {
            decisions: 0,
            allowed: 0,
            degraded: 0,
            errors: 0,
            all: h(),
            local: h(),
        }
    }

    fn merge(&mut self, other: &Tally) {
        self.decisions += other.decisions;
        self.allowed += other.allowed;
        self.degraded += other.degraded;
        self.errors += other.errors;
        let _ = self.all.add(&other.all);
        let _ = self.local.add(&other.local);
    }
}

/// Drives `limiter` until `until`; a decision that is ready on its first poll never waited on Redis.
async fn caller(limiter: Arc<dyn KeyedLimit>, key: Vec<u8>, until: Instant) -> Tally {
    let mut tally = Tally::new();
    while Instant::now() < until {
        let start = Instant::now();
        let mut check = pin!(limiter.check(&key, 1));
        let first = check.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        let (result, local) = match first {
            Poll::Ready(result) => (result, true),
            Poll::Pending => (check.await, false),
        };
        let micros = (start.elapsed().as_nanos() as u64).div_ceil(1000).max(1);
        tally.decisions += 1;
        let _ = tally.all.record(micros);
        if local {
            let _ = tally.local.record(micros);
        }
        match result {
            Ok(d) => {
                tally.allowed += u64::from(d.allowed);
                tally.degraded += u64::from(d.degraded.is_some());
            }
            Err(_) => tally.errors += 1,
        }
        tokio::task::yield_now().await;
    }
    tally
}

async fn script_runs(url: &str) -> Option<u64> {
    let client = redis::Client::open(url).ok()?;
    let mut conn = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .ok()?;
    let field = |line: &str, name: &str| -> u64 {
        line.split(',')
            .find_map(|f| f.rsplit_once(name)?.1.parse().ok())
            .unwrap_or(0)
    };
    Some(
        info.lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .map(|l| field(l, "calls=") - field(l, "failed_calls="))
            .sum(),
    )
}

async fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let two_tier = a.two_tier();
    let quota = Quota::per_second(a.rate)?.with_burst(a.burst)?;
    let mut pods: Vec<Arc<dyn KeyedLimit>> = Vec::new();
    for _ in 0..a.pods {
        let store = RedisStore::builder(&a.redis)
            .prefix(&a.prefix)
            .timeout(Duration::from_millis(a.timeout_ms))
            .connect()
            .await?;
        let limiter = RemoteRateLimiter::builder(store, quota).build()?;
        pods.push(if two_tier {
            Arc::new(TwoTierLimiter::builder(limiter, a.batch).build()?)
        } else {
            Arc::new(limiter)
        });
    }
    // A fresh key per run, so runs never share state.
    let key = format!(
        "run-{}-{}",
        std::process::id(),
        std::time::UNIX_EPOCH.elapsed()?.as_nanos()
    )
    .into_bytes();
    let calls_before = script_runs(&a.redis).await;
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(a.seconds);
    let mut tasks = Vec::new();
    for pod in &pods {
        for _ in 0..a.tasks {
            tasks.push(tokio::spawn(caller(pod.clone(), key.clone(), until)));
        }
    }
    let mut total = Tally::new();
    for t in tasks {
        total.merge(&t.await?);
    }
    let elapsed = start.elapsed();
    let calls_after = script_runs(&a.redis).await;
    let redis_calls = calls_before
        .zip(calls_after)
        .map(|(b, a)| a.saturating_sub(b));

    let interval = quota.emission_interval().as_secs_f64();
    let bound = (f64::from(a.burst) + elapsed.as_secs_f64() / interval).floor() as u64;
    let slack = if two_tier {
        a.pods as u64 * u64::from(a.batch)
    } else {
        0
    };
    let mode = if two_tier { "two-tier" } else { "one-tier" };
    let batch = if two_tier { a.batch } else { 1 };
    println!(
        "{mode}: {} pods x {} callers, {:.2} s: {} decisions, {} allowed (bound {bound} + {slack}), \
         p50 {} us, p99 {} us, local p99 {} us over {} decisions, redis script runs {}",
        a.pods,
        a.tasks,
        elapsed.as_secs_f64(),
        total.decisions,
        total.allowed,
        total.all.value_at_quantile(0.5),
        total.all.value_at_quantile(0.99),
        total.local.value_at_quantile(0.99),
        total.local.len(),
        redis_calls.map_or("unknown".into(), |c| c.to_string()),
    );
    if a.json {
        let calls_per_decision = redis_calls.map(|c| c as f64 / total.decisions.max(1) as f64);
        println!(
            "{}",
            serde_json::json!({
                "mode": mode,
                "pods": a.pods,
                "batch": batch,
                "decisions": total.decisions,
                "allowed": total.allowed,
                "bound": bound,
                "elapsed_s": elapsed.as_secs_f64(),
                "p50_us": total.all.value_at_quantile(0.5),
                "p99_us": total.all.value_at_quantile(0.99),
                "local_decisions": total.local.len(),
                "local_p99_us": total.local.value_at_quantile(0.99),
                "redis_calls": redis_calls,
                "calls_per_decision": calls_per_decision,
                "degraded": total.degraded,
                "errors": total.errors,
                "within_bound": total.allowed <= bound + slack,
            })
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pods: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_tier(flags: &[&str]) -> bool {
        let argv = std::iter::once("pods").chain(flags.iter().copied());
        Args::try_parse_from(argv).unwrap().two_tier()
    }

    #[test]
    fn the_mode_follows_the_batch_unless_named() {
        assert!(two_tier(&[]));
        assert!(!two_tier(&["--batch", "1"]));
        assert!(two_tier(&["--batch", "1", "--mode", "two-tier"]));
        assert!(!two_tier(&["--mode", "one-tier"]));
    }
}
