//! vegas_sim: flowguard's adaptive concurrency limiters against a downstream that slows down and
//! recovers, on a virtual clock (the scenarios and figures are described on [`Args`], which
//! `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin vegas_sim -- [--json] [--plot DIR] [--seed N] [--slots N]
//! cargo run --release -p flowguard-harness --bin vegas_sim -- --step [--seed N] [--reported-queue] [--host-noise-ms MS] [--json]
//! cargo run --release -p flowguard-harness --bin vegas_sim -- --fleet [--instances N] [--workers N] [--service-ms MS] [--seed N] [--reported-queue] [--host-noise-ms MS] [--vegas-instances LIST] [--reported-instances LIST] [--json]
//! ```

mod fleet;
mod host_noise;
mod step;

use flowguard_harness::service_spread::SpreadShape;
use flowguard_harness::vegas_settings::VegasSettings;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use flowguard::clock::ManualClock;
use flowguard::vegas::{Aimd, Fixed, Gradient, LimitAlgorithm, LimitBounds, Limiter, OwnedPermit};
use flowguard_harness::cli::{above_zero, positive, spread};
use flowguard_harness::exponential::unit_exponential;
use flowguard_harness::rollout::Rollout;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// Downstream and load settings.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    slots: usize,
    queue_capacity: usize,
    service: Duration,
    /// Service time varies uniformly by this share around its mean.
    jitter: f64,
    /// The shape of the service time's spread (`jitter` is its width).
    shape: SpreadShape,
    offered_load: f64,
    slowdown: f64,
    slowdown_at: Duration,
    recovery_at: Duration,
    end: Duration,
    seed: u64,
}

impl Scenario {
    fn standard(seed: u64, slots: usize) -> Self {
        Self {
            slots,
            queue_capacity: 2 * slots,
            service: Duration::from_millis(20),
            jitter: 0.1,
            shape: SpreadShape::Uniform,
            offered_load: 3.0,
            slowdown: 3.0,
            slowdown_at: Duration::from_secs(20),
            recovery_at: Duration::from_secs(40),
            end: Duration::from_secs(60),
            seed,
        }
    }

    /// Mean service time in effect at `at`, in nanoseconds.
    fn mean_service_nanos(&self, at: u64) -> f64 {
        let slow = at >= nanos(self.slowdown_at) && at < nanos(self.recovery_at);
        self.service.as_nanos() as f64 * if slow { self.slowdown } else { 1.0 }
    }

    /// Calls per nanosecond the downstream completes at `at` when saturated.
    fn capacity_per_nano(&self, at: u64) -> f64 {
        self.slots as f64 / self.mean_service_nanos(at)
    }

