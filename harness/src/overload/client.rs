//! The client: Poisson arrivals at a multiple of the backend's capacity, each request through a
//! [`Gate`] with a wait for a permit and a deadline, and a record of what happened to every one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::backend::{BackendConfig, BackendStats};
use super::gate::{Gate, HttpCall, LimiterKind, Outcome};
use crate::exponential::unit_exponential;
use crate::vegas_settings::VegasSettings;

/// How the client offers load.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Length of the run (arrivals stop then; requests in flight get their deadline).
    pub seconds: f64,
    /// Offered load as a multiple of the backend's capacity before the step.
    pub overload: f64,
    /// Arrivals per second, instead of `overload` x capacity.
    pub rate: Option<f64>,
    /// Time from arrival to the answer after which a request is given up.
    pub deadline: Duration,
    /// Time a request waits for a permit before it is shed.
    pub wait: Duration,
    /// Seed of the arrival times.
    pub seed: u64,
    /// flowguard's Vegas, in the `flowguard` and `flowguard-queue` arms: the settings that
    /// differ from its defaults.
    pub vegas: VegasSettings,
}

impl Default for ClientConfig {
    /// 20 s at 3x, 1 s deadline, 50 ms wait, seed 1.
    fn default() -> Self {
        Self {
            seconds: 20.0,
            overload: 3.0,
            rate: None,
            deadline: Duration::from_secs(1),
            wait: Duration::from_millis(50),
            seed: 1,
            vegas: VegasSettings::default(),
        }
    }
}

/// One request: when it arrived and ended (from the start of the run), and how.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Record {
    /// Arrival, from the start of the run.
    pub arrival: Duration,
    /// Answer, timeout or shed, from the start of the run.
    pub done: Duration,
    /// What happened.
    pub outcome: Outcome,
}

/// The limiter's state at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// From the start of the run.
    pub at: Duration,
    /// The limit (`None` without a limiter).
    pub limit: Option<usize>,
    /// Requests admitted and not yet ended.
    pub in_flight: usize,
}

/// Interval between two samples of the limiter.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// Everything one run recorded.
#[derive(Debug, Clone)]
pub struct RunRecord {
    /// The limiter's name.
    pub limiter: String,
    /// The backend as it described itself.
    pub backend: BackendConfig,
    /// Arrivals per second offered.
    pub rate: f64,
    /// Length of the run.
    pub seconds: f64,
    /// Requests that arrived (sent or shed).
    pub arrivals: u64,
    /// Every request that ended, in no particular order.
    pub records: Vec<Record>,
    /// The limiter every [`SAMPLE_EVERY`].
    pub samples: Vec<Sample>,
    /// The backend's counts after the run.
    pub backend_stats: BackendStats,
    /// Requests whose task did not end within the deadline plus a grace period, or failed (a bug
    /// if not 0).
    pub unfinished: u64,
}

/// A keep-alive client for loopback: no proxy, connections pooled without bound.
pub fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// Starts a run on the backend at `base` (`POST /run`) and answers its configuration.
pub async fn start_backend_run(
    client: &reqwest::Client,
    base: &reqwest::Url,
) -> Result<BackendConfig, String> {
    let json = fetch_json(client.post(join(base, "run")?)).await?;
    BackendConfig::from_json(&json)
}

/// The backend's counts of the current run (`GET /stats`).
pub async fn backend_stats(
    client: &reqwest::Client,
    base: &reqwest::Url,
) -> Result<BackendStats, String> {
    let json = fetch_json(client.get(join(base, "stats")?)).await?;
    BackendStats::from_json(&json)
}

fn join(base: &reqwest::Url, path: &str) -> Result<reqwest::Url, String> {
    base.join(path)
        .map_err(|e| format!("backend URL {base} + {path}: {e}"))
}

