//! The overload run on real sockets: an HTTP backend with a few workers behind an unbounded queue,
//! offered 3x its capacity (Poisson arrivals) through each limiter in turn, with a step in its
//! service time (or worker count) in the middle of the run.
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin overload -- --seconds 20 --limiter all [--json]
//! cargo run --release -p flowguard-harness --bin overload -- --fleet 4 --seconds 30 --step-at none [--in-process]
//! cargo run --release -p flowguard-harness --bin overload -- --fleet 2 --seconds 30 --step-at none --workers 16 --limiter flowguard --vegas-instances 0 --vegas-max-queue-share 0.2
//! ```
//!
//! With `--fleet N`, N instances share the backend, each with its own limiter and HTTP client, each
//! in a client process of its own (this executable again, as the hidden `overload fleet-instance
//! ...`), or with `--in-process` all in this one process (see `flowguard_harness::overload::fleet`
//! and `flowguard_harness::overload::instance`). `--vegas-instances LIST` gives the `--vegas-*`
//! settings to the listed instances only, and `--reported-instances LIST` lets only those read the
//! backend's reports in the `flowguard-queue` arm: a fleet in the middle of a rollout.
//!
//! Without `--backend URL` it starts a fresh backend process per limiter (itself, as
//! `overload backend --port 0 ...`, so client and server never share a runtime) with the backend
//! flags given here: `--workers 4 --service-ms 10 --step-at 10 --step-to 25 [--workers-to M]` by
//! default. With `--backend URL` it drives a running `overload_backend` (whose own flags then
//! apply), starting a run on it (`POST /run`) before each limiter.
//!
//! Client flags: `--limiter all|LIST` (none, fixedN, flowguard, flowguard-queue, tower-acc; default all), `--seconds S`
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

use clap::{Parser, Subcommand};
use flowguard_harness::cli;
use flowguard_harness::fleet_report::FleetReport;
use flowguard_harness::overload::backend::{
    self, BACKEND_USAGE, BackendArgs, BackendConfig, BackendFlags,
};
use flowguard_harness::overload::client::{self, ClientConfig};
use flowguard_harness::overload::fleet::{self, FleetConfig, FleetMode};
use flowguard_harness::overload::gate::LimiterKind;
use flowguard_harness::overload::instance::{self, InstanceArgs};
use flowguard_harness::overload::machine::{self, Machine};
use flowguard_harness::overload::report::{self, Report, Targets};
use flowguard_harness::rollout::{self, Rollout};
use flowguard_harness::vegas_settings::VegasSettings;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The overload run on real sockets: an HTTP backend offered several times its capacity
/// through each limiter in turn, with a step in its service time (or worker count) in the
/// middle of the run.
#[derive(Parser, Debug)]
#[command(
    name = "overload",
    override_usage = format!(
        "overload [--backend URL] [--limiter all|none,fixedN,flowguard,flowguard-queue,tower-acc] [--seconds S] \
         [--overload X | --rate R] [--deadline-ms MS] [--wait-ms MS] [--seed N] [--json] [--fleet N [--in-process] \
         [--vegas-instances LIST] [--reported-instances LIST]] \
         [--workers N] [--service-ms S] [--step-at SEC|none] [--step-to MS] [--workers-to M] \
         [--queue own|layer [--max-waiting N]] [--vegas-window-rounds R] [--vegas-max-queue-share S] \
         [--vegas-alpha A] [--vegas-beta B] [--vegas-band-growth G]\n       \
         overload backend {BACKEND_USAGE}"
    ),
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Run>,
    /// A running overload_backend to drive (POST /run before each limiter; its own flags apply).
    /// Without it, each limiter gets a fresh backend process with the backend flags given here
    #[arg(long = "backend", value_name = "URL", value_parser = backend_url)]
    backend_url: Option<reqwest::Url>,
    /// The limiters, in turn: all, or a comma-separated list of none, fixedN, flowguard, flowguard-queue, tower-acc
    #[arg(long, value_name = "all|LIST", default_value = "all", value_parser = Limiters::parse)]
    limiter: Limiters,
    /// Length of the run in seconds
    #[arg(long, value_name = "S", default_value_t = ClientConfig::default().seconds,
          value_parser = cli::above_zero, allow_negative_numbers = true)]
    seconds: f64,
    /// Offered load, times the backend's capacity before the step
    #[arg(long, value_name = "X", default_value_t = ClientConfig::default().overload,
          value_parser = cli::above_zero, allow_negative_numbers = true, conflicts_with = "rate")]
    overload: f64,
    /// Offered load in arrivals per second, instead of --overload
    #[arg(long, value_name = "R", value_parser = cli::above_zero, allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Time from arrival to the answer after which a request is given up, in milliseconds
    #[arg(long = "deadline-ms", value_name = "MS",
          default_value_t = ClientConfig::default().deadline.as_secs_f64() * 1e3,
          value_parser = cli::above_zero, allow_negative_numbers = true)]
    deadline_ms: f64,
    /// Time a request waits for a permit before it is shed, in milliseconds
    #[arg(long = "wait-ms", value_name = "MS",
          default_value_t = ClientConfig::default().wait.as_secs_f64() * 1e3,
          value_parser = cli::above_zero, allow_negative_numbers = true)]
    wait_ms: f64,
    /// Seed of the arrival times
    #[arg(long, value_name = "N", default_value_t = ClientConfig::default().seed)]
    seed: u64,
    /// One JSON object on the last line instead of tables
    #[arg(long)]
    json: bool,
    /// Runs N instances (2 to 8), each in a client process of its own with its own limiter and
    /// HTTP client, sharing one backend: staggered starts, the last one joins at a third of the
    /// run, the first leaves at two thirds (`--limiter all` then means fixed1, fixed4, flowguard,
    /// flowguard-queue, tower-acc)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(2..=8))]
    fleet: Option<u8>,
    /// With --fleet: runs every instance in this one process instead (still a limiter and an HTTP
    /// client each)
    #[arg(long = "in-process", requires = "fleet")]
    in_process: bool,
    /// With --fleet: only these instances run the `--vegas-*` settings, the others flowguard's
    /// defaults, as in a fleet in the middle of a rollout (comma-separated indices in start
    /// order: 0 starts first and leaves, the last one joins late)
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "fleet")]
    vegas_instances: Option<Vec<usize>>,
    /// With --fleet: in the flowguard-queue arm, only these instances read the backend's queue
    /// reports, the others run the flowguard arm, told not to read them, as in a rollout of a
    /// version that reads them (comma-separated indices in start order)
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "fleet")]
    reported_instances: Option<Vec<usize>>,
    #[command(flatten)]
    backend: BackendFlags,
    #[command(flatten)]
    vegas: VegasSettings,
}

