//! The fleet scenario: N instances, each with a limiter of its own, share one backend.
//!
//! Backend: `workers` workers serve calls from every instance in one FIFO order, from an
//! unbounded queue; each call takes the mean service time +/- `jitter`, and on a noisy host
//! (`host_noise`) the delay of its epoch longer (see [`HostNoise`]).
//!
//! Instances: each offers Poisson arrivals at `offered_load / instances` x the backend's
//! capacity, so the backend sees `offered_load` x its capacity while all are up. Instance `i`
//! starts at `i * stagger`, except the last one, which joins late (`join_at`); the first one
//! leaves at `leave_at` (its arrivals stop; calls it holds finish). Each arrival waits for a
//! permit of its instance's limiter, first come first served, up to `max_wait`, and is shed
//! after that; a call that has not completed `deadline` after it arrived times out (its permit
//! reports `dropped`; the backend still serves it). A completed call reports `success`.
//! Latency runs from arrival (including the wait for a permit) to completion.

use flowguard_harness::service_spread::SpreadShape;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::error::Error;
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::{LimitAlgorithm, Limiter, OwnedPermit};
use flowguard_harness::exponential::unit_exponential;
use flowguard_harness::fairness::{jain_index, time_to_share};
use flowguard_harness::fleet_report::{self, InstanceReport, percentile};
pub use flowguard_harness::fleet_report::{FleetReport, print_instance_limits};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use flowguard_harness::rollout::{self, Rollout};

use crate::host_noise::{self, HostNoise};

/// Backend, fleet and client settings.
#[derive(Debug, Clone)]
pub struct FleetScenario {
    pub instances: usize,
    pub workers: usize,
    pub service: Duration,
    /// Service time varies uniformly by this share around its mean.
    pub jitter: f64,
    /// The shape of the service time's spread (`jitter` is its width).
    pub shape: SpreadShape,
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
    /// The backend reports how long each call waited in its queue; the instances finish their
    /// permits with `Permit::success_queued`.
    pub reported_queue: bool,
    /// Mean delay the host adds to every call of an epoch (zero: a quiet host).
    pub host_noise: Duration,
    /// The instances that run the `vegas` arm's settings (the others Vegas's defaults) and,
    /// with `reported_queue`, those that read the reports (the others finish their permits with
    /// `Permit::success`, as clients that do not read them): a fleet in the middle of a rollout.
    pub rollout: Rollout,
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
            shape: SpreadShape::Uniform,
            offered_load: 3.0,
            stagger: Duration::from_secs(1),
            join_at: Duration::from_secs(10),
            leave_at: Duration::from_secs(20),
            end: Duration::from_secs(30),
            max_wait: Duration::from_millis(50),
            deadline: Duration::from_secs(1),
            seed,
            reported_queue: false,
            host_noise: Duration::ZERO,
            rollout: Rollout::default(),
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

    /// When the instances still up are judged after the first one left: 1 s after it left,
    /// until the end.
    pub fn after_leave(&self) -> f64 {
        self.leave_at.as_secs_f64() + 1.0
    }

