//! Vegas in a fleet: four instances, each with a limiter of its own, share one backend of four
//! workers. A deterministic simulation on a `ManualClock` (fixed seeds, no wall clock): the
//! instances must settle at fair shares with a short queue, and a late joiner must get its share
//! within 3 simulated seconds; eight instances in front of the same four workers, and two in
//! front of 128 workers, must share evenly too. Alone, the same defaults keep what holds for one instance: one
//! lucky sample or a burst of fast failures does not collapse the limit, and it grows only when
//! used.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use crate::common::{Dependency, Rng, sample};
use flowguard::clock::ManualClock;
use flowguard::vegas::{LimitAlgorithm, LimitBounds, Limiter, Outcome, OwnedPermit, Vegas};

const INSTANCES: usize = 4;
const WORKERS: usize = 4;
const SERVICE_NANOS: f64 = 10e6;
/// The instances offer 3x the backend's capacity in total, whatever their number.
const OVERLOAD: f64 = 3.0;
const MAX_WAIT: u64 = 50_000_000;
const SECOND: u64 = 1_000_000_000;
/// The last instance joins here; the run ends at `END`.
const JOIN_AT: u64 = 6 * SECOND;
const END: u64 = 14 * SECOND;
/// Fairness and the sum of the limits are judged from here to the end.
const JUDGED_FROM: u64 = 8 * SECOND;
const WINDOW: u64 = SECOND / 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Completion(usize),
    Arrival(usize),
}

struct Call {
    instance: usize,
    arrival: u64,
    permit: Option<OwnedPermit>,
}

/// What the run measured.
struct Fleet {
    /// Successful calls per instance while judged.
    judged: Vec<u64>,
    /// Mean sum of the limits while judged, sampled at every event.
    limit_sum: f64,
    /// Successful calls per instance per [`WINDOW`].
    windows: Vec<Vec<u64>>,
}

/// The first instances start a second apart; the last joins at [`JOIN_AT`].
fn start_of(instance: usize, instances: usize) -> u64 {
    if instance == instances - 1 {
        JOIN_AT
    } else {
        instance as u64 * SECOND
    }
}

/// Runs [`INSTANCES`] instances with the arrivals and service times of seed 7, one limiter per
/// instance built by `vegas`.
fn run(vegas: impl Fn() -> Vegas) -> Fleet {
    run_fleet(INSTANCES, WORKERS, 7, vegas)
}

/// Runs `instances` instances in front of `workers` workers, with the arrivals and service times
/// of `seed`, one limiter per instance built by `vegas`.
fn run_fleet(instances: usize, workers: usize, seed: u64, vegas: impl Fn() -> Vegas) -> Fleet {
    let rate_per_nano = OVERLOAD * workers as f64 / SERVICE_NANOS / instances as f64;
    let clock = ManualClock::new();
    let limiters: Vec<Limiter> = (0..instances)
        .map(|_| {
            Limiter::builder(vegas())
                .clock(clock.clone())
                .build()
                .unwrap()
        })
        .collect();
    let mut rng = Rng(seed);
    let mut events = BinaryHeap::new();
    for instance in 0..instances {
        events.push(Reverse((
            start_of(instance, instances),
            Event::Arrival(instance),
        )));
    }
    let mut calls: Vec<Call> = Vec::new();
    let mut waiting: Vec<VecDeque<usize>> = vec![VecDeque::new(); instances];
    let mut backlog: VecDeque<usize> = VecDeque::new();
    let mut busy = 0;
    let mut fleet = Fleet {
        judged: vec![0; instances],
        limit_sum: 0.0,
        windows: vec![vec![0; instances]; (END / WINDOW) as usize + 1],
    };
    let (mut sum, mut observations) = (0.0, 0_u64);
    while let Some(Reverse((now, event))) = events.pop() {
        if now >= END {
            break;
        }
        clock.set_nanos(now);
        match event {
            Event::Completion(id) => {
                busy -= 1;
                let call = &mut calls[id];
                if let Some(permit) = call.permit.take() {
                    permit.success();
                }
                fleet.windows[(now / WINDOW) as usize][call.instance] += 1;
                if now >= JUDGED_FROM {
                    fleet.judged[call.instance] += 1;
                }
            }
            Event::Arrival(instance) => {
                calls.push(Call {
                    instance,
                    arrival: now,
                    permit: None,
                });
                waiting[instance].push_back(calls.len() - 1);
                let gap = -(1.0 - rng.next()).ln() / rate_per_nano;
                events.push(Reverse((now + gap as u64 + 1, Event::Arrival(instance))));
            }
        }
        for (instance, queue) in waiting.iter_mut().enumerate() {
            while let Some(&id) = queue.front() {
                if now > calls[id].arrival + MAX_WAIT {
                    queue.pop_front();
                    continue;
                }
                let Ok(permit) = limiters[instance].try_acquire_owned() else {
                    break;
                };
                queue.pop_front();
                calls[id].permit = Some(permit);
                backlog.push_back(id);
            }
        }
        while busy < workers {
            let Some(id) = backlog.pop_front() else {
                break;
            };
            busy += 1;
            let service = SERVICE_NANOS * (0.9 + 0.2 * rng.next());
            events.push(Reverse((now + service as u64, Event::Completion(id))));
        }
        if now >= JUDGED_FROM {
            sum += limiters.iter().map(Limiter::limit).sum::<usize>() as f64;
            observations += 1;
        }
    }
    fleet.limit_sum = sum / observations as f64;
    fleet
}

