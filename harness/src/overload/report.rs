//! What a run measured, from its records: goodput per second and around the step, latency
//! percentiles of successful requests, the limit over time, and the targets of the comparison.
//!
//! Definitions:
//! - goodput: requests answered 2xx, counted in the second they completed; the whole-run figure
//!   counts those completed before the end of the run;
//! - around the step: the second before it, and the first, second and third seconds after it;
//! - latency: from arrival (including the wait for a permit) to the answer, successful requests;
//! - steady state: from 2 s after the start to the step, and from 2 s after the step to the end;
//!   the share of it with the limit below the worker count in service is read from the samples.

use std::time::Duration;

use super::backend::{BackendConfig, BackendStats};
use super::client::{Record, RunRecord, Sample};
use super::gate::Outcome;
use crate::fleet_report::percentile;

/// Time after the start and after the step that is not steady state.
pub const SETTLE: Duration = Duration::from_secs(2);

/// Resolution of the limit trace.
pub const TRACE: Duration = Duration::from_millis(100);

/// One limiter's figures.
#[derive(Debug, Clone)]
pub struct Report {
    /// The limiter's name.
    pub limiter: String,
    /// Arrivals per second offered.
    pub rate: f64,
    /// Length of the run in seconds.
    pub seconds: f64,
    /// Requests that arrived.
    pub arrivals: u64,
    /// Answered 2xx before the deadline.
    pub ok: u64,
    /// Never sent: no permit within the wait.
    pub shed: u64,
    /// Sent, no answer before the deadline.
    pub timeouts: u64,
    /// Answered non-2xx, or the connection failed.
    pub errors: u64,
    /// Requests that never ended (a bug if not 0).
    pub unfinished: u64,
    /// Successful requests completed in each second of the run.
    pub goodput_per_s: Vec<u64>,
    /// Goodput in the second before the step and the first three seconds after it (`None` for a
    /// second that does not fit in the run).
    pub around_step: Option<[Option<u64>; 4]>,
    /// Median latency of successful requests, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency of successful requests, ms.
    pub p99_ms: Option<f64>,
    /// Mean limit per [`TRACE`] (`None` without a limiter or without a sample).
    pub limit_trace: Vec<Option<f64>>,
    /// Share of steady-state samples with the limit below the workers in service.
    pub below_workers_steady: Option<f64>,
    /// Seconds the limit spent below the workers in service in the [`SETTLE`] after the step.
    pub below_workers_after_step_s: Option<f64>,
    /// Lowest limit in the [`SETTLE`] after the step.
    pub min_limit_after_step: Option<usize>,
    /// Most requests in flight at one sample.
    pub max_in_flight: usize,
    /// The backend's counts.
    pub backend_stats: BackendStats,
    /// The backend's configuration.
    pub backend: BackendConfig,
}

impl Report {
    /// Goodput over the whole run (completed before its end).
    pub fn goodput(&self) -> u64 {
        self.goodput_per_s.iter().sum()
    }

    /// Goodput in the first second after the step.
    pub fn first_second_after_step(&self) -> Option<u64> {
        self.around_step.and_then(|around| around[1])
    }

    /// Whether every request that arrived is accounted for exactly once.
    pub fn accounted(&self) -> bool {
        self.ok + self.shed + self.timeouts + self.errors + self.unfinished == self.arrivals
    }

