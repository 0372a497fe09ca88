//! The fleet run: several instances, each with a limiter and an HTTP client of its own, share
//! one backend process.
//!
//! Each instance is a [`Gate`] of its own (its own limiter, its own `reqwest::Client` and
//! connection pool); what they share is the backend's queue, as instances of a service do. Where
//! they run is the [`FleetMode`]: by default each in a client process of its own (this
//! executable again, as `overload fleet-instance ...`, see [`instance`]), which say when they
//! are ready and are then all given one common start as a wall-clock instant (so that their
//! records share one origin, however long a loaded machine took to start them), each printing
//! its records and limit samples as one JSON line that the parent merges; or, with
//! [`FleetMode::InProcess`], all in this one process and runtime. The report is the same either
//! way. The backend's run starts (`POST /run`) just before the instances do: with processes,
//! the time they took to start plus half a second before them, so a step in the backend's
//! service time falls that much earlier in the fleet's time (the fleet is meant to run with
//! `--step-at none`).
//!
//! Each offers Poisson arrivals at `overload / instances` x the backend's capacity, so the backend
//! sees `overload` x its capacity while all are up. Instance `i` starts at `i * stagger`, except
//! the last one, which joins late (`join_at`); the first one leaves at `leave_at`; the run ends at
//! `seconds`.
//!
//! Per instance it reports goodput (per second, while every instance is up), p50/p99 latency of
//! successful requests, timeouts and the limit per second; for the fleet, Jain's index over those
//! goodputs, the total goodput over the backend's capacity while all are up, the sum of the
//! limits per second, and the time the late joiner took to hold 80 % of its fair share (two
//! 500 ms windows in a row): a [`FleetReport`], printed by [`print()`].

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::backend::BackendConfig;
use super::client::{self, ClientConfig, Record, http_client};
use super::gate::{Gate, HttpCall, LimiterKind, Outcome};
use super::instance::{self, InstanceArgs, InstanceLimits};
use crate::fairness::{jain_index, time_to_share};
use crate::fleet_report::{self, FleetReport, InstanceReport, percentile};
use crate::rollout::Rollout;
use crate::vegas_settings::VegasSettings;

/// The fleet's schedule, and the instances that run other settings than the rest, as in a
/// rollout.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetConfig {
    /// Instances, at least 2.
    pub instances: usize,
    /// Instance `i` (but the last) starts at `i * stagger`.
    pub stagger: Duration,
    /// The last instance starts here.
    pub join_at: Duration,
    /// The first instance stops offering load here.
    pub leave_at: Duration,
    /// The instances that run the client's Vegas settings (the others flowguard's defaults),
    /// and those that read the backend's queue reports in the `flowguard-queue` arm (the others
    /// run the `flowguard` arm, told not to read them).
    pub rollout: Rollout,
}

impl FleetConfig {
    /// `instances` over a run of `seconds`: starts 1 s apart, the last joins at a third of the
    /// run, the first leaves at two thirds.
    pub fn standard(instances: usize, seconds: f64) -> Self {
        Self {
            instances,
            stagger: Duration::from_secs(1),
            join_at: Duration::from_secs_f64(seconds / 3.0),
            leave_at: Duration::from_secs_f64(2.0 * seconds / 3.0),
            rollout: Rollout::default(),
        }
    }

    /// Why the rollout cannot be run with `settings` and `limiters`, if it cannot: what
    /// [`Rollout::check`] refuses, or `reports_read_by` without the `flowguard-queue` arm.
    pub fn check_rollout(
        &self,
        settings: &VegasSettings,
        limiters: &[LimiterKind],
    ) -> Result<(), String> {
        self.rollout.check(self.instances, settings)?;
        let queue = LimiterKind::FlowguardQueue;
        if self.rollout.reports_read_by.is_some() && !limiters.contains(&queue) {
            return Err(format!(
                "--reported-instances: only the {} arm reads the reports, and --limiter leaves it out",
                queue.name()
            ));
        }
        Ok(())
    }

