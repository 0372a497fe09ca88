//! The fleet scenario: N instances, each with a limiter of its own, share one backend.
//!
//! Backend: `workers` workers serve calls from every instance in one FIFO order, from an
//! unbounded queue; each call takes the mean service time +/- `jitter`.
//!
//! Instances: each offers Poisson arrivals at `offered_load / instances` x the backend's
//! capacity, so the backend sees `offered_load` x its capacity while all are up. Instance `i`
//! starts at `i * stagger`, except the last one, which joins late (`join_at`); the first one
//! leaves at `leave_at` (its arrivals stop; calls it holds finish). Each arrival waits for a
//! permit of its instance's limiter, first come first served, up to `max_wait`, and is shed
//! after that; a call that has not completed `deadline` after it arrived times out (its permit
//! reports `dropped`; the backend still serves it). A completed call reports `success`.
//! Latency runs from arrival (including the wait for a permit) to completion.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::error::Error;
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::{LimitAlgorithm, Limiter, OwnedPermit};
use flowguard_harness::fairness::{jain_index, time_to_share};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Backend, fleet and client settings.
#[derive(Debug, Clone, Copy)]
pub struct FleetScenario {
    pub instances: usize,
    pub workers: usize,
    pub service: Duration,
    /// Service time varies uniformly by this share around its mean.
    pub jitter: f64,
    /// Total offered load while every instance is up, times the backend's capacity.
    pub offered_load: f64,
    /// Instance `i` (but the last) starts at `i * stagger`.
    pub stagger: Duration,
    /// The last instance starts here.
    pub join_at: Duration,
    /// The first instance stops offering load here.
    pub leave_at: Duration,
    pub end: Duration,
    pub max_wait: Duration,
    pub deadline: Duration,
    pub seed: u64,
}

impl FleetScenario {
    /// `instances` instances in front of 4 workers at 10 ms, 3x overload in total: starts 1 s
    /// apart, the last joins at 10 s, the first leaves at 20 s, the run ends at 30 s.
    pub fn standard(instances: usize, seed: u64) -> Self {
        Self {
            instances,
            workers: 4,
            service: Duration::from_millis(10),
            jitter: 0.1,
            offered_load: 3.0,
            stagger: Duration::from_secs(1),
            join_at: Duration::from_secs(10),
            leave_at: Duration::from_secs(20),
            end: Duration::from_secs(30),
            max_wait: Duration::from_millis(50),
            deadline: Duration::from_secs(1),
            seed,
        }
    }

    /// When instance `index` starts offering load.
    fn start_of(&self, index: usize) -> u64 {
        if index + 1 == self.instances && self.instances > 1 {
            nanos(self.join_at)
        } else {
            nanos(self.stagger) * index as u64
        }
    }

    /// When instance `index` stops offering load.
    fn stop_of(&self, index: usize) -> u64 {
        if index == 0 && self.instances > 1 {
            nanos(self.leave_at)
        } else {
            nanos(self.end)
        }
    }

    /// Calls per second the backend completes.
    fn capacity(&self) -> f64 {
        self.workers as f64 / self.service.as_secs_f64()
    }