    /// Whether instance `index` reads the backend's reports of its queue.
    pub fn reads_reports(&self, index: usize) -> bool {
        self.reported_queue && self.rollout.reads_reports(index)
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
    /// When the call's permit was granted (it joined the backend's queue).
    granted_at: u64,
    /// How long it waited in the backend's queue before a worker took it.
    queued: u64,
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
    ok_after_leave: u64,
    timeouts: u64,
    shed: u64,
    trace: Vec<f64>,
    windows: Vec<u64>,
}

/// Runs `scenario` with one limiter per instance, each following an algorithm from `algorithm`
/// (called once per instance, with its index in start order), on one virtual clock.
pub fn simulate_fleet(
    scenario: &FleetScenario,
    name: String,
    algorithm: &dyn Fn(usize) -> Result<Box<dyn LimitAlgorithm>, Box<dyn Error>>,
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
    let after_leave_from = (scenario.after_leave() * 1e9) as u64;

    let mut instances = Vec::with_capacity(scenario.instances);
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    for index in 0..scenario.instances {
        let limiter = Limiter::builder(algorithm(index)?)
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
            ok_after_leave: 0,
            timeouts: 0,
            shed: 0,
            trace: vec![0.0; (end / trace) as usize + 1],
            windows: vec![0; (end / share_window) as usize + 1],
        });
        events.push(Reverse((scenario.start_of(index), Event::Arrival(index))));
    }
    let mut service_rng = SmallRng::seed_from_u64(scenario.seed);
    let mut noise = HostNoise::new(scenario.host_noise, scenario.seed);
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
                        if scenario.reads_reports(call.instance) {
                            permit.success_queued(Duration::from_nanos(call.queued));
                        } else {
                            permit.success();
                        }
                    }
                    let instance = &mut instances[call.instance];
                    instance.ok += 1;
                    instance.windows[(now / share_window) as usize] += 1;
                    if (all_up_from..all_up_until).contains(&now) {
                        instance.ok_all_up += 1;
                    }
                    if now >= after_leave_from {
                        instance.ok_after_leave += 1;
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
                    granted_at: 0,
                    queued: 0,
                    arrival: now,
                    permit: None,
                    finished: false,
                });
                let instance = &mut instances[index];
                instance.waiting.push_back(calls.len() - 1);
                let gap = unit_exponential(&mut instance.rng) / rate_per_nano;
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
                calls[id].granted_at = now;
                events.push(Reverse((calls[id].arrival + deadline, Event::Deadline(id))));
                backlog.push_back(id);
            }
        }
        // The backend starts serving queued calls while workers are free.
        while busy < scenario.workers {
            let Some(id) = backlog.pop_front() else {
                break;
            };
            let spread = scenario.shape.factor(scenario.jitter, &mut service_rng);
            let service = (scenario.service.as_nanos() as f64 * spread) as u64 + noise.delay(now);
            busy += 1;
            calls[id].queued = now - calls[id].granted_at;
            events.push(Reverse((now + service.max(1), Event::Completion(id))));
        }
    }

    let all_up_s = (all_up_until - all_up_from) as f64 / 1e9;
    let seconds = scenario.end.as_secs() as usize;
    let limit_sum_trace: Vec<f64> = (0..instances[0].trace.len())
        .map(|i| instances.iter().map(|instance| instance.trace[i]).sum())
        .collect();
    let (from, until) = (
        (all_up_from / trace) as usize,
        (all_up_until / trace) as usize,
    );
    let limit_sum_all_up =
        limit_sum_trace[from..until].iter().sum::<f64>() / (until - from).max(1) as f64;
    let late_joiner_80_s = (scenario.instances > 1)
        .then(|| {
            let newcomer = scenario.instances - 1;
            let windows: Vec<(f64, f64, usize)> = (0..instances[0].windows.len())
                .map(|w| {
                    let at = w as u64 * share_window;
                    let active = (0..scenario.instances)
                        .filter(|&i| at >= scenario.start_of(i) && at < scenario.stop_of(i))
                        .count();
                    let total = instances.iter().map(|i| i.windows[w] as f64).sum();
                    (instances[newcomer].windows[w] as f64, total, active)
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
    let after_leave_s = (end - after_leave_from.min(end)) as f64 / 1e9;
    let reports: Vec<InstanceReport> = instances
        .into_iter()
        .enumerate()
        .map(|(index, mut instance)| {
            instance.latencies.sort_by(f64::total_cmp);
            InstanceReport {
                goodput_all_up: instance.ok_all_up as f64 / all_up_s,
                goodput_after_leave: (scenario.stop_of(index) == end && after_leave_s > 0.0)
                    .then(|| instance.ok_after_leave as f64 / after_leave_s),
                arrivals: None,
                ok: instance.ok,
                p50_ms: percentile(&instance.latencies, 0.5),
                p99_ms: percentile(&instance.latencies, 0.99),
                timeouts: instance.timeouts,
                shed: instance.shed,
                errors: None,
                rtt_base_ms: instance
                    .limiter
                    .snapshot()
                    .rtt_base
                    .map(|base| base.as_secs_f64() * 1e3),
                limit_per_s: per_second(&instance.trace, seconds),
            }
        })
        .collect();
    let goodputs: Vec<f64> = reports.iter().map(|r| r.goodput_all_up).collect();
    let ok: u64 = reports.iter().map(|r| r.ok).sum();
    let after_leave: f64 = reports.iter().filter_map(|r| r.goodput_after_leave).sum();
    Ok(FleetReport {
        name,
        goodput_ratio: ok as f64 / (scenario.capacity() * scenario.end.as_secs_f64()),
        jain: jain_index(&goodputs),
        limit_sum_per_s: per_second(&limit_sum_trace, seconds),
        limit_sum_per_100ms: Some(limit_sum_trace),
        limit_sum_all_up: Some(limit_sum_all_up),
        late_joiner_80_s,
        after_leave_ratio: after_leave / scenario.capacity(),
        instances: reports,
    })
}

/// The mean of `trace` (a value per [`TRACE`]) per second, over the first `seconds` of the run.
fn per_second(trace: &[f64], seconds: usize) -> Vec<Option<f64>> {
    let chunk = (1_000_000_000 / nanos(TRACE)) as usize;
    trace
        .chunks(chunk)
        .take(seconds)
        .map(|values| Some(values.iter().sum::<f64>() / values.len() as f64))
        .collect()
}

/// Prints the scenario, then the fleet report of each limiter (see [`fleet_report::print`]).
pub fn print(scenario: &FleetScenario, reports: &[FleetReport]) {
    println!(
        "\nfleet: {} instances, {} workers at {:?} ({}), {}x total overload; starts {:?} apart, the last joins at {:?}, the first leaves at {:?}, end {:?}; wait <= {:?}, deadline {:?}, seed {}{}{}",
        scenario.instances,
        scenario.workers,
        scenario.service,
        scenario.shape.describe(scenario.jitter),
        scenario.offered_load,
        scenario.stagger,
        scenario.join_at,
        scenario.leave_at,
        scenario.end,
        scenario.max_wait,
        scenario.deadline,
        scenario.seed,
        match (&scenario.rollout.reports_read_by, scenario.reported_queue) {
            (_, false) => String::new(),
            (None, true) => "; the backend reports each call's queue wait".into(),
            (Some(read_by), true) => format!(
                "; the backend reports each call's queue wait, read by instances {} only",
                rollout::list(read_by)
            ),
        },
        host_noise::describe(scenario.host_noise)
    );
    let (from, until) = scenario.all_up();
    println!("fairness and limits judged from {from} s to {until} s (all instances up)");
    fleet_report::print(reports);
}

/// The reports as JSON: the scenario, and each limiter's report (see [`FleetReport::to_json`]).
pub fn json(scenario: &FleetScenario, reports: &[FleetReport]) -> serde_json::Value {
    serde_json::json!({
        "scenario": "fleet",
        "instances": scenario.instances,
        "seed": scenario.seed,
        "reported_queue": scenario.reported_queue,
        "reports_read_by": scenario.rollout.reports_read_by,
        "vegas_instances": scenario.rollout.vegas_on,
        "host_noise_ms": scenario.host_noise.as_secs_f64() * 1e3,
        "service_jitter": scenario.jitter,
        "service_shape": scenario.shape.name(),
        "limiters": reports.iter().map(FleetReport::to_json).collect::<Vec<_>>(),
    })
}