fn jain(values: &[u64]) -> f64 {
    let sum: f64 = values.iter().map(|&x| x as f64).sum();
    let squares: f64 = values.iter().map(|&x| (x as f64).powi(2)).sum();
    sum * sum / (values.len() as f64 * squares)
}

/// Each instance's algorithm: Vegas with its defaults, as a `Guard` builds it.
fn fleet_vegas() -> Vegas {
    Vegas::new()
}

#[test]
fn four_instances_settle_at_fair_shares_with_a_short_queue() {
    let fleet = run(fleet_vegas);
    let index = jain(&fleet.judged);
    assert!(index >= 0.95, "Jain's index {index}: {:?}", fleet.judged);
    // Four workers: limits that add up to 4..8 keep them busy with at most as many queued
    // (measured: 6.4, Jain 0.999; the limits of the earlier default, which grew in proportion
    // to the limit and kept one call queued per instance, added up to 23.7).
    assert!(
        (4.0..=8.0).contains(&fleet.limit_sum),
        "the limits add up to {} in front of {WORKERS} workers",
        fleet.limit_sum
    );
    // And the backend stays busy: at least 95 % of its capacity is served.
    let served: u64 = fleet.judged.iter().sum();
    let capacity = (END - JUDGED_FROM) as f64 / SERVICE_NANOS * WORKERS as f64;
    assert!(served as f64 >= 0.95 * capacity, "{served} of {capacity}");
}

#[test]
fn a_late_joiner_gets_80_percent_of_its_share_within_3_seconds() {
    let fleet = run(fleet_vegas);
    let newcomer = INSTANCES - 1;
    let first = (JOIN_AT / WINDOW) as usize;
    let reached = |window: &[u64]| {
        let fair = window.iter().sum::<u64>() as f64 / INSTANCES as f64;
        window[newcomer] as f64 >= 0.8 * fair
    };
    let within = first + (3 * SECOND / WINDOW) as usize;
    let at = (first..within)
        .find(|&w| reached(&fleet.windows[w]) && reached(&fleet.windows[w + 1]))
        .map(|w| (w + 1 - first) as f64 * WINDOW as f64 / 1e9);
    assert!(at.is_some(), "{:?}", &fleet.windows[first..within + 1]);
    // Once there, it keeps its share: over the last 4 s it holds 80 % of it.
    let last = fleet.windows.len() - 1;
    let mut total = vec![0; INSTANCES];
    for window in &fleet.windows[last - 8..last] {
        for (sum, calls) in total.iter_mut().zip(window) {
            *sum += calls;
        }
    }
    assert!(reached(&total), "{total:?}");
}

/// 8 slots of 10 ms, as one instance alone sees them.
const ALONE: Dependency = Dependency {
    slots: 8,
    service_micros: 10_000,
};

/// Vegas settled alone in front of [`ALONE`], starting below the slots.
fn settled_alone() -> (Vegas, usize) {
    let mut vegas = Vegas::builder()
        .bounds(LimitBounds::new(1, 500, 4).unwrap())
        .build()
        .unwrap();
    let limit = ALONE.drive(&mut vegas, 1_000);
    assert!((ALONE.slots..=ALONE.slots + 2).contains(&limit), "{limit}");
    (vegas, limit)
}

