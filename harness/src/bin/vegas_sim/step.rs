//! The capacity-step scenario: a small backend whose service time (or worker count) steps at a
//! given second, behind an unbounded queue, and a client that offers 3x its capacity.
//!
//! Backend: `workers` workers serve calls in FIFO order from an unbounded queue; each call takes
//! the mean service time in effect when its service starts, +/- `jitter`. At `step_at` the mean
//! service time becomes `service_after`, and the worker count `workers_after` (a worker that is
//! busy finishes its call).
//!
//! Host noise (`host_noise`, none by default): see [`HostNoise`].
//!
//! Client: Poisson arrivals at `offered_load` x the initial capacity. Each arrival asks the
//! [`Limiter`] for a permit; if none is free it waits, first come first served, up to
//! `max_wait`, and is shed after that. A call that has not completed `deadline` after it arrived
//! times out: the client reports its permit `dropped` and gives up (the backend still serves it,
//! as a real server that never learns of the cancellation would). A completed call reports
//! `success`. Latency runs from arrival (including the wait for a permit) to completion.

use flowguard_harness::service_spread::SpreadShape;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::error::Error;
use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::vegas::{LimitAlgorithm, Limiter, OwnedPermit};
use flowguard_harness::exponential::unit_exponential;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::host_noise::{self, HostNoise};

/// Backend and client settings.
#[derive(Debug, Clone, Copy)]
pub struct StepScenario {
    pub name: &'static str,
    pub workers: usize,
    pub service: Duration,
    pub workers_after: usize,
    pub service_after: Duration,
    pub step_at: Duration,
    pub end: Duration,
    /// Service time varies uniformly by this share around its mean.
    pub jitter: f64,
    /// The shape of the service time's spread (`jitter` is its width).
    pub shape: SpreadShape,
    pub offered_load: f64,
    pub max_wait: Duration,
    pub deadline: Duration,
    pub seed: u64,
    /// The backend reports how long each call waited in its queue, and the client finishes its
    /// permits with `Permit::success_queued`.
    pub reported_queue: bool,
    /// Mean delay the host adds to every call of an epoch (zero: a quiet host; see
    /// [`HostNoise`]).
    pub host_noise: Duration,
}

impl StepScenario {
    /// 4 workers at 10 ms; the service time steps to 25 ms at 10 s (the real-socket run).
    pub fn slower_service(seed: u64) -> Self {
        Self {
            name: "service 10->25 ms",
            workers: 4,
            service: Duration::from_millis(10),
            workers_after: 4,
            service_after: Duration::from_millis(25),
            step_at: Duration::from_secs(10),
            end: Duration::from_secs(20),
            jitter: 0.1,
            shape: SpreadShape::Uniform,
            offered_load: 3.0,
            max_wait: Duration::from_millis(50),
            deadline: Duration::from_secs(1),
            seed,
            reported_queue: false,
            host_noise: Duration::ZERO,
        }
    }

    /// 8 workers at 10 ms; half of them go away at 10 s.
    pub fn fewer_workers(seed: u64) -> Self {
        Self {
            name: "workers 8->4",
            workers: 8,
            workers_after: 4,
            service_after: Duration::from_millis(10),
            ..Self::slower_service(seed)
        }
    }

    fn after_step(&self, at: u64) -> bool {
        at >= nanos(self.step_at)
    }

    fn workers_at(&self, at: u64) -> usize {
        if self.after_step(at) {
            self.workers_after
        } else {
            self.workers
        }
    }

    fn mean_service_nanos(&self, at: u64) -> f64 {
        let service = if self.after_step(at) {
            self.service_after
        } else {
            self.service
        };
        service.as_nanos() as f64
    }

