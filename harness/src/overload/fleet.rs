//! The fleet run: several instances, each with a limiter and an HTTP client of its own, share
//! one backend process.
//!
//! The instances run in this one client process (each its own [`Gate`]: its own limiter, its own
//! `reqwest::Client` and connection pool), not in processes of their own: what they share is the
//! backend's queue, as instances of a service do. Each offers Poisson arrivals at `overload /
//! instances` x the backend's capacity, so the backend sees `overload` x its capacity while all
//! are up. Instance `i` starts at `i * stagger`, except the last one, which joins late
//! (`join_at`); the first one leaves at `leave_at`; the run ends at `seconds`.
//!
//! Per instance it reports goodput (per second, while every instance is up), p50/p99 latency of
//! successful requests, timeouts and the limit per second; for the fleet, Jain's index over those
//! goodputs, the total goodput over the backend's capacity while all are up, the sum of the
//! limits per second, and the time the late joiner took to hold 80 % of its fair share (two
//! 500 ms windows in a row): a [`FleetReport`], printed by [`print`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::backend::BackendConfig;
use super::client::{self, ClientConfig, Record, http_client};
use super::gate::{Gate, HttpCall, LimiterKind, Outcome};
use crate::fairness::{jain_index, time_to_share};
use crate::fleet_report::{self, FleetReport, InstanceReport, percentile};

/// The fleet's schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetConfig {
    /// Instances, at least 2.
    pub instances: usize,
    /// Instance `i` (but the last) starts at `i * stagger`.
    pub stagger: Duration,
    /// The last instance starts here.
    pub join_at: Duration,
    /// The first instance stops offering load here.
    pub leave_at: Duration,
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

/// Runs `kind` in every instance of `fleet` against the backend at `base` for `config.seconds`.
pub async fn run(
    base: &reqwest::Url,
    kind: LimiterKind,
    fleet: FleetConfig,
    config: &ClientConfig,
) -> Result<FleetReport, String> {
    let work = base
        .join("work")
        .map_err(|e| format!("backend URL {base} + work: {e}"))?;
    let mut gates = Vec::with_capacity(fleet.instances);
    for _ in 0..fleet.instances {
        let call = HttpCall::new(http_client()?, work.clone());
        gates.push(Arc::new(Gate::new(kind, call, config.wait).await?));
    }
    let control = http_client()?;
    let backend = client::start_backend_run(&control, base).await?;
    let rate = config.rate.unwrap_or(config.overload * backend.capacity()) / fleet.instances as f64;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("the arrival rate must be above 0, got {rate}"));
    }
    let start = Instant::now();
    let sampler = tokio::spawn(sample_limits(gates.clone(), start, config.seconds));
    let offers: Vec<_> = gates
        .iter()
        .enumerate()
        .map(|(index, gate)| {
            let (gate, config) = (gate.clone(), config.clone());
            let from = start + fleet.start_of(index);
            let until = start + fleet.stop_of(index, config.seconds);
            let seed = config.seed.wrapping_mul(1000).wrapping_add(index as u64);
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
    Ok(report(kind, &fleet, config, &backend, &offered, &limits))
}

/// A sample of the limits: `(at, limit of each instance, None when it has no limiter)`.
type LimitSample = (f64, Vec<Option<usize>>);

/// Samples every gate's limit every 10 ms until `seconds`.
async fn sample_limits(gates: Vec<Arc<Gate>>, start: Instant, seconds: f64) -> Vec<LimitSample> {
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
                goodput_after_leave: (index != 0 && after_leave_s > 0.0).then(|| {
                    o.records.iter().filter(|r| after_leave(r)).count() as f64 / after_leave_s
                }),
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
/// [`fleet_report::print`]) and the limit per instance of flowguard's.
pub fn print(fleet: &FleetConfig, reports: &[FleetReport]) {
    let (from, until) = fleet.all_up();
    println!(
        "fleet of {} in one process (a limiter and an HTTP client each), starts {:?} apart, the last joins at {:?}, the first leaves at {:?}; judged from {from} s to {until} s",
        fleet.instances, fleet.stagger, fleet.join_at, fleet.leave_at
    );
    fleet_report::print(reports);
    let flowguard = LimiterKind::Flowguard.name();
    for report in reports.iter().filter(|r| r.name == flowguard) {
        fleet_report::print_instance_limits(report);
    }
}