    fn changes(&self) -> [(u64, u64); 2] {
        [
            (nanos(self.slowdown_at), nanos(self.recovery_at)),
            (nanos(self.recovery_at), nanos(self.end)),
        ]
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// A call admitted by the limiter.
struct Call {
    permit: OwnedPermit,
    admitted_at: u64,
}

/// A call being served: completes at `done_at`.
struct InService {
    call: Call,
    service_nanos: u64,
}

/// Per-window measurements (for convergence and plots).
#[derive(Debug, Clone, Default)]
struct Window {
    successes: u64,
    ratios: Vec<f64>,
    limit_sum: f64,
    in_flight_sum: f64,
    latency_ms: Vec<f64>,
    observations: u64,
}

impl Window {
    fn p99(values: &mut [f64]) -> Option<f64> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let index = ((values.len() as f64 * 0.99).ceil() as usize).clamp(1, values.len()) - 1;
        Some(values[index])
    }
}

/// What one algorithm achieved.
struct Report {
    name: &'static str,
    goodput_ratio: f64,
    p99_latency_ratio: f64,
    reconverge_each_s: Vec<Option<f64>>,
    limit_settle_each_s: Vec<Option<f64>>,
    shed: u64,
    dropped: u64,
    windows: Vec<Window>,
}

const WINDOW: Duration = Duration::from_millis(250);

/// Runs the scenario against one limiter and measures it.
fn simulate(scenario: &Scenario, algorithm: impl LimitAlgorithm) -> Result<Report, Box<dyn Error>> {
    let name = algorithm.name();
    let clock = ManualClock::new();
    let limiter = Limiter::builder(algorithm)
        .name(name)
        .clock(clock.clone())
        .build()?;
    let mut rng = SmallRng::seed_from_u64(scenario.seed);
    let arrival_rate = scenario.offered_load * scenario.capacity_per_nano(0);
    let end = nanos(scenario.end);
    let window_nanos = nanos(WINDOW);
    let mut windows = vec![Window::default(); (end / window_nanos + 1) as usize];

    // Completion events: (time, sequence) -> the call in service.
    let mut completions: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut in_service: hashbrown::HashMap<u64, InService> = hashbrown::HashMap::new();
    let mut queue: VecDeque<Call> = VecDeque::new();
    let mut sequence = 0_u64;
    let mut next_arrival = 0_u64;
    let (mut shed, mut dropped) = (0_u64, 0_u64);
    let mut ratios = Vec::new();
    let mut next_observation = 0_u64;

    let mut start_service =
        |call: Call,
         now: u64,
         rng: &mut SmallRng,
         completions: &mut BinaryHeap<Reverse<(u64, u64)>>,
         in_service: &mut hashbrown::HashMap<u64, InService>| {
            let spread = scenario.shape.factor(scenario.jitter, rng);
            let service_nanos = (scenario.mean_service_nanos(now) * spread) as u64;
            sequence += 1;
            completions.push(Reverse((now + service_nanos, sequence)));
            in_service.insert(
                sequence,
                InService {
                    call,
                    service_nanos,
                },
            );
        };

    loop {
        let next_completion = completions.peek().map(|Reverse((at, _))| *at);
        let now = match next_completion {
            Some(at) if at <= next_arrival => at,
            _ => next_arrival,
        };
        if now >= end {
            break;
        }
        clock.set_nanos(now);
        while next_observation <= now {
            let window = &mut windows[(next_observation / window_nanos) as usize];
            window.limit_sum += limiter.limit() as f64;
            window.in_flight_sum += limiter.in_flight() as f64;
            window.observations += 1;
            next_observation += window_nanos / 25;
        }
        if Some(now) == next_completion {
            let Some(Reverse((_, id))) = completions.pop() else {
                break;
            };
            let Some(done) = in_service.remove(&id) else {
                continue;
            };
            let latency = now - done.call.admitted_at;
            done.call.permit.success();
            let ratio = latency as f64 / done.service_nanos.max(1) as f64;
            let window = &mut windows[(now / window_nanos) as usize];
            window.successes += 1;
            window.ratios.push(ratio);
            window.latency_ms.push(latency as f64 / 1e6);
            ratios.push(ratio);
            if let Some(call) = queue.pop_front() {
                start_service(call, now, &mut rng, &mut completions, &mut in_service);
            }
            continue;
        }
        // An arrival.
        let gap = unit_exponential(&mut rng) / arrival_rate;
        next_arrival = now + gap.max(1.0) as u64;
        let Ok(permit) = limiter.try_acquire_owned() else {
            shed += 1;
            continue;
        };
        let call = Call {
            permit,
            admitted_at: now,
        };
        if in_service.len() < scenario.slots {
            start_service(call, now, &mut rng, &mut completions, &mut in_service);
        } else if queue.len() < scenario.queue_capacity {
            queue.push_back(call);
        } else {
            dropped += 1;
            call.permit.dropped();
        }
    }

    let capacity: f64 = (0..end / window_nanos)
        .map(|w| scenario.capacity_per_nano(w * window_nanos) * window_nanos as f64)
        .sum();
    let successes: u64 = windows.iter().map(|w| w.successes).sum();
    let reconverge_each_s = scenario
        .changes()
        .iter()
        .map(|&(from, until)| reconverge(scenario, &mut windows, from, until))
        .collect();
    let limit_settle_each_s = scenario
        .changes()
        .iter()
        .map(|&(from, until)| limit_settle(&windows, from, until))
        .collect();
    Ok(Report {
        name,
        goodput_ratio: successes as f64 / capacity,
        p99_latency_ratio: Window::p99(&mut ratios).unwrap_or(f64::NAN),
        reconverge_each_s,
        limit_settle_each_s,
        shed,
        dropped,
        windows,
    })
}

/// Seconds from `from` until one second of windows with goodput >= 0.9 and p99 ratio <= 2.
fn reconverge(scenario: &Scenario, windows: &mut [Window], from: u64, until: u64) -> Option<f64> {
    let window_nanos = nanos(WINDOW);
    let needed = (1_000_000_000 / window_nanos) as usize;
    let first = from.div_ceil(window_nanos) as usize;
    let last = (until / window_nanos) as usize;
    let good: Vec<bool> = (first..last)
        .map(|index| {
            let start = index as u64 * window_nanos;
            let capacity = scenario.capacity_per_nano(start) * window_nanos as f64;
            let window = &mut windows[index];
            let goodput = window.successes as f64 / capacity;
            let p99 = Window::p99(&mut window.ratios).unwrap_or(f64::INFINITY);
            goodput >= 0.9 && p99 <= 2.0
        })
        .collect();
    let run_start = good
        .windows(needed)
        .position(|run| run.iter().all(|&ok| ok))?;
    Some(((first + run_start) as u64 * window_nanos - from) as f64 / 1e9)
}

/// Seconds from `from` until one second of windows whose mean limit is within 15 % of the mean
/// over the phase's last 5 seconds.
fn limit_settle(windows: &[Window], from: u64, until: u64) -> Option<f64> {
    let window_nanos = nanos(WINDOW);
    let needed = (1_000_000_000 / window_nanos) as usize;
    let first = from.div_ceil(window_nanos) as usize;
    let last = (until / window_nanos) as usize;
    let mean_limit = |w: &Window| w.limit_sum / w.observations.max(1) as f64;
    let tail = &windows[last.saturating_sub(20).max(first)..last];
    let target = tail.iter().map(mean_limit).sum::<f64>() / tail.len().max(1) as f64;
    let settled: Vec<bool> = windows[first..last]
        .iter()
        .map(|w| (mean_limit(w) - target).abs() <= 0.15 * target)
        .collect();
    let run_start = settled
        .windows(needed)
        .position(|run| run.iter().all(|&ok| ok))?;
    Some((((first + run_start) as u64 * window_nanos).saturating_sub(from)) as f64 / 1e9)
}

fn algorithms(
    scenario: &Scenario,
    vegas: &VegasSettings,
) -> Result<Vec<Box<dyn LimitAlgorithm>>, Box<dyn Error>> {
    let bounds = LimitBounds::new(1, 1000, 20)?;
    Ok(vec![
        Box::new(vegas.builder().bounds(bounds).build()?),
        Box::new(Aimd::builder().bounds(bounds).build()?),
        Box::new(Gradient::builder().bounds(bounds).build()?),
        // A static guess at twice the slots.
        Box::new(Fixed::new(2 * scenario.slots)?),
    ])
}

type Chart<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::backend::SVGBackend<'b>,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// One chart over `seconds` x `[0, 1.1 * top]`, with a mesh drawn.
fn panel<'a, 'b>(
    area: &'a plotters::drawing::DrawingArea<
        plotters::backend::SVGBackend<'b>,
        plotters::coord::Shift,
    >,
    title: &str,
    seconds: f64,
    top: f64,
) -> Result<Chart<'a, 'b>, Box<dyn Error>> {
    use plotters::prelude::*;

    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..seconds, 0.0..top * 1.1)?;
    chart.configure_mesh().x_desc("seconds").draw()?;
    Ok(chart)
}

fn plot(dir: &Path, scenario: &Scenario, reports: &[Report]) -> Result<PathBuf, Box<dyn Error>> {
    use plotters::prelude::*;

    std::fs::create_dir_all(dir)?;
    let path = dir.join("vegas_sim.svg");
    let root = SVGBackend::new(&path, (1400, 320 * reports.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((reports.len(), 2));
    let seconds = scenario.end.as_secs_f64();
    let window_s = WINDOW.as_secs_f64();
    for (index, report) in reports.iter().enumerate() {
        let series = |f: &dyn Fn(&Window) -> Option<f64>| -> Vec<(f64, f64)> {
            report
                .windows
                .iter()
                .enumerate()
                .filter_map(|(i, w)| f(w).map(|v| (i as f64 * window_s, v)))
                .collect()
        };
        let limit = series(&|w| (w.observations > 0).then(|| w.limit_sum / w.observations as f64));
        let in_flight =
            series(&|w| (w.observations > 0).then(|| w.in_flight_sum / w.observations as f64));
        let top = limit
            .iter()
            .chain(&in_flight)
            .map(|p| p.1)
            .fold(1.0, f64::max);
        let title = format!("{}: limit and in-flight", report.name);
        let mut chart = panel(&panels[2 * index], &title, seconds, top)?;
        chart
            .draw_series(LineSeries::new(limit, &BLUE))?
            .label("limit")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 15, y)], BLUE));
        chart
            .draw_series(LineSeries::new(in_flight, &RED))?
            .label("in flight")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 15, y)], RED));
        chart.configure_series_labels().border_style(BLACK).draw()?;

        let latency = series(&|w| Window::p99(&mut w.latency_ms.clone()));
        let top = latency.iter().map(|p| p.1).fold(1.0, f64::max);
        let title = format!("{}: p99 latency per 250 ms (ms)", report.name);
        let mut chart = panel(&panels[2 * index + 1], &title, seconds, top)?;
        chart.draw_series(LineSeries::new(latency, &MAGENTA))?;
    }
    root.present()?;
    Ok(path.clone())
}

