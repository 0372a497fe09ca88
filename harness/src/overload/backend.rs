//! The backend: an HTTP server whose `GET /work` requests wait in an unbounded FIFO queue for one of
//! `workers` workers, each of which serves one request at a time by sleeping the service time. Each
//! answer reports how long its request waited for a worker, as `Server-Timing:
//! flowguard-queue;dur=<ms>` (the metric a `Guard` reads by default); only the `flowguard-queue`
//! limiter of the client reads it (`flowguard` is told not to).
//!
//! From `step_at` seconds after a run starts, the service time becomes `service_after` and the
//! worker count `workers_after` (a worker that is busy finishes its request first). Requests are
//! never cancelled: a client that gave up still gets its request served when its turn comes, as by
//! a server that never learns of the cancellation; that work is counted as `abandoned`.
//!
//! With `--queue layer`, the queue and the report are flowguard's own `WorkerQueueLayer` in front
//! of a handler that sleeps the service time, as a service would use it; the worker count cannot
//! step then. A request whose client went away leaves that queue (hyper drops its handler), where
//! the backend's own queue serves it anyway.
//!
//! `POST /run` starts a run: the step clock restarts, and requests still queued from an earlier run
//! are discarded unserved (`stale`). It answers the configuration as JSON. `GET /stats` answers the
//! counts of the current run.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Extension, Request, State};
use axum::http::HeaderName;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use flowguard::vegas::QueueTiming;
use flowguard::vegas::worker_queue::{Bounded, WorkerQueueLayer};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::service_spread::SpreadShape;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use crate::cli;

/// The `Server-Timing` header, in which `GET /work` answers how long the request queued.
const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// Workers, service time, and the step.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendConfig {
    /// Workers before the step.
    pub workers: usize,
    /// Service time of one request before the step.
    pub service: Duration,
    /// Seconds after the start of a run at which the step happens (`None`: no step).
    pub step_at: Option<Duration>,
    /// Service time from the step on.
    pub service_after: Duration,
    /// Workers from the step on.
    pub workers_after: usize,
    /// Which queue the requests wait in.
    pub queue: BackendQueue,
    /// With [`BackendQueue::Layer`]: how many requests may wait (`None`: any number); the next
    /// one is answered 503 at once.
    pub max_waiting: Option<usize>,
    /// How far each request's service time strays from the service time in effect, either way,
    /// as a fraction in `[0, 1)`, drawn uniformly (0: every request takes exactly the service
    /// time).
    pub service_jitter: f64,
    /// The shape of that spread: uniform within it, or lognormal with a standard deviation of
    /// about `service_jitter` times the service time.
    pub service_shape: SpreadShape,
}

/// Which queue `GET /work` requests wait in for a worker.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendQueue {
    /// The backend's own: a FIFO channel that worker tasks take requests from, the worker count
    /// able to step; a request is served even after its client gave up.
    #[default]
    Own,
    /// flowguard's `WorkerQueueLayer` around the handler: a fixed worker count; a request whose
    /// client gave up leaves the queue.
    Layer,
}

impl BackendQueue {
    /// The flag's value (and the JSON's).
    pub fn name(self) -> &'static str {
        match self {
            BackendQueue::Own => "own",
            BackendQueue::Layer => "layer",
        }
    }

    /// In words, for the printed reports.
    pub fn describe(self) -> &'static str {
        match self {
            BackendQueue::Own => "its own queue",
            BackendQueue::Layer => "queued by WorkerQueueLayer",
        }
    }
}

impl Default for BackendConfig {
    /// 4 workers at 10 ms; from second 10, 25 ms.
    fn default() -> Self {
        Self {
            workers: 4,
            service: Duration::from_millis(10),
            step_at: Some(Duration::from_secs(10)),
            service_after: Duration::from_millis(25),
            workers_after: 4,
            queue: BackendQueue::Own,
            max_waiting: None,
            service_jitter: 0.0,
            service_shape: SpreadShape::Uniform,
        }
    }
}

