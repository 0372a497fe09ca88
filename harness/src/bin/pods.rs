//! N simulated instances ("pods") of a service enforce one global quota on one key through Redis,
//! each with its own store and connection, under more offered load than the quota.
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin pods -- \
//!     --redis redis://127.0.0.1:6379 --pods 8 --rate 1000 --burst 100 --batch 50 --seconds 3 --json
//! ```
//!
//! `--mode one-tier` (or `--batch 1`) asks Redis for every decision; the default two-tier mode
//! reserves `--batch` tokens per round trip and spends them locally. Flags: `--tasks N` callers per
//! pod (default 4), `--prefix P` key prefix, `--timeout-ms MS` per Redis call.
//!
//! The last stdout line with `--json` is a JSON object: `mode`, `pods`, `batch`, `decisions`,
//! `allowed`, `bound` (`burst + elapsed / T`, the most the quota allows in the run), `elapsed_s`,
//! `p50_us`, `p99_us` (all decisions), `local_decisions` and `local_p99_us` (decisions answered
//! on their first poll, i.e. from the reservoir without waiting on Redis), `redis_calls` and
//! `calls_per_decision` (script runs counted by the server, `INFO commandstats`, server-wide),
//! `degraded`, `errors`, `within_bound` (`allowed <= bound + pods * batch`).

use std::future::Future;
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use flowguard::gcra::redis::RedisStore;
use flowguard::gcra::remote::RemoteRateLimiter;
use flowguard::gcra::two_tier::TwoTierLimiter;
use flowguard::gcra::{KeyedLimit, Quota};
use hdrhistogram::Histogram;

struct Args {
    redis: String,
    pods: usize,
    tasks: usize,
    rate: u32,
    burst: u32,
    batch: u32,
    seconds: f64,
    json: bool,
    prefix: String,
    timeout: Duration,
    two_tier: bool,
}

const USAGE: &str = "usage: pods [--redis URL] [--pods N] [--tasks N] [--rate R] [--burst B] [--batch N] \
                     [--seconds S] [--mode one-tier|two-tier] [--prefix P] [--timeout-ms MS] [--json]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        redis: "redis://127.0.0.1:6379".into(),
        pods: 8,
        tasks: 4,
        rate: 1000,
        burst: 100,
        batch: 50,
        seconds: 3.0,
        json: false,
        prefix: "flowguard-pods:".into(),
        timeout: Duration::from_millis(50),
        two_tier: true,
    };
    let mut mode = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            a.json = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}\n{USAGE}");
        match flag.as_str() {
            "--redis" => a.redis = value,
            "--pods" => a.pods = value.parse().map_err(|e| bad(&e))?,
            "--tasks" => a.tasks = value.parse().map_err(|e| bad(&e))?,
            "--rate" => a.rate = value.parse().map_err(|e| bad(&e))?,
            "--burst" => a.burst = value.parse().map_err(|e| bad(&e))?,
            "--batch" => a.batch = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => a.seconds = value.parse().map_err(|e| bad(&e))?,
            "--prefix" => a.prefix = value,
            "--timeout-ms" => {
                a.timeout = Duration::from_millis(value.parse().map_err(|e| bad(&e))?)
            }
            "--mode" => mode = Some(value),
            _ => return Err(format!("unknown flag {flag}\n{USAGE}")),
        }
    }
    a.two_tier = match mode.as_deref() {
        None => a.batch > 1,
        Some("two-tier") => true,
        Some("one-tier") => false,
        Some(other) => return Err(format!("--mode {other}: use one-tier or two-tier\n{USAGE}")),
    };
    if a.pods == 0 || a.tasks == 0 || a.seconds.is_nan() || a.seconds <= 0.0 {
        return Err(format!(
            "--pods, --tasks and --seconds must be positive\n{USAGE}"
        ));
    }
    Ok(a)
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
    let quota = Quota::per_second(a.rate)?.with_burst(a.burst)?;
    let mut pods: Vec<Arc<dyn KeyedLimit>> = Vec::new();
    for _ in 0..a.pods {
        let store = RedisStore::builder(&a.redis)
            .prefix(&a.prefix)
            .timeout(a.timeout)
            .connect()
            .await?;
        let limiter = RemoteRateLimiter::builder(store, quota).build()?;
        pods.push(if a.two_tier {
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
    let slack = if a.two_tier {
        a.pods as u64 * u64::from(a.batch)
    } else {
        0
    };
    let mode = if a.two_tier { "two-tier" } else { "one-tier" };
    let batch = if a.two_tier { a.batch } else { 1 };
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
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pods: {e}");
            ExitCode::FAILURE
        }
    }
}
