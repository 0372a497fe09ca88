//! Statistical properties of the backoff sequences, with fixed seeds.

use std::time::Duration;

use flowguard::backoff::{
    BackoffBounds, CapAwareJitter, DecorrelatedJitter, Exponential, FullJitter,
};

const SEEDS: u64 = 200;
const DRAWS: usize = 200;

fn bounds() -> BackoffBounds {
    BackoffBounds::new(Duration::from_millis(10), Duration::from_secs(1)).unwrap()
}

/// Draws after a warm-up long enough for the sequence to saturate (`3^8 * 10ms >> 1s`).
fn saturated<I: Iterator<Item = Duration>>(make: impl Fn(u64) -> I) -> Vec<f64> {
    (0..SEEDS)
        .flat_map(|seed| make(seed).skip(20).take(DRAWS))
        .map(|d| d.as_secs_f64())
        .collect()
}

fn fraction(xs: &[f64], pred: impl Fn(f64) -> bool) -> f64 {
    xs.iter().filter(|x| pred(**x)).count() as f64 / xs.len() as f64
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

fn std_dev(xs: &[f64]) -> f64 {
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / xs.len() as f64).sqrt()
}

#[test]
fn every_delay_within_bounds() {
    let b = bounds();
    for seed in 0..SEEDS {
        let mut prev = b.base();
        for d in DecorrelatedJitter::new(b, seed).take(DRAWS) {
            assert!(
                d >= b.base() && d <= b.cap().min(prev * 3),
                "{d:?} after {prev:?}"
            );
            prev = d;
        }
        let mut prev = b.base();
        for d in CapAwareJitter::new(b, seed).take(DRAWS) {
            assert!(
                d >= b.base() && d <= b.cap().min(prev * 3),
                "{d:?} after {prev:?}"
            );
            prev = d;
        }
        for (n, d) in FullJitter::new(b, seed).take(DRAWS).enumerate() {
            let ceiling = b.base().saturating_mul(1 << n.min(20)).min(b.cap());
            assert!(d <= ceiling, "attempt {n}: {d:?} > {ceiling:?}");
        }
    }
    let exp: Vec<u128> = Exponential::new(b).take(9).map(|d| d.as_millis()).collect();
    assert_eq!(exp, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
}

#[test]
fn plain_decorrelated_jitter_clusters_at_the_cap() {
    let xs = saturated(|seed| DecorrelatedJitter::new(bounds(), seed));
    let at_cap = fraction(&xs, |x| x == 1.0);
    println!(
        "decorrelated: P(delay == cap) = {at_cap:.3}, mean = {:.3}s, sd = {:.3}s",
        mean(&xs),
        std_dev(&xs)
    );
    // At prev == cap two draws in three are clamped onto the cap; in steady state about a
    // third of all delays (measured 0.32) are exactly the cap: a point mass.
    assert!(at_cap > 0.25, "{at_cap}");
}

#[test]
fn cap_aware_jitter_is_not_a_point_mass_at_the_cap() {
    let xs = saturated(|seed| CapAwareJitter::new(bounds(), seed));
    let at_cap = fraction(&xs, |x| x == 1.0);
    let top_percent = fraction(&xs, |x| x >= 0.99);
    let upper_half = fraction(&xs, |x| x >= 0.5);
    let (m, sd) = (mean(&xs), std_dev(&xs));
    println!(
        "cap-aware: P(delay == cap) = {at_cap:.4}, P(>= 0.99 cap) = {top_percent:.3}, \
         P(>= cap/2) = {upper_half:.3}, mean = {m:.3}s, sd = {sd:.3}s"
    );
    assert!(at_cap < 0.001, "{at_cap}");
    // Roughly uniform near the cap: the top 1% of the range holds a few percent, not 2/3.
    assert!(top_percent < 0.05, "{top_percent}");
    // Still sheds load (measured: 44% of delays in the upper half, mean 0.42 cap) with
    // a real spread.
    assert!(upper_half > 0.35, "{upper_half}");
    assert!((0.35..0.5).contains(&m), "{m}");
    assert!(sd > 0.1, "{sd}");
    // Ten equal bins over [cap/2, cap]: none empty or dominant.
    let mut bins = [0usize; 10];
    for x in xs.iter().filter(|x| **x >= 0.5) {
        bins[(((x - 0.5) / 0.05) as usize).min(9)] += 1;
    }
    let total: usize = bins.iter().sum();
    for (i, n) in bins.iter().enumerate() {
        let share = *n as f64 / total as f64;
        assert!((0.05..0.2).contains(&share), "bin {i}: {share}");
    }
}

#[test]
fn full_jitter_mean_is_half_its_ceiling() {
    let xs = saturated(|seed| FullJitter::new(bounds(), seed));
    let m = mean(&xs);
    println!("full jitter at cap: mean = {m:.3}s");
    assert!((0.45..0.55).contains(&m), "{m}");
}

#[test]
fn sequences_are_reproducible_per_seed() {
    let a: Vec<_> = CapAwareJitter::new(bounds(), 77).take(50).collect();
    let b: Vec<_> = CapAwareJitter::new(bounds(), 77).take(50).collect();
    assert_eq!(a, b);
    let c: Vec<_> = FullJitter::new(bounds(), 77).take(50).collect();
    let d: Vec<_> = FullJitter::new(bounds(), 78).take(50).collect();
    assert_ne!(c, d);
}