    /// Computes the figures of `run`.
    pub fn of(run: &RunRecord) -> Self {
        let count = |pred: fn(&Outcome) -> bool| {
            run.records.iter().filter(|r| pred(&r.outcome)).count() as u64
        };
        let successes: Vec<&Record> = run
            .records
            .iter()
            .filter(|r| r.outcome == Outcome::Ok)
            .collect();
        let end = Duration::from_secs_f64(run.seconds);
        let seconds = run.seconds.ceil() as usize;
        let mut goodput_per_s = vec![0_u64; seconds];
        for r in successes.iter().filter(|r| r.done < end) {
            if let Some(slot) = goodput_per_s.get_mut(r.done.as_secs() as usize) {
                *slot += 1;
            }
        }
        let step = run.backend.step_at.filter(|at| *at < end);
        let around_step = step.map(|at| {
            let in_window = |from: Duration, to: Duration| {
                (to <= end).then(|| {
                    successes
                        .iter()
                        .filter(|r| r.done >= from && r.done < to)
                        .count() as u64
                })
            };
            let second = Duration::from_secs(1);
            [
                in_window(at.saturating_sub(second), at),
                in_window(at, at + second),
                in_window(at + second, at + 2 * second),
                in_window(at + 2 * second, at + 3 * second),
            ]
        });
        let mut latencies: Vec<f64> = successes
            .iter()
            .map(|r| r.done.saturating_sub(r.arrival).as_secs_f64() * 1e3)
            .collect();
        latencies.sort_by(f64::total_cmp);
        let limits = LimitFigures::of(&run.samples, &run.backend, step, end);
        Self {
            limiter: run.limiter.clone(),
            rate: run.rate,
            seconds: run.seconds,
            arrivals: run.arrivals,
            ok: successes.len() as u64,
            shed: count(|o| *o == Outcome::Shed),
            timeouts: count(|o| *o == Outcome::Timeout),
            errors: count(|o| matches!(o, Outcome::Rejected(_) | Outcome::Transport)),
            unfinished: run.unfinished,
            goodput_per_s,
            around_step,
            p50_ms: percentile(&latencies, 0.5),
            p99_ms: percentile(&latencies, 0.99),
            limit_trace: limits.trace,
            below_workers_steady: limits.below_steady,
            below_workers_after_step_s: limits.below_after_step_s,
            min_limit_after_step: limits.min_after_step,
            max_in_flight: run.samples.iter().map(|s| s.in_flight).max().unwrap_or(0),
            backend_stats: run.backend_stats,
            backend: run.backend.clone(),
        }
    }

    /// The figures as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let round = |v: f64| (v * 1000.0).round() / 1000.0;
        serde_json::json!({
            "limiter": self.limiter,
            "rate": round(self.rate),
            "seconds": self.seconds,
            "arrivals": self.arrivals,
            "ok": self.ok,
            "shed": self.shed,
            "timeouts": self.timeouts,
            "errors": self.errors,
            "unfinished": self.unfinished,
            "goodput": self.goodput(),
            "goodput_per_s": self.goodput_per_s,
            "goodput_around_step": self.around_step,
            "p50_ms": self.p50_ms.map(round),
            "p99_ms": self.p99_ms.map(round),
            "limit_per_100ms": self.limit_trace.iter().map(|l| l.map(round)).collect::<Vec<_>>(),
            "below_workers_steady_share": self.below_workers_steady.map(round),
            "below_workers_after_step_s": self.below_workers_after_step_s.map(round),
            "min_limit_after_step": self.min_limit_after_step,
            "max_in_flight": self.max_in_flight,
            "backend": self.backend.to_json(),
            "backend_stats": self.backend_stats.to_json(),
        })
    }
}

/// What the samples say about the limit.
struct LimitFigures {
    trace: Vec<Option<f64>>,
    below_steady: Option<f64>,
    below_after_step_s: Option<f64>,
    min_after_step: Option<usize>,
}

impl LimitFigures {
    fn of(
        samples: &[Sample],
        backend: &BackendConfig,
        step: Option<Duration>,
        end: Duration,
    ) -> Self {
        let slots = (end.as_nanos() / TRACE.as_nanos()) as usize;
        let mut sums = vec![(0.0_f64, 0_u32); slots];
        let (mut steady, mut below_steady) = (0_u64, 0_u64);
        let (mut below_after, mut min_after) = (0_u64, None::<usize>);
        let mut limited = false;
        for s in samples.iter().filter(|s| s.at < end) {
            let Some(limit) = s.limit else { continue };
            limited = true;
            let slot = (s.at.as_nanos() / TRACE.as_nanos()) as usize;
            if let Some((sum, n)) = sums.get_mut(slot) {
                *sum += limit as f64;
                *n += 1;
            }
            let below = limit < backend.workers_at(s.at);
            let settling = s.at < SETTLE || step.is_some_and(|at| s.at >= at && s.at < at + SETTLE);
            if !settling {
                steady += 1;
                below_steady += u64::from(below);
            } else if step.is_some_and(|at| s.at >= at) {
                below_after += u64::from(below);
                min_after = Some(min_after.map_or(limit, |m| m.min(limit)));
            }
        }
        let trace = sums
            .iter()
            .map(|&(sum, n)| (n > 0).then(|| sum / f64::from(n)))
            .collect();
        let sample_s = super::client::SAMPLE_EVERY.as_secs_f64();
        Self {
            trace,
            below_steady: (limited && steady > 0).then(|| below_steady as f64 / steady as f64),
            below_after_step_s: (limited && step.is_some())
                .then_some(below_after as f64 * sample_s),
            min_after_step: min_after,
        }
    }
}

