//! What a fleet run measured, and how it is printed: N instances, each with a concurrency limiter
//! of its own, share one backend. The fleet scenario of `vegas_sim` (on a virtual clock) and the
//! fleet run of `overload` (on real sockets) both fill a [`FleetReport`] per limiter and print
//! them with [`print()`] and [`print_instance_limits`], or as JSON with [`FleetReport::to_json`].
//!
//! A figure that one run measures and the other does not is an `Option`: `None` prints as `-` in
//! the tables and as `null` in JSON. How each run describes its scenario (the line above the
//! table, the object around the limiters in JSON) stays with the run.

use serde_json::{Value, json};

use crate::fairness::jain_index;

/// One instance's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceReport {
    /// Successful calls per second while every instance was up.
    pub goodput_all_up: f64,
    /// Successful calls per second from 1 s after the first instance left to the end of the run
    /// (`None` for the instance that left).
    pub goodput_after_leave: Option<f64>,
    /// Calls that arrived (`None` where the run does not count them).
    pub arrivals: Option<u64>,
    /// Successful calls over the whole run.
    pub ok: u64,
    /// Median latency of successful calls, ms, from arrival (including the wait for a permit);
    /// `None` without a successful call.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency of successful calls, ms, as [`Self::p50_ms`].
    pub p99_ms: Option<f64>,
    /// Calls given up at their deadline.
    pub timeouts: u64,
    /// Calls shed: no permit within the wait.
    pub shed: u64,
    /// Calls that failed otherwise (`None` where the run has no such outcome).
    pub errors: Option<u64>,
    /// The limit algorithm's baseline, the unloaded RTT it reads queues against
    /// (`LimitAlgorithm::rtt_base`), ms, when the run ended; `None` where the run does not read
    /// it or the algorithm keeps none. Instances whose baselines differ read different queues
    /// from the same RTT.
    pub rtt_base_ms: Option<f64>,
    /// The instance's mean limit per second of the run; while the instance is not up, 0 or
    /// `None` as the run measures it, and `None` throughout without a limiter.
    pub limit_per_s: Vec<Option<f64>>,
}

impl InstanceReport {
    /// The figures as JSON (`limit_per_s` is left out).
    pub fn to_json(&self) -> Value {
        json!({
            "goodput_all_up_per_s": round(self.goodput_all_up),
            "goodput_after_leave_per_s": self.goodput_after_leave.map(round),
            "arrivals": self.arrivals,
            "ok": self.ok,
            "p50_ms": self.p50_ms.map(round),
            "p99_ms": self.p99_ms.map(round),
            "timeouts": self.timeouts,
            "shed": self.shed,
            "errors": self.errors,
            "rtt_base_ms": self.rtt_base_ms.map(round),
        })
    }
}

/// One limiter's figures across the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetReport {
    /// The limiter's name.
    pub name: String,
    /// Per instance, in start order (the last one is the late joiner, the first one leaves).
    pub instances: Vec<InstanceReport>,
    /// Successful calls over what the backend could complete (the run says over which span).
    pub goodput_ratio: f64,
    /// Jain's index over the instances' goodput while every instance was up (`None` if none of
    /// them had any).
    pub jain: Option<f64>,
    /// Sum of the limits of the instances that are up, mean per second of the run (`None` for a
    /// second without a limit to add).
    pub limit_sum_per_s: Vec<Option<f64>>,
    /// Sum of the limits, mean per 100 ms of the run (`None` where the run does not trace it so
    /// finely).
    pub limit_sum_per_100ms: Option<Vec<f64>>,
    /// Mean sum of the limits while every instance was up (`None` without limiters).
    pub limit_sum_all_up: Option<f64>,
    /// Seconds from the late join until the newcomer held 80 % of its fair share for two 500 ms
    /// windows in a row (`None` if it never did).
    pub late_joiner_80_s: Option<f64>,
    /// The goodput of the instances still up, from 1 s after the first one left to the end of
    /// the run, over what the backend could complete: whether the share that left was taken up.
    pub after_leave_ratio: f64,
}