    /// Whole seconds simulated.
    fn seconds(&self) -> usize {
        self.end.as_secs() as usize
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Resolution of the limit trace.
pub const TRACE: Duration = Duration::from_millis(100);

/// What one limiter achieved in a step scenario.
#[derive(Debug, Clone)]
pub struct StepReport {
    pub name: String,
    /// Successful calls completed in each second.
    pub goodput_per_s: Vec<u64>,
    /// Mean limit per [`TRACE`] interval.
    pub limit_trace: Vec<f64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub timeouts: u64,
    pub shed: u64,
    /// Share of the steady-state time (from 2 s to the step, and from 2 s after it to the end)
    /// during which the limit was below the worker count.
    pub below_workers_steady: f64,
    /// Seconds the limit spent below the worker count in the 2 s after the step.
    pub below_workers_after_step_s: f64,
    /// Lowest limit in the 2 s after the step.
    pub min_limit_after_step: usize,
    step_second: usize,
}

impl StepReport {
    /// Successful calls in the first second after the step.
    pub fn first_second_after_step(&self) -> u64 {
        self.goodput_per_s[self.step_second]
    }

    /// Successful calls over the whole run.
    pub fn total(&self) -> u64 {
        self.goodput_per_s.iter().sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The call with this id finished its service.
    Completion(usize),
    /// The call with this id reached its deadline.
    Deadline(usize),
}

/// A call from arrival to completion or timeout.
struct Call {
    arrival: u64,
    /// When its permit was granted and it joined the backend's queue.
    sent: u64,
    /// How long it waited in the backend's queue for a worker (set when a worker takes it).
    queued: u64,
    permit: Option<OwnedPermit>,
    finished: bool,
}

/// Time-weighted accounting of the limit.
struct LimitAccount {
    last: u64,
    trace: Vec<f64>,
    below_steady: u64,
    steady: u64,
    below_after_step: u64,
    min_after_step: usize,
}

impl LimitAccount {
    /// Accounts for `limit` held from the last event until `now`, interval by interval.
    fn advance(&mut self, scenario: &StepScenario, limit: usize, now: u64) {
        let trace = nanos(TRACE);
        let step = nanos(scenario.step_at);
        let settle = nanos(Duration::from_secs(2));
        while self.last < now {
            let until = now.min((self.last / trace + 1) * trace);
            let span = until - self.last;
            let index = (self.last / trace) as usize;
            if let Some(slot) = self.trace.get_mut(index) {
                *slot += limit as f64 * span as f64 / trace as f64;
            }
            let below = limit < scenario.workers_at(self.last);
            let steady = (self.last >= settle && self.last < step) || self.last >= step + settle;
            if steady {
                self.steady += span;
                self.below_steady += if below { span } else { 0 };
            } else if self.last >= step {
                self.below_after_step += if below { span } else { 0 };
                self.min_after_step = self.min_after_step.min(limit);
            }
            self.last = until;
        }
    }
}

/// Runs `scenario` against one limit algorithm, on a virtual clock.
pub fn simulate_step(
    scenario: &StepScenario,
    algorithm: impl LimitAlgorithm,
    name: String,
) -> Result<StepReport, Box<dyn Error>> {
    let clock = ManualClock::new();
    let limiter = Limiter::builder(algorithm)
        .name(name.clone())
        .clock(clock.clone())
        .build()?;
    let mut rng = SmallRng::seed_from_u64(scenario.seed);
    let mut noise = HostNoise::new(scenario.host_noise, scenario.seed);
    let end = nanos(scenario.end);
    let capacity_per_nano = scenario.workers as f64 / scenario.mean_service_nanos(0);
    let arrival_rate = scenario.offered_load * capacity_per_nano;
    let max_wait = nanos(scenario.max_wait);
    let deadline = nanos(scenario.deadline);

    let mut calls: Vec<Call> = Vec::new();
    let mut events: BinaryHeap<Reverse<(u64, Event)>> = BinaryHeap::new();
    let mut backlog: VecDeque<usize> = VecDeque::new();
    let mut waiting: VecDeque<usize> = VecDeque::new();
    let mut busy = 0_usize;
    let mut next_arrival = 0_u64;
    let mut goodput_per_s = vec![0_u64; scenario.seconds() + 1];
    let mut latencies = Vec::new();
    let (mut timeouts, mut shed) = (0_u64, 0_u64);
    let mut account = LimitAccount {
        last: 0,
        trace: vec![0.0; (end / nanos(TRACE)) as usize + 1],
        below_steady: 0,
        steady: 0,
        below_after_step: 0,
        min_after_step: usize::MAX,
    };

    // Starts serving queued calls while workers are free, noting how long each waited.
    let serve = |now: u64,
                 busy: &mut usize,
                 backlog: &mut VecDeque<usize>,
                 calls: &mut [Call],
                 events: &mut BinaryHeap<Reverse<(u64, Event)>>,
                 rng: &mut SmallRng,
                 noise: &mut HostNoise| {
        while *busy < scenario.workers_at(now) {
            let Some(id) = backlog.pop_front() else {
                break;
            };
            calls[id].queued = now - calls[id].sent;
            let spread = scenario.shape.factor(scenario.jitter, rng);
            let service = (scenario.mean_service_nanos(now) * spread) as u64 + noise.delay(now);
            *busy += 1;
            events.push(Reverse((now + service.max(1), Event::Completion(id))));
        }
    };

    loop {
        let next_event = events.peek().map(|Reverse((at, _))| *at);
        let now = match next_event {
            Some(at) if at <= next_arrival => at,
            _ => next_arrival,
        };
        if now >= end {
            account.advance(scenario, limiter.limit(), end);
            break;
        }
        account.advance(scenario, limiter.limit(), now);
        clock.set_nanos(now);
        if Some(now) == next_event {
            let Some(Reverse((_, event))) = events.pop() else {
                break;
            };
            match event {
                Event::Completion(id) => {
                    busy -= 1;
                    let call = &mut calls[id];
                    if !call.finished {
                        call.finished = true;
                        if let Some(permit) = call.permit.take() {
                            if scenario.reported_queue {
                                permit.success_queued(Duration::from_nanos(call.queued));
                            } else {
                                permit.success();
                            }
                        }
                        goodput_per_s[(now / 1_000_000_000) as usize] += 1;
                        latencies.push((now - call.arrival) as f64 / 1e6);
                    }
                }
                Event::Deadline(id) => {
                    let call = &mut calls[id];
                    if !call.finished {
                        call.finished = true;
                        timeouts += 1;
                        if let Some(permit) = call.permit.take() {
                            permit.dropped();
                        }
                    }
                }
            }
        } else {
            let gap = unit_exponential(&mut rng) / arrival_rate;
            next_arrival = now + gap.max(1.0) as u64;
            calls.push(Call {
                arrival: now,
                sent: 0,
                queued: 0,
                permit: None,
                finished: false,
            });
            waiting.push_back(calls.len() - 1);
        }
        // Grant waiting callers in arrival order; shed those that waited too long.
        while let Some(&id) = waiting.front() {
            if now > calls[id].arrival + max_wait {
                waiting.pop_front();
                calls[id].finished = true;
                shed += 1;
                continue;
            }
            let Ok(permit) = limiter.try_acquire_owned() else {
                break;
            };
            waiting.pop_front();
            calls[id].permit = Some(permit);
            calls[id].sent = now;
            events.push(Reverse((calls[id].arrival + deadline, Event::Deadline(id))));
            backlog.push_back(id);
        }
        serve(
            now,
            &mut busy,
            &mut backlog,
            &mut calls,
            &mut events,
            &mut rng,
            &mut noise,
        );
    }

    latencies.sort_by(f64::total_cmp);
    let percentile = |p: f64| -> f64 {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let index = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[index]
    };
    Ok(StepReport {
        name,
        goodput_per_s,
        limit_trace: account.trace,
        p50_ms: percentile(0.5),
        p99_ms: percentile(0.99),
        timeouts,
        shed,
        below_workers_steady: account.below_steady as f64 / account.steady.max(1) as f64,
        below_workers_after_step_s: account.below_after_step as f64 / 1e9,
        min_limit_after_step: account.min_after_step,
        step_second: scenario.step_at.as_secs() as usize,
    })
}

/// Prints one scenario's reports: a summary table, goodput per second around the step, and the
/// limit per 100 ms from 0.5 s before the step to 1.5 s after it.
pub fn print(scenario: &StepScenario, reports: &[StepReport]) {
    println!(
        "\n{}: {} workers at {:?} -> {} workers at {:?} at {:?} ({}); offered {}x, wait <= {:?}, deadline {:?}, seed {}{}{}",
        scenario.name,
        scenario.workers,
        scenario.service,
        scenario.workers_after,
        scenario.service_after,
        scenario.step_at,
        scenario.shape.describe(scenario.jitter),
        scenario.offered_load,
        scenario.max_wait,
        scenario.deadline,
        scenario.seed,
        if scenario.reported_queue {
            "; the backend reports each call's queueing"
        } else {
            ""
        },
        host_noise::describe(scenario.host_noise)
    );
    println!(
        "{:<10} {:>9} {:>10} {:>7} {:>7} {:>8} {:>7} {:>14} {:>14} {:>9}",
        "limiter",
        "goodput",
        "1st s aft",
        "p50 ms",
        "p99 ms",
        "timeouts",
        "shed",
        "<workers stdy",
        "<workers 2s aft",
        "min aft"
    );
    for r in reports {
        println!(
            "{:<10} {:>9} {:>10} {:>7.1} {:>7.1} {:>8} {:>7} {:>13.2}% {:>13.2}s {:>9}",
            r.name,
            r.total(),
            r.first_second_after_step(),
            r.p50_ms,
            r.p99_ms,
            r.timeouts,
            r.shed,
            r.below_workers_steady * 100.0,
            r.below_workers_after_step_s,
            r.min_limit_after_step
        );
    }
    let step = scenario.step_at.as_secs() as usize;
    println!("goodput per second, from {} s to {} s:", step - 2, step + 3);
    for r in reports {
        let seconds: Vec<String> = r.goodput_per_s[step - 2..step + 3]
            .iter()
            .map(|n| format!("{n:>4}"))
            .collect();
        println!("  {:<10} {}", r.name, seconds.join(" "));
    }
    let per_second = (1_000_000_000 / nanos(TRACE)) as usize;
    let from = step * per_second - per_second / 2;
    println!(
        "limit per 100 ms, from {:.1} s to {:.1} s:",
        from as f64 / per_second as f64,
        (from + 2 * per_second) as f64 / per_second as f64
    );
    for r in reports.iter().filter(|r| !r.name.starts_with("fixed")) {
        let trace: Vec<String> = r.limit_trace[from..from + 2 * per_second]
            .iter()
            .map(|limit| format!("{limit:>4.1}"))
            .collect();
        println!("  {:<10} {}", r.name, trace.join(" "));
    }
}

/// The reports as JSON.
pub fn json(scenario: &StepScenario, reports: &[StepReport]) -> serde_json::Value {
    let round = |value: f64| (value * 1000.0).round() / 1000.0;
    let limiters: Vec<_> = reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "goodput": r.total(),
                "goodput_first_second_after_step": r.first_second_after_step(),
                "goodput_per_s": r.goodput_per_s,
                "p50_ms": round(r.p50_ms),
                "p99_ms": round(r.p99_ms),
                "timeouts": r.timeouts,
                "shed": r.shed,
                "below_workers_steady_share": round(r.below_workers_steady),
                "below_workers_after_step_s": round(r.below_workers_after_step_s),
                "min_limit_after_step": r.min_limit_after_step,
                "limit_per_100ms": r.limit_trace.iter().map(|l| round(*l)).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "scenario": scenario.name,
        "reported_queue": scenario.reported_queue,
        "host_noise_ms": scenario.host_noise.as_secs_f64() * 1e3,
        "service_jitter": scenario.jitter,
        "service_shape": scenario.shape.name(),
        "limiters": limiters,
    })
}
