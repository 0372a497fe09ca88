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
/// intermediate value exact for well over a century. Fractions of a microsecond stay below the
/// interval's denominator (at most `1000 * rate`, below 2^42), so they are exact too.
pub const MAX_REDIS_WINDOW: Duration = Duration::from_micros(1 << 51);

/// A quota as the Redis store enforces it: the GCRA rule in microseconds
/// (`Gcra::with_resolution(&quota, 1 µs)`), exact: the emission interval is a whole number of
/// microseconds and a fraction, carried exactly by the script, never rounded. Rates faster than one
/// token per microsecond are representable too (the interval is then a fraction of a microsecond).
///
/// ```
/// use flowguard::gcra::{Quota, Ticks};
/// use flowguard::gcra::redis::RedisQuota;
///
/// let q = RedisQuota::new(Quota::per_second(3)?)?;
/// // 333,333 1/3 µs.
/// assert_eq!(q.gcra().interval_ticks(), Ticks { whole: 333_333, frac: 1 });
/// assert_eq!(q.gcra().denominator(), 3);
/// // Two million per second: half a microsecond.
/// let q = RedisQuota::new(Quota::per_second(2_000_000)?)?;
/// assert_eq!(q.gcra().interval_ticks(), Ticks { whole: 0, frac: 1 });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedisQuota {
    quota: Quota,
    gcra: Gcra,
}

impl RedisQuota {
    /// Checks `quota` against the store's range: a burst window of at most [`MAX_REDIS_WINDOW`].
    pub fn new(quota: Quota) -> Result<RedisQuota, RedisStoreError> {
        let gcra = Gcra::with_resolution(&quota, RESOLUTION).map_err(RedisStoreError::Quota)?;
        let window = gcra.window_ticks();
        let max = MAX_REDIS_WINDOW.as_micros() as u64;
        if window.whole > max || (window.whole == max && window.frac > 0) {
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
    fn intervals_keep_their_fraction_of_a_microsecond() {
        // 7 per minute: 8,571,428 4/7 µs; burst 7: exactly one minute.
        let q = RedisQuota::new(Quota::per_minute(7).unwrap()).unwrap();
        assert_eq!(q.gcra().denominator(), 7);
        assert_eq!(
            q.gcra().window_ticks(),
            crate::gcra::Ticks::from(60_000_000)
        );
        // A period that is no whole number of µs: 1,000,000,001 ns per token is 1,000,000 1/1000 µs.
        let q =
            RedisQuota::new(Quota::new(1, Duration::from_nanos(1_000_000_001)).unwrap()).unwrap();
        assert_eq!(q.gcra().denominator(), 1000);
    }

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