impl FleetReport {
    /// The worst instance's p99 latency, ms (`None` without a successful call).
    pub fn worst_p99_ms(&self) -> Option<f64> {
        self.instances
            .iter()
            .filter_map(|i| i.p99_ms)
            .reduce(f64::max)
    }

    /// Jain's index over the goodputs of the instances still up after the first one left
    /// (`None` if none of them had any).
    pub fn after_leave_jain(&self) -> Option<f64> {
        let goodputs: Vec<f64> = self
            .instances
            .iter()
            .filter_map(|i| i.goodput_after_leave)
            .collect();
        jain_index(&goodputs)
    }

    /// Timeouts across the fleet.
    pub fn timeouts(&self) -> u64 {
        self.instances.iter().map(|i| i.timeouts).sum()
    }

    /// The figures as JSON, numbers rounded to 3 decimals (per-instance limits are left out).
    pub fn to_json(&self) -> Value {
        json!({
            "limiter": self.name,
            "goodput_ratio": round(self.goodput_ratio),
            "jain": self.jain.map(round),
            "worst_p99_ms": self.worst_p99_ms().map(round),
            "timeouts": self.timeouts(),
            "limit_sum_all_up": self.limit_sum_all_up.map(round),
            "limit_sum_per_s": self.limit_sum_per_s.iter().map(|l| l.map(round)).collect::<Vec<_>>(),
            "limit_sum_per_100ms": self
                .limit_sum_per_100ms
                .as_ref()
                .map(|trace| trace.iter().copied().map(round).collect::<Vec<_>>()),
            "late_joiner_80_s": self.late_joiner_80_s.map(round),
            "after_leave_ratio": round(self.after_leave_ratio),
            "after_leave_jain": self.after_leave_jain().map(round),
            "instances": self.instances.iter().map(InstanceReport::to_json).collect::<Vec<_>>(),
        })
    }
}