    /// The span over which every instance is up and settled (1 s after the late join, until the
    /// first one leaves): where fairness is judged.
    pub fn all_up(&self) -> (f64, f64) {
        (
            self.join_at.as_secs_f64() + 1.0,
            self.leave_at.as_secs_f64(),
        )
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Width of the goodput windows the newcomer's share is judged on.
pub const SHARE_WINDOW: Duration = Duration::from_millis(500);
/// Resolution of the limit traces.
pub const TRACE: Duration = Duration::from_millis(100);

/// What one instance achieved.
#[derive(Debug, Clone)]
pub struct InstanceReport {
    /// Successful calls per second while every instance was up.
    pub goodput_all_up: f64,
    /// Successful calls over the whole run.
    pub ok: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub timeouts: u64,
    pub shed: u64,
    /// Mean limit per [`TRACE`] interval (0 while the instance is not up).
    pub limit_trace: Vec<f64>,
    /// Successful calls per [`SHARE_WINDOW`].
    pub goodput_windows: Vec<u64>,
}

/// What one kind of limiter achieved across the fleet.
#[derive(Debug, Clone)]
pub struct FleetReport {
    pub name: String,
    pub instances: Vec<InstanceReport>,
    /// Successful calls over the run, over what the backend could complete.
    pub goodput_ratio: f64,
    /// Jain's index over the instances' goodput while every instance was up.
    pub jain: f64,
    /// Sum of the limits per [`TRACE`] interval.
    pub limit_sum_trace: Vec<f64>,
    /// Mean sum of the limits while every instance was up.
    pub limit_sum_all_up: f64,
    /// Seconds from the late join until the newcomer held 80 % of its fair share.
    pub late_joiner_80_s: Option<f64>,
}

impl FleetReport {
    /// The worst instance's p99 latency.
    pub fn worst_p99_ms(&self) -> f64 {
        self.instances.iter().map(|i| i.p99_ms).fold(0.0, f64::max)
    }

    /// Timeouts across the fleet.
    pub fn timeouts(&self) -> u64 {
        self.instances.iter().map(|i| i.timeouts).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The call with this id finished its service.
    Completion(usize),
    /// The call with this id reached its deadline.
    Deadline(usize),
    /// Instance `i` has an arrival.
    Arrival(usize),
}

/// A call from arrival to completion or timeout.
struct Call {
    instance: usize,
    arrival: u64,
    permit: Option<OwnedPermit>,
    finished: bool,
}

/// Per-instance bookkeeping.
struct Instance {
    limiter: Limiter,
    rng: SmallRng,
    waiting: VecDeque<usize>,
    latencies: Vec<f64>,
    ok: u64,
    ok_all_up: u64,
    timeouts: u64,
    shed: u64,
    trace: Vec<f64>,
    windows: Vec<u64>,
}

/// Runs `scenario` with one limiter per instance, each following an algorithm from `algorithm`
/// (called once per instance), on one virtual clock.
pub fn simulate_fleet(
    scenario: &FleetScenario,
    name: String,
    algorithm: &dyn Fn() -> Result<Box<dyn LimitAlgorithm>, Box<dyn Error>>,
) -> Result<FleetReport, Box<dyn Error>> {
    let clock = ManualClock::new();
    let end = nanos(scenario.end);
    let trace = nanos(TRACE);
    let share_window = nanos(SHARE_WINDOW);
    let rate_per_nano =
        scenario.offered_load * scenario.capacity() / 1e9 / scenario.instances as f64;
    let max_wait = nanos(scenario.max_wait);
    let deadline = nanos(scenario.deadline);
    let (all_up_from, all_up_until) = scenario.all_up();
    let (all_up_from, all_up_until) = ((all_up_from * 1e9) as u64, (all_up_until * 1e9) as u64);

    let mut instances = Vec::with_capacity(scenario.instances);
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for index in 0..scenario.instances {
        let limiter = Limiter::builder(algorithm()?)
            .name(format!("{name} {index}"))
            .clock(clock.clone())
            .build()?;
        instances.push(Instance {
            limiter,
            rng: SmallRng::seed_from_u64(
                scenario.seed.wrapping_mul(1000).wrapping_add(index as u64),
            ),
            waiting: VecDeque::new(),
            latencies: Vec::new(),
            ok: 0,
            ok_all_up: 0,
            timeouts: 0,
            shed: 0,
            trace: vec![0.0; (end / trace) as usize + 1],
            windows: vec![0; (end / share_window) as usize + 1],
        });
        events.push(Reverse((scenario.start_of(index), Event::Arrival(index))));
    }
    let mut service_rng = SmallRng::seed_from_u64(scenario.seed);
    let mut calls: Vec<Call> = Vec::new();
    let mut backlog: VecDeque<usize> = VecDeque::new();
    let mut busy = 0_usize;
    let mut last = 0_u64;

    while let Some(Reverse((now, event))) = events.pop() {
        let now = now.min(end);
        // Time-weighted limits since the last event, interval by interval.
        while last < now {
            let until = now.min((last / trace + 1) * trace);
            let share = (until - last) as f64 / trace as f64;
            for (index, instance) in instances.iter_mut().enumerate() {
                if last >= scenario.start_of(index) && last < scenario.stop_of(index) {
                    instance.trace[(last / trace) as usize] +=
                        instance.limiter.limit() as f64 * share;
                }
            }
            last = until;
        }
        if now >= end {
            break;
        }
        clock.set_nanos(now);
        match event {
            Event::Completion(id) => {
                busy -= 1;
                let call = &mut calls[id];
                if !call.finished {
                    call.finished = true;
                    if let Some(permit) = call.permit.take() {
                        permit.success();
                    }
                    let instance = &mut instances[call.instance];
                    instance.ok += 1;
                    instance.windows[(now / share_window) as usize] += 1;
                    if (all_up_from..all_up_until).contains(&now) {
                        instance.ok_all_up += 1;
                    }
                    instance.latencies.push((now - call.arrival) as f64 / 1e6);
                }
            }
            Event::Deadline(id) => {
                let call = &mut calls[id];
                if !call.finished {
                    call.finished = true;
                    instances[call.instance].timeouts += 1;
                    if let Some(permit) = call.permit.take() {
                        permit.dropped();
                    }
                }
            }
            Event::Arrival(index) => {
                calls.push(Call {
                    instance: index,
                    arrival: now,
                    permit: None,
                    finished: false,
                });
                let instance = &mut instances[index];
                instance.waiting.push_back(calls.len() - 1);
                let gap = -(1.0 - instance.rng.random::<f64>()).ln() / rate_per_nano;
                let next = now + gap.max(1.0) as u64;
                if next < scenario.stop_of(index) {
                    events.push(Reverse((next, Event::Arrival(index))));
                }
            }
        }
        // Each instance grants its waiting callers in arrival order, shedding those that
        // waited too long.
        for instance in &mut instances {
            while let Some(&id) = instance.waiting.front() {
                if now > calls[id].arrival + max_wait {
                    instance.waiting.pop_front();
                    calls[id].finished = true;
                    instance.shed += 1;
                    continue;
                }
                let Ok(permit) = instance.limiter.try_acquire_owned() else {
                    break;
                };
                instance.waiting.pop_front();
                calls[id].permit = Some(permit);
                events.push(Reverse((calls[id].arrival + deadline, Event::Deadline(id))));
                backlog.push_back(id);
            }
        }
        // The backend starts serving queued calls while workers are free.
        while busy < scenario.workers {
            let Some(id) = backlog.pop_front() else {
                break;
            };
            let spread = 1.0 + scenario.jitter * (2.0 * service_rng.random::<f64>() - 1.0);
            let service = (scenario.service.as_nanos() as f64 * spread) as u64;
            busy += 1;
            events.push(Reverse((now + service.max(1), Event::Completion(id))));
        }
    }

    let all_up_s = (all_up_until - all_up_from) as f64 / 1e9;
    let reports: Vec<InstanceReport> = instances
        .into_iter()
        .map(|mut instance| {
            instance.latencies.sort_by(f64::total_cmp);
            InstanceReport {
                goodput_all_up: instance.ok_all_up as f64 / all_up_s,
                ok: instance.ok,
                p50_ms: percentile(&instance.latencies, 0.5),
                p99_ms: percentile(&instance.latencies, 0.99),
                timeouts: instance.timeouts,
                shed: instance.shed,
                limit_trace: instance.trace,
                goodput_windows: instance.windows,
            }
        })
        .collect();
    let goodputs: Vec<f64> = reports.iter().map(|r| r.goodput_all_up).collect();
    let limit_sum_trace: Vec<f64> = (0..reports[0].limit_trace.len())
        .map(|i| reports.iter().map(|r| r.limit_trace[i]).sum())
        .collect();
    let (from, until) = (
        (all_up_from / trace) as usize,
        (all_up_until / trace) as usize,
    );
    let limit_sum_all_up =
        limit_sum_trace[from..until].iter().sum::<f64>() / (until - from).max(1) as f64;
    let ok: u64 = reports.iter().map(|r| r.ok).sum();
    let late_joiner_80_s = (scenario.instances > 1)
        .then(|| {
            let newcomer = scenario.instances - 1;
            let windows: Vec<(f64, f64, usize)> = (0..reports[0].goodput_windows.len())
                .map(|w| {
                    let at = w as u64 * share_window;
                    let active = (0..scenario.instances)
                        .filter(|&i| at >= scenario.start_of(i) && at < scenario.stop_of(i))
                        .count();
                    let total = reports.iter().map(|r| r.goodput_windows[w] as f64).sum();
                    (reports[newcomer].goodput_windows[w] as f64, total, active)
                })
                .collect();
            time_to_share(
                &windows,
                SHARE_WINDOW.as_secs_f64(),
                scenario.join_at.as_secs_f64(),
                0.8,
            )
        })
        .flatten();
    Ok(FleetReport {
        name,
        goodput_ratio: ok as f64 / (scenario.capacity() * scenario.end.as_secs_f64()),
        jain: jain_index(&goodputs).unwrap_or(f64::NAN),
        limit_sum_trace,
        limit_sum_all_up,
        late_joiner_80_s,
        instances: reports,
    })
}

/// The value at share `p` of sorted `values` (NaN if empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// Prints one table row per limiter, then per-instance figures and the sum of limits per second.
pub fn print(scenario: &FleetScenario, reports: &[FleetReport]) {
    println!(
        "\nfleet: {} instances, {} workers at {:?} (+/-{}%), {}x total overload; starts {:?} apart, the last joins at {:?}, the first leaves at {:?}, end {:?}; wait <= {:?}, deadline {:?}, seed {}",
        scenario.instances,
        scenario.workers,
        scenario.service,
        scenario.jitter * 100.0,
        scenario.offered_load,
        scenario.stagger,
        scenario.join_at,
        scenario.leave_at,
        scenario.end,
        scenario.max_wait,
        scenario.deadline,
        scenario.seed
    );
    let (from, until) = scenario.all_up();
    println!("fairness and limits judged from {from} s to {until} s (all instances up)");
    println!(
        "{:<10} {:>8} {:>6} {:>12} {:>9} {:>9} {:>14}",
        "limiter", "goodput", "jain", "worst p99 ms", "timeouts", "sum limit", "late 80% s"
    );
    for r in reports {
        println!(
            "{:<10} {:>8.3} {:>6.3} {:>12.1} {:>9} {:>9.2} {:>14}",
            r.name,
            r.goodput_ratio,
            r.jain,
            r.worst_p99_ms(),
            r.timeouts(),
            r.limit_sum_all_up,
            r.late_joiner_80_s
                .map_or("never".to_owned(), |s| format!("{s:.2}"))
        );
    }
    println!("per instance (goodput/s while all up, p50/p99 ms, timeouts, shed):");
    for r in reports {
        let each: Vec<String> = r
            .instances
            .iter()
            .map(|i| {
                format!(
                    "{:.0} {:.0}/{:.0} {} {}",
                    i.goodput_all_up, i.p50_ms, i.p99_ms, i.timeouts, i.shed
                )
            })
            .collect();
        println!("  {:<10} {}", r.name, each.join(" | "));
    }
    println!("sum of limits, mean per second:");
    let per_second = (1_000_000_000 / nanos(TRACE)) as usize;
    for r in reports {
        let seconds: Vec<String> = r
            .limit_sum_trace
            .chunks(per_second)
            .take(scenario.end.as_secs() as usize)
            .map(|chunk| format!("{:>5.1}", chunk.iter().sum::<f64>() / chunk.len() as f64))
            .collect();
        println!("  {:<10} {}", r.name, seconds.join(" "));
    }
}

/// Prints each instance's mean limit per second, for `report`.
pub fn print_instance_limits(report: &FleetReport) {
    let per_second = (1_000_000_000 / nanos(TRACE)) as usize;
    println!("{}: limit per instance, mean per second:", report.name);
    for (index, instance) in report.instances.iter().enumerate() {
        let seconds: Vec<String> = instance
            .limit_trace
            .chunks(per_second)
            .map(|chunk| format!("{:>5.1}", chunk.iter().sum::<f64>() / chunk.len() as f64))
            .collect();
        println!("  {index:<3} {}", seconds.join(" "));
    }
}

/// The reports as JSON.
pub fn json(scenario: &FleetScenario, reports: &[FleetReport]) -> serde_json::Value {
    let round = |value: f64| (value * 1000.0).round() / 1000.0;
    let limiters: Vec<_> = reports
        .iter()
        .map(|r| {
            let instances: Vec<_> = r
                .instances
                .iter()
                .map(|i| {
                    serde_json::json!({
                        "goodput_all_up_per_s": round(i.goodput_all_up),
                        "ok": i.ok,
                        "p50_ms": round(i.p50_ms),
                        "p99_ms": round(i.p99_ms),
                        "timeouts": i.timeouts,
                        "shed": i.shed,
                    })
                })
                .collect();
            serde_json::json!({
                "name": r.name,
                "goodput_ratio": round(r.goodput_ratio),
                "jain": round(r.jain),
                "worst_p99_ms": round(r.worst_p99_ms()),
                "timeouts": r.timeouts(),
                "limit_sum_all_up": round(r.limit_sum_all_up),
                "limit_sum_per_100ms": r.limit_sum_trace.iter().map(|l| round(*l)).collect::<Vec<_>>(),
                "late_joiner_80_s": r.late_joiner_80_s.map(round),
                "instances": instances,
            })
        })
        .collect();
    serde_json::json!({
        "scenario": "fleet",
        "instances": scenario.instances,
        "seed": scenario.seed,
        "limiters": limiters,
    })
}