    /// The limiter of instance `index` in the arm `kind`: `flowguard` rather than
    /// `flowguard-queue` where the rollout has the instance not read the reports.
    pub fn kind_of(&self, index: usize, kind: LimiterKind) -> LimiterKind {
        if kind == LimiterKind::FlowguardQueue && !self.rollout.reads_reports(index) {
            LimiterKind::Flowguard
        } else {
            kind
        }
    }

    fn start_of(&self, index: usize) -> Duration {
        if index + 1 == self.instances {
            self.join_at
        } else {
            self.stagger * index as u32
        }
    }

    fn stop_of(&self, index: usize, seconds: f64) -> Duration {
        if index == 0 {
            self.leave_at
        } else {
            Duration::from_secs_f64(seconds)
        }
    }

    /// When the instances still up are judged after the first one left: 1 s after it left.
    fn after_leave(&self) -> f64 {
        self.leave_at.as_secs_f64() + 1.0
    }

    /// The span with every instance up and settled: 1 s after the late join to the leave.
    fn all_up(&self) -> (f64, f64) {
        (
            self.join_at.as_secs_f64() + 1.0,
            self.leave_at.as_secs_f64(),
        )
    }
}

/// Width of the windows the late joiner's share is judged on.
const SHARE_WINDOW: f64 = 0.5;

/// Where the instances of a fleet run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetMode {
    /// One client process per instance: this executable, started as `overload fleet-instance
    /// ...` (see [`instance`]).
    Processes(PathBuf),
    /// Every instance in this one process and tokio runtime, each a [`Gate`] of its own.
    InProcess,
}

impl FleetMode {
    /// The name in the JSON output: `processes` or `in-process`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Processes(_) => "processes",
            Self::InProcess => "in-process",
        }
    }

    /// Where the instances ran, as the printed header says it.
    fn place(&self) -> &'static str {
        match self {
            Self::Processes(_) => "client processes",
            Self::InProcess => "in one process",
        }
    }
}

/// What a failed instance process said on standard error, or that it said nothing.
fn said(stderr: &str) -> &str {
    match stderr.trim() {
        "" => "nothing on standard error",
        said => said,
    }
}

/// Time from the last instance process saying it is ready to their common start: enough for
/// each to read the start from its standard input on a loaded machine.
const PROCESS_LEAD: Duration = Duration::from_millis(500);
/// The longest the instance processes may take to start and build their limiters and clients.
const READY_BOUND: Duration = Duration::from_secs(60);

/// Runs `kind` in every instance of `fleet` against the backend at `base` for `config.seconds`,
/// the instances where `mode` says.
pub async fn run(
    base: &reqwest::Url,
    kind: LimiterKind,
    fleet: &FleetConfig,
    config: &ClientConfig,
    mode: &FleetMode,
) -> Result<FleetReport, String> {
    match mode {
        FleetMode::Processes(exe) => run_processes(exe, base, kind, fleet, config).await,
        FleetMode::InProcess => run_in_process(base, kind, fleet, config).await,
    }
}

/// Starts a run on the backend (`POST /run`); answers its configuration and the arrival rate of
/// each instance.
async fn start_backend_run(
    base: &reqwest::Url,
    fleet: &FleetConfig,
    config: &ClientConfig,
) -> Result<(BackendConfig, f64), String> {
    let backend = client::start_backend_run(&http_client()?, base).await?;
    let rate = config.rate.unwrap_or(config.overload * backend.capacity()) / fleet.instances as f64;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("the arrival rate must be above 0, got {rate}"));
    }
    Ok((backend, rate))
}

/// The seed of instance `index`'s arrivals.
fn instance_seed(seed: u64, index: usize) -> u64 {
    seed.wrapping_mul(1000).wrapping_add(index as u64)
}

