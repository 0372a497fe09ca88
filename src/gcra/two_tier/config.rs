//! [`Config`]: batch size, refill threshold and token lifetime, validated against the quota.

use std::time::Duration;

use crate::gcra::{ConfigError, Quota};

/// How a [`TwoTierLimiter`](super::TwoTierLimiter) reserves and keeps tokens, checked against its
/// quota, with the defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    batch: u32,
    refill_below: u32,
    max_token_age: Duration,
    limit: u32,
    interval: Duration,
}

impl Config {
    /// Checks `batch`, the refill threshold (default: 20% of the batch, rounded up) and the token
    /// lifetime (default: the quota's burst window `B*T`) against `quota`.
    pub(crate) fn new(
        quota: &Quota,
        batch: u32,
        refill_below: Option<u32>,
        max_token_age: Option<Duration>,
    ) -> Result<Config, ConfigError> {
        if batch == 0 {
            return Err(ConfigError::ZeroBatch);
        }
        if batch > quota.burst() {
            return Err(ConfigError::BatchAboveBurst {
                batch,
                burst: quota.burst(),
            });
        }
        let refill_below = refill_below.unwrap_or(batch.div_ceil(5));
        if refill_below >= batch && batch > 1 {
            return Err(ConfigError::ThresholdNotBelowBatch {
                refill_below,
                batch,
            });
        }
        let max_token_age = max_token_age.unwrap_or(quota.burst_window());
        if max_token_age.is_zero() {
            return Err(ConfigError::ZeroTokenAge);
        }
        Ok(Config {
            batch,
            refill_below,
            max_token_age,
            limit: quota.burst(),
            interval: quota.emission_interval(),
        })
    }

    /// Tokens reserved per round trip.
    pub(crate) fn batch(&self) -> u32 {
        self.batch
    }

    /// A background refill starts when fewer tokens than this are left locally.
    pub(crate) fn refill_below(&self) -> u32 {
        self.refill_below
    }

    /// Reserved tokens are dropped this long after they arrived.
    pub(crate) fn max_token_age(&self) -> Duration {
        self.max_token_age
    }

    /// The global quota's burst.
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// The global quota's emission interval.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        let quota = Quota::per_second(1000).unwrap().with_burst(100).unwrap();
        let config = Config::new(&quota, 50, None, None).unwrap();
        assert_eq!(config.refill_below(), 10); // 20% of the batch
        assert_eq!(config.max_token_age(), quota.burst_window());
        assert_eq!(
            Config::new(&quota, 101, None, None),
            Err(ConfigError::BatchAboveBurst {
                batch: 101,
                burst: 100
            })
        );
        assert_eq!(
            Config::new(&quota, 0, None, None),
            Err(ConfigError::ZeroBatch)
        );
        assert_eq!(
            Config::new(&quota, 10, Some(10), None),
            Err(ConfigError::ThresholdNotBelowBatch {
                refill_below: 10,
                batch: 10
            })
        );
        assert_eq!(
            Config::new(&quota, 10, None, Some(Duration::ZERO)),
            Err(ConfigError::ZeroTokenAge)
        );
        // A batch of one refills when empty.
        assert_eq!(
            Config::new(&quota, 1, None, None).unwrap().refill_below(),
            1
        );
    }
}
