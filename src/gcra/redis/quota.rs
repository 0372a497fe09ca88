//! [`RedisQuota`]: a [`Quota`] checked to be enforceable exactly by the Redis script.

use std::time::Duration;

use super::error::RedisStoreError;
use crate::gcra::{Gcra, Quota};

/// The Redis store's time resolution: one microsecond, the resolution of the server's `TIME`.
pub const RESOLUTION: Duration = Duration::from_micros(1);

/// The longest burst window the Redis store accepts: 2^51 µs, about 71 years.
///
/// The script runs in Lua, whose numbers are doubles: integers are exact below 2^53. Times are
/// microseconds since [`FLOWGUARD_EPOCH_UNIX_SECS`](super::FLOWGUARD_EPOCH_UNIX_SECS) (about 2^48 today),
/// and the script computes `now + 2 * window` at most, so a window of 2^51 µs keeps every
/// intermediate value exact for well over a century.
pub const MAX_REDIS_WINDOW: Duration = Duration::from_micros(1 << 51);

/// A quota as the Redis store enforces it: the GCRA rule in integer microseconds
/// (`Gcra::with_resolution(&quota, 1 µs)`; the emission interval is rounded down to whole µs).
///
/// ```
/// use flowguard::gcra::Quota;
/// use flowguard::gcra::redis::RedisQuota;
/// use std::time::Duration;
///
/// let q = RedisQuota::new(Quota::per_second(3)?)?;
/// assert_eq!(q.gcra().interval_ticks(), 333_333); // µs
/// // Faster than one token per microsecond cannot be represented.
/// assert!(RedisQuota::new(Quota::per_second(2_000_000)?).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedisQuota {
    quota: Quota,
    gcra: Gcra,
}

impl RedisQuota {
    /// Checks `quota` against the store's resolution and range.
    pub fn new(quota: Quota) -> Result<RedisQuota, RedisStoreError> {
        let gcra = Gcra::with_resolution(&quota, RESOLUTION).map_err(RedisStoreError::Quota)?;
        if gcra.window_ticks() > MAX_REDIS_WINDOW.as_micros() as u64 {
            return Err(RedisStoreError::WindowTooLong {
                window: quota.burst_window(),
                max: MAX_REDIS_WINDOW,
            });
        }
        Ok(RedisQuota { quota, gcra })
    }

    /// The quota as configured.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The rule the script applies (microsecond ticks): an in-memory store deciding with this rule
    /// at the same times reaches the same decisions.
    pub fn gcra(&self) -> &Gcra {
        &self.gcra
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_beyond_exact_doubles_are_rejected() {
        let q = Quota::per_hour(1).unwrap().with_burst(1_000_000).unwrap(); // ~114 years
        assert!(matches!(
            RedisQuota::new(q),
            Err(RedisStoreError::WindowTooLong { .. })
        ));
        let q = Quota::per_hour(1).unwrap().with_burst(500_000).unwrap(); // ~57 years
        assert!(RedisQuota::new(q).is_ok());
    }
}
