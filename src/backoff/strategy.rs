//! [`BackoffStrategy`]: a choice of backoff sequence, from which each retried call draws its
//! own independently seeded [`Backoff`].

use std::time::Duration;

use super::jitter::{BackoffBounds, CapAwareJitter, DecorrelatedJitter, Exponential, FullJitter};

/// Which backoff sequence a retry policy uses, with its bounds.
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::{BackoffBounds, BackoffStrategy};
///
/// let b = BackoffBounds::new(Duration::from_millis(50), Duration::from_secs(10))?;
/// let strategy = BackoffStrategy::CapAware(b);
/// let first = strategy.sequence(1).next().unwrap();
/// assert!(first >= b.base() && first <= b.cap());
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffStrategy {
    /// [`Exponential`]: no jitter.
    Exponential(BackoffBounds),
    /// [`FullJitter`].
    FullJitter(BackoffBounds),
    /// [`DecorrelatedJitter`].
    Decorrelated(BackoffBounds),
    /// [`CapAwareJitter`]: decorrelated jitter that keeps jitter at the cap (the default).
    CapAware(BackoffBounds),
}

impl BackoffStrategy {
    /// The bounds of the sequence.
    pub fn bounds(&self) -> BackoffBounds {
        match *self {
            Self::Exponential(b)
            | Self::FullJitter(b)
            | Self::Decorrelated(b)
            | Self::CapAware(b) => b,
        }
    }

    /// A fresh sequence whose draws are determined by `seed`.
    pub fn sequence(&self, seed: u64) -> Backoff {
        match *self {
            Self::Exponential(b) => Backoff::Exponential(Exponential::new(b)),
            Self::FullJitter(b) => Backoff::FullJitter(FullJitter::new(b, seed)),
            Self::Decorrelated(b) => Backoff::Decorrelated(DecorrelatedJitter::new(b, seed)),
            Self::CapAware(b) => Backoff::CapAware(CapAwareJitter::new(b, seed)),
        }
    }
}

/// One running backoff sequence (an infinite iterator of delays).
#[derive(Debug, Clone)]
pub enum Backoff {
    /// See [`Exponential`].
    Exponential(Exponential),
    /// See [`FullJitter`].
    FullJitter(FullJitter),
    /// See [`DecorrelatedJitter`].
    Decorrelated(DecorrelatedJitter),
    /// See [`CapAwareJitter`].
    CapAware(CapAwareJitter),
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        match self {
            Self::Exponential(s) => s.next(),
            Self::FullJitter(s) => s.next(),
            Self::Decorrelated(s) => s.next(),
            Self::CapAware(s) => s.next(),
        }
    }
}