/// One process per instance (`exe fleet-instance ...`), each printing its records and limit
/// samples as one JSON line; a process that fails is an error naming its index and what it said
/// on standard error, and then every other one is killed.
async fn run_processes(
    exe: &Path,
    base: &reqwest::Url,
    kind: LimiterKind,
    fleet: &FleetConfig,
    config: &ClientConfig,
) -> Result<FleetReport, String> {
    let (backend, rate) = start_backend_run(base, fleet, config).await?;
    // Until the run below, dropping `starting` (on an error) drops every child, which kills it
    // (`kill_on_drop`).
    let mut starting = Vec::with_capacity(fleet.instances);
    for index in 0..fleet.instances {
        let args = InstanceArgs {
            backend: base.clone(),
            index,
            limiter: fleet.kind_of(index, kind),
            from_s: fleet.start_of(index).as_secs_f64(),
            until_s: fleet.stop_of(index, config.seconds).as_secs_f64(),
            seconds: config.seconds,
            rate,
            seed: instance_seed(config.seed, index),
            wait_ms: config.wait.as_secs_f64() * 1e3,
            deadline_ms: config.deadline.as_secs_f64() * 1e3,
            vegas: fleet.rollout.vegas_of(index, &config.vegas),
        };
        let mut child = Command::new(exe)
            .arg(instance::SUBCOMMAND)
            .args(args.to_flags())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start instance {index} ({}): {e}", exe.display()))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(format!(
                "instance {index}: its standard streams are not piped"
            ));
        };
        starting.push((child, stdin, BufReader::new(stdout), stderr));
    }
    // Every instance says it is ready, however long starting took; then they all get one start.
    let ready = async {
        for (index, (_, _, stdout, stderr)) in starting.iter_mut().enumerate() {
            let mut line = String::new();
            stdout
                .read_line(&mut line)
                .await
                .map_err(|e| format!("instance {index}: cannot read it: {e}"))?;
            if line.trim() != instance::READY {
                let mut text = String::new();
                let _ = stderr.read_to_string(&mut text).await;
                return Err(format!("instance {index} did not start: {}", said(&text)));
            }
        }
        Ok::<_, String>(())
    };
    tokio::time::timeout(READY_BOUND, ready)
        .await
        .map_err(|_| format!("the instances were not ready within {READY_BOUND:?}"))??;
    let start_unix_ms = instance::unix_ms_now() + PROCESS_LEAD.as_millis() as u64;
    // Dropping the set (on an error, or when the bound passes) aborts its tasks, which drops
    // every child not yet waited for, and kills it.
    let mut children = JoinSet::new();
    for (index, (mut child, mut stdin, mut stdout, mut stderr)) in starting.into_iter().enumerate()
    {
        stdin
            .write_all(format!("{start_unix_ms}\n").as_bytes())
            .await
            .map_err(|e| format!("instance {index}: cannot give it the start: {e}"))?;
        children.spawn(async move {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let (read_out, read_err, status) = tokio::join!(
                stdout.read_to_end(&mut out),
                stderr.read_to_end(&mut err),
                child.wait()
            );
            // Held until the child ended: it exits when its standard input closes.
            drop(stdin);
            let status = read_out.and(read_err).and(status);
            (index, status, out, err)
        });
    }
    let bound = PROCESS_LEAD
        + Duration::from_secs_f64(config.seconds)
        + config.deadline
        + config.wait
        + Duration::from_secs(15);
    let collect = async {
        let mut lines = vec![None; fleet.instances];
        while let Some(joined) = children.join_next().await {
            let (index, status, stdout, stderr) =
                joined.map_err(|e| format!("waiting for an instance: {e}"))?;
            let status =
                status.map_err(|e| format!("instance {index}: cannot wait for it: {e}"))?;
            if !status.success() {
                let stderr = String::from_utf8_lossy(&stderr);
                return Err(format!(
                    "instance {index} failed ({status}): {}",
                    said(&stderr)
                ));
            }
            lines[index] =
                Some(instance::read_line(&stdout).map_err(|e| format!("instance {index}: {e}"))?);
        }
        Ok(lines)
    };
    let lines = tokio::time::timeout(bound, collect)
        .await
        .map_err(|_| format!("the instances did not finish within {bound:?}"))??;
    let (offered, limits): (Vec<_>, Vec<_>) = lines.into_iter().flatten().unzip();
    let limits = merge_limits(&limits, config.seconds);
    Ok(report(kind, fleet, config, &backend, &offered, &limits))
}

