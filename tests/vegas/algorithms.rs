//! The pure limit algorithms: bounds, robustness of the Vegas baseline, cuts and growth.

use crate::common;

use std::time::Duration;

use common::{Dependency, Rng, busy_rounds, sample};
use flowguard::vegas::{
    Aimd, ConfigError, Fixed, Gradient, LimitAlgorithm, LimitBounds, Outcome, Vegas, VegasBuilder,
};
use proptest::prelude::*;

const DEPENDENCY: Dependency = Dependency {
    slots: 40,
    service_micros: 10_000,
};

/// The default Vegas, but starting at `limit` (bounds `[1, 1000]`).
fn vegas_starting_at(limit: usize) -> Vegas {
    Vegas::builder()
        .bounds(LimitBounds::new(1, 1000, limit).unwrap())
        .build()
        .unwrap()
}

fn vegas() -> Vegas {
    Vegas::builder()
        .bounds(LimitBounds::new(1, 500, 10).unwrap())
        .build()
        .unwrap()
}

/// The limit Vegas settles at against DEPENDENCY: a few calls above the slots.
fn converged() -> (Vegas, usize) {
    let mut vegas = vegas();
    let limit = DEPENDENCY.drive(&mut vegas, 300);
    assert!(
        (DEPENDENCY.slots..=DEPENDENCY.slots + 25).contains(&limit),
        "settles a small queue above the {} slots, got {limit}",
        DEPENDENCY.slots
    );
    (vegas, limit)
}

#[test]
fn vegas_settles_just_above_the_dependency_capacity() {
    let (vegas, _) = converged();
    let base = vegas.rtt_base().unwrap();
    assert_eq!(base, Duration::from_micros(DEPENDENCY.service_micros));
}

#[test]
fn one_1us_sample_does_not_poison_the_baseline() {
    let (mut vegas, before) = converged();
    vegas.update(&sample(1, before, Outcome::Success));
    let after = DEPENDENCY.drive(&mut vegas, 20);
    assert_eq!(
        vegas.rtt_base(),
        Some(Duration::from_micros(DEPENDENCY.service_micros))
    );
    assert!(after >= DEPENDENCY.slots, "limit collapsed to {after}");
}

#[test]
fn a_burst_of_fast_failures_costs_one_cut_not_a_collapse() {
    let (mut vegas, before) = converged();
    for _ in 0..before {
        vegas.update(&sample(1, before, Outcome::Dropped));
    }
    assert_eq!(
        vegas.limit(),
        before / 2,
        "one multiplicative cut per round"
    );
    assert_eq!(
        vegas.rtt_base(),
        Some(Duration::from_micros(DEPENDENCY.service_micros)),
        "fast failures never feed the baseline"
    );
    let recovered = DEPENDENCY.drive(&mut vegas, 30);
    assert!(recovered >= DEPENDENCY.slots, "back to {recovered}");
}

#[test]
fn sustained_drops_keep_cutting_round_after_round() {
    let (mut vegas, before) = converged();
    for _ in 0..4 {
        let limit = vegas.limit();
        for _ in 0..limit.max(1) {
            vegas.update(&sample(5_000, limit, Outcome::Dropped));
        }
    }
    assert!(
        vegas.limit() <= before / 8,
        "{} after 4 rounds of drops",
        vegas.limit()
    );
}

#[test]
fn the_limit_only_grows_while_the_caller_uses_half_of_it() {
    let mut vegas = vegas();
    // 100 rounds' worth (the first periodic probe comes after 500).
    for _ in 0..1_000 {
        vegas.update(&sample(10_000, 4, Outcome::Success));
    }
    assert_eq!(
        vegas.limit(),
        10,
        "4 in flight of 10 is below half: no growth"
    );
    busy_rounds(&mut vegas, 20, 10_000);
    assert!(vegas.limit() > 10);
}

#[test]
fn a_slower_dependency_is_relearned_and_the_limit_recovers() {
    let (mut vegas, _) = converged();
    let slow = Dependency {
        service_micros: 3 * DEPENDENCY.service_micros,
        ..DEPENDENCY
    };
    let limit = slow.drive(&mut vegas, 40);
    let base = vegas.rtt_base().unwrap();
    assert_eq!(base, Duration::from_micros(slow.service_micros));
    assert!(
        limit >= slow.slots,
        "concurrency capacity did not change, limit {limit}"
    );
}

