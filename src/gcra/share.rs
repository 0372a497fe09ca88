//! [`LocalShare`]: this instance's part of a global quota, as a quota of its own.

use std::time::Duration;

use super::error::ConfigError;
use super::quota::{Quota, QuotaError};

/// This instance's part of a global quota, e.g. for the local fallback of
/// [`FailurePolicy::LocalFallback`](super::remote::FailurePolicy::LocalFallback).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum LocalShare {
    /// A fraction in `(0, 1]`: the local quota has `rate * share` per period and burst `floor(burst * share)`.
    Fraction(f64),
    /// One of `n` equal instances: rate `rate / n` per period (exactly: `rate` per `n * period`),
    /// burst `floor(burst / n)`.
    Instances(u32),
}

impl LocalShare {
    /// The local quota this share of `global` gives.
    ///
    /// ```
    /// use flowguard::gcra::{LocalShare, Quota};
    /// use std::time::Duration;
    ///
    /// let global = Quota::per_second(100)?.with_burst(40)?;
    /// let local = LocalShare::Instances(4).local_quota(&global)?;
    /// assert_eq!(local.emission_interval(), Duration::from_millis(40)); // 25 per second
    /// assert_eq!(local.burst(), 10);
    /// // A share of the burst that rounds down to nothing is an error, not a silent 1.
    /// assert!(LocalShare::Instances(64).local_quota(&global).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn local_quota(&self, global: &Quota) -> Result<Quota, ConfigError> {
        let wrap = |source| ConfigError::LocalQuota {
            share: self.fraction(),
            source,
        };
        match *self {
            LocalShare::Instances(0) => Err(ConfigError::InvalidShare { share: 0.0 }),
            LocalShare::Instances(n) => {
                let period =
                    global
                        .period()
                        .checked_mul(n)
                        .ok_or(wrap(QuotaError::WindowTooLong {
                            window: Duration::MAX,
                        }))?;
                Quota::new(global.rate(), period)
                    .and_then(|q| q.with_burst(global.burst() / n))
                    .map_err(wrap)
            }
            LocalShare::Fraction(share) => {
                if !(share > 0.0 && share <= 1.0) {
                    return Err(ConfigError::InvalidShare { share });
                }
                let period_ns = (global.period().as_nanos() as f64 / share).round();
                let period = if period_ns < u64::MAX as f64 {
                    Duration::from_nanos(period_ns as u64)
                } else {
                    Duration::MAX
                };
                let burst = (f64::from(global.burst()) * share).floor() as u32;
                Quota::new(global.rate(), period)
                    .and_then(|q| q.with_burst(burst))
                    .map_err(wrap)
            }
        }
    }

    /// The share as a fraction of the global quota.
    fn fraction(&self) -> f64 {
        match *self {
            LocalShare::Fraction(share) => share,
            LocalShare::Instances(n) => 1.0 / f64::from(n),
        }
    }

    /// Checks the share without a quota: a fraction must lie in `(0, 1]`, instances be at least 1.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            LocalShare::Fraction(share) if !(share > 0.0 && share <= 1.0) => {
                Err(ConfigError::InvalidShare { share })
            }
            LocalShare::Instances(0) => Err(ConfigError::InvalidShare { share: 0.0 }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_divide_rate_and_burst() {
        let global = Quota::per_second(10).unwrap().with_burst(10).unwrap();
        let half = LocalShare::Fraction(0.5).local_quota(&global).unwrap();
        assert_eq!(half.emission_interval(), Duration::from_millis(200));
        assert_eq!(half.burst(), 5);
        let third = LocalShare::Instances(3).local_quota(&global).unwrap();
        assert_eq!(third.emission_interval(), Duration::from_millis(300));
        assert_eq!(third.burst(), 3);
        assert_eq!(
            LocalShare::Fraction(1.0)
                .local_quota(&global)
                .unwrap()
                .burst(),
            10
        );
    }

    #[test]
    fn invalid_shares_are_errors() {
        let global = Quota::per_second(10).unwrap();
        for bad in [0.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                LocalShare::Fraction(bad).local_quota(&global),
                Err(ConfigError::InvalidShare { .. })
            ));
            assert!(LocalShare::Fraction(bad).validate().is_err());
        }
        assert!(LocalShare::Instances(0).validate().is_err());
        assert_eq!(
            LocalShare::Instances(11).local_quota(&global),
            Err(ConfigError::LocalQuota {
                share: 1.0 / 11.0,
                source: QuotaError::ZeroBurst
            })
        );
        let msg = LocalShare::Fraction(0.01)
            .local_quota(&global)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("larger share"), "{msg}");
    }
}