fn json(reports: &[Report]) -> String {
    let number = |value: f64| {
        if value.is_finite() {
            serde_json::json!((value * 1000.0).round() / 1000.0)
        } else {
            serde_json::Value::Null
        }
    };
    let algorithms: Vec<_> = reports
        .iter()
        .map(|r| {
            let seconds = |each: &[Option<f64>]| -> Vec<_> {
                each.iter()
                    .map(|s| s.map_or(serde_json::Value::Null, number))
                    .collect()
            };
            let worst = r
                .reconverge_each_s
                .iter()
                .try_fold(0.0_f64, |worst, s| s.map(|s| worst.max(s)));
            serde_json::json!({
                "name": r.name,
                "goodput_ratio": number(r.goodput_ratio),
                "p99_latency_ratio": number(r.p99_latency_ratio),
                "reconverge_s": worst.map_or(serde_json::Value::Null, number),
                "reconverge_each_s": seconds(&r.reconverge_each_s),
                "limit_settle_each_s": seconds(&r.limit_settle_each_s),
            })
        })
        .collect();
    serde_json::json!({ "algorithms": algorithms }).to_string()
}

/// Deterministic discrete-event simulation of flowguard's adaptive concurrency limiter.
///
/// A downstream with a fixed number of concurrent slots, a service time and a bounded queue behind
/// the slots is offered 3x its capacity (Poisson arrivals). Mid-run its service time triples; later
/// it recovers. Every arrival asks a real `Limiter` (on a `ManualClock` that the simulation
/// advances, so nothing sleeps) for a permit with `try_acquire`; rejected calls are shed at once.
/// Admitted calls take a slot, wait in the queue, or are rejected by the full queue (a fast
/// failure, reported as `dropped`). Completed calls report `success`.
///
/// For each algorithm (vegas, aimd, gradient, fixed) it prints:
/// - `goodput_ratio`: successful calls / what the downstream could have completed over the run;
/// - `p99_latency_ratio`: p99 over successful calls of `latency / own service time` (1.0 = no
///   queueing; the unloaded latency of a call is its service time);
/// - `reconverge_s`: seconds after each change (slowdown, recovery) until goodput >= 90 % and
///   p99 ratio <= 2 hold for one second of 250 ms windows (`null` if never within the phase);
///   the JSON field `reconverge_s` is the worse of the two, `reconverge_each_s` lists both;
/// - `limit_settle_each_s`: seconds after each change until the limit stays (for one second)
///   within 15 % of where it ends the phase, whether or not that level is healthy.
///
/// With `--step`, it runs the capacity-step scenarios instead (see `step.rs`): a backend of 4
/// workers at 10 ms whose service time steps to 25 ms, and one of 8 workers at 10 ms of which 4
/// go away, each behind an unbounded queue, offered 3x its capacity by clients that wait up to
/// 50 ms for a permit and give up after 1 s; for vegas, aimd, gradient and fixed limits of 4 and
/// 16 it prints goodput per second around the step, p50/p99 latency, the limit over time and how
/// long the limit spent below the worker count.
///
/// With `--fleet`, it runs the fleet scenario instead (see `fleet.rs`): N instances (default 4),
/// each with a limiter of its own, share one backend of 4 workers at 10 ms behind an unbounded
/// queue, offered 3x its capacity in total; they start 1 s apart, the last one joins at 10 s and
/// the first one leaves at 20 s. For vegas (`Vegas::new()`), aimd, gradient and fixed limits of
/// 1 and 4 per instance it prints goodput, Jain's index over the instances' goodput while all
/// are up, the worst p99, timeouts, the sum of the limits, the time the late joiner took to hold
/// 80 % of its fair share, and per-instance figures. With `--vegas-instances LIST` only the
/// listed instances run the `--vegas-*` settings, and with `--reported-instances LIST` only they
/// read the backend's reports: a fleet in the middle of a rollout.
///
/// With `--host-noise-ms MS` (fleet and step scenarios), the host is noisy: every call whose
/// service starts in the same 20 ms takes the same extra delay, drawn from an exponential
/// distribution with mean MS (see `host_noise.rs`).
///
/// With `--service-jitter F` (every scenario; default 0.1), each call's service time is drawn
/// uniformly from (1 - F) to (1 + F) times the mean; with `--service-shape lognormal`, from a
/// lognormal distribution whose standard deviation is about F times the mean. Vegas reads its
/// queue from the low end of the RTTs, so a wider spread is a harder dependency for it (see
/// docs/PERFORMANCE.md).
///
/// The `--vegas-*` flags set flowguard's Vegas (the `vegas` arm of every scenario) other than
/// its defaults, e.g. `--vegas-window-rounds 3`.
#[derive(Parser)]
#[command(verbatim_doc_comment, args_override_self = true)]
#[command(group(clap::ArgGroup::new("scenario").args(["step", "fleet"])))]
struct Args {
    /// Print the figures as one JSON object on the last stdout line: `{"algorithms":[..]}`, or
    /// with --step `{"step_scenarios":[..]}`.
    #[arg(long)]
    json: bool,
    /// Write `vegas_sim.svg` into DIR: limit, in-flight calls and p99 latency over time, per
    /// algorithm (not with --step).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Seed of the arrivals and service times.
    #[arg(long, default_value_t = 7, value_name = "N")]
    seed: u64,
    /// Concurrent slots of the downstream; its queue holds twice as many (not with --step).
    #[arg(long, default_value_t = 50, value_name = "N", value_parser = positive::<usize>)]
    slots: usize,
    /// Run the capacity-step scenarios instead.
    #[arg(long, conflicts_with = "fleet")]
    step: bool,
    /// Run the fleet scenario instead.
    #[arg(long)]
    fleet: bool,
    /// Instances in the fleet scenario, 2 to 8.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u8).range(2..=8))]
    instances: u8,
    /// Workers of the fleet scenario's backend (at 10 ms each; the offered load scales with
    /// them, 3x their capacity).
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Service time of the fleet scenario's workers, in milliseconds (default 10). The wait for
    /// a permit (50 ms) and the deadline (1 s) stay as they are, so a longer service time means
    /// fewer rounds of calls in each second: `--workers 64 --service-ms 40` is the shape of the
    /// real-socket run `overload --fleet 2 --workers 64 --service-ms 40`.
    #[arg(long, value_name = "MS", value_parser = above_zero, requires = "fleet")]
    service_ms: Option<f64>,
    /// Fleet and step scenarios: the backend reports how long each call waited in its queue,
    /// and the instances finish their permits with `Permit::success_queued`.
    #[arg(long)]
    reported_queue: bool,
    /// Fleet and step scenarios: the host delays every call of each 20 ms by the same amount,
    /// drawn from an exponential distribution with this mean, in milliseconds (a busy or shared
    /// host).
    #[arg(long, value_name = "MS", value_parser = above_zero, requires = "scenario")]
    host_noise_ms: Option<f64>,
    /// How far each call's service time strays from the mean, either way, as a fraction in
    /// `[0, 1)`, drawn uniformly (every scenario; default 0.1: 90 % to 110 % of the mean).
    #[arg(long, default_value_t = 0.1, value_name = "FRACTION", value_parser = spread)]
    service_jitter: f64,
    /// The shape of that spread: uniform, or lognormal (each call's service time is the mean
    /// times `exp(F * z - F^2 / 2)`, `z` standard normal: a standard deviation of about F times
    /// the mean, a long tail to the right).
    #[arg(long, value_enum, default_value_t = SpreadShape::Uniform)]
    service_shape: SpreadShape,
    /// Fleet scenario: only these instances take the `--vegas-*` settings, the others keep
    /// Vegas's defaults, as in a fleet in the middle of a rollout (comma-separated indices in
    /// start order: 0 starts first and leaves, the last one joins late).
    #[arg(long, value_name = "LIST", value_delimiter = ',', requires = "fleet")]
    vegas_instances: Option<Vec<usize>>,
    /// Fleet scenario with --reported-queue: only these instances read the backend's reports
    /// (comma-separated indices in start order); the others finish their permits with
    /// `Permit::success`, as clients that do not read them.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        requires = "fleet",
        requires = "reported_queue"
    )]
    reported_instances: Option<Vec<usize>>,
    #[command(flatten)]
    vegas: VegasSettings,
}