/// The backend's flags: of `overload_backend` and `overload backend`, and of the `overload`
/// client, which starts its backends with them. [`config`](Self::config) reads them.
#[derive(clap::Args, Debug, Clone)]
pub struct BackendFlags {
    /// Workers before the step (and after it, unless --workers-to)
    #[arg(long, value_name = "N", default_value_t = BackendConfig::default().workers,
          value_parser = cli::positive::<usize>)]
    pub workers: usize,
    /// Service time of one request before the step, in milliseconds
    #[arg(long = "service-ms", value_name = "S",
          default_value_t = millis(BackendConfig::default().service), value_parser = cli::above_zero, allow_negative_numbers = true)]
    pub service_ms: f64,
    /// Seconds after the start of a run (`POST /run`) at which the step happens, or `none`
    #[arg(long = "step-at", value_name = "SEC|none",
          default_value_t = StepAt(BackendConfig::default().step_at), value_parser = StepAt::parse, allow_negative_numbers = true)]
    pub step_at: StepAt,
    /// Service time from the step on, in milliseconds
    #[arg(long = "step-to", value_name = "MS",
          default_value_t = millis(BackendConfig::default().service_after),
          value_parser = cli::above_zero, allow_negative_numbers = true)]
    pub step_to: f64,
    /// Workers from the step on [default: --workers]
    #[arg(long = "workers-to", value_name = "M", value_parser = cli::positive::<usize>)]
    pub workers_to: Option<usize>,
    /// Where requests wait for a worker: the backend's own queue, or flowguard's
    /// WorkerQueueLayer (no worker step)
    #[arg(long, value_enum, default_value_t = BackendQueue::Own)]
    pub queue: BackendQueue,
    /// With --queue layer: at most N requests wait for a worker, the next one is answered 503
    /// at once [default: any number]
    #[arg(long = "max-waiting", value_name = "N")]
    pub max_waiting: Option<usize>,
    /// Each request's service time is drawn uniformly from (1 - F) to (1 + F) times the
    /// service time, F in [0, 1)
    #[arg(long = "service-jitter", value_name = "F", default_value_t = 0.0, value_parser = cli::spread)]
    pub service_jitter: f64,
    /// The shape of that spread: uniform, or lognormal (a standard deviation of about F times
    /// the service time, with a long tail to the right)
    #[arg(long = "service-shape", value_enum, default_value_t = SpreadShape::Uniform)]
    pub service_shape: SpreadShape,
}

impl BackendFlags {
    /// The configuration the flags say.
    pub fn config(&self) -> BackendConfig {
        BackendConfig {
            workers: self.workers,
            service: Duration::from_secs_f64(self.service_ms / 1e3),
            step_at: self.step_at.0,
            service_after: Duration::from_secs_f64(self.step_to / 1e3),
            workers_after: self.workers_to.unwrap_or(self.workers),
            queue: self.queue,
            max_waiting: self.max_waiting,
            service_jitter: self.service_jitter,
            service_shape: self.service_shape,
        }
    }
}

/// `--step-at`: seconds after the start of a run, or `none` for no step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepAt(pub Option<Duration>);

impl StepAt {
    /// Reads `none` or a number of seconds >= 0.
    pub fn parse(text: &str) -> Result<StepAt, String> {
        if text == "none" {
            return Ok(StepAt(None));
        }
        let seconds: f64 = text
            .parse()
            .map_err(|e| format!("{e} (seconds, or `none`)"))?;
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err("must be seconds >= 0, or `none`".into());
        }
        Ok(StepAt(Some(Duration::from_secs_f64(seconds))))
    }
}

impl std::fmt::Display for StepAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(at) => write!(f, "{}", at.as_secs_f64()),
            None => f.write_str("none"),
        }
    }
}