async fn fetch_json(request: reqwest::RequestBuilder) -> Result<serde_json::Value, String> {
    let response = request
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| format!("backend control request failed: {e}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|e| format!("backend control answer unreadable: {e}"))?;
    if !status.is_success() {
        return Err(format!("backend control request answered {status}: {body}"));
    }
    serde_json::from_str(&body).map_err(|e| format!("backend answered no JSON ({e}): {body}"))
}

/// Runs `kind` against the backend at `base` (with a trailing `/`) for `config.seconds`.
pub async fn run(
    base: &reqwest::Url,
    kind: LimiterKind,
    config: &ClientConfig,
) -> Result<RunRecord, String> {
    let client = http_client()?;
    let work = join(base, "work")?;
    let call = HttpCall::new(client.clone(), work);
    let gate = Arc::new(Gate::new(kind, call, config.wait, &config.vegas).await?);
    let backend = start_backend_run(&client, base).await?;
    let rate = config.rate.unwrap_or(config.overload * backend.capacity());
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("the arrival rate must be above 0, got {rate}"));
    }
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(config.seconds);

    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn(sample(gate.clone(), start, sampling.clone()));

    let offered = offer(gate.clone(), start, start, end, rate, config.seed, config).await;
    sampling.store(false, Ordering::Relaxed);
    let samples = sampler
        .await
        .map_err(|e| format!("the limit sampler failed: {e}"))?;
    let backend_stats = backend_stats(&client, base).await?;
    Ok(RunRecord {
        limiter: kind.name(),
        backend,
        rate,
        seconds: config.seconds,
        arrivals: offered.arrivals,
        records: offered.records,
        samples,
        backend_stats,
        unfinished: offered.unfinished,
    })
}

/// What [`offer`] recorded.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    /// Requests that arrived.
    pub arrivals: u64,
    /// Every request that ended, in no particular order.
    pub records: Vec<Record>,
    /// Requests whose task did not end within the deadline plus a grace period, or failed.
    pub unfinished: u64,
}

/// Offers Poisson arrivals at `rate` per second through `gate` from `from` until `until`, each
/// request waiting up to `config.wait` for a permit and given `config.deadline`; times are
/// recorded from `start`. Answers once every request ended (or a grace period passed).
pub async fn offer(
    gate: Arc<Gate>,
    start: Instant,
    from: Instant,
    until: Instant,
    rate: f64,
    seed: u64,
    config: &ClientConfig,
) -> Offered {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut tasks = JoinSet::new();
    let mut next = from;
    let mut arrivals = 0_u64;
    while next < until {
        tokio::time::sleep_until(next).await;
        let now = Instant::now();
        // Every arrival due by now (the timer wakes at most once per millisecond).
        while next <= now && next < until {
            let gate = gate.clone();
            let (wait, deadline) = (config.wait, now + config.deadline);
            let arrival = now - start;
            tasks.spawn(async move {
                let outcome = gate.call(wait, deadline).await;
                Record {
                    arrival,
                    done: start.elapsed(),
                    outcome,
                }
            });
            arrivals += 1;
            let gap = unit_exponential(&mut rng) / rate;
            next += Duration::from_secs_f64(gap);
        }
    }
    let mut records = Vec::with_capacity(tasks.len());
    let mut failed = 0_u64;
    let grace = config.deadline + config.wait + Duration::from_secs(5);
    let collected = tokio::time::timeout(grace, async {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(record) => records.push(record),
                Err(_) => failed += 1,
            }
        }
    })
    .await;
    let unfinished = failed
        + match collected {
            Ok(()) => 0,
            Err(_) => {
                let left = tasks.len() as u64;
                tasks.abort_all();
                left
            }
        };
    Offered {
        arrivals,
        records,
        unfinished,
    }
}

/// Samples `gate` every [`SAMPLE_EVERY`] while `sampling` holds.
async fn sample(gate: Arc<Gate>, start: Instant, sampling: Arc<AtomicBool>) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while sampling.load(Ordering::Relaxed) {
        ticks.tick().await;
        samples.push(Sample {
            at: start.elapsed(),
            limit: gate.limit(),
            in_flight: gate.in_flight(),
        });
    }
    samples
}
