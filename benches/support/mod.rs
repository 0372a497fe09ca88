//! Shared by the benches: running criterion, and its results of this run, to print peer ratios.

use std::time::SystemTime;

use criterion::Criterion;

/// Runs the criterion `benches` and prints criterion's summary; answers when the run started, to
/// read this run's estimates with, or `None` when criterion only listed or smoke-tested them
/// (`--list`, `--test`: no estimates to report).
pub fn run(benches: fn()) -> Option<SystemTime> {
    let started = SystemTime::now();
    benches();
    Criterion::default().configure_from_args().final_summary();
    let measured = !std::env::args().any(|a| a == "--list" || a == "--test");
    measured.then_some(started)
}

/// Criterion's point estimate of `statistic` (`"mean"` or `"median"`, ns) for `group/function`,
/// if it was measured by this process.
///
/// Criterion keeps `new/estimates.json` from earlier runs; a file older than this process belongs
/// to a bench that was filtered out now, so it is not reported as if it were current.
fn estimate_ns(started: SystemTime, group: &str, function: &str, statistic: &str) -> Option<f64> {
    // Criterion writes under the workspace's target directory, while a bench runs from its
    // package's directory (harness/): find the target directory from the workspace root.
    let dir = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target").to_string());
    let path = format!("{dir}/criterion/{group}/{function}/new/estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < started {
        return None;
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json[statistic]["point_estimate"].as_f64()
}

/// Criterion's mean (ns) for `group/function`, if measured by this process.
pub fn mean_ns(started: SystemTime, group: &str, function: &str) -> Option<f64> {
    estimate_ns(started, group, function, "mean")
}

/// Criterion's median (ns) for `group/function`, if measured by this process. Less moved than
/// the mean by the bursts of interference a shared machine adds to some samples.
#[allow(dead_code)] // used by some benches only
pub fn median_ns(started: SystemTime, group: &str, function: &str) -> Option<f64> {
    estimate_ns(started, group, function, "median")
}

/// Paired rounds of three sides: each round times every side back to back (rotating which goes
/// first), so machine noise hits all three alike. `time(side)` returns ns per operation for side
/// 0, 1 or 2. Returns the medians over `rounds` of `[ns0, ns1, ns2, ns0/ns1, ns0/ns2]`.
#[allow(dead_code)] // not every bench that includes this module runs paired rounds
pub fn paired_medians(rounds: usize, mut time: impl FnMut(usize) -> f64) -> [f64; 5] {
    let mut columns: [Vec<f64>; 5] = Default::default();
    for round in 0..rounds {
        let mut ns = [0.0; 3];
        for step in 0..3 {
            let side = (round + step) % 3;
            ns[side] = time(side);
        }
        let row = [ns[0], ns[1], ns[2], ns[0] / ns[1], ns[0] / ns[2]];
        for (column, value) in columns.iter_mut().zip(row) {
            column.push(value);
        }
    }
    columns.map(|mut column| {
        column.sort_by(f64::total_cmp);
        column[column.len() / 2]
    })
}

#[allow(dead_code)] // used by the benches that filter their own paired rounds
/// The benchmark filter given on the command line (criterion's positional argument), skipping
/// the values of criterion's options that take one (`--output-format bencher` is no filter).
pub fn filter() -> Option<String> {
    const TAKES_VALUE: [&str; 12] = [
        "--output-format",
        "--warm-up-time",
        "--measurement-time",
        "--sample-size",
        "--save-baseline",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--color",
        "--noise-threshold",
        "--significance-level",
        "--confidence-level",
    ];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if TAKES_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return Some(arg);
        }
    }
    None
}