#[test]
fn a_faster_dependency_is_relearned_from_unloaded_samples() {
    let (mut vegas, _) = converged();
    let fast = Dependency {
        service_micros: DEPENDENCY.service_micros / 2,
        ..DEPENDENCY
    };
    let limit = fast.drive(&mut vegas, 60);
    assert_eq!(
        vegas.rtt_base(),
        Some(Duration::from_micros(fast.service_micros))
    );
    assert!((fast.slots..=fast.slots + 25).contains(&limit), "{limit}");
}

#[test]
fn periodic_probes_do_not_creep_the_baseline_upwards() {
    let (mut vegas, _) = converged();
    // Thousands of rounds: many periodic probes, each at reduced concurrency.
    let limit = DEPENDENCY.drive(&mut vegas, 3_000);
    assert_eq!(
        vegas.rtt_base(),
        Some(Duration::from_micros(DEPENDENCY.service_micros))
    );
    assert!(
        limit <= DEPENDENCY.slots + 25,
        "queue crept up: limit {limit}"
    );
}

#[test]
fn invalid_vegas_settings_are_typed_errors() {
    let bad = |builder: VegasBuilder| builder.build().unwrap_err();
    assert!(matches!(
        bad(Vegas::builder().alpha(6.0).beta(6.0)),
        ConfigError::AlphaNotBelowBeta { .. }
    ));
    let error = bad(Vegas::builder().backoff_ratio(1.0));
    assert!(error.to_string().contains("backoff_ratio"), "{error}");
    let error = bad(Vegas::builder().window_rounds(0.25));
    assert!(
        error.to_string().contains("window_rounds") && error.to_string().contains("[0.5, 64]"),
        "{error}"
    );
    let error = bad(Vegas::builder().band_growth(-0.5));
    assert!(
        error.to_string().contains("band_growth") && error.to_string().contains("[0, 1]"),
        "{error}"
    );
    assert!(matches!(
        bad(Vegas::builder().smoothing(f64::NAN)),
        ConfigError::OutOfRange {
            field: "smoothing",
            ..
        }
    ));
    assert!(matches!(
        LimitBounds::new(10, 5, 7),
        Err(ConfigError::MinAboveMax { min: 10, max: 5 })
    ));
    assert!(matches!(
        LimitBounds::new(0, 5, 1),
        Err(ConfigError::ZeroLimit { field: "min" })
    ));
    assert!(matches!(
        LimitBounds::new(2, 5, 9),
        Err(ConfigError::InitialOutOfRange { .. })
    ));
    assert!(Fixed::new(0).is_err());
    assert!(
        Aimd::builder()
            .latency_threshold(Duration::ZERO)
            .build()
            .is_err()
    );
    assert!(Gradient::builder().rtt_tolerance(0.5).build().is_err());
}

#[test]
fn aimd_adds_per_round_and_multiplies_on_drops() {
    let mut aimd = Aimd::builder()
        .bounds(LimitBounds::new(1, 100, 10).unwrap())
        .latency_threshold(Duration::from_millis(50))
        .build()
        .unwrap();
    assert_eq!(busy_rounds(&mut aimd, 5, 10_000), 15);
    assert_eq!(aimd.update(&sample(1_000, 15, Outcome::Dropped)), 13);
    assert_eq!(
        aimd.update(&sample(60_000, 13, Outcome::Success)),
        12,
        "slower than the latency threshold counts as a drop"
    );
}

#[test]
fn gradient_shrinks_when_latency_rises_above_its_average() {
    let mut gradient = Gradient::builder()
        .bounds(LimitBounds::new(1, 1000, 50).unwrap())
        .build()
        .unwrap();
    busy_rounds(&mut gradient, 3, 10_000);
    let before = gradient.limit();
    busy_rounds(&mut gradient, 1, 40_000);
    assert!(gradient.limit() < before);
}

fn bounds() -> impl Strategy<Value = LimitBounds> {
    (1usize..50, 0usize..200, 0usize..200).prop_map(|(min, span, offset)| {
        let max = min + span;
        LimitBounds::new(min, max, min + offset.min(span)).unwrap()
    })
}

fn samples() -> impl Strategy<Value = Vec<(u64, usize, u8)>> {
    prop::collection::vec((1u64..2_000_000, 1usize..600, 0u8..3), 1..1_500)
}

