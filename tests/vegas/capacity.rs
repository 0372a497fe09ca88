//! Vegas against a dependency whose capacity steps down: a slower service time at the same
//! concurrency must be re-learned without collapsing the limit; fewer slots must still be cut to.

use crate::common;

use std::time::Duration;

use common::{Dependency, sample};
use flowguard::vegas::{LimitAlgorithm, LimitBounds, Outcome, Vegas};

/// Feeds `samples` samples from `dependency` to a caller that always uses the whole limit, and
/// answers the limit after each.
fn drive(vegas: &mut Vegas, dependency: Dependency, samples: usize) -> Vec<usize> {
    (0..samples)
        .map(|_| {
            let limit = vegas.limit();
            vegas.update(&sample(
                dependency.rtt_micros(limit),
                limit,
                Outcome::Success,
            ))
        })
        .collect()
}

/// Asserts that every limit in `limits` is 4, 5 or 6: the 4 slots kept busy, a small queue.
fn assert_keeps_four_slots_busy(limits: &[usize], what: &str) {
    assert!(
        limits.iter().all(|&limit| (4..=6).contains(&limit)),
        "{what}: limits {:?}",
        limits.iter().min()..=limits.iter().max()
    );
}

/// The longest run of consecutive samples with the limit below `floor`.
fn longest_run_below(limits: &[usize], floor: usize) -> usize {
    limits
        .split(|&limit| limit >= floor)
        .map(<[usize]>::len)
        .max()
        .unwrap_or(0)
}

const FOUR_SLOTS: Dependency = Dependency {
    slots: 4,
    service_micros: 10_000,
};

/// Vegas with default settings, starting below the slots (as a caller ramping up does, so its
/// first window is unloaded).
fn vegas() -> Vegas {
    Vegas::builder()
        .bounds(LimitBounds::new(1, 1000, 2).unwrap())
        .build()
        .unwrap()
}

/// [`vegas`] settled against FOUR_SLOTS.
fn settled() -> Vegas {
    let mut vegas = vegas();
    drive(&mut vegas, FOUR_SLOTS, 2_000);
    vegas
}

#[test]
fn a_small_dependency_keeps_its_slots_busy_in_steady_state() {
    let mut vegas = settled();
    let limits = drive(&mut vegas, FOUR_SLOTS, 4_000);
    assert_keeps_four_slots_busy(&limits, "steady state");
}

#[test]
fn a_slower_service_time_is_relearned_without_collapsing_the_limit() {
    let mut vegas = settled();
    let slower = Dependency {
        service_micros: 25_000,
        ..FOUR_SLOTS
    };
    let limits = drive(&mut vegas, slower, 400);
    // The stale 10 ms baseline makes the first windows look queued; the cut that follows is
    // judged by the RTT after it, and reverted within one short window.
    let below = longest_run_below(&limits, slower.slots);
    assert!(below <= 8, "limit below the 4 slots for {below} samples");
    assert!(
        limits.iter().all(|&limit| limit >= 2),
        "limit fell to {:?}",
        limits.iter().min()
    );
    assert_eq!(vegas.rtt_base(), Some(Duration::from_millis(25)));
    assert_keeps_four_slots_busy(&limits[200..], "after the re-learn");
}

#[test]
fn after_a_raise_to_a_slower_dependency_the_limit_holds_32_rounds_before_it_grows() {
    // The dependency moves to slower machines, and more of them: 8 slots of 25 ms where there
    // were 4 of 10 ms. The cut the stale baseline causes shows the slower service time, and the
    // raise restores the concurrency at which the congestion began. In a fleet the same reading
    // can be a queue the others built at once, so the limit holds there for 32 rounds, growing
    // to the new slots only after that.
    let mut vegas = settled();
    let slower_and_wider = Dependency {
        slots: 8,
        service_micros: 25_000,
    };
    let mut samples = 0;
    while vegas.rtt_base() != Some(Duration::from_millis(25)) {
        assert!(samples < 400, "not re-learned after {samples} samples");
        let limit = vegas.limit();
        vegas.update(&sample(
            slower_and_wider.rtt_micros(limit),
            limit,
            Outcome::Success,
        ));
        samples += 1;
    }
    let restored = vegas.limit();
    assert!((4..=6).contains(&restored), "restored to {restored}");
    let limits = drive(&mut vegas, slower_and_wider, 3_000);
    // 32 rounds of `restored` calls, less the window that may span the end of the hold.
    let held = 32 * restored - 16;
    assert!(
        limits[..held].iter().all(|&limit| limit <= restored),
        "grew within the hold: {:?}",
        limits[..held].iter().max()
    );
    assert!(
        limits[2_000..].iter().all(|&limit| limit >= 8),
        "did not grow to the 8 slots after it: {:?}",
        limits[2_000..].iter().min()
    );
}

#[test]
fn fewer_slots_are_cut_to_and_the_baseline_stays() {
    let mut vegas = vegas();
    let eight = Dependency {
        slots: 8,
        ..FOUR_SLOTS
    };
    drive(&mut vegas, eight, 2_000);
    let limits = drive(&mut vegas, FOUR_SLOTS, 1_000);
    assert_eq!(
        vegas.rtt_base(),
        Some(Duration::from_millis(10)),
        "the queue after losing slots is a real queue, not a slower dependency"
    );
    assert_keeps_four_slots_busy(&limits[500..], "after losing 4 of 8 slots");
}

#[test]
fn drops_still_halve_the_limit_after_a_relearn() {
    let mut vegas = settled();
    let slower = Dependency {
        service_micros: 25_000,
        ..FOUR_SLOTS
    };
    drive(&mut vegas, slower, 400);
    let before = vegas.limit();
    let after = vegas.update(&sample(1_000, before, Outcome::Dropped));
    assert_eq!(after, before / 2);
}