/// `d` in milliseconds, as the flags write it.
fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl BackendConfig {
    /// The flags that reproduce this configuration (to start a backend process with).
    pub fn to_flags(&self) -> Vec<String> {
        let mut flags = vec![
            "--workers".into(),
            self.workers.to_string(),
            "--workers-to".into(),
            self.workers_after.to_string(),
            "--service-ms".into(),
            millis(self.service).to_string(),
            "--step-to".into(),
            millis(self.service_after).to_string(),
            "--step-at".into(),
            StepAt(self.step_at).to_string(),
            "--queue".into(),
            self.queue.name().into(),
        ];
        if let Some(max_waiting) = self.max_waiting {
            flags.extend(["--max-waiting".into(), max_waiting.to_string()]);
        }
        if self.service_jitter > 0.0 {
            flags.extend(["--service-jitter".into(), self.service_jitter.to_string()]);
        }
        if self.service_shape != SpreadShape::Uniform {
            flags.extend(["--service-shape".into(), self.service_shape.name().into()]);
        }
        flags
    }

    /// Whether a backend can serve this configuration: `--queue layer` has a fixed worker count,
    /// and only it has a bound on the queue.
    pub fn check(&self) -> Result<(), String> {
        if let (BackendQueue::Own, Some(max_waiting)) = (self.queue, self.max_waiting) {
            return Err(format!(
                "--max-waiting {max_waiting} bounds WorkerQueueLayer's queue; add --queue layer or drop --max-waiting"
            ));
        }
        if self.queue == BackendQueue::Layer && self.workers_after != self.workers {
            return Err(format!(
                "--queue layer serves a fixed number of workers; drop --workers-to {} or use --queue own",
                self.workers_after
            ));
        }
        Ok(())
    }

    /// In words, for the printed reports: `4 workers at 10.0 ms (400/s); from 10.0 s: 4
    /// workers at 25.0 ms (160/s); its own queue`.
    pub fn describe(&self) -> String {
        let step = match self.step_at {
            Some(at) => format!(
                "; from {:.1} s: {} workers at {:.1} ms ({:.0}/s)",
                at.as_secs_f64(),
                self.workers_after,
                self.service_after.as_secs_f64() * 1e3,
                self.workers_after as f64 / self.service_after.as_secs_f64()
            ),
            None => String::new(),
        };
        let bound = match self.max_waiting {
            Some(max_waiting) => format!(", at most {max_waiting} waiting"),
            None => String::new(),
        };
        let jitter = if self.service_jitter > 0.0 {
            format!(" {}", self.service_shape.describe(self.service_jitter))
        } else {
            String::new()
        };
        format!(
            "{} workers at {:.1} ms{jitter} ({:.0}/s){step}; {}{bound}",
            self.workers,
            self.service.as_secs_f64() * 1e3,
            self.capacity(),
            self.queue.describe()
        )
    }

    /// Whether `since_start` is at or after the step.
    pub fn after_step(&self, since_start: Duration) -> bool {
        self.step_at.is_some_and(|at| since_start >= at)
    }

    /// Workers in service at `since_start`.
    pub fn workers_at(&self, since_start: Duration) -> usize {
        if self.after_step(since_start) {
            self.workers_after
        } else {
            self.workers
        }
    }

    /// Service time of a request whose service starts at `since_start`.
    pub fn service_at(&self, since_start: Duration) -> Duration {
        if self.after_step(since_start) {
            self.service_after
        } else {
            self.service
        }
    }

    /// Service time of a request whose service starts at `since_start`, its spread drawn from
    /// `rng`.
    pub fn service_drawn(&self, since_start: Duration, rng: &mut impl Rng) -> Duration {
        let factor = self.service_shape.factor(self.service_jitter, rng);
        self.service_at(since_start).mul_f64(factor)
    }

    /// Requests per second the workers complete before the step (`workers / service`).
    pub fn capacity(&self) -> f64 {
        self.workers as f64 / self.service.as_secs_f64()
    }

    /// The configuration as JSON (times in milliseconds and seconds).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "workers": self.workers,
            "service_ms": self.service.as_secs_f64() * 1e3,
            "step_at_s": self.step_at.map(|at| at.as_secs_f64()),
            "service_after_ms": self.service_after.as_secs_f64() * 1e3,
            "workers_after": self.workers_after,
            "queue": self.queue.name(),
            "max_waiting": self.max_waiting,
            "service_jitter": self.service_jitter,
            "service_shape": self.service_shape.name(),
        })
    }

    /// Reads [`to_json`](Self::to_json)'s output.
    pub fn from_json(json: &serde_json::Value) -> Result<Self, String> {
        let field = |name: &str| {
            json.get(name)
                .ok_or_else(|| format!("backend configuration lacks `{name}`: {json}"))
        };
        let number = |name: &str| {
            field(name)?
                .as_f64()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!("backend configuration: `{name}` is not a number >= 0: {json}")
                })
        };
        let count = |name: &str| {
            field(name)?
                .as_u64()
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| format!("backend configuration: `{name}` is not a count: {json}"))
        };
        let step_at = match field("step_at_s")? {
            serde_json::Value::Null => None,
            _ => Some(Duration::from_secs_f64(number("step_at_s")?)),
        };
        // Reports written before there was a choice of queue lack the field: the backend's own.
        let queue = match json.get("queue").and_then(serde_json::Value::as_str) {
            None | Some("own") => BackendQueue::Own,
            Some("layer") => BackendQueue::Layer,
            Some(other) => {
                return Err(format!(
                    "backend configuration: `queue` is `{other}`, not `own` or `layer`"
                ));
            }
        };
        // Likewise, reports from before the bound lack it: any number may wait.
        let max_waiting = match json.get("max_waiting") {
            None | Some(serde_json::Value::Null) => None,
            Some(_) => Some(count("max_waiting")?),
        };
        // And reports from before the jitter lack it: every request took the service time.
        let service_jitter = match json.get("service_jitter") {
            None | Some(serde_json::Value::Null) => 0.0,
            Some(_) => number("service_jitter")?,
        };
        let service_shape = match json
            .get("service_shape")
            .and_then(serde_json::Value::as_str)
        {
            None => SpreadShape::Uniform,
            Some(name) => <SpreadShape as clap::ValueEnum>::from_str(name, false).map_err(|_| {
                format!(
                    "backend configuration: `service_shape` is `{name}`, not `uniform` or `lognormal`"
                )
            })?,
        };
        Ok(Self {
            queue,
            max_waiting,
            service_jitter,
            service_shape,
            workers: count("workers")?,
            service: Duration::from_secs_f64(number("service_ms")? / 1e3),
            step_at,
            service_after: Duration::from_secs_f64(number("service_after_ms")? / 1e3),
            workers_after: count("workers_after")?,
        })
    }
}