impl Args {
    /// The instances of the fleet that run the `--vegas-*` settings and read the reports.
    fn rollout(&self) -> Rollout {
        Rollout {
            vegas_on: self.vegas_instances.clone(),
            reports_read_by: self.reported_instances.clone(),
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    // A setting Vegas refuses stops the run before it starts, as a usage error with the
    // builder's message.
    if let Err(refused) = args.vegas.build() {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                format!("flowguard's Vegas: {refused}"),
            )
            .exit();
    }
    let rollout = args.rollout();
    if let Err(refused) = rollout.check(usize::from(args.instances), &args.vegas) {
        Args::command()
            .error(clap::error::ErrorKind::ValueValidation, refused)
            .exit();
    }
    if args.vegas != VegasSettings::default() {
        println!("vegas: {}", rollout.describe_vegas(&args.vegas));
    }
    let host_noise = Duration::from_secs_f64(args.host_noise_ms.unwrap_or(0.0) / 1e3);
    if args.step {
        return run_steps(
            args.seed,
            args.reported_queue,
            host_noise,
            args.service_jitter,
            args.service_shape,
            &args.vegas,
            args.json,
        );
    }
    if args.fleet {
        let scenario = fleet::FleetScenario {
            workers: usize::from(args.workers),
            service: args.service_ms.map_or(Duration::from_millis(10), |ms| {
                Duration::from_secs_f64(ms / 1e3)
            }),
            reported_queue: args.reported_queue,
            host_noise,
            jitter: args.service_jitter,
            shape: args.service_shape,
            rollout,
            ..fleet::FleetScenario::standard(usize::from(args.instances), args.seed)
        };
        let reports = run_fleet(&scenario, &args.vegas)?;
        fleet::print(&scenario, &reports);
        if let Some(vegas) = reports.iter().find(|r| r.name == "vegas") {
            fleet::print_instance_limits(vegas);
        }
        if args.json {
            println!("{}", fleet::json(&scenario, &reports));
        }
        return Ok(());
    }
    let scenario = Scenario {
        jitter: args.service_jitter,
        shape: args.service_shape,
        ..Scenario::standard(args.seed, args.slots)
    };
    println!(
        "downstream: {} slots, {:?} service ({}), queue {}; offered {}x capacity; {}x slowdown at {:?}, recovery at {:?}, end {:?}; seed {}",
        scenario.slots,
        scenario.service,
        scenario.shape.describe(scenario.jitter),
        scenario.queue_capacity,
        scenario.offered_load,
        scenario.slowdown,
        scenario.slowdown_at,
        scenario.recovery_at,
        scenario.end,
        scenario.seed
    );
    let mut reports = Vec::new();
    for algorithm in algorithms(&scenario, &args.vegas)? {
        reports.push(simulate(&scenario, algorithm)?);
    }
    println!(
        "{:<9} {:>8} {:>9} {:>24} {:>24} {:>9} {:>9}",
        "algorithm",
        "goodput",
        "p99 ratio",
        "reconverge s (slow/rec)",
        "limit settle s (slow/rec)",
        "shed",
        "dropped"
    );
    let seconds = |each: &[Option<f64>]| -> String {
        each.iter()
            .map(|s| s.map_or("never".to_owned(), |s| format!("{s:.2}")))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    for r in &reports {
        println!(
            "{:<9} {:>8.3} {:>9.2} {:>24} {:>24} {:>9} {:>9}",
            r.name,
            r.goodput_ratio,
            r.p99_latency_ratio,
            seconds(&r.reconverge_each_s),
            seconds(&r.limit_settle_each_s),
            r.shed,
            r.dropped
        );
    }
    if let Some(dir) = args.plot {
        let path = plot(&dir, &scenario, &reports)?;
        println!("plot: {}", path.display());
    }
    if args.json {
        println!("{}", json(&reports));
    }
    Ok(())
}

/// A limit algorithm and the name its report goes by.
type NamedAlgorithm = (String, Box<dyn LimitAlgorithm>);

/// The limiters compared in the step scenarios: every algorithm with its defaults (Vegas with
/// `vegas`), and fixed limits of 4 and 16.
fn step_limiters(vegas: &VegasSettings) -> Result<Vec<NamedAlgorithm>, Box<dyn Error>> {
    Ok(vec![
        ("vegas".into(), Box::new(vegas.build()?)),
        ("aimd".into(), Box::new(Aimd::new())),
        ("gradient".into(), Box::new(Gradient::new())),
        ("fixed 4".into(), Box::new(Fixed::new(4)?)),
        ("fixed 16".into(), Box::new(Fixed::new(16)?)),
    ])
}

fn run_step(
    scenario: &step::StepScenario,
    vegas: &VegasSettings,
) -> Result<Vec<step::StepReport>, Box<dyn Error>> {
    step_limiters(vegas)?
        .into_iter()
        .map(|(name, algorithm)| step::simulate_step(scenario, algorithm, name))
        .collect()
}

/// Builds the algorithm of each fleet instance, given its index in start order.
type Factory = Box<dyn Fn(usize) -> Result<Box<dyn LimitAlgorithm>, Box<dyn Error>>>;

/// The limiters compared in the fleet scenario: every algorithm with its defaults (Vegas with
/// `vegas` on the instances the `rollout` gives them to, the defaults on the others), and fixed
/// limits of 1 (the limits add up to the worker count) and 4 per instance.
fn fleet_limiters(vegas: &VegasSettings, rollout: &Rollout) -> Vec<(String, Factory)> {
    let (vegas, rollout) = (vegas.clone(), rollout.clone());
    vec![
        (
            "vegas".into(),
            Box::new(move |index| Ok(Box::new(rollout.vegas_of(index, &vegas).build()?) as _)),
        ),
        ("aimd".into(), Box::new(|_| Ok(Box::new(Aimd::new()) as _))),
        (
            "gradient".into(),
            Box::new(|_| Ok(Box::new(Gradient::new()) as _)),
        ),
        (
            "fixed 1".into(),
            Box::new(|_| Ok(Box::new(Fixed::new(1)?) as _)),
        ),
        (
            "fixed 4".into(),
            Box::new(|_| Ok(Box::new(Fixed::new(4)?) as _)),
        ),
    ]
}

fn run_fleet(
    scenario: &fleet::FleetScenario,
    vegas: &VegasSettings,
) -> Result<Vec<fleet::FleetReport>, Box<dyn Error>> {
    fleet_limiters(vegas, &scenario.rollout)
        .into_iter()
        .map(|(name, factory)| fleet::simulate_fleet(scenario, name, &*factory))
        .collect()
}

fn run_steps(
    seed: u64,
    reported_queue: bool,
    host_noise: Duration,
    jitter: f64,
    shape: SpreadShape,
    vegas: &VegasSettings,
    as_json: bool,
) -> Result<(), Box<dyn Error>> {
    let mut all = Vec::new();
    for scenario in [
        step::StepScenario::slower_service(seed),
        step::StepScenario::fewer_workers(seed),
    ] {
        let scenario = step::StepScenario {
            reported_queue,
            host_noise,
            jitter,
            shape,
            ..scenario
        };
        let reports = run_step(&scenario, vegas)?;
        step::print(&scenario, &reports);
        all.push(step::json(&scenario, &reports));
    }
    if as_json {
        println!("{}", serde_json::json!({ "step_scenarios": all }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowguard::vegas::Vegas;

    /// The issue's targets, on a shortened run (`cargo test -p flowguard-harness --bin vegas_sim`).
    #[test]
    fn vegas_meets_its_targets_and_keeps_latency_below_aimd_and_gradient() {
        let scenario = Scenario {
            slowdown_at: Duration::from_secs(8),
            recovery_at: Duration::from_secs(16),
            end: Duration::from_secs(24),
            ..Scenario::standard(11, 50)
        };
        let reports: Vec<Report> = algorithms(&scenario, &VegasSettings::default())
            .unwrap()
            .into_iter()
            .map(|algorithm| simulate(&scenario, algorithm).unwrap())
            .collect();
        let by_name = |name: &str| reports.iter().find(|r| r.name == name).unwrap();
        let vegas = by_name("vegas");
        assert!(
            vegas.goodput_ratio >= 0.95,
            "goodput {}",
            vegas.goodput_ratio
        );
        assert!(
            vegas.p99_latency_ratio <= 2.0,
            "p99 {}",
            vegas.p99_latency_ratio
        );
        assert!(
            vegas
                .reconverge_each_s
                .iter()
                .all(|s| s.is_some_and(|s| s <= 2.0)),
            "{:?}",
            vegas.reconverge_each_s
        );
        for other in ["aimd", "gradient"] {
            assert!(vegas.p99_latency_ratio < by_name(other).p99_latency_ratio);
        }
    }

    /// Runs the fleet scenario of `instances` for `seed` and asserts what every fleet test
    /// wants of Vegas: Jain's index at least `min_jain`, limits adding up to at most
    /// `max_limit_sum`, a worst p99 at most 1.5x fixed 1's, no timeout, and once the first
    /// instance left, the others using at least 95 % of the capacity with Jain's index at least
    /// `min_jain`. Answers the reports for further checks.
    fn assert_vegas_fleet(
        instances: usize,
        seed: u64,
        min_jain: f64,
        max_limit_sum: f64,
    ) -> Vec<fleet::FleetReport> {
        assert_vegas_fleet_in(
            fleet::FleetScenario::standard(instances, seed),
            min_jain,
            max_limit_sum,
        )
    }

    /// [`assert_vegas_fleet`] for any fleet `scenario`.
    fn assert_vegas_fleet_in(
        scenario: fleet::FleetScenario,
        min_jain: f64,
        max_limit_sum: f64,
    ) -> Vec<fleet::FleetReport> {
        let (instances, seed) = (scenario.instances, scenario.seed);
        let reports = run_fleet(&scenario, &VegasSettings::default()).unwrap();
        let by_name = |name: &str| reports.iter().find(|r| r.name == name).unwrap();
        let vegas = by_name("vegas");
        let context = format!("{instances} instances, seed {seed}");
        assert!(
            vegas.jain.is_some_and(|j| j >= min_jain),
            "{context}: Jain {:?}",
            vegas.jain
        );
        assert!(
            vegas
                .limit_sum_all_up
                .is_some_and(|sum| sum <= max_limit_sum),
            "{context}: the limits add up to {:?}",
            vegas.limit_sum_all_up
        );
        assert!(
            vegas.worst_p99_ms().unwrap() <= 1.5 * by_name("fixed 1").worst_p99_ms().unwrap(),
            "{context}: p99 {:?}",
            vegas.worst_p99_ms()
        );
        assert_eq!(vegas.timeouts(), 0, "{context}");
        // The instance that leaves frees its share: the others take it up, fairly. A noisy host
        // delays every call, which leaves the backend `service / (service + mean delay)` of its
        // capacity.
        let capacity =
            scenario.service.as_secs_f64() / (scenario.service + scenario.host_noise).as_secs_f64();
        assert!(
            vegas.after_leave_ratio >= 0.95 * capacity,
            "{context}: the instances left use {:.3} of the capacity",
            vegas.after_leave_ratio
        );
        assert!(
            vegas.after_leave_jain().is_some_and(|j| j >= min_jain),
            "{context}: Jain after the leave {:?}",
            vegas.after_leave_jain()
        );
        reports
    }

    /// The fleet targets, in simulation, for Vegas with its defaults: 4 instances at 3x
    /// overload, staggered, a late joiner and one leaving, over 16 seeds: Jain's index at least
    /// 0.95 for every seed (the issue's target; before a newcomer's first raise of its baseline
    /// waited a gap and a probe's raise was capped at the band, seeds 5 and 12 gave 0.938 and
    /// 0.934) and 0.98 for the median one.
    #[test]
    fn vegas_shares_fairly_in_a_fleet_with_a_short_queue() {
        let mut jains = Vec::new();
        for seed in 1..=16 {
            let reports = assert_vegas_fleet(4, seed, 0.95, 10.0);
            let by_name = |name: &str| reports.iter().find(|r| r.name == name).unwrap();
            let vegas = by_name("vegas");
            let best_fixed = by_name("fixed 1")
                .goodput_ratio
                .max(by_name("fixed 4").goodput_ratio);
            let context = format!("seed {seed}");
            assert!(vegas.goodput_ratio >= 0.97 * best_fixed, "{context}");
            assert!(
                vegas.late_joiner_80_s.is_some_and(|s| s <= 3.0),
                "{context}: {:?}",
                vegas.late_joiner_80_s
            );
            jains.extend(vegas.jain);
        }
        assert!(median(&mut jains) >= 0.98, "{jains:?}");
    }

    /// The fleet targets hold on a noisy host too (every call of the same 20 ms delayed alike,
    /// 0.4 ms on average): the noise that keeps a lone instance below the workers is the same
    /// for every instance in front of the dependency, so the fleet still cuts and grows
    /// together.
    #[test]
    fn vegas_shares_fairly_in_a_fleet_on_a_noisy_host() {
        for seed in 1..=8 {
            let scenario = fleet::FleetScenario {
                host_noise: Duration::from_micros(400),
                ..fleet::FleetScenario::standard(4, seed)
            };
            let reports = assert_vegas_fleet_in(scenario, 0.95, 10.0);
            let by_name = |name: &str| reports.iter().find(|r| r.name == name).unwrap();
            let vegas = by_name("vegas");
            let best_fixed = by_name("fixed 1")
                .goodput_ratio
                .max(by_name("fixed 4").goodput_ratio);
            assert!(vegas.goodput_ratio >= 0.97 * best_fixed, "seed {seed}");
            assert!(
                vegas.late_joiner_80_s.is_some_and(|s| s <= 3.0),
                "seed {seed}: {:?}",
                vegas.late_joiner_80_s
            );
        }
    }

    /// The median of `values` by nearest rank (the lower one of an even count), as the fleet
    /// reports take their percentiles.
    fn median(values: &mut [f64]) -> f64 {
        values.sort_by(f64::total_cmp);
        flowguard_harness::fleet_report::percentile(values, 0.5).expect("some seeds")
    }

    /// Eight instances in front of four workers: a fair share is half a call, below the one
    /// permit each instance keeps, so a queue of four calls always stands and no instance can
    /// see the unloaded RTT. The instances must not take that queue for their baselines in
    /// turn (each re-learn letting one grow and lengthen the queue the next one takes): the
    /// limits stay near one each. The shares are less even than with four instances (the
    /// limits are whole permits): over 16 seeds, Jain's index is at least 0.8 for every seed
    /// (0.767 for seed 1 before the newcomer's first raise waited a gap) and 0.9 for the median
    /// one.
    #[test]
    fn vegas_does_not_ratchet_its_baseline_up_when_instances_outnumber_workers() {
        let mut jains = Vec::new();
        for seed in 1..=16 {
            let reports = assert_vegas_fleet(8, seed, 0.8, 16.0);
            jains.extend(reports.iter().find(|r| r.name == "vegas").unwrap().jain);
        }
        assert!(median(&mut jains) >= 0.9, "{jains:?}");
    }

    /// A backend that reports how long each call waited in its queue gives every instance its
    /// unloaded RTT and its own queued calls, whatever queue the others keep
    /// (`Permit::success_queued`): 2, 4 and 8 instances in front of 4 workers share evenly
    /// (Jain's index at least 0.97, 0.98 and 0.98 for every one of 16 seeds, against 0.95 and
    /// 0.8 for 4 and 8 without the reports), and 8 instances hold little more than one permit
    /// each (their limits add up to at most 10, against 16). Each keeps half a call to one call of its own queued
    /// and moves toward the middle of that band, so two instances do not keep the split they
    /// reached when the second one joined.
    #[test]
    fn vegas_shares_evenly_when_the_dependency_reports_its_queue() {
        for seed in 1..=16 {
            for (instances, min_jain, max_limit_sum) in
                [(2, 0.97, 6.0), (4, 0.98, 8.0), (8, 0.98, 10.0)]
            {
                let scenario = fleet::FleetScenario {
                    reported_queue: true,
                    ..fleet::FleetScenario::standard(instances, seed)
                };
                assert_vegas_fleet_in(scenario, min_jain, max_limit_sum);
            }
        }
    }

    /// With reports, two instances share evenly in front of many workers too (64 and 128 at
    /// 10 ms, and 64 at 40 ms, the shape of the real-socket run, where a second holds 4 times
    /// fewer rounds), and the late joiner holds 80 % of its share within 2 s at 10 ms and 3 s at
    /// 40 ms, in every seed. There each instance holds tens of permits, and a band that is the
    /// same share of the RTT for every limit let any split stand: Jain's index was below 0.95
    /// for every seed of 2 instances in front of 128 workers (0.77-0.81), with the late joiner
    /// over 3 s; the band of the reports, narrower as a share for a larger limit, has the larger
    /// instance give way first, and the growth that no longer tapers toward `alpha` brings the
    /// late joiner in. At 40 ms, Jain's index was below 0.95 in 5 of these 8 seeds (0.88 at the
    /// least) before the reports were read as one's own queued calls with a move to the band's
    /// middle, and the late joiner took over 3 s in 6 of them before slow start went on below
    /// the middle of the share band, and in 2 (3.5 and 5.5 s) before a slow start ended by the
    /// newcomer's own passing queue resumed.
    #[test]
    fn vegas_shares_evenly_in_front_of_many_workers_when_the_dependency_reports_its_queue() {
        let cases = (1..=3)
            .flat_map(|seed| [(64, 10, seed, 2.0), (128, 10, seed, 2.0)])
            .chain((1..=8).map(|seed| (64, 40, seed, 3.0)));
        for (workers, service_ms, seed, max_late_s) in cases {
            let scenario = fleet::FleetScenario {
                reported_queue: true,
                workers,
                service: Duration::from_millis(service_ms),
                ..fleet::FleetScenario::standard(2, seed)
            };
            let vegas = simulate_vegas(&scenario, Vegas::new());
            let context = format!("2 instances, {workers} workers at {service_ms} ms, seed {seed}");
            assert_shares_evenly(&vegas, &context, 0.95, max_late_s);
        }
    }

    /// The fleet `scenario` with one `vegas` per instance.
    fn simulate_vegas(scenario: &fleet::FleetScenario, vegas: Vegas) -> fleet::FleetReport {
        fleet::simulate_fleet(scenario, "vegas".to_string(), &|_| {
            Ok(Box::new(vegas.clone()))
        })
        .unwrap()
    }

    /// Jain's index at least `min_jain`, the late joiner at 80 % of its share within
    /// `max_late_s`, and no timeouts.
    fn assert_shares_evenly(
        vegas: &fleet::FleetReport,
        context: &str,
        min_jain: f64,
        max_late_s: f64,
    ) {
        assert!(
            vegas.jain.is_some_and(|j| j >= min_jain),
            "{context}: Jain {:?}",
            vegas.jain
        );
        assert!(
            vegas.late_joiner_80_s.is_some_and(|s| s <= max_late_s),
            "{context}: late joiner {:?}",
            vegas.late_joiner_80_s
        );
        assert_eq!(vegas.timeouts(), 0, "{context}");
    }

    /// Without reports, two instances in front of 64 workers share evenly too, because the
    /// growth goes on inside the band (`VegasBuilder::band_growth`): both keep reaching `beta`
    /// and cutting together. Over these 8 seeds Jain's index is at least 0.98 (0.93 before the
    /// windows that read the queue held an eighth of the limit) and the late joiner gets 80 % of
    /// its share within 2.5 s, but for seed 6, 4.0 s (1.5 s before: below a limit of 16 its cuts
    /// need no margin over `beta`, the first instance's do, and it grows from its slow start's
    /// 11 permits through 3 s of even cuts). With a band that holds (`band_growth(0.0)`), seed 1
    /// keeps a split at Jain's index 0.85 (0.70 with the windows of half the limit, the joiner
    /// taking 10.5 s; and 30 seeds gave 12 below 0.95 before the growth went on inside the band,
    /// against 3).
    #[test]
    fn vegas_shares_evenly_in_front_of_many_workers_without_reports() {
        let run = |seed, vegas: Vegas| {
            let scenario = fleet::FleetScenario {
                workers: 64,
                ..fleet::FleetScenario::standard(2, seed)
            };
            simulate_vegas(&scenario, vegas)
        };
        for seed in 1..=8 {
            let vegas = run(seed, Vegas::new());
            let context = format!("2 instances, 64 workers, seed {seed}");
            assert_shares_evenly(&vegas, &context, 0.95, 4.0);
        }
        let holding = Vegas::builder().band_growth(0.0).build().unwrap();
        let held = run(1, holding);
        assert!(
            held.jain.is_some_and(|j| j < 0.9),
            "a band that holds kept the split of seed 1: Jain {:?}",
            held.jain
        );
    }

    /// In front of 64 workers at 40 ms a round of calls takes four times as long as at 10 ms, and
    /// a newcomer's share comes with the rounds: each cycle of growth and proportional cuts moves
    /// a few percent of the limits from the larger instance to the smaller, so over these 8 seeds
    /// the default's late joiner holds 80 % of its share after 1.5-5.0 s (32.5 s in all).
    /// `band_growth(1.0)`, the same growth all the way up to `beta` (twice the default's inside
    /// the band, and no taper below it), shortens the cycles: every Jain's index is at least 0.95
    /// (0.970 at the least, against 0.937) and the late joiner comes in sooner (27.0 s in all).
    /// It is an option for a few instances at tens of permits each, not the default, as it
    /// lengthens the queue of many instances at a few permits each (`VegasBuilder::band_growth`).
    #[test]
    fn full_growth_through_the_band_brings_a_late_joiner_in_sooner_in_front_of_slow_workers() {
        let run = |seed, vegas: Vegas| {
            let scenario = fleet::FleetScenario {
                workers: 64,
                service: Duration::from_millis(40),
                ..fleet::FleetScenario::standard(2, seed)
            };
            simulate_vegas(&scenario, vegas)
        };
        let late = |report: &fleet::FleetReport| report.late_joiner_80_s.unwrap_or(f64::INFINITY);
        let (mut default_late, mut full_late) = (0.0, 0.0);
        for seed in 1..=8 {
            let full = run(seed, Vegas::builder().band_growth(1.0).build().unwrap());
            assert_shares_evenly(&full, &format!("band_growth(1.0), seed {seed}"), 0.95, 6.0);
            full_late += late(&full);
            default_late += late(&run(seed, Vegas::new()));
        }
        assert!(
            full_late < default_late,
            "the late joiner took {full_late} s in all with band_growth(1.0), {default_late} s \
             with the default"
        );
    }

    /// On a noisy host (every call of the same 20 ms delayed alike, 0.4 ms on average), a lone
    /// Vegas whose dependency reports each call's queue wait keeps its limit at the workers:
    /// below them less than 1 % of the steady time in both capacity steps. Its own baseline
    /// cannot (the least window low is the host's quietest moment: in the 8 -> 4 workers step
    /// these seeds spend 5.9, 6.4 and 8.9 % below without the reports; see
    /// `docs/PERFORMANCE.md`, "A lone instance on a noisy host").
    #[test]
    fn queue_reports_keep_a_lone_vegas_at_the_workers_on_a_noisy_host() {
        for seed in [7, 11, 13] {
            for scenario in [
                step::StepScenario::slower_service(seed),
                step::StepScenario::fewer_workers(seed),
            ] {
                let scenario = step::StepScenario {
                    reported_queue: true,
                    host_noise: Duration::from_micros(400),
                    ..scenario
                };
                let vegas =
                    step::simulate_step(&scenario, Vegas::new(), "vegas".to_string()).unwrap();
                let context = format!("{} seed {seed}", scenario.name);
                assert!(
                    vegas.below_workers_steady < 0.01,
                    "{context}: {}",
                    vegas.below_workers_steady
                );
                assert_eq!(vegas.timeouts, 0, "{context}");
            }
        }
    }

    /// The capacity-step targets, in simulation: after the service time steps from 10 to 25 ms
    /// at 4 workers, Vegas keeps at least 90 % of the best fixed limit's goodput in the first
    /// second, and its limit stays below the worker count less than 1 % of the steady time;
    /// the same whether or not the backend reports each call's queueing (a baseline from the
    /// reports must follow the slower service as fast as its own does).
    #[test]
    fn vegas_follows_a_slower_service_time_without_starving_the_workers() {
        for (seed, reported_queue) in [(7, false), (11, false), (7, true), (23, true)] {
            for scenario in [
                step::StepScenario::slower_service(seed),
                step::StepScenario::fewer_workers(seed),
            ] {
                let scenario = step::StepScenario {
                    step_at: Duration::from_secs(4),
                    end: Duration::from_secs(8),
                    reported_queue,
                    ..scenario
                };
                let reports = run_step(&scenario, &VegasSettings::default()).unwrap();
                let by_name = |name: &str| reports.iter().find(|r| r.name == name).unwrap();
                let vegas = by_name("vegas");
                let fixed = [by_name("fixed 4"), by_name("fixed 16")];
                let best_first = fixed.iter().map(|r| r.first_second_after_step()).max();
                let best_total = fixed.iter().map(|r| r.total()).max().unwrap();
                let context = format!("{} seed {seed}, reports {reported_queue}", scenario.name);
                assert!(
                    vegas.first_second_after_step() as f64 >= 0.9 * best_first.unwrap() as f64,
                    "{context}: {} vs {best_first:?}",
                    vegas.first_second_after_step()
                );
                assert!(
                    vegas.total() as f64 >= 0.97 * best_total as f64,
                    "{context}: {} vs {best_total}",
                    vegas.total()
                );
                assert!(
                    vegas.below_workers_steady < 0.01,
                    "{context}: {}",
                    vegas.below_workers_steady
                );
                assert!(vegas.min_limit_after_step >= 2, "{context}");
                assert!(vegas.p99_ms <= by_name("fixed 16").p99_ms, "{context}");
                assert_eq!(vegas.timeouts, 0, "{context}");
            }
        }
    }
    /// The first instance's goodput while all were up, over its fair share.
    fn first_share(report: &fleet::FleetReport) -> f64 {
        let goodputs: Vec<f64> = report.instances.iter().map(|i| i.goodput_all_up).collect();
        goodputs[0] / goodputs.iter().sum::<f64>() * goodputs.len() as f64
    }

    /// The `vegas` report of the fleet `scenario`, with `vegas` where its rollout says.
    fn mixed_vegas(scenario: &fleet::FleetScenario, vegas: &VegasSettings) -> fleet::FleetReport {
        let (name, factory) = fleet_limiters(vegas, &scenario.rollout).remove(0);
        assert_eq!(name, "vegas");
        fleet::simulate_fleet(scenario, name, &*factory).unwrap()
    }

    /// In the middle of a rollout the instances of a fleet run different settings. The band is a
    /// share of the RTT that every instance reads alike, so the instance with the wider band
    /// holds its permits while the others cut: in front of 32 workers, the first instance at
    /// `max_queue_share(0.2)` beside one at the default 0.1 takes 1.57-1.67 times its fair share
    /// over these seeds (1.02-1.24 when both run the defaults; 1.36-1.79 over 100 seeds).
    #[test]
    fn the_instance_with_the_wider_band_takes_the_larger_share_of_a_mixed_fleet() {
        let wider = VegasSettings {
            max_queue_share: Some(0.2),
            ..VegasSettings::default()
        };
        for seed in 1..=3 {
            let scenario = |vegas_on| fleet::FleetScenario {
                workers: 32,
                rollout: Rollout {
                    vegas_on,
                    ..Rollout::default()
                },
                ..fleet::FleetScenario::standard(2, seed)
            };
            let alike = first_share(&mixed_vegas(&scenario(None), &VegasSettings::default()));
            let mixed = first_share(&mixed_vegas(&scenario(Some(vec![0])), &wider));
            assert!(
                alike <= 1.3,
                "seed {seed}, the defaults on both: {alike:.2}"
            );
            assert!(
                mixed >= 1.4,
                "seed {seed}, the wider band on the first: {mixed:.2}"
            );
        }
    }

    /// An instance that reads the dependency's reports of its queue keeps a band that narrows as
    /// a share of the RTT as its limit grows; beside one that does not read them, it is the one
    /// that gives way: in front of 64 workers the first instance, the only one reading them,
    /// holds 0.43-0.46 of its fair share over these seeds (0.98-1.03 when both read them;
    /// 0.41-0.48 over 100 seeds).
    #[test]
    fn an_instance_that_reads_the_reports_gives_way_to_one_that_does_not() {
        for seed in 1..=3 {
            let scenario = |reports_read_by| fleet::FleetScenario {
                workers: 64,
                reported_queue: true,
                rollout: Rollout {
                    reports_read_by,
                    ..Rollout::default()
                },
                ..fleet::FleetScenario::standard(2, seed)
            };
            let defaults = VegasSettings::default();
            let both = first_share(&mixed_vegas(&scenario(None), &defaults));
            let first = first_share(&mixed_vegas(&scenario(Some(vec![0])), &defaults));
            assert!(
                (0.9..=1.1).contains(&both),
                "seed {seed}, both read: {both:.2}"
            );
            assert!(
                first <= 0.6,
                "seed {seed}, the first alone reads: {first:.2}"
            );
        }
    }

    #[test]
    fn the_instance_lists_name_instances_of_the_fleet_and_a_setting_to_apply() {
        let check = |argv: &[&str]| {
            let args = Args::try_parse_from([&["vegas_sim", "--fleet"], argv].concat()).unwrap();
            args.rollout()
                .check(usize::from(args.instances), &args.vegas)
        };
        assert_eq!(
            check(&["--vegas-instances", "0,3", "--vegas-alpha", "2"]),
            Ok(())
        );
        assert_eq!(
            check(&["--vegas-instances", "0,4", "--vegas-alpha", "2"]),
            Err("--vegas-instances: no instance 4 in a fleet of 4 (indices 0 to 3)".into())
        );
        assert_eq!(
            check(&[
                "--instances",
                "2",
                "--reported-queue",
                "--reported-instances",
                "2"
            ]),
            Err("--reported-instances: no instance 2 in a fleet of 2 (indices 0 to 1)".into())
        );
        assert_eq!(
            check(&["--vegas-instances", "1"]),
            Err("--vegas-instances: no --vegas-* setting to apply to those instances".into())
        );
        let without_reports = ["vegas_sim", "--fleet", "--reported-instances", "0"];
        assert!(Args::try_parse_from(without_reports).is_err());
    }
}
