//! backoff_sim: how backoff strategies share one contended resource, on virtual time (the model
//! is described on [`Args`], which `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin backoff_sim -- [--clients 100] [--runs 20] [--seed 1]
//!     [--base-ms 10] [--cap-ms 100] [--json] [--plot DIR]
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::error::Error;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use flowguard::backoff::{Backoff, BackoffBounds, BackoffStrategy};
use flowguard_harness::cli::positive;
use plotters::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Length of one commit slot of the resource, in microseconds.
const SLOT_US: u64 = 1_000;
/// One-way network latency range, in microseconds.
const LATENCY_US: (u64, u64) = (1_000, 3_000);
/// Safety horizon of virtual time (never reached with the parameters above).
const HORIZON_US: u64 = 3_600_000_000;

#[derive(Clone, Copy)]
enum Strategy {
    None,
    Library(fn(BackoffBounds) -> BackoffStrategy, &'static str),
}

impl Strategy {
    fn all() -> [Strategy; 5] {
        [
            Strategy::None,
            Strategy::Library(BackoffStrategy::Exponential, "exponential"),
            Strategy::Library(BackoffStrategy::FullJitter, "full_jitter"),
            Strategy::Library(BackoffStrategy::Decorrelated, "decorrelated_jitter"),
            Strategy::Library(BackoffStrategy::CapAware, "cap_aware_jitter"),
        ]
    }

    fn name(&self) -> &'static str {
        match self {
            Strategy::None => "no_backoff",
            Strategy::Library(_, name) => name,
        }
    }