/// The flags of a backend process (`overload_backend`, `overload backend`).
#[derive(clap::Args, Debug, Clone)]
pub struct BackendArgs {
    /// Port on 127.0.0.1 (0: a free one); the first line printed is `listening on http://ADDR/`
    #[arg(long, value_name = "P", default_value_t = 0)]
    pub port: u16,
    /// Exit when standard input closes (how the `overload` client takes along a backend it
    /// started, however it ends)
    #[arg(long = "exit-with-stdin")]
    pub exit_with_stdin: bool,
    #[command(flatten)]
    pub backend: BackendFlags,
}

/// The usage line of a backend process, after its program name.
pub const BACKEND_USAGE: &str = "[--port P] [--workers N] [--service-ms S] [--step-at SEC|none] [--step-to MS] [--workers-to M] [--queue own|layer [--max-waiting N]]";

/// Runs a backend with `args`: binds loopback, prints `listening on http://ADDR/` as its first
/// line of standard output, serves until killed (or, with `--exit-with-stdin`, until its
/// standard input closes: the way a client that started it takes it along when it ends, even
/// abruptly).
pub async fn run(args: BackendArgs) -> Result<(), String> {
    let (port, exit_with_stdin) = (args.port, args.exit_with_stdin);
    let config = args.backend.config();
    config.check()?;
    let (listener, addr) = bind(port)
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))?;
    if exit_with_stdin {
        exit_when_stdin_closes();
    }
    println!("listening on http://{addr}/");
    eprintln!("backend: {}", config.to_json());
    serve(listener, config)
        .await
        .map_err(|e| format!("the server stopped: {e}"))
}

/// Exits the process once its standard input closes: for a process started by another that
/// holds its standard input (a backend, a fleet instance), so that when the parent goes away,
/// however it ends, so does the child. Spawns a task on the current runtime.
pub fn exit_when_stdin_closes() {
    tokio::spawn(async {
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut sink).await;
        std::process::exit(0);
    });
}