#[test]
fn a_dependency_that_slows_while_the_caller_is_light_is_relearned_once_it_is_busy() {
    // A caller with one call at a time (the default limit starts at 1 and stays small, since
    // growth needs use) sees the dependency slow down 2.5x. At one call in flight it cannot cut
    // or probe lower, so its baseline stays at 10 ms. When its traffic picks up, the limit must
    // still reach the four slots: the stale baseline is found out by trying one call more.
    let mut vegas = Vegas::new();
    let slower = Dependency {
        service_micros: 25_000,
        ..FOUR_SLOTS
    };
    for (dependency, samples) in [(FOUR_SLOTS, 200), (slower, 400)] {
        for _ in 0..samples {
            vegas.update(&sample(dependency.rtt_micros(1), 1, Outcome::Success));
        }
    }
    let limits = drive(&mut vegas, slower, 3_000);
    assert_eq!(vegas.rtt_base(), Some(Duration::from_millis(25)));
    assert_keeps_four_slots_busy(&limits[2_000..], "once the caller is busy");
}

#[test]
fn an_rtt_that_grows_with_the_load_below_the_slots_does_not_hold_the_limit_below_them() {
    // 8 slots of 10 ms on a busy host: every call in flight adds 2 % to the RTT, queued or
    // not (11.4 ms with 7 in flight), as on a machine whose cores serve client and dependency.
    // Read as a queue, that would keep the limit below the 8 slots; a cut that leaves the RTT
    // where it was shows it is not one.
    let rtt = |in_flight: usize| {
        let busy = 10_000.0 * (1.0 + 0.02 * in_flight as f64);
        (busy * (in_flight as f64 / 8.0).max(1.0)) as u64
    };
    let mut vegas = Vegas::new();
    let mut limits = Vec::new();
    for _ in 0..20_000 {
        let limit = vegas.limit();
        limits.push(vegas.update(&sample(rtt(limit), limit, Outcome::Success)));
    }
    let settled = &limits[10_000..];
    let below = settled.iter().filter(|&&limit| limit < 8).count();
    assert!(
        below * 100 <= settled.len(),
        "below the 8 slots in {below} of {} samples, limits {:?}",
        settled.len(),
        settled.iter().min()..=settled.iter().max()
    );
    assert!(
        settled.iter().all(|&limit| limit <= 12),
        "{:?}",
        settled.iter().max()
    );
}

/// A window whose calls were granted while the concurrency still rose (a burst filling the
/// permits, or slow start overshooting) has the RTT of its least loaded calls as its low
/// percentile: here the calls granted with 9 in flight, in front of 4 slots, 20.6 ms. Judged from
/// the window's mean concurrency (10.8) instead, the 20 ms after the cut to 8 looked too slow
/// for a queue and the baseline was raised to it: alone in front of the dependency, the limit
/// then held twice the slots, with a queue as long as the slots.
#[test]
fn a_queue_built_by_a_burst_is_not_taken_for_a_slower_dependency() {
    let mut vegas = Vegas::builder()
        .bounds(LimitBounds::new(1, 1000, 16).unwrap())
        .build()
        .unwrap();
    // The first calls come one at a time: 10 ms, the baseline.
    for _ in 0..16 {
        vegas.update(&sample(10_000, 1, Outcome::Success));
    }
    // Then a burst fills the 16 permits: granted at 9 to 16 in flight (mean 10.8), each call
    // behind the calls ahead of it, which were a quarter served on average.
    let burst = [9, 9, 9, 9, 9, 9, 10, 10, 10, 11, 11, 12, 13, 14, 15, 16];
    for in_flight in burst {
        let rtt = FOUR_SLOTS.rtt_micros(in_flight) - 2_500;
        vegas.update(&sample(rtt, in_flight, Outcome::Success));
    }
    assert!(vegas.limit() < 10, "the queue is cut: {}", vegas.limit());
    let limits = drive(&mut vegas, FOUR_SLOTS, 2_000);
    assert_eq!(
        vegas.rtt_base(),
        Some(Duration::from_millis(10)),
        "the queue the burst built is not the baseline"
    );
    assert_keeps_four_slots_busy(&limits[1_000..], "after the burst");
}

#[test]
fn a_limit_held_at_its_floor_by_a_baseline_a_little_too_low_grows_once_the_dependency_is_idle() {
    // A lucky first window sets the baseline at 10.43 ms; drops (another caller's overload) then
    // take the limit to its floor. Once the dependency is idle, the RTT at one call is 11.2 ms:
    // 7 % above the baseline, inside the band, so the window neither grows nor cuts the limit.
    // On real sockets an instance held 1 permit for 7 s that way, three of four workers idle.
    let mut vegas = Vegas::new();
    for _ in 0..16 {
        vegas.update(&sample(10_430, 1, Outcome::Success));
    }
    assert!(vegas.limit() > 1, "slow start: {}", vegas.limit());
    for _ in 0..1_000 {
        if vegas.limit() == 1 {
            break;
        }
        let limit = vegas.limit();
        vegas.update(&sample(10_430, limit, Outcome::Dropped));
    }
    assert_eq!(vegas.limit(), 1);
    let limits: Vec<usize> = (0..2_000)
        .map(|_| {
            let limit = vegas.limit();
            vegas.update(&sample(11_200, limit, Outcome::Success))
        })
        .collect();
    assert!(
        limits[1_000..].iter().all(|&limit| limit >= 4),
        "limits {:?}",
        &limits[limits.len() - 20..]
    );
}
