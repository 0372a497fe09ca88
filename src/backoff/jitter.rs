//! Backoff sequences: infinite iterators over [`Duration`] driven by a seedable RNG.
//!
//! All four sequences share validated [`BackoffBounds`] (`base`, `cap`) and are pure:
//! the same seed always yields the same delays.
//!
//! | sequence | delay `n` (from 0) | bounds |
//! |---|---|---|
//! | [`Exponential`] | `min(cap, base * 2^n)` | `[base, cap]`, no jitter |
//! | [`FullJitter`] | `uniform(0, min(cap, base * 2^n))` | `[0, cap]` |
//! | [`DecorrelatedJitter`] | `min(cap, uniform(base, prev * 3))`, `prev_0 = base` | `[base, cap]` |
//! | [`CapAwareJitter`] | as decorrelated, but a draw beyond `cap` becomes `uniform(max(base, cap/2), cap)` | `[base, cap]` |

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::error::ConfigError;

/// The largest cap a sequence accepts: delays are computed in `u64` nanoseconds.
pub const MAX_CAP: Duration = Duration::from_nanos(u64::MAX / 4);

/// Validated bounds of a backoff sequence: `0 < base <= cap <= MAX_CAP`.
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::BackoffBounds;
///
/// let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_secs(5))?;
/// assert_eq!(bounds.base(), Duration::from_millis(10));
/// assert!(BackoffBounds::new(Duration::from_secs(5), Duration::from_secs(1)).is_err());
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffBounds {
    base: u64,
    cap: u64,
}

impl BackoffBounds {
    /// Bounds with the first/smallest delay `base` and the largest delay `cap`.
    pub fn new(base: Duration, cap: Duration) -> Result<Self, ConfigError> {
        if base.is_zero() {
            return Err(ConfigError::ZeroBase);
        }
        if cap < base {
            return Err(ConfigError::CapBelowBase { base, cap });
        }
        if cap > MAX_CAP {
            return Err(ConfigError::CapTooLarge { cap, max: MAX_CAP });
        }
        // Both fit: cap <= MAX_CAP < u64::MAX nanoseconds.
        Ok(Self {
            base: nanos(base),
            cap: nanos(cap),
        })
    }

    /// The base delay.
    pub fn base(&self) -> Duration {
        Duration::from_nanos(self.base)
    }

    /// The cap: no sequence ever yields a longer delay.
    pub fn cap(&self) -> Duration {
        Duration::from_nanos(self.cap)
    }