    fn sequence(&self, bounds: BackoffBounds, seed: u64) -> Option<Backoff> {
        match self {
            Strategy::None => None,
            Strategy::Library(make, _) => Some(make(bounds).sequence(seed)),
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Outcome {
    calls: u64,
    completion_us: u64,
}

/// One run: `clients` contend until every one has committed its write.
fn simulate(strategy: Strategy, clients: usize, seed: u64, bounds: BackoffBounds) -> Outcome {
    let mut net = SmallRng::seed_from_u64(seed);
    let mut latency = move || net.random_range(LATENCY_US.0..=LATENCY_US.1);
    let mut backoffs: Vec<Option<Backoff>> = (0..clients as u64)
        .map(|c| strategy.sequence(bounds, seed.wrapping_mul(1_000_003).wrapping_add(c)))
        .collect();
    // (landing time, client), earliest first.
    let mut landing: BinaryHeap<Reverse<(u64, usize)>> =
        (0..clients).map(|c| Reverse((latency(), c))).collect();
    let mut committed_slot = None;
    let mut out = Outcome::default();
    while let Some(Reverse((t, client))) = landing.pop() {
        out.calls += 1;
        let slot = t / SLOT_US;
        let back = latency();
        if committed_slot != Some(slot) {
            committed_slot = Some(slot);
            out.completion_us = out.completion_us.max(t + back);
            continue;
        }
        let wait = backoffs[client]
            .as_mut()
            .and_then(Iterator::next)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let next = t + back + wait + latency();
        if next > HORIZON_US {
            out.completion_us = HORIZON_US;
            break;
        }
        landing.push(Reverse((next, client)));
    }
    out
}

#[derive(Debug, Clone)]
struct Row {
    name: &'static str,
    calls: f64,
    completion_ms: f64,
}

fn compare(clients: usize, runs: u64, seed: u64, bounds: BackoffBounds) -> Vec<Row> {
    Strategy::all()
        .iter()
        .map(|s| {
            let (mut calls, mut completion) = (0.0, 0.0);
            for run in 0..runs {
                let o = simulate(*s, clients, seed.wrapping_add(run), bounds);
                calls += o.calls as f64;
                completion += o.completion_us as f64 / 1000.0;
            }
            // One decimal, the same in the table and the JSON.
            let round1 = |x: f64| (x / runs as f64 * 10.0).round() / 10.0;
            Row {
                name: s.name(),
                calls: round1(calls),
                completion_ms: round1(completion),
            }
        })
        .collect()
}

/// N clients contending for one resource, in the manner of the AWS Architecture Blog's
/// "Exponential Backoff And Jitter" simulation, on virtual time.
///
/// Model (optimistic concurrency): every client wants one successful write and all start at
/// t = 0. A call travels to the resource (one-way latency uniform in 1..3 ms), and the write
/// lands there. The resource commits at most one write per 1 ms slot: the first write to land
/// in a slot commits, every other write landing in the same slot conflicts (it read the
/// version the winner just replaced). The client learns the outcome one latency later; on a
/// conflict it waits its backoff delay and tries again. Backoff strategies use flowguard's
/// iterators with base 10 ms and cap 100 ms (`--base-ms`, `--cap-ms`); "none" retries at once.
///
/// Reported per strategy (mean over `--runs` seeded runs): total calls (work done by the
/// resource) and completion time (when the last client succeeded).
#[derive(Parser)]
#[command(verbatim_doc_comment, args_override_self = true)]
struct Args {
    /// Clients contending for the resource, each wanting one successful write.
    #[arg(long, default_value_t = 100, value_name = "N", value_parser = positive::<usize>)]
    clients: usize,
    /// Seeded runs per strategy; the figures are their mean.
    #[arg(long, default_value_t = 20, value_name = "N", value_parser = positive::<u64>)]
    runs: u64,
    /// Seed of the first run (the others follow it: seed + 1, seed + 2, ...).
    #[arg(long, default_value_t = 1, value_name = "N")]
    seed: u64,
    /// Base delay of the backoff strategies, in milliseconds.
    #[arg(long, default_value_t = 10, value_name = "MS")]
    base_ms: u64,
    /// Cap of the backoff delays, in milliseconds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    cap_ms: u64,
    /// Print `{"strategies":[{"name":..,"calls":..,"completion_ms":..}]}` as the last stdout line.
    #[arg(long)]
    json: bool,
    /// Write `calls.svg` and `completion.svg` into DIR (a sweep over 5 to 200 clients).
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

/// Which number of a [`Row`] a chart shows.
type Metric = fn(&Row) -> f64;

fn plot(dir: &PathBuf, sweep: &[(usize, Vec<Row>)]) -> Result<(), Box<dyn Error>> {
    std::fs::create_dir_all(dir)?;
    let charts: [(&str, &str, Metric); 2] = [
        ("calls.svg", "total calls (mean)", |r| r.calls),
        ("completion.svg", "completion time, ms (mean)", |r| {
            r.completion_ms
        }),
    ];
    let max_clients = sweep.iter().map(|(n, _)| *n).max().unwrap_or(1) as f64;
    for (file, label, metric) in charts {
        let path = dir.join(file);
        let root = SVGBackend::new(&path, (800, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let y_max = sweep
            .iter()
            .flat_map(|(_, rows)| rows.iter().map(metric))
            .fold(1.0, f64::max);
        let mut chart = ChartBuilder::on(&root)
            .caption(format!("backoff_sim: {label}"), ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..max_clients, (1.0..y_max * 1.5).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("clients")
            .y_desc(label)
            .draw()?;
        for (i, name) in Strategy::all().iter().map(Strategy::name).enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let points = sweep.iter().filter_map(|(n, rows)| {
                rows.iter()
                    .find(|r| r.name == name)
                    .map(|r| (*n as f64, metric(r).max(1.0)))
            });
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        root.present()?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let bounds = BackoffBounds::new(
        Duration::from_millis(args.base_ms),
        Duration::from_millis(args.cap_ms),
    )?;
    let rows = compare(args.clients, args.runs, args.seed, bounds);
    println!(
        "{} clients, {} runs from seed {}, slot {} ms, latency {}-{} ms, base {:?}, cap {:?}",
        args.clients,
        args.runs,
        args.seed,
        SLOT_US / 1000,
        LATENCY_US.0 / 1000,
        LATENCY_US.1 / 1000,
        bounds.base(),
        bounds.cap()
    );
    println!("{:<22} {:>12} {:>16}", "strategy", "calls", "completion_ms");
    for r in &rows {
        println!("{:<22} {:>12.1} {:>16.1}", r.name, r.calls, r.completion_ms);
    }
    if let Some(dir) = &args.plot {
        let sweep: Vec<(usize, Vec<Row>)> = [5, 10, 25, 50, 75, 100, 150, 200]
            .into_iter()
            .map(|n| (n, compare(n, args.runs, args.seed, bounds)))
            .collect();
        plot(dir, &sweep)?;
    }
    if args.json {
        // Fields in the documented order (serde_json's map would sort them).
        let strategies: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    r#"{{"name":{},"calls":{},"completion_ms":{}}}"#,
                    serde_json::Value::from(r.name),
                    serde_json::Value::from(r.calls),
                    serde_json::Value::from(r.completion_ms)
                )
            })
            .collect();
        let line = format!(r#"{{"strategies":[{}]}}"#, strategies.join(","));
        // Valid JSON by construction; checked so a formatting slip cannot go unnoticed.
        serde_json::from_str::<serde_json::Value>(&line)?;
        println!("{line}");
    }
    Ok(())
}