fn outcome(code: u8) -> Outcome {
    match code {
        0 => Outcome::Success,
        1 => Outcome::Dropped,
        _ => Outcome::Ignored,
    }
}

fn check_bounds(
    mut algorithm: impl LimitAlgorithm,
    bounds: LimitBounds,
    feed: &[(u64, usize, u8)],
) {
    assert!((bounds.min()..=bounds.max()).contains(&algorithm.limit()));
    for &(rtt, in_flight, code) in feed {
        let limit = algorithm.update(&sample(rtt, in_flight, outcome(code)));
        assert_eq!(limit, algorithm.limit());
        assert!(
            (bounds.min()..=bounds.max()).contains(&limit),
            "{} left [{}, {}]: {limit}",
            algorithm.name(),
            bounds.min(),
            bounds.max()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_algorithm_keeps_its_limit_in_bounds(bounds in bounds(), feed in samples(), scaled: bool) {
        let vegas = Vegas::builder().bounds(bounds).log10_scaling(scaled).build().unwrap();
        check_bounds(vegas, bounds, &feed);
        check_bounds(Aimd::builder().bounds(bounds).build().unwrap(), bounds, &feed);
        check_bounds(Gradient::builder().bounds(bounds).build().unwrap(), bounds, &feed);
    }

    #[test]
    fn vegas_stays_in_bounds_under_a_queueing_dependency(bounds in bounds(), slots in 1usize..300) {
        let dependency = Dependency { slots, service_micros: 5_000 };
        let mut vegas = Vegas::builder().bounds(bounds).build().unwrap();
        for _ in 0..50 {
            let limit = dependency.drive(&mut vegas, 1);
            prop_assert!((bounds.min()..=bounds.max()).contains(&limit));
        }
    }
}

#[test]
fn a_small_dependency_gets_a_proportionally_small_queue() {
    let small = Dependency {
        slots: 8,
        service_micros: 10_000,
    };
    // Start below the slots, as a caller ramping up does, so the first window is unloaded.
    let mut vegas = Vegas::builder()
        .bounds(LimitBounds::new(1, 500, 4).unwrap())
        .build()
        .unwrap();
    small.drive(&mut vegas, 300);
    // alpha and beta are capped at 10 % and 20 % of the limit: at most 2 calls queue, not 3..6.
    for _ in 0..20 {
        let limit = small.drive(&mut vegas, 1);
        assert!((8..=10).contains(&limit), "limit {limit} for 8 slots");
    }
}

#[test]
fn limits_beyond_what_a_limiter_tracks_are_config_errors() {
    use flowguard::vegas::{ConfigError, Fixed, LimitBounds, MAX_LIMIT};
    assert!(LimitBounds::new(1, MAX_LIMIT, 1).is_ok());
    let err = LimitBounds::new(1, MAX_LIMIT + 1, 1).unwrap_err();
    assert_eq!(
        err,
        ConfigError::LimitTooLarge {
            field: "max",
            value: MAX_LIMIT + 1,
            max: MAX_LIMIT
        }
    );
    assert!(err.to_string().contains("use a smaller limit"), "{err}");
    assert!(matches!(
        Fixed::new(usize::MAX),
        Err(ConfigError::LimitTooLarge { field: "limit", .. })
    ));
}

#[test]
fn the_defaults_behind_new_are_valid_settings() {
    // `new()` is the builder with defaults and cannot fail: the defaults must pass the checks.
    assert!(Vegas::builder().build().is_ok());
    assert!(Aimd::builder().build().is_ok());
    assert!(Gradient::builder().build().is_ok());
    // Vegas starts at 1 and slow start takes it up; the others start at the default bounds' 20.
    assert_eq!(Vegas::new().limit(), 1);
    assert_eq!(Aimd::new().limit(), LimitBounds::default().initial());
}

/// Every call takes 20 ms, 18 of them in the dependency's queue, which other callers keep: a
/// dependency that says so (`update_queued`) gives Vegas its unloaded RTT, and each call in
/// flight is nine tenths of a call queued, so the limit stays at its floor (2 would be 1.8 calls
/// queued, over the band of half a call to one); without the reports, the 20 ms are taken for
/// the unloaded RTT and the limit grows. Reports that stop are forgotten, and the baseline is
/// Vegas's own again.
#[test]
fn a_dependency_that_reports_its_queue_gives_the_baseline() {
    const MS: u64 = 1_000_000;
    let mut reported = Vegas::new();
    let mut unreported = Vegas::new();
    for _ in 0..200 {
        let in_flight = reported.limit();
        reported.update_queued(20 * MS, in_flight, 18 * MS);
        let in_flight = unreported.limit();
        unreported.update_nanos(20 * MS, in_flight, Outcome::Success);
    }
    assert_eq!(reported.rtt_base(), Some(Duration::from_millis(2)));
    assert_eq!(reported.limit(), 1, "nine tenths of every RTT is a queue");
    assert_eq!(unreported.rtt_base(), Some(Duration::from_millis(20)));
    assert!(unreported.limit() > 1, "no queue seen: grows");

    for _ in 0..65 {
        let in_flight = reported.limit();
        reported.update_nanos(20 * MS, in_flight, Outcome::Success);
    }
    assert_eq!(reported.rtt_base(), Some(Duration::from_millis(20)));
}

/// The unloaded RTT of [`feed_queued_share`]'s dependency: 10 ms.
const UNLOADED_NANOS: f64 = 10_000_000.0;

/// Feeds `samples` calls granted at the full limit, each spending `share` of its RTT in the
/// dependency's queue (whose unloaded RTT is [`UNLOADED_NANOS`]), as the dependency reports.
fn feed_queued_share(vegas: &mut Vegas, share: f64, samples: usize) {
    let rtt = (UNLOADED_NANOS / (1.0 - share)) as u64;
    for _ in 0..samples {
        let in_flight = vegas.limit();
        vegas.update_queued(rtt, in_flight, rtt - UNLOADED_NANOS as u64);
    }
}

/// While the dependency reports its queue, the band is counted in calls at every limit (at
/// least half a call) and grows as the square root of the limit from 20 permits up, so as a
/// share of the RTT it is narrower for a larger limit. Two instances that read the same queue
/// share then move toward each other: with 4 % of every RTT queued, one at 48 permits cuts
/// where one at 16 holds; with 2 %, the one at 16 grows where the one at 48 holds. (A band that
/// is the same share of the RTT for both, 5 to 10 %, would have both grow in both cases, and
/// keep whatever split they had.)
#[test]
fn with_reports_the_larger_of_two_limits_gives_way_first() {
    /// The limit after four windows of calls granted at the full limit, `share` of each RTT
    /// spent in the dependency's queue, as it reports. A dropped call first halves the limit
    /// from twice `limit` and ends slow start, which with reports goes on through the band.
    fn after_four_windows(limit: usize, share: f64) -> usize {
        let mut vegas = vegas_starting_at(2 * limit);
        vegas.update_nanos(UNLOADED_NANOS as u64, 2 * limit, Outcome::Dropped);
        assert_eq!(vegas.limit(), limit);
        feed_queued_share(&mut vegas, share, 4 * (limit.max(32) / 2));
        assert_eq!(vegas.rtt_base(), Some(Duration::from_millis(10)));
        vegas.limit()
    }
    assert!(after_four_windows(48, 0.04) < 48, "the larger one cuts");
    assert_eq!(after_four_windows(16, 0.04), 16, "the smaller one holds");
    assert_eq!(after_four_windows(48, 0.02), 48, "the larger one holds");
    assert!(after_four_windows(16, 0.02) > 16, "the smaller one grows");
}

/// While the dependency reports its queue, the limit moves toward the middle of its band (half a
/// call to one call of its own queued) instead of holding anywhere inside it. Every call here
/// spends half its RTT queued, behind other callers: one call in flight is half a call queued,
/// the band's lower edge, where a band that only holds would keep it; two are one call queued,
/// its upper edge. The middle, three quarters of a call, is 1.5 calls in flight: the limit
/// moves between 1 and 2 around it.
#[test]
fn with_reports_the_limit_moves_toward_the_middle_of_its_band() {
    const MS: u64 = 1_000_000;
    let mut vegas = Vegas::new();
    let mut limits = Vec::new();
    for _ in 0..3_000 {
        let limit = vegas.limit();
        for _ in 0..limit {
            vegas.update_queued(20 * MS, limit, 10 * MS);
        }
        limits.push(limit);
    }
    let settled = &limits[1_000..];
    let mean = settled.iter().sum::<usize>() as f64 / settled.len() as f64;
    assert!(
        settled.iter().all(|&limit| limit <= 2),
        "{:?}",
        &settled[..20]
    );
    assert!((1.2..=1.8).contains(&mean), "mean limit {mean:.2}");
}

/// While the dependency reports its queue, an instance's queued calls are its calls in flight
/// times the share of their RTT the reports say they waited (Little's law), not the queue its
/// least loaded calls saw. In front of many workers a short queue comes and goes: here half the
/// calls of a window found a free worker and half waited 2.5 ms of 12.5. The low percentile of
/// the RTT sees no queue at all, and a limit of 48 would grow; read from the reports it is
/// about 5 calls, above the band, and the limit is cut.
#[test]
fn with_reports_a_queue_that_only_some_calls_meet_counts() {
    const MS: u64 = 1_000_000;
    let mut vegas = vegas_starting_at(48);
    for i in 0..24 {
        let in_flight = vegas.limit();
        let (rtt, queued) = if i % 2 == 0 {
            (10 * MS, 0)
        } else {
            (12 * MS + MS / 2, 2 * MS + MS / 2)
        };
        vegas.update_queued(rtt, in_flight, queued);
    }
    assert_eq!(vegas.rtt_base(), Some(Duration::from_millis(10)));
    assert!(vegas.limit() < 48, "cut, got {}", vegas.limit());
}

/// Two instances in front of one dependency of 64 workers, whose reports say how long each call
/// waited; one starts at 48 permits and the other at 16, and every call of a round waits as
/// long as the calls in flight beyond the workers make it (a fluid model, no noise). A band that
/// only holds would let that 3:1 split stand (up to 4:1 reads inside both bands); moving toward
/// the band's middle, whose share of the limit is smaller for the larger limit, they end within
/// a permit or two of each other, with a short queue.
#[test]
fn with_reports_two_instances_move_to_equal_limits() {
    const BASE: u64 = 10_000_000; // 10 ms unloaded
    const WORKERS: usize = 64;
    let mut fleet = [vegas_starting_at(48), vegas_starting_at(16)];
    for _ in 0..2_000 {
        let limits = fleet.each_ref().map(|vegas| vegas.limit());
        let in_flight: usize = limits.iter().sum();
        let rtt = BASE * in_flight.max(WORKERS) as u64 / WORKERS as u64;
        for (vegas, limit) in fleet.iter_mut().zip(limits) {
            for _ in 0..limit {
                vegas.update_queued(rtt, limit, rtt - BASE);
            }
        }
    }
    let [a, b] = fleet.each_ref().map(|vegas| vegas.limit());
    assert!(a.abs_diff(b) <= 2, "equal limits, got {a} and {b}");
    assert!(
        (WORKERS..=WORKERS + 6).contains(&(a + b)),
        "a short queue: {a} + {b} in front of {WORKERS} workers"
    );
}

/// A report of a wait at least as long as the RTT cannot be true (a report in seconds read as
/// milliseconds, say): Vegas takes those calls as unreported successes instead of a baseline of
/// nothing that would read every RTT as a queue and cut the limit to 1.
#[test]
fn a_report_longer_than_the_rtt_is_no_report() {
    const MS: u64 = 1_000_000;
    let mut impossible = Vegas::new();
    let mut unreported = Vegas::new();
    for _ in 0..200 {
        let in_flight = impossible.limit();
        impossible.update_queued(20 * MS, in_flight, 20_000 * MS);
        let in_flight = unreported.limit();
        unreported.update_nanos(20 * MS, in_flight, Outcome::Success);
    }
    assert_eq!(impossible.rtt_base(), Some(Duration::from_millis(20)));
    assert_eq!(impossible.limit(), unreported.limit());
    assert!(impossible.limit() > 1, "no queue seen: grows");
}

/// Algorithms that do not use the dependency's reports take a reported call as a success.
#[test]
fn other_algorithms_take_a_reported_call_as_a_success() {
    let mut aimd = Aimd::new();
    let mut plain = Aimd::new();
    for _ in 0..50 {
        let (a, p) = (aimd.limit(), plain.limit());
        assert_eq!(
            aimd.update_queued(5_000_000, a, 1_000_000),
            plain.update_nanos(5_000_000, p, Outcome::Success)
        );
    }
}

/// While the dependency reports its queue, slow start ends only where the queue is above the
/// band in calls of the instance's own and above the middle of the band that is a share of the
/// RTT (7.5 % by default). A newcomer in front of many workers queues its own calls behind the
/// others' on its last doubling, before they cut, and a band of a call or two ended its slow
/// start at a third of its share. Here every call spends `share` of its RTT queued: at 5 % slow
/// start goes on well past the 20 permits where that is one call of its own (and past 40, where
/// it is two); at 10 % it ends, and the limit stays where 10 % is about a call.
#[test]
fn with_reports_slow_start_goes_on_below_the_middle_of_the_share_band() {
    fn after_samples(share: f64, samples: usize) -> usize {
        let mut vegas = Vegas::new();
        feed_queued_share(&mut vegas, share, samples);
        vegas.limit()
    }
    let below = after_samples(0.05, 2_000);
    assert!(below > 100, "5 % queued: still in slow start, got {below}");
    let above = after_samples(0.10, 2_000);
    assert!(above <= 16, "10 % queued: slow start ended, got {above}");
}

/// While the dependency reports its queue, a slow start that ended above the band resumes, once,
/// when a window within 4 rounds finds the queue gone: a newcomer's last doubling queues its own
/// calls behind the others' until they cut, which ends its slow start far below its share (as
/// HyStart++ resumes a slow start whose RTT falls back). A queue that stays, even inside the
/// band, ends it for good.
#[test]
fn with_reports_a_slow_start_ended_by_a_passing_queue_resumes_once() {
    /// Feeds calls that spend 30 % of their RTT queued until the limit is cut; answers the
    /// limit after the cut.
    fn cut(vegas: &mut Vegas) -> usize {
        let before = vegas.limit();
        while vegas.limit() >= before {
            feed_queued_share(vegas, 0.3, 1);
        }
        vegas.limit()
    }
    /// A Vegas in slow start with nothing queued up to at least 16 permits, then cut.
    fn grown_then_cut() -> (Vegas, usize) {
        let mut vegas = Vegas::new();
        while vegas.limit() < 16 {
            feed_queued_share(&mut vegas, 0.0, 1);
        }
        let limit = cut(&mut vegas);
        (vegas, limit)
    }
    /// The limit after 64 calls with nothing queued (4 windows at up to 32 permits).
    fn after_no_queue(vegas: &mut Vegas) -> usize {
        feed_queued_share(vegas, 0.0, 64);
        vegas.limit()
    }

    let (mut vegas, cut_to) = grown_then_cut();
    let resumed = after_no_queue(&mut vegas);
    assert!(
        resumed >= 2 * cut_to,
        "the queue gone after the cut: slow start resumes ({cut_to} -> {resumed})"
    );
    // Once only: cut again, and the queue gone again, the limit grows additively.
    let cut_again = cut(&mut vegas);
    let after = after_no_queue(&mut vegas);
    assert!(
        after <= cut_again + 4,
        "resumes once: {cut_again} -> {after}"
    );

    // A queue that stays after the cut (2 % of the RTT, under the band) for more than 4 rounds
    // ends slow start for good.
    let (mut vegas, cut_to) = grown_then_cut();
    feed_queued_share(&mut vegas, 0.02, 6 * 16);
    let held = vegas.limit();
    let after = after_no_queue(&mut vegas);
    assert!(
        after <= held + 4,
        "a queue that stayed: no slow start again ({cut_to} -> {held} -> {after})"
    );
}

/// Runs `rounds` rounds of a busy caller in front of `workers` workers at 10 ms on a host whose
/// own delay changes from round to round (the same for every call of a round, uniform between
/// none and `scatter` of the service time, from a fixed-seed sequence), and returns the mean
/// limit over the last quarter of the rounds.
fn mean_limit_on_a_busy_host(
    vegas: &mut Vegas,
    workers: usize,
    scatter: f64,
    rounds: usize,
) -> f64 {
    let dependency = Dependency {
        slots: workers,
        service_micros: 10_000,
    };
    let mut rng = Rng(7);
    mean_of_the_last_quarter(rounds, || {
        let host = (scatter * rng.next() * dependency.service_micros as f64) as u64;
        dependency.round(vegas, host)
    })
}

/// The mean of what `round` answers (the limit after a round) over the last quarter of `rounds`
/// calls, when the limit has settled.
fn mean_of_the_last_quarter(rounds: usize, mut round: impl FnMut() -> usize) -> f64 {
    let settled = rounds * 3 / 4;
    let mut sum = 0.0;
    for i in 0..rounds {
        let limit = round();
        if i >= settled {
            sum += limit as f64;
        }
    }
    sum / (rounds - settled) as f64
}

/// A busy host's RTT scattering by up to 16 % of a 10 ms service with nothing queued (on real
/// sockets, window lows of 10.1-12.0 ms in front of 64 workers) holds the default band's lone
/// instance far below the workers: a usual round reads more than the 5 % under which it grows,
/// and the noisiest cut and look confirmed by the quieter round after them. A band twice as wide
/// keeps it at the workers.
#[test]
fn on_a_busy_host_a_wider_band_keeps_a_lone_instance_at_many_workers() {
    let held = mean_limit_on_a_busy_host(&mut Vegas::new(), 64, 0.16, 2000);
    assert!(
        held < 32.0,
        "the default band holds a lone instance below half of 64 workers here, got {held:.1}"
    );
    let mut wider = Vegas::builder().max_queue_share(0.2).build().unwrap();
    let kept = mean_limit_on_a_busy_host(&mut wider, 64, 0.16, 2000);
    assert!(
        kept >= 60.0,
        "max_queue_share(0.2) keeps it at the 64 workers, got {kept:.1}"
    );
}

/// How a service time strays from its mean, drawn for each call.
#[derive(Debug, Clone, Copy)]
enum Spread {
    /// Uniformly, within this share of the mean either way.
    Uniform(f64),
    /// Lognormally (the shape measured service times tend to have), with a standard deviation
    /// of about this share of the mean.
    Lognormal(f64),
}

impl Spread {
    /// A service time's share of the mean.
    fn factor(self, rng: &mut Rng) -> f64 {
        match self {
            Self::Uniform(share) => 1.0 + share * (2.0 * rng.next() - 1.0),
            Self::Lognormal(share) => {
                // A standard normal draw (Box-Muller), then exp(share * z - share^2 / 2), whose
                // mean is 1.
                let u = rng.next().max(f64::MIN_POSITIVE);
                let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * rng.next()).cos();
                (share * z - share * share / 2.0).exp()
            }
        }
    }
}

/// The mean limit, over the last quarter of `rounds` rounds, of a lone caller that uses its whole
/// limit in front of `workers` workers whose service time of 10 ms strays by `spread`. Past the
/// workers every call waits in a standing queue (its RTT is its service time times the calls per
/// worker); with `reported`, each call says how long.
fn mean_limit_with_a_spread_service(
    vegas: &mut Vegas,
    workers: usize,
    spread: Spread,
    reported: bool,
    rounds: usize,
) -> f64 {
    const SERVICE_NANOS: f64 = 10_000_000.0;
    let mut rng = Rng(11);
    mean_of_the_last_quarter(rounds, || {
        let limit = vegas.limit();
        let per_worker = (limit as f64 / workers as f64).max(1.0);
        for _ in 0..limit {
            let service = SERVICE_NANOS * spread.factor(&mut rng);
            let rtt = (service * per_worker) as u64;
            if reported {
                vegas.update_queued(rtt, limit, rtt - service as u64);
            } else {
                vegas.update_nanos(rtt, limit, Outcome::Success);
            }
        }
        vegas.limit()
    })
}

/// Without reports the band reads the low percentile of a window of 16 calls against the
/// least such low seen: with a service time that varies by 10 % either way that reading stays
/// inside the band with nothing queued, with 30 % it often does not, and the default holds a
/// lone instance far below a dependency of 64 workers (in `vegas_sim --service-jitter 0.3`, 0.11
/// of the capacity served in front of 50 slots). The dependency's queue reports keep it at the
/// workers, and so does a band wide enough for the spread, for an instance alone in front of it.
#[test]
fn a_widely_spread_service_time_needs_the_reports_or_a_wider_band() {
    let narrow =
        mean_limit_with_a_spread_service(&mut Vegas::new(), 64, Spread::Uniform(0.1), false, 2000);
    assert!(
        narrow >= 60.0,
        "a spread of 10 % leaves a lone instance at the 64 workers, got {narrow:.1}"
    );
    let held =
        mean_limit_with_a_spread_service(&mut Vegas::new(), 64, Spread::Uniform(0.3), false, 2000);
    assert!(
        held < 32.0,
        "the default band holds a lone instance below half of 64 workers here, got {held:.1}"
    );
    let reported =
        mean_limit_with_a_spread_service(&mut Vegas::new(), 64, Spread::Uniform(0.3), true, 2000);
    assert!(
        reported >= 60.0,
        "the queue reports keep it at the 64 workers, got {reported:.1}"
    );
    let mut wider = Vegas::builder()
        .max_queue_share(0.3)
        .alpha(10.0)
        .beta(20.0)
        .build()
        .unwrap();
    let kept = mean_limit_with_a_spread_service(&mut wider, 64, Spread::Uniform(0.3), false, 2000);
    assert!(
        kept >= 60.0,
        "a band of 15-30 % of the RTT keeps it at the 64 workers, got {kept:.1}"
    );
}

/// A lognormal service time whose standard deviation is 10 % of its mean holds the default's lone
/// instance far below 64 workers (8.0 permits on average here): its thin left tail keeps lowering
/// the least window low. Windows of 3 rounds (192 calls there rather than 32) scatter less and
/// keep it at the workers (66.3); at 30 %, they do so beside a band as wide as the spread (76.5),
/// which alone does not (7.8).
#[test]
fn windows_of_more_rounds_keep_a_lone_instance_at_the_workers_of_a_spread_service() {
    let spread = Spread::Lognormal(0.1);
    let held = mean_limit_with_a_spread_service(&mut Vegas::new(), 64, spread, false, 2000);
    assert!(
        held < 32.0,
        "the default holds a lone instance below half of 64 workers here, got {held:.1}"
    );
    let mut longer = Vegas::builder().window_rounds(3.0).build().unwrap();
    let kept = mean_limit_with_a_spread_service(&mut longer, 64, spread, false, 2000);
    assert!(
        kept >= 60.0,
        "windows of 3 rounds keep it at the 64 workers, got {kept:.1}"
    );

    let wide = Spread::Lognormal(0.3);
    let wider_band = || Vegas::builder().max_queue_share(0.3).alpha(10.0).beta(20.0);
    let mut band_only = wider_band().build().unwrap();
    let held = mean_limit_with_a_spread_service(&mut band_only, 64, wide, false, 2000);
    assert!(
        held < 32.0,
        "at 30 % the wider band alone holds it below half of 64 workers, got {held:.1}"
    );
    let mut both = wider_band().window_rounds(3.0).build().unwrap();
    let kept = mean_limit_with_a_spread_service(&mut both, 64, wide, false, 2000);
    assert!(
        kept >= 60.0,
        "the wider band and windows of 3 rounds keep it at the 64 workers, got {kept:.1}"
    );
}

/// Feeds `count` successful calls of `rtt_ms` granted at `in_flight`; answers after how many
/// calls the limit first moved (`None`: it did not).
fn calls_until_the_limit_moves(
    vegas: &mut Vegas,
    rtt_ms: u64,
    in_flight: usize,
    count: usize,
) -> Option<usize> {
    let before = vegas.limit();
    let call = sample(rtt_ms * 1_000, in_flight, Outcome::Success);
    (1..=count).find(|_| vegas.update(&call) != before)
}

/// Windows of more rounds are for reading the queue at a steady limit: a running slow start
/// judges windows of at most one round, as it learns of the queue its own growth built only
/// when a window closes.
#[test]
fn longer_windows_leave_slow_start_a_round_at_most() {
    let mut vegas = Vegas::builder()
        .bounds(LimitBounds::new(1, 1000, 64).unwrap())
        .window_rounds(3.0)
        .build()
        .unwrap();
    // Slow start at 64 permits: the window closes after one round (64 calls, not 192) and the
    // limit grows by half of it.
    assert_eq!(
        calls_until_the_limit_moves(&mut vegas, 10, 64, 1000),
        Some(64)
    );
    assert_eq!(vegas.limit(), 96);
    // One round at 96 permits reads the RTT doubled: a queue, which ends slow start with a cut.
    assert_eq!(
        calls_until_the_limit_moves(&mut vegas, 20, 96, 1000),
        Some(96)
    );
    assert!(vegas.limit() < 96, "{}", vegas.limit());

    // The default's windows of half a round are below that round already.
    let mut default = vegas_starting_at(64);
    assert_eq!(
        calls_until_the_limit_moves(&mut default, 10, 64, 1000),
        Some(32)
    );
}
