//! The overload run on real sockets: an HTTP backend with a few workers behind an unbounded queue,
//! offered 3x its capacity (Poisson arrivals) through each limiter in turn, with a step in its
//! service time (or worker count) in the middle of the run.
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin overload -- --seconds 20 --limiter all [--json]
//! ```
//!
//! Without `--backend URL` it starts a fresh backend process per limiter (itself, as
//! `overload backend --port 0 ...`, so client and server never share a runtime) with the backend
//! flags given here: `--workers 4 --service-ms 10 --step-at 10 --step-to 25 [--workers-to M]` by
//! default. With `--backend URL` it drives a running `overload_backend` (whose own flags then
//! apply), starting a run on it (`POST /run`) before each limiter.
//!
//! Client flags: `--limiter all|LIST` (none, fixedN, flowguard, tower-acc; default all), `--seconds S`
//! (20), `--overload X` (3, times the capacity before the step) or `--rate R` (arrivals per second),
//! `--deadline-ms MS` (1000), `--wait-ms MS` (50, the wait for a permit before a request is shed),
//! `--seed N` (1), `--json` (one JSON object on the last line instead of tables).
//!
//! It prints, per limiter: arrivals, goodput (2xx answered) over the run and per second, goodput in
//! the second before the step and the three after it, p50/p99 latency of successful requests
//! (from arrival, including the wait for a permit), timeouts, sheds, errors, the share of
//! steady-state time the limit was below the worker count, the time below it in the 2 s after the
//! step and the lowest limit then, the most requests in flight; the limit per 100 ms around the
//! step; and Vegas against the targets. Definitions: `flowguard_harness::overload::report`.

use std::process::{ExitCode, Stdio};
use std::time::Duration;

use flowguard_harness::overload::backend::{BACKEND_FLAGS, BackendConfig};
use flowguard_harness::overload::client::{self, ClientConfig};
use flowguard_harness::overload::gate::LimiterKind;
use flowguard_harness::overload::report::{self, Report, Targets};
use flowguard_harness::overload::{args, machine};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

struct Args {
    backend_url: Option<reqwest::Url>,
    backend: BackendConfig,
    limiters: Vec<LimiterKind>,
    client: ClientConfig,
    json: bool,
}

fn usage() -> String {
    format!(
        "usage: overload [--backend URL] [--limiter all|none,fixedN,flowguard,tower-acc] [--seconds S] \
         [--overload X | --rate R] [--deadline-ms MS] [--wait-ms MS] [--seed N] [--json] {BACKEND_FLAGS}\n\
         \x20      overload backend [--port P] {BACKEND_FLAGS}"
    )
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        backend_url: None,
        backend: BackendConfig::default(),
        limiters: LimiterKind::ALL.to_vec(),
        client: ClientConfig::default(),
        json: false,
    };
    let mut workers_to_given = false;
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--backend" => {
                let raw: String = args::value(&mut it, "--backend")?;
                let mut url = reqwest::Url::parse(&raw)
                    .map_err(|e| format!("--backend {raw}: {e} (e.g. http://127.0.0.1:8080/)"))?;
                if !url.path().ends_with('/') {
                    url.set_path(&format!("{}/", url.path()));
                }
                a.backend_url = Some(url);
            }
            "--limiter" => {
                a.limiters = LimiterKind::parse_list(&args::value::<String>(&mut it, "--limiter")?)?
            }
            "--seconds" => a.client.seconds = args::positive(&mut it, "--seconds")?,
            "--overload" => a.client.overload = args::positive(&mut it, "--overload")?,
            "--rate" => a.client.rate = Some(args::positive(&mut it, "--rate")?),
            "--deadline-ms" => {
                a.client.deadline =
                    Duration::from_secs_f64(args::positive(&mut it, "--deadline-ms")? / 1e3)
            }
            "--wait-ms" => {
                a.client.wait = Duration::from_secs_f64(args::positive(&mut it, "--wait-ms")? / 1e3)
            }
            "--seed" => a.client.seed = args::value(&mut it, "--seed")?,
            "--json" => a.json = true,
            "--help" | "-h" => return Err(usage()),
            _ => {
                if !a.backend.read_flag(&flag, &mut it, &mut workers_to_given)? {
                    return Err(format!("unknown flag {flag}\n{}", usage()));
                }
            }
        }
    }
    Ok(a)
}