/// The instances' own limit samples on one grid, every [`client::SAMPLE_EVERY`] from 0 until
/// `seconds`: each instance's column holds its latest sample up to half a step after the grid's
/// time (`None` before its first).
fn merge_limits(each: &[InstanceLimits], seconds: f64) -> Vec<LimitSample> {
    let every = client::SAMPLE_EVERY.as_secs_f64();
    let mut next = vec![0; each.len()];
    let mut held = vec![None; each.len()];
    let mut merged = Vec::new();
    for step in 0.. {
        let at = step as f64 * every;
        if at >= seconds {
            break;
        }
        for (index, samples) in each.iter().enumerate() {
            while let Some((sampled, limit)) = samples.get(next[index]) {
                if *sampled > at + every / 2.0 {
                    break;
                }
                held[index] = *limit;
                next[index] += 1;
            }
        }
        merged.push((at, held.clone()));
    }
    merged
}

/// Every instance a [`Gate`] in this process, on this runtime.
async fn run_in_process(
    base: &reqwest::Url,
    kind: LimiterKind,
    fleet: &FleetConfig,
    config: &ClientConfig,
) -> Result<FleetReport, String> {
    let work = base
        .join("work")
        .map_err(|e| format!("backend URL {base} + work: {e}"))?;
    let mut gates = Vec::with_capacity(fleet.instances);
    for index in 0..fleet.instances {
        let call = HttpCall::new(http_client()?, work.clone());
        let vegas = fleet.rollout.vegas_of(index, &config.vegas);
        let kind = fleet.kind_of(index, kind);
        gates.push(Arc::new(Gate::new(kind, call, config.wait, &vegas).await?));
    }
    let (backend, rate) = start_backend_run(base, fleet, config).await?;
    let start = Instant::now();
    let sampler = tokio::spawn(sample_limits(gates.clone(), start, config.seconds));
    let offers: Vec<_> = gates
        .iter()
        .enumerate()
        .map(|(index, gate)| {
            let (gate, config) = (gate.clone(), config.clone());
            let from = start + fleet.start_of(index);
            let until = start + fleet.stop_of(index, config.seconds);
            let seed = instance_seed(config.seed, index);
            tokio::spawn(async move {
                client::offer(gate, start, from, until, rate, seed, &config).await
            })
        })
        .collect();
    let mut offered = Vec::with_capacity(offers.len());
    for offer in offers {
        offered.push(
            offer
                .await
                .map_err(|e| format!("an instance failed: {e}"))?,
        );
    }
    let limits = sampler
        .await
        .map_err(|e| format!("the limit sampler failed: {e}"))?;
    Ok(report(kind, fleet, config, &backend, &offered, &limits))
}

/// A sample of the limits: `(at, limit of each instance, None when it has no limiter)`.
pub(super) type LimitSample = (f64, Vec<Option<usize>>);

/// Samples every gate's limit every [`client::SAMPLE_EVERY`] until `seconds`.
pub(super) async fn sample_limits(
    gates: Vec<Arc<Gate>>,
    start: Instant,
    seconds: f64,
) -> Vec<LimitSample> {
    let mut samples = Vec::new();
    let mut ticks = tokio::time::interval(client::SAMPLE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        let at = start.elapsed().as_secs_f64();
        if at >= seconds {
            return samples;
        }
        samples.push((at, gates.iter().map(|gate| gate.limit()).collect()));
    }
}