#[derive(Subcommand, Debug)]
enum Run {
    /// Serves as a backend instead, as overload_backend does
    #[command(override_usage = format!("overload backend {BACKEND_USAGE}"))]
    Backend(BackendArgs),
    /// One instance of a fleet run, started by `overload --fleet N` (prints one JSON line)
    #[command(name = "fleet-instance", hide = true)]
    FleetInstance(InstanceArgs),
}

/// `--limiter`: the limiters to run, in turn.
#[derive(Clone, Debug)]
struct Limiters(Vec<LimiterKind>);

impl Limiters {
    fn parse(list: &str) -> Result<Limiters, String> {
        LimiterKind::parse_list(list).map(Limiters)
    }
}

/// `--backend`: an absolute URL, read as a folder (with a trailing `/`).
fn backend_url(raw: &str) -> Result<reqwest::Url, String> {
    let mut url =
        reqwest::Url::parse(raw).map_err(|e| format!("{e} (e.g. http://127.0.0.1:8080/)"))?;
    if !url.path().ends_with('/') {
        url.set_path(&format!("{}/", url.path()));
    }
    Ok(url)
}

struct Args {
    backend_url: Option<reqwest::Url>,
    backend: BackendConfig,
    limiters: Vec<LimiterKind>,
    client: ClientConfig,
    json: bool,
    fleet: Option<FleetConfig>,
    in_process: bool,
}