/// A backend process started for one run; killed when dropped.
struct BackendProcess {
    child: Child,
    url: reqwest::Url,
    /// Kept open, so that the backend never writes to a closed pipe.
    _stdout: BufReader<tokio::process::ChildStdout>,
}

impl BackendProcess {
    async fn start(config: &BackendConfig) -> Result<Self, String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this executable to start the backend: {e}"))?;
        let mut child = Command::new(exe)
            .arg("backend")
            .args(["--port", "0", "--exit-with-stdin"])
            .args(config.to_flags())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start the backend process: {e}"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("the backend process has no standard output")?;
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        let read = stdout.read_line(&mut line);
        match tokio::time::timeout(Duration::from_secs(10), read).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Err("the backend process did not say where it listens within 10 s".into()),
        }
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|url| reqwest::Url::parse(url).ok())
            .ok_or_else(|| format!("unexpected first line from the backend: {line:?}"))?;
        Ok(Self {
            child,
            url,
            _stdout: stdout,
        })
    }

    async fn stop(mut self) {
        // Ours, by its handle; a backend already gone is fine.
        let _ = self.child.kill().await;
    }
}

async fn run(args: Args) -> Result<(), String> {
    let load_before = machine::load_average();
    let mut reports = Vec::new();
    for kind in &args.limiters {
        let record = match &args.backend_url {
            Some(url) => client::run(url, *kind, &args.client).await?,
            None => {
                let backend = BackendProcess::start(&args.backend).await?;
                let record = client::run(&backend.url, *kind, &args.client).await;
                backend.stop().await;
                record?
            }
        };
        let report = Report::of(&record);
        if !args.json {
            eprintln!(
                "{}: {} arrivals, {} ok, {} shed, {} timeouts, {} errors",
                report.limiter,
                report.arrivals,
                report.ok,
                report.shed,
                report.timeouts,
                report.errors
            );
        }
        reports.push(report);
        // Let the closed connections and the machine settle before the next limiter.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let load_after = machine::load_average();
    let cpu = machine::cpu_model();
    if args.json {
        let json = serde_json::json!({
            "machine": {
                "cpu": cpu,
                "cores": machine::cores(),
                "load_average_before": load_before,
                "load_average_after": load_after,
            },
            "client": {
                "seconds": args.client.seconds,
                "overload": args.client.overload,
                "rate": args.client.rate,
                "deadline_ms": args.client.deadline.as_secs_f64() * 1e3,
                "wait_ms": args.client.wait.as_secs_f64() * 1e3,
                "seed": args.client.seed,
            },
            "limiters": reports.iter().map(Report::to_json).collect::<Vec<_>>(),
            "targets": Targets::of(&reports).map(|t| t.to_json()),
        });
        println!("{json}");
    } else {
        let load = |l: Option<[f64; 3]>| {
            l.map_or("unknown".into(), |[a, b, c]| {
                format!("{a:.2} {b:.2} {c:.2}")
            })
        };
        println!(
            "machine: {} ({} cores); load average before {}, after {}",
            cpu.as_deref().unwrap_or("unknown CPU"),
            machine::cores(),
            load(load_before),
            load(load_after)
        );
        report::print(&reports);
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("backend") {
        argv.next();
        return match flowguard_harness::overload::backend::main_with_args(argv).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("overload backend: {e}");
                ExitCode::from(2)
            }
        };
    }
    let args = match parse_args(argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("overload: {e}");
            ExitCode::FAILURE
        }
    }
}