fn report(
    kind: LimiterKind,
    fleet: &FleetConfig,
    config: &ClientConfig,
    backend: &BackendConfig,
    offered: &[client::Offered],
    limits: &[LimitSample],
) -> FleetReport {
    let (from, until) = fleet.all_up();
    let within = |record: &Record| {
        let done = record.done.as_secs_f64();
        record.outcome == Outcome::Ok && done >= from && done < until
    };
    let after_leave_from = fleet.after_leave();
    let after_leave_s = config.seconds - after_leave_from;
    let after_leave = |record: &Record| {
        record.outcome == Outcome::Ok && record.done.as_secs_f64() >= after_leave_from
    };
    // Whether instance `index` is up at `at` seconds, and the mean per second of the run of what
    // `value` reads from each sample of the limits.
    let up = |index: usize, at: f64| {
        at >= fleet.start_of(index).as_secs_f64()
            && at < fleet.stop_of(index, config.seconds).as_secs_f64()
    };
    let mean = |values: Vec<f64>| {
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let per_second = |value: &dyn Fn(&LimitSample) -> Option<f64>| {
        (0..config.seconds.ceil() as usize)
            .map(|s| {
                mean(
                    limits
                        .iter()
                        .filter(|(at, _)| *at >= s as f64 && *at < s as f64 + 1.0)
                        .filter_map(value)
                        .collect(),
                )
            })
            .collect::<Vec<_>>()
    };
    let instances: Vec<InstanceReport> = offered
        .iter()
        .enumerate()
        .map(|(index, o)| {
            let mut latencies: Vec<f64> = o
                .records
                .iter()
                .filter(|r| r.outcome == Outcome::Ok)
                .map(|r| (r.done - r.arrival).as_secs_f64() * 1e3)
                .collect();
            latencies.sort_by(f64::total_cmp);
            let count = |outcome: fn(&Outcome) -> bool| {
                o.records.iter().filter(|r| outcome(&r.outcome)).count() as u64
            };
            InstanceReport {
                goodput_all_up: o.records.iter().filter(|r| within(r)).count() as f64
                    / (until - from),
                goodput_after_leave: (up(index, after_leave_from) && after_leave_s > 0.0).then(
                    || o.records.iter().filter(|r| after_leave(r)).count() as f64 / after_leave_s,
                ),
                arrivals: Some(o.arrivals),
                ok: count(|o| *o == Outcome::Ok),
                p50_ms: percentile(&latencies, 0.5),
                p99_ms: percentile(&latencies, 0.99),
                timeouts: count(|o| *o == Outcome::Timeout),
                shed: count(|o| *o == Outcome::Shed),
                errors: Some(
                    count(|o| matches!(o, Outcome::Rejected(_) | Outcome::Transport))
                        + o.unfinished,
                ),
                // Each instance's limiter lives in its own client process, which does not
                // report it.
                rtt_base_ms: None,
                limit_per_s: per_second(&|(at, each)| {
                    each[index]
                        .filter(|_| up(index, *at))
                        .map(|limit| limit as f64)
                }),
            }
        })
        .collect();
    let goodputs: Vec<f64> = instances.iter().map(|i| i.goodput_all_up).collect();
    let goodput_ratio = goodputs.iter().sum::<f64>() / backend.capacity();
    let after_leave_ratio = instances
        .iter()
        .filter_map(|i| i.goodput_after_leave)
        .sum::<f64>()
        / backend.capacity();

    // The sum of the limits of the instances that are up, per second and while all are up.
    let sum_at = |(at, each): &LimitSample| -> Option<f64> {
        let mut sum = None;
        for (index, limit) in each.iter().enumerate() {
            if let (Some(limit), true) = (limit, up(index, *at)) {
                *sum.get_or_insert(0.0) += *limit as f64;
            }
        }
        sum
    };
    let limit_sum_per_s = per_second(&sum_at);
    let limit_sum_all_up = mean(
        limits
            .iter()
            .filter(|(at, _)| *at >= from && *at < until)
            .filter_map(sum_at)
            .collect(),
    );

    // The late joiner's goodput per window against the fleet's.
    let windows = (config.seconds / SHARE_WINDOW).ceil() as usize;
    let mut per_window = vec![(0.0, 0.0, 0); windows];
    for (index, o) in offered.iter().enumerate() {
        for record in o.records.iter().filter(|r| r.outcome == Outcome::Ok) {
            let w = (record.done.as_secs_f64() / SHARE_WINDOW) as usize;
            if let Some(slot) = per_window.get_mut(w) {
                slot.1 += 1.0;
                if index + 1 == fleet.instances {
                    slot.0 += 1.0;
                }
            }
        }
    }
    for (w, slot) in per_window.iter_mut().enumerate() {
        let at = w as f64 * SHARE_WINDOW;
        slot.2 = (0..fleet.instances).filter(|&i| up(i, at)).count();
    }
    let late_joiner_80_s =
        time_to_share(&per_window, SHARE_WINDOW, fleet.join_at.as_secs_f64(), 0.8);
    FleetReport {
        name: kind.name(),
        jain: jain_index(&goodputs),
        goodput_ratio,
        limit_sum_per_s,
        limit_sum_per_100ms: None,
        limit_sum_all_up,
        late_joiner_80_s,
        after_leave_ratio,
        instances,
    }
}

/// Prints the fleet's schedule, then the fleet report of each limiter (see
/// [`fleet_report::print`]) and the limit per instance of flowguard's (with and without the
/// backend's queue reports).
pub fn print(fleet: &FleetConfig, mode: &FleetMode, reports: &[FleetReport]) {
    let (from, until) = fleet.all_up();
    let (n, place) = (fleet.instances, mode.place());
    println!(
        "fleet of {n} {place} (a limiter and an HTTP client each), starts {:?} apart, the last joins at {:?}, the first leaves at {:?}; judged from {from} s to {until} s",
        fleet.stagger, fleet.join_at, fleet.leave_at
    );
    fleet_report::print(reports);
    let flowguards = [LimiterKind::Flowguard, LimiterKind::FlowguardQueue].map(|kind| kind.name());
    for report in reports.iter().filter(|r| flowguards.contains(&r.name)) {
        fleet_report::print_instance_limits(report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listed_instances_of_the_queue_arm_read_the_reports() {
        let fleet = FleetConfig {
            rollout: Rollout {
                reports_read_by: Some(vec![1]),
                ..Rollout::default()
            },
            ..FleetConfig::standard(3, 30.0)
        };
        let queue = LimiterKind::FlowguardQueue;
        let each: Vec<_> = (0..3).map(|index| fleet.kind_of(index, queue)).collect();
        assert_eq!(
            each,
            [LimiterKind::Flowguard, queue, LimiterKind::Flowguard]
        );
        let fixed = LimiterKind::Fixed(1);
        assert!((0..3).all(|index| fleet.kind_of(index, fixed) == fixed));
        let defaults = VegasSettings::default();
        assert_eq!(fleet.check_rollout(&defaults, &[fixed, queue]), Ok(()));
        assert_eq!(
            fleet.check_rollout(&defaults, &[fixed]),
            Err(
                "--reported-instances: only the flowguard-queue arm reads the reports, and \
                 --limiter leaves it out"
                    .into()
            )
        );
        // The rollout's own checks (see `rollout`) come first.
        let outside = FleetConfig {
            rollout: Rollout {
                reports_read_by: Some(vec![0, 5]),
                ..Rollout::default()
            },
            ..fleet.clone()
        };
        assert_eq!(
            outside.check_rollout(&defaults, &[queue]),
            Err("--reported-instances: no instance 5 in a fleet of 3 (indices 0 to 2)".into())
        );
    }

    #[test]
    fn the_instances_limits_merge_on_one_grid() {
        // Instance 0 sampled a little late and missed a tick; instance 1 starts sampling later.
        let each = vec![
            vec![(0.001, Some(4)), (0.011, Some(5)), (0.031, Some(6))],
            vec![(0.019, Some(2)), (0.029, None)],
        ];
        let merged = merge_limits(&each, 0.04);
        let columns: Vec<_> = merged.iter().map(|(_, limits)| limits.clone()).collect();
        assert_eq!(
            columns,
            [
                vec![Some(4), None],
                vec![Some(5), None],
                vec![Some(5), Some(2)],
                vec![Some(6), None],
            ]
        );
        let times: Vec<f64> = merged.iter().map(|(at, _)| *at).collect();
        assert_eq!(times, [0.0, 0.01, 0.02, 0.03]);
    }
}
