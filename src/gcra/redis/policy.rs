//! [`FailurePolicy`]: what a Redis-backed limiter answers when Redis is slow or down.

use std::time::Duration;

use super::error::RedisStoreError;
use crate::gcra::Quota;

/// What a [`RedisRateLimiter`](super::RedisRateLimiter) answers when the store does not answer in time
/// (timeout, connection failure, cluster failover in progress). Every such decision carries
/// [`Decision::degraded`](crate::gcra::Decision::degraded), is logged (`tracing::warn!`, at most once
/// per second per store) and counted (`flowguard_redis_degraded_total{policy}`). Redis is asked again
/// automatically; the first answer ends the degradation.
///
/// The default is [`FailOpen`](FailurePolicy::FailOpen): an outage of the rate limiter should not
/// become an outage of the service. Choose [`FailClosed`](FailurePolicy::FailClosed) when over-admission
/// is worse than rejection, or [`LocalFallback`](FailurePolicy::LocalFallback) to keep enforcing an
/// approximate quota.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Allow the request, reported as an idle key would be (remaining `B - cost`).
    #[default]
    FailOpen,
    /// Deny the request; `retry_after` is the store's probe interval (when Redis is next asked).
    FailClosed,
    /// Decide with a local in-memory GCRA holding this instance's share of the quota. With `N`
    /// instances each holding `1/N`, the fleet admits about the global quota during an outage.
    ///
    /// The local limiter is bounded like the in-memory store: it tracks at most
    /// [`local_max_keys`](super::RedisRateLimiterBuilder::local_max_keys) live keys, and when it
    /// is full a key it does not track is **denied** (retry after the probe interval), marked
    /// [`Degradation::LocalFallbackFull`](crate::gcra::Degradation::LocalFallbackFull); it is
    /// never allowed untracked, so a flood of distinct keys during an outage cannot make any key
    /// unlimited. Keys already tracked keep their share, and keys whose state has expired are
    /// reclaimed to make room.
    LocalFallback(LocalShare),
}

/// This instance's part of a global quota, for [`FailurePolicy::LocalFallback`].
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum LocalShare {
    /// A fraction in `(0, 1]`: the local quota has `rate * share` per period and burst `floor(burst * share)`.
    Fraction(f64),
    /// One of `n` equal instances: rate `rate / n` per period (exactly: `rate` per `n * period`),
    /// burst `floor(burst / n)`.
    Instances(u32),
}

impl FailurePolicy {
    /// `LocalFallback` with a fraction of the quota.
    pub fn local_share(share: f64) -> FailurePolicy {
        FailurePolicy::LocalFallback(LocalShare::Fraction(share))
    }

    /// `LocalFallback` with one of `instances` equal shares.
    pub fn local_instances(instances: u32) -> FailurePolicy {
        FailurePolicy::LocalFallback(LocalShare::Instances(instances))
    }

    /// The label used in logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            FailurePolicy::FailOpen => "fail_open",
            FailurePolicy::FailClosed => "fail_closed",
            FailurePolicy::LocalFallback(_) => "local_fallback",
        }
    }

    /// Checks the share (if any) without a quota: a fraction must lie in `(0, 1]`, instances be at least 1.
    pub(crate) fn validate(&self) -> Result<(), RedisStoreError> {
        match self {
            FailurePolicy::LocalFallback(LocalShare::Fraction(share))
                if !(*share > 0.0 && *share <= 1.0) =>
            {
                Err(RedisStoreError::InvalidShare { share: *share })
            }
            FailurePolicy::LocalFallback(LocalShare::Instances(0)) => {
                Err(RedisStoreError::InvalidShare { share: 0.0 })
            }
            _ => Ok(()),
        }
    }
}

impl LocalShare {
    /// The local quota this share of `global` gives.
    ///
    /// ```
    /// use flowguard::gcra::Quota;
    /// use flowguard::gcra::redis::LocalShare;
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
    pub fn local_quota(&self, global: &Quota) -> Result<Quota, RedisStoreError> {
        let wrap = |source| RedisStoreError::LocalQuota {
            share: *self,
            source,
        };
        match *self {
            LocalShare::Instances(0) => Err(RedisStoreError::InvalidShare { share: 0.0 }),
            LocalShare::Instances(n) => {
                let period = global
                    .period()
                    .checked_mul(n)
                    .ok_or(RedisStoreError::LocalQuota {
                        share: *self,
                        source: crate::gcra::QuotaError::WindowTooLong {
                            window: Duration::MAX,
                        },
                    })?;
                Quota::new(global.rate(), period)
                    .and_then(|q| q.with_burst(global.burst() / n))
                    .map_err(wrap)
            }
            LocalShare::Fraction(share) => {
                if !(share > 0.0 && share <= 1.0) {
                    return Err(RedisStoreError::InvalidShare { share });
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::QuotaError;

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
                Err(RedisStoreError::InvalidShare { .. })
            ));
            assert!(FailurePolicy::local_share(bad).validate().is_err());
        }
        assert!(FailurePolicy::local_instances(0).validate().is_err());
        assert_eq!(
            LocalShare::Instances(11).local_quota(&global),
            Err(RedisStoreError::LocalQuota {
                share: LocalShare::Instances(11),
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
