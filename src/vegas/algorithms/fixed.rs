//! A limit that never changes: the baseline to compare adaptive algorithms against.

use super::algorithm::{LimitAlgorithm, Sample};
use super::bounds::check_limit;
use crate::vegas::error::ConfigError;

/// A constant limit.
///
/// ```
/// use flowguard::vegas::{Fixed, LimitAlgorithm};
///
/// assert_eq!(Fixed::new(16)?.limit(), 16);
/// assert!(Fixed::new(0).is_err());
/// # Ok::<(), flowguard::vegas::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed {
    limit: usize,
}

impl Fixed {
    /// A constant limit of `limit` (at least 1).
    pub fn new(limit: usize) -> Result<Self, ConfigError> {
        check_limit("limit", limit)?;
        Ok(Self { limit })
    }
}

impl LimitAlgorithm for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn limit(&self) -> usize {
        self.limit
    }

    fn update(&mut self, _sample: &Sample) -> usize {
        self.limit
    }
}