/// The value at share `p` (e.g. 0.99) of sorted `values`, by nearest rank (`None` if empty).
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Rounds to 3 decimals, as the JSON gives its figures.
fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// `value` with `decimals` decimals, or `-` for `None`.
fn figure(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Each value as [`figure`] with 1 decimal, right-aligned in 5 columns, joined by spaces.
fn per_second(values: &[Option<f64>]) -> String {
    let each: Vec<String> = values
        .iter()
        .map(|v| format!("{:>5}", figure(*v, 1)))
        .collect();
    each.join(" ")
}

/// Prints one table row per limiter (goodput ratio, Jain's index, worst p99, timeouts, sum of the
/// limits while all are up, the late joiner's time to 80 % of its share, the goodput ratio and
/// Jain's index of the instances still up after one left), then each limiter's
/// per-instance figures and its sum of limits per second.
pub fn print(reports: &[FleetReport]) {
    // The limiter column fits the longest name, and at least 10.
    let width = reports
        .iter()
        .map(|r| r.name.len())
        .chain([10])
        .max()
        .unwrap_or(10);
    println!(
        "{:<width$} {:>8} {:>6} {:>12} {:>9} {:>9} {:>11} {:>12} {:>10}",
        "limiter",
        "goodput",
        "jain",
        "worst p99 ms",
        "timeouts",
        "sum limit",
        "late 80% s",
        "after leave",
        "jain after"
    );
    for r in reports {
        println!(
            "{:<width$} {:>8.3} {:>6} {:>12} {:>9} {:>9} {:>11} {:>12.3} {:>10}",
            r.name,
            r.goodput_ratio,
            figure(r.jain, 3),
            figure(r.worst_p99_ms(), 1),
            r.timeouts(),
            figure(r.limit_sum_all_up, 2),
            r.late_joiner_80_s
                .map_or("never".to_owned(), |s| format!("{s:.2}")),
            r.after_leave_ratio,
            figure(r.after_leave_jain(), 3)
        );
    }
    println!(
        "per instance (goodput/s while all up, p50/p99 ms, timeouts, shed, errors, baseline ms):"
    );
    for r in reports {
        let each: Vec<String> = r
            .instances
            .iter()
            .map(|i| {
                format!(
                    "{:.0} {}/{} {} {} {} {}",
                    i.goodput_all_up,
                    figure(i.p50_ms, 0),
                    figure(i.p99_ms, 0),
                    i.timeouts,
                    i.shed,
                    i.errors.map_or_else(|| "-".to_owned(), |e| e.to_string()),
                    figure(i.rtt_base_ms, 2)
                )
            })
            .collect();
        println!("  {:<width$} {}", r.name, each.join(" | "));
    }
    println!("sum of limits, mean per second:");
    for r in reports {
        println!("  {:<width$} {}", r.name, per_second(&r.limit_sum_per_s));
    }
}

/// Prints each instance's mean limit per second, for `report`.
pub fn print_instance_limits(report: &FleetReport) {
    println!("{}: limit per instance, mean per second:", report.name);
    for (index, instance) in report.instances.iter().enumerate() {
        println!("  {index:<3} {}", per_second(&instance.limit_per_s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(p99_ms: Option<f64>, timeouts: u64) -> InstanceReport {
        InstanceReport {
            goodput_all_up: 100.0,
            goodput_after_leave: Some(120.0),
            arrivals: None,
            ok: 3000,
            p50_ms: p99_ms.map(|p| p / 2.0),
            p99_ms,
            timeouts,
            shed: 7,
            errors: Some(0),
            rtt_base_ms: Some(9.5),
            limit_per_s: vec![Some(1.0), None],
        }
    }

    fn report() -> FleetReport {
        FleetReport {
            name: "fixed 1".into(),
            instances: vec![
                instance(Some(61.0), 2),
                instance(None, 1),
                instance(Some(75.5), 0),
            ],
            goodput_ratio: 0.8087,
            jain: None,
            limit_sum_per_s: vec![Some(2.0), None],
            limit_sum_per_100ms: None,
            limit_sum_all_up: Some(3.0),
            late_joiner_80_s: Some(0.5),
            after_leave_ratio: 0.9,
        }
    }

    #[test]
    fn the_fleet_figures_skip_what_is_missing() {
        let report = report();
        assert_eq!(report.worst_p99_ms(), Some(75.5));
        assert_eq!(report.timeouts(), 3);
        let none = FleetReport {
            instances: vec![instance(None, 0)],
            ..report
        };
        assert_eq!(none.worst_p99_ms(), None);
    }

    #[test]
    fn fairness_after_the_leave_counts_only_the_instances_still_up() {
        let mut report = report();
        report.instances[0].goodput_after_leave = None; // the one that left
        report.instances[2].goodput_after_leave = Some(60.0);
        // Jain's index of 120 and 60: 180^2 / (2 * (120^2 + 60^2)) = 0.9.
        let jain = report.after_leave_jain().expect("two instances up");
        assert!((jain - 0.9).abs() < 1e-12, "{jain}");
        assert_eq!(report.to_json()["after_leave_jain"], 0.9);
        assert!(report.to_json()["instances"][0]["goodput_after_leave_per_s"].is_null());
        for instance in &mut report.instances {
            instance.goodput_after_leave = None;
        }
        assert_eq!(report.after_leave_jain(), None);
    }

    #[test]
    fn missing_figures_are_null_in_json_and_numbers_are_rounded() {
        let json = report().to_json();
        assert_eq!(json["limiter"], "fixed 1");
        assert_eq!(json["goodput_ratio"], 0.809);
        assert!(json["jain"].is_null());
        assert!(json["limit_sum_per_100ms"].is_null());
        assert_eq!(json["limit_sum_per_s"], json!([2.0, null]));
        assert_eq!(json["worst_p99_ms"], 75.5);
        assert!(json["instances"][1]["p99_ms"].is_null());
        assert!(json["instances"][0]["arrivals"].is_null());
        assert_eq!(json["instances"][0]["errors"], 0);
        assert_eq!(json["instances"][0]["rtt_base_ms"], 9.5);
        assert_eq!(figure(None, 1), "-");
        assert_eq!(per_second(&[Some(4.04), None]), "  4.0     -");
    }

    #[test]
    fn percentiles_go_by_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(50.0));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&[3.0], 0.99), Some(3.0));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
