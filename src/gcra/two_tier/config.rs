//! [`TwoTierConfig`]: batch size, refill threshold and token lifetime, validated against the quota.

use std::fmt;
use std::time::Duration;

use crate::gcra::Quota;

/// How a [`TwoTierLimiter`](super::TwoTierLimiter) reserves and keeps tokens.
///
/// ```
/// use flowguard::gcra::two_tier::TwoTierConfig;
/// use flowguard::gcra::Quota;
///
/// let quota = Quota::per_second(1000)?.with_burst(100)?;
/// let config = TwoTierConfig::new(50).validate(&quota)?;
/// assert_eq!(config.refill_below(), 10); // 20% of the batch
/// assert_eq!(config.max_token_age(), quota.burst_window());
/// assert!(TwoTierConfig::new(101).validate(&quota).is_err()); // batch > burst
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwoTierConfig {
    batch: u32,
    refill_below: Option<u32>,
    max_token_age: Option<Duration>,
}

/// A [`TwoTierConfig`] that cannot work with its quota, and what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TwoTierConfigError {
    /// The batch was 0.
    ZeroBatch,
    /// The batch exceeds the quota's burst: such a reservation could never be granted.
    BatchAboveBurst {
        /// The configured batch.
        batch: u32,
        /// The quota's burst.
        burst: u32,
    },
    /// The refill threshold is not below the batch, so every local decision would start a refill.
    ThresholdNotBelowBatch {
        /// The configured threshold.
        refill_below: u32,
        /// The configured batch.
        batch: u32,
    },
    /// The maximum token age was zero: reserved tokens would be stale on arrival.
    ZeroTokenAge,
    /// `max_keys` was 0: the limiter needs room for at least one reservoir.
    ZeroMaxKeys,
}

impl fmt::Display for TwoTierConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TwoTierConfigError::ZeroBatch => f.write_str("two-tier batch is 0: reserve at least 1 token per batch"),
            TwoTierConfigError::BatchAboveBurst { batch, burst } => write!(
                f,
                "two-tier batch of {batch} exceeds the quota's burst of {burst}: such a reservation is never granted; \
                 use a batch of at most {burst} (or raise the burst)"
            ),
            TwoTierConfigError::ThresholdNotBelowBatch { refill_below, batch } => write!(
                f,
                "two-tier refill threshold {refill_below} is not below the batch {batch}: use a threshold below the batch"
            ),
            TwoTierConfigError::ZeroMaxKeys => {
                f.write_str("two-tier max_keys is 0: the limiter needs room for at least one reservoir")
            }
            TwoTierConfigError::ZeroTokenAge => {
                f.write_str("two-tier max_token_age is zero: tokens would be stale on arrival; use a positive age")
            }
        }
    }
}

impl std::error::Error for TwoTierConfigError {}

impl TwoTierConfig {
    /// Reserve `batch` tokens per round trip; refill below 20% of it; tokens live one burst window.
    pub fn new(batch: u32) -> TwoTierConfig {
        TwoTierConfig {
            batch,
            refill_below: None,
            max_token_age: None,
        }
    }

    /// Start a background refill when fewer than `tokens` are left locally (default: 20% of the batch, rounded up).
    pub fn refill_below(mut self, tokens: u32) -> TwoTierConfig {
        self.refill_below = Some(tokens);
        self
    }

    /// Drop reserved tokens this long after they arrived (default: the quota's burst window `B*T`).
    pub fn max_token_age(mut self, age: Duration) -> TwoTierConfig {
        self.max_token_age = Some(age);
        self
    }

    /// Checks the configuration against `quota` and fills in the defaults.
    pub fn validate(self, quota: &Quota) -> Result<ValidConfig, TwoTierConfigError> {
        if self.batch == 0 {
            return Err(TwoTierConfigError::ZeroBatch);
        }
        if self.batch > quota.burst() {
            return Err(TwoTierConfigError::BatchAboveBurst {
                batch: self.batch,
                burst: quota.burst(),
            });
        }
        let refill_below = self.refill_below.unwrap_or(self.batch.div_ceil(5));
        if refill_below >= self.batch && self.batch > 1 {
            return Err(TwoTierConfigError::ThresholdNotBelowBatch {
                refill_below,
                batch: self.batch,
            });
        }
        let max_token_age = self.max_token_age.unwrap_or(quota.burst_window());
        if max_token_age.is_zero() {
            return Err(TwoTierConfigError::ZeroTokenAge);
        }
        Ok(ValidConfig {
            batch: self.batch,
            refill_below,
            max_token_age,
            limit: quota.burst(),
            interval: quota.emission_interval(),
        })
    }
}

/// A [`TwoTierConfig`] checked against its quota, with defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidConfig {
    batch: u32,
    refill_below: u32,
    max_token_age: Duration,
    limit: u32,
    interval: Duration,
}

impl ValidConfig {
    /// Tokens reserved per round trip.
    pub fn batch(&self) -> u32 {
        self.batch
    }

    /// A background refill starts when fewer tokens than this are left locally.
    pub fn refill_below(&self) -> u32 {
        self.refill_below
    }

    /// Reserved tokens are dropped this long after they arrived.
    pub fn max_token_age(&self) -> Duration {
        self.max_token_age
    }

    /// The global quota's burst.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The global quota's emission interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }
}