#[test]
fn alone_one_fast_sample_or_a_burst_of_fast_failures_does_not_collapse_the_limit() {
    let (mut vegas, before) = settled_alone();
    vegas.update(&sample(1, before, Outcome::Success));
    let after = ALONE.drive(&mut vegas, 20);
    assert!(after >= ALONE.slots, "one 1 us sample: {after}");
    assert_eq!(vegas.rtt_base(), Some(Duration::from_millis(10)));

    let (mut vegas, before) = settled_alone();
    for _ in 0..before {
        vegas.update(&sample(1, before, Outcome::Dropped));
    }
    assert_eq!(
        vegas.limit(),
        before / 2,
        "one multiplicative cut per round"
    );
    assert_eq!(vegas.rtt_base(), Some(Duration::from_millis(10)));
    let recovered = ALONE.drive(&mut vegas, 100);
    assert!(recovered >= ALONE.slots, "back to {recovered}");
}

#[test]
fn alone_the_limit_grows_only_while_half_of_it_is_used() {
    let (mut vegas, before) = settled_alone();
    // A caller that uses a quarter of the limit, with no queue at all. The window that spans
    // the change still had half of its calls at the whole limit, and may grow it once.
    for _ in 0..100 {
        vegas.update(&sample(10_000, before / 4, Outcome::Success));
    }
    let switched = vegas.limit();
    assert!(switched <= before + 2, "{switched} from {before}");
    for _ in 0..2_000 {
        vegas.update(&sample(10_000, before / 4, Outcome::Success));
    }
    assert!(
        vegas.limit() <= switched,
        "{} from {switched}",
        vegas.limit()
    );
}

/// The 4 workers of 10 ms the fleet shares: a newcomer's call waits behind the calls the other
/// instances keep in flight as well as its own.
const SHARED: Dependency = Dependency {
    slots: WORKERS,
    service_micros: 10_000,
};

#[test]
fn a_newcomer_does_not_take_the_fleets_queue_for_its_baseline() {
    // Three instances keep 5 calls in flight, so a newcomer's first calls, one at a time, take
    // 15 ms: its first baseline already holds a call's worth of their queue. Slow start then
    // overshoots and cuts; the RTT after the cut falls by less than the newcomer's own share of
    // the queue (the rest is the others'), which reads as a slower dependency. Raised at once,
    // the baseline would take that queue in and the cut would be undone.
    let mut vegas = Vegas::new();
    let mut limits = Vec::new();
    for _ in 0..400 {
        let limit = vegas.limit();
        let rtt = SHARED.rtt_micros(5 + limit);
        limits.push(vegas.update(&sample(rtt, limit, Outcome::Success)));
    }
    let base = vegas.rtt_base().expect("learned");
    assert!(
        base <= Duration::from_millis(15),
        "the baseline rose to {base:?}: limits {:?}",
        &limits[limits.len() - 20..]
    );
    let settled = &limits[200..];
    assert!(
        settled.iter().all(|&limit| limit <= 3),
        "limits {:?}",
        settled.iter().min()..=settled.iter().max()
    );
}

/// The low percentile of a window on real sockets, in front of 4 workers at about 11.2 ms, with
/// `q` calls queued: `overload --fleet 2` measured +1 % for 1, +7 % for 2, +18 % for 3 and +46 %
/// for 4 (medians of the windows), which `2 % * q * q` follows up to 3. The least loaded calls
/// of a window wait least, so a queue shorter than the workers barely shows, and 1 or 2 calls
/// queued read inside the band; a longer one shows in full, about a service time per round of
/// workers.
fn window_low_micros(total_in_flight: usize) -> u64 {
    let queued = total_in_flight.saturating_sub(WORKERS) as f64;
    let longer = (queued - 2.0).max(0.0) / WORKERS as f64;
    (11_200.0 * (1.0 + (0.02 * queued * queued).max(longer))) as u64
}