/// Vegas against the targets: first second after the step, whole run, p99, timeouts, steady limit.
#[derive(Debug, Clone)]
pub struct Targets {
    /// Vegas's goodput in the first second after the step / the best fixed limit's.
    pub first_second_ratio: Option<f64>,
    /// Vegas's whole-run goodput / the best fixed limit's.
    pub whole_run_ratio: Option<f64>,
    /// Vegas's p99 and fixed16's, ms.
    pub p99_vs_fixed16: Option<(f64, f64)>,
    /// Vegas's timeouts.
    pub timeouts: u64,
    /// Share of steady-state samples with Vegas's limit below the workers.
    pub below_workers_steady: Option<f64>,
}

impl Targets {
    /// Minimum first-second ratio.
    pub const FIRST_SECOND: f64 = 0.90;
    /// Minimum whole-run ratio.
    pub const WHOLE_RUN: f64 = 0.97;
    /// Maximum steady-state share below the workers.
    pub const BELOW_WORKERS: f64 = 0.01;

    /// The targets from `reports`, if they hold a `flowguard` run and at least one `fixed` run.
    pub fn of(reports: &[Report]) -> Option<Self> {
        let vegas = reports.iter().find(|r| r.limiter == "flowguard")?;
        let fixed: Vec<&Report> = reports
            .iter()
            .filter(|r| r.limiter.starts_with("fixed"))
            .collect();
        if fixed.is_empty() {
            return None;
        }
        let best_first = fixed
            .iter()
            .filter_map(|r| r.first_second_after_step())
            .max();
        let best_whole = fixed.iter().map(|r| r.goodput()).max().unwrap_or(0);
        let ratio = |a: u64, b: u64| (b > 0).then(|| a as f64 / b as f64);
        let fixed16 = reports.iter().find(|r| r.limiter == "fixed16");
        Some(Self {
            first_second_ratio: vegas
                .first_second_after_step()
                .zip(best_first)
                .and_then(|(v, b)| ratio(v, b)),
            whole_run_ratio: ratio(vegas.goodput(), best_whole),
            p99_vs_fixed16: vegas.p99_ms.zip(fixed16.and_then(|f| f.p99_ms)),
            timeouts: vegas.timeouts,
            below_workers_steady: vegas.below_workers_steady,
        })
    }

    /// Each target: its name, what was measured, and whether it is met (`None`: not measured).
    pub fn verdicts(&self) -> Vec<(&'static str, String, Option<bool>)> {
        let ratio = |r: Option<f64>, min: f64| match r {
            Some(r) => (format!("{r:.3}x"), Some(r >= min)),
            None => ("not measured".into(), None),
        };
        let (first, first_met) = ratio(self.first_second_ratio, Self::FIRST_SECOND);
        let (whole, whole_met) = ratio(self.whole_run_ratio, Self::WHOLE_RUN);
        let (p99, p99_met) = match self.p99_vs_fixed16 {
            Some((v, f)) => (format!("{v:.1} ms vs {f:.1} ms"), Some(v <= f)),
            None => ("not measured".into(), None),
        };
        let (below, below_met) = match self.below_workers_steady {
            Some(b) => (format!("{:.2}%", b * 100.0), Some(b < Self::BELOW_WORKERS)),
            None => ("not measured".into(), None),
        };
        vec![
            (
                "first second after the step >= 0.90x best fixed",
                first,
                first_met,
            ),
            ("whole-run goodput >= 0.97x best fixed", whole, whole_met),
            ("p99 <= fixed16's", p99, p99_met),
            (
                "zero timeouts",
                self.timeouts.to_string(),
                Some(self.timeouts == 0),
            ),
            ("steady-state limit below workers < 1%", below, below_met),
        ]
    }