    /// `min(cap, base * 2^attempt)` in nanoseconds, saturating.
    fn exponential(&self, attempt: u32) -> u64 {
        let factor = 1u64.checked_shl(attempt).unwrap_or(u64::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn uniform(rng: &mut SmallRng, lo: u64, hi: u64) -> u64 {
    if hi <= lo {
        lo
    } else {
        rng.random_range(lo..=hi)
    }
}

/// Plain exponential backoff without jitter: `min(cap, base * 2^n)`.
///
/// Kept for comparison: clients that fail together retry together.
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::{BackoffBounds, Exponential};
///
/// let b = BackoffBounds::new(Duration::from_millis(100), Duration::from_millis(500))?;
/// let d: Vec<_> = Exponential::new(b).take(4).map(|d| d.as_millis()).collect();
/// assert_eq!(d, [100, 200, 400, 500]);
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Exponential {
    bounds: BackoffBounds,
    attempt: u32,
}

impl Exponential {
    /// The sequence `base, 2 base, 4 base, ...` capped at `cap`.
    pub fn new(bounds: BackoffBounds) -> Self {
        Self { bounds, attempt: 0 }
    }
}

impl Iterator for Exponential {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let d = self.bounds.exponential(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        Some(Duration::from_nanos(d))
    }
}

/// "Full jitter": `uniform(0, min(cap, base * 2^n))`.
///
/// Spreads clients well but may retry almost at once (the lower bound is zero).
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::{BackoffBounds, FullJitter};
///
/// let b = BackoffBounds::new(Duration::from_millis(100), Duration::from_secs(1))?;
/// for (n, d) in FullJitter::new(b, 7).take(10).enumerate() {
///     assert!(d <= Duration::from_millis(100 << n).min(Duration::from_secs(1)));
/// }
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct FullJitter {
    bounds: BackoffBounds,
    attempt: u32,
    rng: SmallRng,
}

impl FullJitter {
    /// A full-jitter sequence whose draws are determined by `seed`.
    pub fn new(bounds: BackoffBounds, seed: u64) -> Self {
        Self {
            bounds,
            attempt: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }
}

impl Iterator for FullJitter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let hi = self.bounds.exponential(self.attempt);
        self.attempt = self.attempt.saturating_add(1);
        Some(Duration::from_nanos(uniform(&mut self.rng, 0, hi)))
    }
}

/// Decorrelated jitter: `sleep = min(cap, uniform(base, prev * 3))`, starting from `prev = base`.
///
/// Known weakness: once `prev` reaches the cap, about two draws in three exceed it and are
/// clamped to exactly `cap`; in steady state (`base = cap / 100`) about a third of all delays
/// are exactly `cap`, so saturated clients re-synchronise on the cap.
/// [`CapAwareJitter`] removes that point mass.
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::{BackoffBounds, DecorrelatedJitter};
///
/// let b = BackoffBounds::new(Duration::from_millis(10), Duration::from_secs(1))?;
/// assert!(DecorrelatedJitter::new(b, 42)
///     .take(1000)
///     .all(|d| d >= b.base() && d <= b.cap()));
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct DecorrelatedJitter(Decorrelated);

/// The state both decorrelated sequences share: bounds, previous delay and RNG.
#[derive(Debug, Clone)]
struct Decorrelated {
    bounds: BackoffBounds,
    prev: u64,
    rng: SmallRng,
}

impl Decorrelated {
    fn new(bounds: BackoffBounds, seed: u64) -> Self {
        Self {
            bounds,
            prev: bounds.base,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// `uniform(base, prev * 3)`, unclamped.
    fn raw(&mut self) -> u64 {
        uniform(&mut self.rng, self.bounds.base, self.prev.saturating_mul(3))
    }
}

impl DecorrelatedJitter {
    /// A decorrelated-jitter sequence whose draws are determined by `seed`.
    pub fn new(bounds: BackoffBounds, seed: u64) -> Self {
        Self(Decorrelated::new(bounds, seed))
    }
}

impl Iterator for DecorrelatedJitter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let s = &mut self.0;
        let d = s.raw().min(s.bounds.cap);
        s.prev = d;
        Some(Duration::from_nanos(d))
    }
}

/// Decorrelated jitter that keeps its jitter at the cap.
///
/// Draws `raw = uniform(base, prev * 3)` like [`DecorrelatedJitter`]. A draw within the cap is
/// used as is. A draw that would be clamped is replaced by a fresh draw from
/// `uniform(max(base, cap / 2), cap)` ("equal jitter" at the cap), and becomes `prev`.
///
/// Distribution: every delay lies in `[base, cap]` and no single value carries a point mass
/// (in particular not `cap`), so saturated clients do not re-synchronise. Below the cap it
/// is the decorrelated distribution. With `prev = p`, a delay is `uniform(base, min(3p, cap))`
/// with probability `(min(3p, cap) - base) / (3p - base)` and `uniform(max(base, cap/2), cap)`
/// otherwise. Measured in steady state with `base = cap / 100` (tests/backoff/jitter.rs):
/// mean 0.42 cap (plain decorrelated: 0.53 cap, a third of it exactly at the cap), 44% of the
/// delays in `[cap/2, cap]`, spread evenly there; under 1% within 1% of the cap.
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::{BackoffBounds, CapAwareJitter};
///
/// let b = BackoffBounds::new(Duration::from_millis(10), Duration::from_secs(1))?;
/// let at_cap = CapAwareJitter::new(b, 42).take(1000).filter(|d| *d == b.cap()).count();
/// assert!(at_cap < 5);
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct CapAwareJitter(Decorrelated);

impl CapAwareJitter {
    /// A cap-aware decorrelated-jitter sequence whose draws are determined by `seed`.
    pub fn new(bounds: BackoffBounds, seed: u64) -> Self {
        Self(Decorrelated::new(bounds, seed))
    }
}

impl Iterator for CapAwareJitter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let s = &mut self.0;
        let BackoffBounds { base, cap } = s.bounds;
        let raw = s.raw();
        let d = if raw <= cap {
            raw
        } else {
            uniform(&mut s.rng, base.max(cap / 2), cap)
        };
        s.prev = d;
        Some(Duration::from_nanos(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn bounds_reject_bad_config() {
        assert_eq!(
            BackoffBounds::new(Duration::ZERO, ms(1)),
            Err(ConfigError::ZeroBase)
        );
        assert!(matches!(
            BackoffBounds::new(ms(2), ms(1)),
            Err(ConfigError::CapBelowBase { .. })
        ));
        assert!(matches!(
            BackoffBounds::new(ms(1), Duration::MAX),
            Err(ConfigError::CapTooLarge { .. })
        ));
        assert!(BackoffBounds::new(ms(1), ms(1)).is_ok());
    }

    #[test]
    fn same_seed_same_sequence_other_seed_differs() {
        let b = BackoffBounds::new(ms(1), ms(1000)).unwrap();
        let a: Vec<_> = DecorrelatedJitter::new(b, 1).take(20).collect();
        let a2: Vec<_> = DecorrelatedJitter::new(b, 1).take(20).collect();
        let c: Vec<_> = DecorrelatedJitter::new(b, 2).take(20).collect();
        assert_eq!(a, a2);
        assert_ne!(a, c);
    }

    #[test]
    fn exponential_saturates_without_overflow() {
        let b = BackoffBounds::new(ms(1), MAX_CAP).unwrap();
        let last = Exponential::new(b).nth(200).unwrap();
        assert_eq!(last, MAX_CAP);
    }

    #[test]
    fn base_equal_cap_is_constant() {
        let b = BackoffBounds::new(ms(7), ms(7)).unwrap();
        assert!(CapAwareJitter::new(b, 3).take(100).all(|d| d == ms(7)));
        assert!(DecorrelatedJitter::new(b, 3).take(100).all(|d| d == ms(7)));
    }
}