/// Counts of one run, as answered by `GET /stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Requests served to a client still waiting for the answer (a client that gives up at the
    /// last moment is counted here).
    pub served: u64,
    /// Requests served after their client had given up (wasted work).
    pub abandoned: u64,
    /// Requests still queued or in service.
    pub queued: u64,
    /// Requests of earlier runs discarded unserved.
    pub stale: u64,
}

impl BackendStats {
    /// The counts as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "served": self.served,
            "abandoned": self.abandoned,
            "queued": self.queued,
            "stale": self.stale,
        })
    }

    /// Reads [`to_json`](Self::to_json)'s output.
    pub fn from_json(json: &serde_json::Value) -> Result<Self, String> {
        let count = |name: &str| {
            json.get(name)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| format!("backend stats: `{name}` is not a count: {json}"))
        };
        Ok(Self {
            served: count("served")?,
            abandoned: count("abandoned")?,
            queued: count("queued")?,
            stale: count("stale")?,
        })
    }
}

/// A queued request: the run it belongs to, when it joined the queue, and where its answer goes
/// (how long it waited for a worker).
struct Job {
    run: u64,
    enqueued: Instant,
    reply: oneshot::Sender<Duration>,
}

/// The current run: its number and when it started.
#[derive(Clone, Copy)]
struct Run {
    number: u64,
    started: Instant,
}

struct Shared {
    config: BackendConfig,
    queue: mpsc::UnboundedSender<Job>,
    run: Mutex<Run>,
    enqueued: AtomicU64,
    done: AtomicU64,
    served: AtomicU64,
    abandoned: AtomicU64,
    stale: AtomicU64,
    /// With `--queue layer`: the layer, whose counts are the queue's.
    layered: Option<Layered>,
    /// Where each service time falls within `--service-jitter`: a fixed sequence, restarted by
    /// each run, taken in the order services start.
    draws: Mutex<SmallRng>,
}

/// The seed of the service-time draws, the same for every run.
const DRAW_SEED: u64 = 1;

/// The backend's `WorkerQueueLayer`, bounded (`--max-waiting`) or not.
#[derive(Clone)]
enum Layered {
    Unbounded(WorkerQueueLayer),
    Bounded(WorkerQueueLayer<Bounded>),
}

impl Layered {
    /// Requests holding a worker or waiting for one.
    fn queued(&self) -> usize {
        match self {
            Layered::Unbounded(layer) => layer.busy() + layer.waiting(),
            Layered::Bounded(layer) => layer.busy() + layer.waiting(),
        }
    }
}