    /// The verdicts as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let verdicts: Vec<_> = self
            .verdicts()
            .into_iter()
            .map(|(target, measured, met)| {
                serde_json::json!({ "target": target, "measured": measured, "met": met })
            })
            .collect();
        serde_json::Value::Array(verdicts)
    }
}

/// Prints the reports as tables: the summary, goodput around the step, the limit around the step,
/// and the targets.
pub fn print(reports: &[Report]) {
    let Some(first) = reports.first() else {
        return;
    };
    let b = &first.backend;
    println!(
        "backend: {}; offered {:.0}/s for {} s",
        b.describe(),
        first.rate,
        first.seconds
    );
    println!(
        "{:<10} {:>8} {:>8} {:>8} {:>24} {:>7} {:>7} {:>8} {:>7} {:>6} {:>9} {:>9} {:>6} {:>8}",
        "limiter",
        "arrivals",
        "goodput",
        "/s",
        "step -1s | +1s +2s +3s",
        "p50 ms",
        "p99 ms",
        "timeouts",
        "shed",
        "errors",
        "<wkrs st",
        "<wkrs 2s",
        "min 2s",
        "max infl"
    );
    let opt = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for r in reports {
        let n = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        let around = r.around_step.map_or("-".into(), |[before, a, b, c]| {
            format!("{} | {} {} {}", n(before), n(a), n(b), n(c))
        });
        println!(
            "{:<10} {:>8} {:>8} {:>8.1} {:>24} {:>7} {:>7} {:>8} {:>7} {:>6} {:>9} {:>9} {:>6} {:>8}",
            r.limiter,
            r.arrivals,
            r.goodput(),
            r.goodput() as f64 / r.seconds,
            around,
            opt(r.p50_ms, 1),
            opt(r.p99_ms, 1),
            r.timeouts,
            r.shed,
            r.errors,
            r.below_workers_steady
                .map_or("-".into(), |b| format!("{:.2}%", b * 100.0)),
            opt(r.below_workers_after_step_s, 2),
            r.min_limit_after_step.map_or("-".into(), |m| m.to_string()),
            r.max_in_flight
        );
    }
    if let Some(step) = b.step_at.filter(|at| at.as_secs_f64() < first.seconds) {
        let from_slot = (step.saturating_sub(Duration::from_millis(500)).as_nanos()
            / TRACE.as_nanos()) as usize;
        println!(
            "limit per 100 ms from {:.1} s (the step at {:.1} s is the 6th column):",
            from_slot as f64 * TRACE.as_secs_f64(),
            step.as_secs_f64()
        );
        for r in reports
            .iter()
            .filter(|r| r.limit_trace.iter().any(Option::is_some))
        {
            if r.limiter.starts_with("fixed") {
                continue;
            }
            let trace: Vec<String> = r
                .limit_trace
                .iter()
                .skip(from_slot)
                .take(20)
                .map(|l| l.map_or("   -".into(), |l| format!("{l:>4.1}")))
                .collect();
            println!("  {:<10} {}", r.limiter, trace.join(" "));
        }
    }
    if let Some(targets) = Targets::of(reports) {
        println!("targets (flowguard's Vegas against the fixed limits):");
        for (target, measured, met) in targets.verdicts() {
            let verdict = match met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "-",
            };
            println!("  {target:<50} {measured:>22}  {verdict}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn run(records: Vec<Record>, samples: Vec<Sample>) -> RunRecord {
        RunRecord {
            limiter: "flowguard".into(),
            backend: BackendConfig {
                step_at: Some(Duration::from_secs(3)),
                ..BackendConfig::default()
            },
            rate: 100.0,
            seconds: 6.0,
            arrivals: records.len() as u64 + 1,
            records,
            samples,
            backend_stats: BackendStats::default(),
            unfinished: 1,
        }
    }

    fn ok(arrival: u64, done: u64) -> Record {
        Record {
            arrival: ms(arrival),
            done: ms(done),
            outcome: Outcome::Ok,
        }
    }

    #[test]
    fn goodput_is_counted_in_the_second_of_completion_within_the_run() {
        let records = vec![
            ok(900, 1_100),
            ok(2_990, 3_010),
            ok(3_100, 3_200),
            ok(5_950, 6_050), // completes after the run: accounted as ok, not in the goodput
            Record {
                arrival: ms(10),
                done: ms(60),
                outcome: Outcome::Shed,
            },
            Record {
                arrival: ms(10),
                done: ms(1_010),
                outcome: Outcome::Timeout,
            },
            Record {
                arrival: ms(10),
                done: ms(20),
                outcome: Outcome::Rejected(503),
            },
        ];
        let report = Report::of(&run(records, vec![]));
        assert_eq!(report.goodput_per_s, [0, 1, 0, 2, 0, 0]);
        assert_eq!(
            report.around_step,
            Some([Some(0), Some(2), Some(0), Some(0)])
        );
        assert_eq!(
            (report.ok, report.shed, report.timeouts, report.errors),
            (4, 1, 1, 1)
        );
        assert!(report.accounted());
        assert_eq!(report.p50_ms, Some(100.0));
        assert_eq!(report.p99_ms, Some(200.0));
    }

    #[test]
    fn seconds_around_the_step_past_the_end_of_the_run_are_not_counted() {
        let mut short = run(vec![ok(3_100, 3_200), ok(4_100, 4_200)], vec![]);
        short.seconds = 4.5;
        let report = Report::of(&short);
        assert_eq!(report.around_step, Some([Some(0), Some(1), None, None]));
        assert_eq!(report.goodput_per_s, [0, 0, 0, 1, 1]);
    }

    #[test]
    fn the_steady_limit_is_judged_outside_the_start_and_the_step() {
        let sample = |at: u64, limit: usize| Sample {
            at: ms(at),
            limit: Some(limit),
            in_flight: limit,
        };
        // Below 4 workers: once at start (settling), once in steady state, twice after the step.
        let samples = vec![
            sample(500, 1),
            sample(2_000, 6),
            sample(2_500, 3),
            sample(3_000, 2),
            sample(3_010, 1),
            sample(4_000, 5),
            sample(5_000, 6),
            sample(5_500, 6),
        ];
        let report = Report::of(&run(vec![], samples));
        assert_eq!(report.below_workers_steady, Some(1.0 / 4.0));
        assert_eq!(report.min_limit_after_step, Some(1));
        assert_eq!(report.below_workers_after_step_s, Some(0.02));
        assert_eq!(report.limit_trace[5], Some(1.0));
        assert_eq!(report.limit_trace[30], Some(1.5));
        assert_eq!(report.max_in_flight, 6);
    }

    #[test]
    fn targets_compare_vegas_with_the_best_fixed_limit() {
        let report = |name: &str, goodput: u64, first: u64, p99: f64, timeouts: u64| Report {
            limiter: name.into(),
            rate: 1.0,
            seconds: 1.0,
            arrivals: 0,
            ok: goodput,
            shed: 0,
            timeouts,
            errors: 0,
            unfinished: 0,
            goodput_per_s: vec![goodput],
            around_step: Some([Some(0), Some(first), Some(0), Some(0)]),
            p50_ms: Some(1.0),
            p99_ms: Some(p99),
            limit_trace: vec![],
            below_workers_steady: Some(0.005),
            below_workers_after_step_s: None,
            min_limit_after_step: None,
            max_in_flight: 0,
            backend_stats: BackendStats::default(),
            backend: BackendConfig::default(),
        };
        let reports = [
            report("fixed4", 800, 160, 60.0, 0),
            report("fixed16", 1024, 140, 90.0, 0),
            report("flowguard", 1008, 120, 95.0, 2),
        ];
        let targets = Targets::of(&reports).unwrap();
        assert_eq!(targets.first_second_ratio, Some(0.75));
        assert_eq!(targets.whole_run_ratio, Some(0.984375));
        let met: Vec<Option<bool>> = targets.verdicts().into_iter().map(|v| v.2).collect();
        assert_eq!(
            met,
            [
                Some(false),
                Some(true),
                Some(false),
                Some(false),
                Some(true)
            ]
        );
        assert!(Targets::of(&reports[..2]).is_none());
    }
}