impl Cli {
    fn into_args(self) -> Args {
        Args {
            backend_url: self.backend_url,
            backend: self.backend.config(),
            fleet: self.fleet.map(|n| FleetConfig {
                rollout: Rollout {
                    vegas_on: self.vegas_instances.clone(),
                    reports_read_by: self.reported_instances.clone(),
                },
                ..FleetConfig::standard(usize::from(n), self.seconds)
            }),
            limiters: match (self.fleet, self.limiter.0.as_slice()) {
                (Some(_), all) if all == LimiterKind::ALL => LimiterKind::FLEET.to_vec(),
                (_, limiters) => limiters.to_vec(),
            },
            client: ClientConfig {
                seconds: self.seconds,
                overload: self.overload,
                rate: self.rate,
                deadline: Duration::from_secs_f64(self.deadline_ms / 1e3),
                wait: Duration::from_secs_f64(self.wait_ms / 1e3),
                seed: self.seed,
                vegas: self.vegas,
            },
            json: self.json,
            in_process: self.in_process,
        }
    }
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

/// The fleet run: every limiter in turn, in every instance, against a fresh backend (or the
/// running one).
async fn run_fleet(args: &Args, fleet: &FleetConfig) -> Result<(), String> {
    let mode = if args.in_process {
        FleetMode::InProcess
    } else {
        FleetMode::Processes(std::env::current_exe().map_err(|e| {
            format!("cannot find this executable to start the fleet's instances: {e}")
        })?)
    };
    let load_before = machine::load_average();
    let mut reports: Vec<FleetReport> = Vec::new();
    for kind in &args.limiters {
        let report = match &args.backend_url {
            Some(url) => fleet::run(url, *kind, fleet, &args.client, &mode).await?,
            None => {
                let backend = BackendProcess::start(&args.backend).await?;
                let report = fleet::run(&backend.url, *kind, fleet, &args.client, &mode).await;
                backend.stop().await;
                report?
            }
        };
        if !args.json {
            eprintln!(
                "{}: jain {:?}, {} timeouts",
                report.name,
                report.jain,
                report.timeouts()
            );
        }
        reports.push(report);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let machine = Machine::after(load_before);
    if args.json {
        let json = serde_json::json!({
            "machine": machine.to_json(),
            "fleet": {
                "mode": mode.name(),
                "instances": fleet.instances,
                "join_at_s": fleet.join_at.as_secs_f64(),
                "leave_at_s": fleet.leave_at.as_secs_f64(),
                "seconds": args.client.seconds,
                "overload": args.client.overload,
                "vegas": args.client.vegas.describe(),
                "vegas_instances": fleet.rollout.vegas_on,
                "reported_instances": fleet.rollout.reports_read_by,
            },
            // The backend this run started (none when it was given one with --backend).
            "backend": args.backend_url.is_none().then(|| args.backend.to_json()),
            "limiters": reports.iter().map(FleetReport::to_json).collect::<Vec<_>>(),
        });
        println!("{json}");
    } else {
        machine.print();
        if args.client.vegas != VegasSettings::default() {
            println!(
                "flowguard's Vegas: {}",
                fleet.rollout.describe_vegas(&args.client.vegas)
            );
        }
        if let Some(read_by) = &fleet.rollout.reports_read_by {
            println!(
                "{}: the reports read by instances {} only, the others told not to read them",
                LimiterKind::FlowguardQueue.name(),
                rollout::list(read_by)
            );
        }
        if args.backend_url.is_none() {
            println!("backend: {}", args.backend.describe());
        }
        fleet::print(fleet, &mode, &reports);
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    // Refused before any process starts.
    args.client
        .vegas
        .build()
        .map_err(|e| format!("flowguard's Vegas: {e}"))?;
    if args.backend_url.is_none() {
        // Refused here, before a backend process is started only to refuse it.
        args.backend.check()?;
    }
    if let Some(fleet) = &args.fleet {
        fleet.check_rollout(&args.client.vegas, &args.limiters)?;
        return run_fleet(&args, fleet).await;
    }
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
    let machine = Machine::after(load_before);
    if args.json {
        let json = serde_json::json!({
            "machine": machine.to_json(),
            "client": {
                "seconds": args.client.seconds,
                "overload": args.client.overload,
                "rate": args.client.rate,
                "deadline_ms": args.client.deadline.as_secs_f64() * 1e3,
                "wait_ms": args.client.wait.as_secs_f64() * 1e3,
                "seed": args.client.seed,
                "vegas": args.client.vegas.describe(),
            },
            "limiters": reports.iter().map(Report::to_json).collect::<Vec<_>>(),
            "targets": Targets::of(&reports).map(|t| t.to_json()),
        });
        println!("{json}");
    } else {
        machine.print();
        if args.client.vegas != VegasSettings::default() {
            println!("flowguard's Vegas: {}", args.client.vegas.describe());
        }
        report::print(&reports);
    }
    Ok(())
}

/// A tokio runtime: on every core, or (for a fleet instance, of which there may be 8 on a
/// machine of 2 cores) on this thread only.
fn runtime(multi_thread: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let multi_thread = !matches!(cli.command, Some(Run::FleetInstance(_)));
    let runtime = match runtime(multi_thread) {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("overload: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match cli.command {
        Some(Run::Backend(args)) => match runtime.block_on(backend::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("overload backend: {e}");
                ExitCode::from(2)
            }
        },
        Some(Run::FleetInstance(args)) => match runtime.block_on(instance::run(args)) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("overload fleet-instance: {e}");
                ExitCode::from(2)
            }
        },
        None => match runtime.block_on(run(cli.into_args())) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("overload: {e}");
                ExitCode::FAILURE
            }
        },
    };
    // Without waiting for a blocking read of standard input (a fleet instance's, which only ends
    // when its parent closes it, and the parent waits for this process to exit first).
    runtime.shutdown_background();
    code
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(argv: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("overload").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_flags_read_as_before() {
        Cli::command().debug_assert();
        let args = parse(&[
            "--limiter",
            "none,fixed8",
            "--rate",
            "150",
            "--workers",
            "2",
        ])
        .unwrap()
        .into_args();
        assert_eq!(args.limiters, [LimiterKind::None, LimiterKind::Fixed(8)]);
        assert_eq!(args.client.rate, Some(150.0));
        assert_eq!((args.backend.workers, args.backend.workers_after), (2, 2));
        assert_eq!(args.client.deadline, ClientConfig::default().deadline);
        let url = parse(&["--backend", "http://127.0.0.1:8080/base"]).unwrap();
        assert_eq!(
            url.backend_url.unwrap().as_str(),
            "http://127.0.0.1:8080/base/"
        );
        let Some(Run::Backend(backend)) = parse(&["backend", "--port", "0", "--exit-with-stdin"])
            .unwrap()
            .command
        else {
            panic!("not the backend")
        };
        assert!(backend.exit_with_stdin);
        assert!(
            parse(&["--overload", "2", "--rate", "5"])
                .unwrap_err()
                .contains("--rate")
        );
        assert!(
            parse(&["--seconds", "0"])
                .unwrap_err()
                .contains("--seconds")
        );
        assert!(
            parse(&["--backend", "nowhere"])
                .unwrap_err()
                .contains("--backend")
        );
    }

    #[test]
    fn a_fleet_runs_in_processes_unless_in_process_and_an_instance_reads_its_flags_back() {
        assert!(!parse(&["--fleet", "4"]).unwrap().into_args().in_process);
        assert!(
            parse(&["--fleet", "4", "--in-process"])
                .unwrap()
                .into_args()
                .in_process
        );
        assert!(parse(&["--in-process"]).unwrap_err().contains("--fleet"));
        let mixed = [
            "--fleet",
            "2",
            "--vegas-instances",
            "0",
            "--vegas-max-queue-share",
            "0.2",
        ];
        let fleet = parse(&mixed).unwrap().into_args().fleet.unwrap();
        assert_eq!(fleet.rollout.vegas_on, Some(vec![0]));
        assert!(
            parse(&["--vegas-instances", "0"])
                .unwrap_err()
                .contains("--fleet")
        );
        let args = InstanceArgs {
            backend: reqwest::Url::parse("http://127.0.0.1:8080/").unwrap(),
            index: 3,
            limiter: LimiterKind::Fixed(1),
            from_s: 0.0,
            until_s: 20.0 / 3.0,
            seconds: 20.0,
            rate: 400.0 / 3.0,
            seed: 1003,
            wait_ms: 50.0,
            deadline_ms: 1000.0,
            vegas: VegasSettings {
                window_rounds: Some(3.0),
                ..VegasSettings::default()
            },
        };
        let flags = args.to_flags();
        let argv: Vec<&str> = std::iter::once(instance::SUBCOMMAND)
            .chain(flags.iter().map(String::as_str))
            .collect();
        let Some(Run::FleetInstance(back)) = parse(&argv).unwrap().command else {
            panic!("not a fleet instance")
        };
        assert_eq!(back, args);
        let help = Cli::command().render_help().to_string();
        assert!(!help.contains(instance::SUBCOMMAND), "{help}");
    }
}