#[test]
fn two_instances_that_read_the_same_queue_share_converge_to_equal_limits() {
    // An incumbent has the dependency to itself and settles; a newcomer joins at 1 permit. Both
    // read the same RTT, so the same share of it queued. Counted as a share alone, that says
    // nothing about who should give way: the newcomer held 1 permit inside the band beside an
    // incumbent at 5-6. Counted in calls of one's own (at least a quarter of a call), the
    // smaller instance grows where the larger one holds.
    let mut incumbent = Vegas::new();
    for _ in 0..2_000 {
        let limit = incumbent.limit();
        for _ in 0..limit {
            incumbent.update(&sample(window_low_micros(limit), limit, Outcome::Success));
        }
    }
    let alone = incumbent.limit();
    assert!(alone >= WORKERS, "alone it keeps the workers busy: {alone}");
    let mut newcomer = Vegas::new();
    let mut pairs = Vec::new();
    for _ in 0..3_000 {
        let (a, b) = (incumbent.limit(), newcomer.limit());
        let rtt = window_low_micros(a + b);
        for _ in 0..a {
            incumbent.update(&sample(rtt, a, Outcome::Success));
        }
        for _ in 0..b {
            newcomer.update(&sample(rtt, b, Outcome::Success));
        }
        pairs.push((incumbent.limit(), newcomer.limit()));
    }
    let settled = &pairs[2_000..];
    let (sum_a, sum_b) = settled
        .iter()
        .fold((0, 0), |(x, y), &(a, b)| (x + a, y + b));
    let (mean_a, mean_b) = (
        sum_a as f64 / settled.len() as f64,
        sum_b as f64 / settled.len() as f64,
    );
    assert!(
        mean_a.min(mean_b) >= 0.6 * mean_a.max(mean_b),
        "mean limits {mean_a:.2} and {mean_b:.2} (alone {alone}); last {:?}",
        &pairs[pairs.len() - 10..]
    );
    assert!(
        mean_a + mean_b <= 2.0 * WORKERS as f64,
        "the queue stays short: {:.2}",
        mean_a + mean_b
    );
}

#[test]
fn more_instances_than_workers_agree_on_a_baseline_and_share_evenly() {
    // 8 instances in front of 4 workers: each holds at least one permit, so the queue never
    // drains and none can learn the unloaded RTT. The instances at their floor take the RTT of
    // one call in front of the others' queue for their baseline (a trial of one call more showed
    // the queue was not theirs), as the late joiner did when it started, and so agree with it.
    // Each keeping the baseline its history gave it, 5 of these 20 seeds fell below 0.95 (0.871
    // at the least) and the late joiner took the largest share; now 0.959 at the least.
    // The queue stays short: about two permits each at the most (measured 13.0-17.4).
    assert_even_with_a_short_queue(8, WORKERS, 20, 20.0);
}

/// Runs `instances` in front of `workers` for seeds 1 to `seeds` and asserts that every run
/// shares evenly (Jain's index at least 0.95) with the limits adding up to `max_limit_sum` at the
/// most.
fn assert_even_with_a_short_queue(
    instances: usize,
    workers: usize,
    seeds: u64,
    max_limit_sum: f64,
) {
    for seed in 1..=seeds {
        let fleet = run_fleet(instances, workers, seed, fleet_vegas);
        let index = jain(&fleet.judged);
        assert!(
            index >= 0.95,
            "seed {seed}: Jain's index {index}: {:?}",
            fleet.judged
        );
        assert!(
            fleet.limit_sum <= max_limit_sum,
            "seed {seed}: the limits add up to {} in front of {workers} workers",
            fleet.limit_sum
        );
    }
}

#[test]
fn two_instances_in_front_of_many_workers_share_evenly() {
    // 2 instances in front of 128 workers, at tens of permits each. Windows of half the limit
    // made the larger instance's reading the steadier one (more calls per window), so the
    // smaller one crossed the band and cut more often and stayed smaller: 8 of these 12 seeds
    // fell below 0.95 (0.757 at the least). The windows that read the queue now hold an eighth
    // of the limit, at least 16 calls: up to 128 permits both read windows of 16 calls, which
    // scatter alike, and the larger one reads (and cuts) more often. Now 0.970 at the least.
    // The queue stays short: the limits add up to the workers and a band of a few percent
    // (measured 133-136).
    assert_even_with_a_short_queue(2, 128, 12, 1.2 * 128.0);
}
