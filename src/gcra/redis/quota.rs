//! The Redis store's rule for a [`Quota`]: microsecond ticks, checked to be enforceable exactly by
//! the Redis script.

use std::time::Duration;

use crate::gcra::{ConfigError, Gcra, Quota};

/// The epoch of the store's timestamps: unix time 1,700,000,000 s (2023-11-14T22:13:20Z).
/// Microseconds since then stay below 2^53 (exact in Lua) for about 280 years.
pub const FLOWGUARD_EPOCH_UNIX_SECS: u64 = 1_700_000_000;

/// The Redis store's time resolution: one microsecond, the resolution of the server's `TIME`.
pub const RESOLUTION: Duration = Duration::from_micros(1);

/// The longest burst window the Redis store accepts: 2^51 µs, about 71 years.
///
/// The script runs in Lua, whose numbers are doubles: integers are exact below 2^53. Times are
/// microseconds since [`FLOWGUARD_EPOCH_UNIX_SECS`] (about 2^48 today),
/// and the script computes `now + 2 * window` at most, so a window of 2^51 µs keeps every
/// intermediate value exact for well over a century. Fractions of a microsecond stay below the
/// interval's denominator (at most `1000 * rate`, below 2^42), so they are exact too.
pub const MAX_REDIS_WINDOW: Duration = Duration::from_micros(1 << 51);

/// `quota` as the Redis store enforces it: the GCRA rule in microseconds
/// (`Gcra::with_resolution(&quota, 1 µs)`), exact: the emission interval is a whole number of
/// microseconds and a fraction, carried exactly by the script, never rounded. Rates faster than one
/// token per microsecond are representable too (the interval is then a fraction of a microsecond).
/// A burst window beyond [`MAX_REDIS_WINDOW`] is refused.
pub(crate) fn rule(quota: &Quota) -> Result<Gcra, ConfigError> {
    let gcra = Gcra::with_resolution(quota, RESOLUTION).map_err(ConfigError::StoreResolution)?;
    let window = gcra.window_ticks();
    let max = MAX_REDIS_WINDOW.as_micros() as u64;
    if window.whole > max || (window.whole == max && window.frac > 0) {
        return Err(ConfigError::StoreWindowTooLong {
            window: quota.burst_window(),
            max: MAX_REDIS_WINDOW,
        });
    }
    Ok(gcra)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::gcra::Ticks;

    #[test]
    fn intervals_keep_their_fraction_of_a_microsecond() {
        // 3 per second: 333,333 1/3 µs.
        let g = rule(&Quota::per_second(3).unwrap()).unwrap();
        assert_eq!(
            g.interval_ticks(),
            Ticks {
                whole: 333_333,
                frac: 1
            }
        );
        assert_eq!(g.denominator(), 3);
        // Two million per second: half a microsecond.
        let g = rule(&Quota::per_second(2_000_000).unwrap()).unwrap();
        assert_eq!(g.interval_ticks(), Ticks { whole: 0, frac: 1 });
        // 7 per minute: 8,571,428 4/7 µs; burst 7: exactly one minute.
        let g = rule(&Quota::per_minute(7).unwrap()).unwrap();
        assert_eq!(g.denominator(), 7);
        assert_eq!(g.window_ticks(), Ticks::from(60_000_000));
        // A period that is no whole number of µs: 1,000,000,001 ns per token is 1,000,000 1/1000 µs.
        let g = rule(&Quota::new(1, Duration::from_nanos(1_000_000_001)).unwrap()).unwrap();
        assert_eq!(g.denominator(), 1000);
    }

    #[test]
    fn windows_beyond_exact_doubles_are_rejected() {
        let q = Quota::per_hour(1).unwrap().with_burst(1_000_000).unwrap(); // ~114 years
        assert!(matches!(
            rule(&q),
            Err(ConfigError::StoreWindowTooLong { .. })
        ));
        let q = Quota::per_hour(1).unwrap().with_burst(500_000).unwrap(); // ~57 years
        assert!(rule(&q).is_ok());
    }
}