impl Shared {
    fn run(&self) -> Run {
        *self
            .run
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The service time of a request whose service starts now, in `run`.
    fn service(&self, run: &Run) -> Duration {
        let since_start = run.started.elapsed();
        if self.config.service_jitter == 0.0 {
            return self.config.service_at(since_start);
        }
        let mut draws = self
            .draws
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.config.service_drawn(since_start, &mut *draws)
    }
}

/// Serves the backend on `listener` until the process ends.
pub async fn serve(listener: TcpListener, config: BackendConfig) -> std::io::Result<()> {
    let (queue, receiver) = mpsc::unbounded_channel();
    let layered = match config.queue {
        BackendQueue::Own => None,
        BackendQueue::Layer => {
            config.check().map_err(std::io::Error::other)?;
            let builder = WorkerQueueLayer::builder(config.workers);
            let layer = match config.max_waiting {
                None => builder.build().map(Layered::Unbounded),
                Some(max_waiting) => builder
                    .max_waiting(max_waiting)
                    .build()
                    .map(Layered::Bounded),
            };
            Some(layer.map_err(std::io::Error::other)?)
        }
    };
    let shared = Arc::new(Shared {
        config: config.clone(),
        queue,
        run: Mutex::new(Run {
            number: 0,
            started: Instant::now(),
        }),
        enqueued: AtomicU64::new(0),
        done: AtomicU64::new(0),
        served: AtomicU64::new(0),
        abandoned: AtomicU64::new(0),
        stale: AtomicU64::new(0),
        layered: layered.clone(),
        draws: Mutex::new(SmallRng::seed_from_u64(DRAW_SEED)),
    });
    let work_route = match layered {
        None => {
            let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
            for index in 0..config.workers.max(config.workers_after) {
                tokio::spawn(worker(index, shared.clone(), receiver.clone()));
            }
            get(work)
        }
        Some(layered) => {
            // Outermost, the run the request arrived in; then its wait for a worker.
            let work = match layered {
                Layered::Unbounded(workers) => get(work_layered).layer(workers),
                Layered::Bounded(workers) => get(work_layered).layer(workers),
            };
            work.layer(axum::middleware::map_request_with_state(
                shared.clone(),
                stamp_run,
            ))
        }
    };
    let app = Router::new()
        .route("/work", work_route)
        .route("/run", post(start_run))
        .route("/stats", get(stats))
        .with_state(shared);
    axum::serve(listener, app).await
}

/// Binds 127.0.0.1:`port` (0: any free port) and answers the address bound.
pub async fn bind(port: u16) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(("127.0.0.1", port)).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Worker `index`: takes requests in arrival order while it is one of the workers in service.
async fn worker(
    index: usize,
    shared: Arc<Shared>,
    receiver: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Job>>>,
) {
    const OFF_DUTY_POLL: Duration = Duration::from_millis(5);
    loop {
        let run = shared.run();
        if index >= shared.config.workers_at(run.started.elapsed()) {
            tokio::time::sleep(OFF_DUTY_POLL).await;
            continue;
        }
        let job = receiver.lock().await.recv().await;
        let Some(job) = job else {
            return;
        };
        let run = shared.run();
        if job.run != run.number {
            shared.stale.fetch_add(1, Ordering::Relaxed);
            shared.done.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let queued = job.enqueued.elapsed();
        tokio::time::sleep(shared.service(&run)).await;
        // Counted before the answer leaves, so that a client that has its answer finds it counted.
        if job.reply.is_closed() {
            shared.abandoned.fetch_add(1, Ordering::Relaxed);
        } else {
            shared.served.fetch_add(1, Ordering::Relaxed);
            let _ = job.reply.send(queued);
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// `GET /work`: queued, served by a worker, answered 200 with how long it waited for the worker
/// in `Server-Timing: flowguard-queue;dur=<ms>` (503 if the backend is shutting down).
async fn work(State(shared): State<Arc<Shared>>) -> Response {
    let (reply, answer) = oneshot::channel();
    let job = Job {
        run: shared.run().number,
        enqueued: Instant::now(),
        reply,
    };
    shared.enqueued.fetch_add(1, Ordering::Relaxed);
    if shared.queue.send(job).is_err() {
        shared.done.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match answer.await {
        Ok(queued) => (
            [(SERVER_TIMING, QueueTiming::default().header_value(queued))],
            "ok\n",
        )
            .into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "discarded\n").into_response(),
    }
}

/// The run a request arrived in (with `--queue layer`), stamped before it queues.
#[derive(Clone, Copy)]
struct ArrivedIn(u64);

async fn stamp_run(State(shared): State<Arc<Shared>>, mut request: Request) -> Request {
    request
        .extensions_mut()
        .insert(ArrivedIn(shared.run().number));
    request
}

/// `GET /work` behind `WorkerQueueLayer`: holds a worker for the service time and answers 200;
/// the layer adds how long the request waited for it. A request of an earlier run is answered 503
/// at once (`stale`), as the backend's own workers discard it.
async fn work_layered(
    State(shared): State<Arc<Shared>>,
    Extension(arrived): Extension<ArrivedIn>,
) -> Response {
    let run = shared.run();
    if arrived.0 != run.number {
        shared.stale.fetch_add(1, Ordering::Relaxed);
        return (StatusCode::SERVICE_UNAVAILABLE, "discarded\n").into_response();
    }
    // Dropped before the service time is over: its client went away (hyper drops the handler).
    let abandoned = Abandoned(&shared.abandoned);
    tokio::time::sleep(shared.service(&run)).await;
    std::mem::forget(abandoned);
    shared.served.fetch_add(1, Ordering::Relaxed);
    "ok\n".into_response()
}

/// Counts a request as abandoned if it is dropped while it holds a worker.
struct Abandoned<'a>(&'a AtomicU64);

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// `POST /run`: starts a run (step clock at zero, earlier requests discarded), answers the config.
async fn start_run(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    {
        let mut run = shared
            .run
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        run.number += 1;
        run.started = Instant::now();
    }
    *shared
        .draws
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = SmallRng::seed_from_u64(DRAW_SEED);
    for counter in [&shared.served, &shared.abandoned, &shared.stale] {
        counter.store(0, Ordering::Relaxed);
    }
    json_response(shared.config.to_json())
}

/// `GET /stats`: the counts of the current run.
async fn stats(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let queued = match &shared.layered {
        Some(layer) => layer.queued() as u64,
        None => {
            let enqueued = shared.enqueued.load(Ordering::Relaxed);
            enqueued.saturating_sub(shared.done.load(Ordering::Relaxed))
        }
    };
    let stats = BackendStats {
        served: shared.served.load(Ordering::Relaxed),
        abandoned: shared.abandoned.load(Ordering::Relaxed),
        queued,
        stale: shared.stale.load(Ordering::Relaxed),
    };
    json_response(stats.to_json())
}

fn json_response(json: serde_json::Value) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        json.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        backend: BackendFlags,
    }

    fn parse(flags: &[&str]) -> Result<BackendConfig, String> {
        use clap::Parser;
        let argv = std::iter::once("backend").chain(flags.iter().copied());
        Flags::try_parse_from(argv)
            .map(|f| f.backend.config())
            .map_err(|e| e.to_string())
    }

    /// `config` reads back the same from its flags and from its JSON.
    fn assert_round_trips(config: &BackendConfig) {
        let flags = config.to_flags();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        assert_eq!(&parse(&flags).unwrap(), config);
        assert_eq!(
            &BackendConfig::from_json(&config.to_json()).unwrap(),
            config
        );
    }

    #[test]
    fn flags_round_trip_through_to_flags_and_json() {
        let config = parse(&[
            "--workers",
            "8",
            "--workers-to",
            "4",
            "--service-ms",
            "5",
            "--step-at",
            "2.5",
            "--step-to",
            "12.5",
            "--queue",
            "own",
        ])
        .unwrap();
        assert_eq!(config.workers, 8);
        assert_eq!(config.workers_after, 4);
        assert_eq!(config.step_at, Some(Duration::from_millis(2500)));
        assert_round_trips(&config);
    }

    #[test]
    fn the_layer_queue_round_trips_and_refuses_a_worker_step() {
        let config = parse(&["--queue", "layer", "--workers", "6"]).unwrap();
        assert_eq!(config.queue, BackendQueue::Layer);
        assert_eq!(config.check(), Ok(()));
        assert_round_trips(&config);
        let stepped = parse(&["--queue", "layer", "--workers-to", "2"]).unwrap();
        assert!(stepped.check().unwrap_err().contains("--workers-to 2"));
        // A report from before the choice of queue reads as the backend's own.
        let mut old = BackendConfig::default().to_json();
        old.as_object_mut().unwrap().remove("queue");
        assert_eq!(
            BackendConfig::from_json(&old).unwrap().queue,
            BackendQueue::Own
        );
        assert!(parse(&["--queue", "mine"]).unwrap_err().contains("--queue"));
    }

    #[test]
    fn a_bound_on_the_layer_queue_round_trips_and_needs_the_layer() {
        let config = parse(&["--queue", "layer", "--max-waiting", "32"]).unwrap();
        assert_eq!(config.max_waiting, Some(32));
        assert_eq!(config.check(), Ok(()));
        assert_round_trips(&config);
        assert!(
            config
                .describe()
                .ends_with("queued by WorkerQueueLayer, at most 32 waiting")
        );
        let own = parse(&["--max-waiting", "32"]).unwrap();
        assert!(own.check().unwrap_err().contains("add --queue layer"));
        // A report from before the bound: any number may wait.
        let mut old = config.to_json();
        old.as_object_mut().unwrap().remove("max_waiting");
        assert_eq!(BackendConfig::from_json(&old).unwrap().max_waiting, None);
    }

    #[test]
    fn a_service_jitter_round_trips_and_spreads_the_service_time_both_ways() {
        let config = parse(&[
            "--service-ms",
            "40",
            "--step-at",
            "none",
            "--service-jitter",
            "0.3",
        ])
        .unwrap();
        assert_eq!(config.service_jitter, 0.3);
        assert_round_trips(&config);
        assert!(
            config
                .describe()
                .starts_with("4 workers at 40.0 ms +/-30% (100/s)")
        );
        let at = Duration::ZERO;
        let mut rng = SmallRng::seed_from_u64(5);
        let drawn: Vec<Duration> = (0..1000)
            .map(|_| config.service_drawn(at, &mut rng))
            .collect();
        assert!(drawn.iter().all(|d| *d >= Duration::from_millis(28)));
        assert!(drawn.iter().all(|d| *d < Duration::from_millis(52)));
        assert!(drawn.iter().any(|d| *d < Duration::from_millis(30)));
        assert!(drawn.iter().any(|d| *d > Duration::from_millis(50)));
        // Lognormal: named in the flags, the JSON and the description.
        let lognormal =
            parse(&["--service-jitter", "0.1", "--service-shape", "lognormal"]).unwrap();
        assert_eq!(lognormal.service_shape, SpreadShape::Lognormal);
        assert_round_trips(&lognormal);
        assert!(
            lognormal
                .describe()
                .starts_with("4 workers at 10.0 ms lognormal sigma 0.1 (")
        );
        // Without it, every request takes the service time, and the flag is not written.
        let exact = parse(&["--service-ms", "40"]).unwrap();
        assert_eq!(exact.service_drawn(at, &mut rng), Duration::from_millis(40));
        assert!(!exact.to_flags().contains(&"--service-jitter".to_owned()));
        assert!(
            parse(&["--service-jitter", "1"])
                .unwrap_err()
                .contains("below 1")
        );
        // A report from before the jitter: none.
        let mut old = config.to_json();
        old.as_object_mut().unwrap().remove("service_jitter");
        assert_eq!(BackendConfig::from_json(&old).unwrap().service_jitter, 0.0);
    }

    #[test]
    fn the_description_names_the_step_and_the_queue() {
        assert_eq!(
            BackendConfig::default().describe(),
            "4 workers at 10.0 ms (400/s); from 10.0 s: 4 workers at 25.0 ms (160/s); its own queue"
        );
        let layered = parse(&["--step-at", "none", "--queue", "layer"]).unwrap();
        assert_eq!(
            layered.describe(),
            "4 workers at 10.0 ms (400/s); queued by WorkerQueueLayer"
        );
    }

    #[test]
    fn workers_follow_workers_unless_a_step_says_otherwise() {
        assert_eq!(parse(&["--workers", "6"]).unwrap().workers_after, 6);
        assert_eq!(
            parse(&["--workers-to", "2", "--workers", "6"])
                .unwrap()
                .workers_after,
            2
        );
        let no_step = parse(&["--step-at", "none"]).unwrap();
        assert_eq!(
            no_step.service_at(Duration::from_secs(100)),
            no_step.service
        );
    }

    #[test]
    fn bad_flags_name_what_to_change() {
        assert!(
            parse(&["--workers", "0"])
                .unwrap_err()
                .contains("--workers")
        );
        assert!(
            parse(&["--service-ms", "-1"])
                .unwrap_err()
                .contains("--service-ms")
        );
        assert!(
            parse(&["--step-at", "soon"])
                .unwrap_err()
                .contains("--step-at")
        );
    }

    #[test]
    fn the_step_changes_workers_and_service_time_at_step_at() {
        let config = parse(&["--workers-to", "2", "--step-at", "10"]).unwrap();
        let before = Duration::from_millis(9_999);
        let at = Duration::from_secs(10);
        assert_eq!(
            (config.workers_at(before), config.service_at(before)),
            (4, Duration::from_millis(10))
        );
        assert_eq!(
            (config.workers_at(at), config.service_at(at)),
            (2, Duration::from_millis(25))
        );
    }
}
