//! [`Quota`]: how many tokens a key may spend, how fast they come back, and how many may be spent at once.

use std::fmt;
use std::time::Duration;

/// The longest burst window (`burst * emission_interval`) a quota may span: 2^62 ns, about 146 years.
///
/// Time is kept as integer nanoseconds in a `u64`; capping the window at a quarter of that range
/// leaves room for `now + 2 * window` without overflow for the lifetime of any process.
pub const MAX_WINDOW: Duration = Duration::from_nanos(1 << 62);

/// A rate limit: `rate` tokens per `period`, spent at most `burst` at a time.
///
/// [`Quota::new`], [`Quota::per_second`], [`Quota::per_minute`] and [`Quota::per_hour`] set the
/// burst equal to the rate: `Quota::per_second(10)` lets a fresh key spend 10 tokens at once, so
/// up to 20 pass within its first second (at most `B + t / T` in any window `t`). Use
/// [`Quota::with_burst`] for another burst (`with_burst(1)` spaces requests evenly).
///
/// The Generic Cell Rate Algorithm turns this into an *emission interval*
/// `T = period / rate` (one token comes back every `T`) and a burst window `B * T`
/// (how far ahead of now a key may have spent).
///
/// `T` is enforced **exactly**, as the fraction `period / rate` in lowest terms
/// ([`Quota::emission_interval_exact`]), never rounded: every store keeps a key's state as a whole
/// number of its ticks plus a fraction of a tick (see [`Gcra`](super::Gcra)), so in any window
/// of length `t` at most `B + t / T` tokens are admitted with the nominal `T`, and a client
/// sending at exactly the nominal rate is never denied (with a burst of at least 2 when `T` is
/// not a whole number of nanoseconds: see [`Gcra`](super::Gcra)). [`Quota::emission_interval`] is `T`
/// rounded **up** to whole nanoseconds: waiting that long is always enough for one token.
///
/// ```
/// use flowguard::gcra::Quota;
/// use std::time::Duration;
///
/// let q = Quota::per_second(10)?.with_burst(20)?;
/// assert_eq!(q.emission_interval(), Duration::from_millis(100));
/// assert_eq!(q.burst(), 20);
///
/// // 7 per minute does not divide a minute evenly: T = 60 s / 7 exactly.
/// let q = Quota::per_minute(7)?;
/// assert_eq!(q.emission_interval_exact(), (60_000_000_000, 7)); // ns / 7
/// assert_eq!(q.emission_interval(), Duration::from_nanos(8_571_428_572)); // rounded up
/// # Ok::<(), flowguard::gcra::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    rate: u32,
    period: Duration,
    burst: u32,
    /// `T = interval_num / interval_den` ns, in lowest terms.
    interval_num: u128,
    interval_den: u32,
}

/// Why a [`Quota`] could not be built. Each variant says what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// `rate` was 0: a quota must admit at least one token per period.
    ZeroRate,
    /// `period` was zero: use a positive period such as one second.
    ZeroPeriod,
    /// `burst` was 0: a burst of at least 1 is needed for any request to pass.
    ZeroBurst,
    /// `period / rate` is below the time resolution of the store.
    IntervalTooShort {
        /// The requested rate.
        rate: u32,
        /// The requested period.
        period: Duration,
        /// The smallest emission interval the store can represent.
        resolution: Duration,
    },
    /// The emission interval cannot be kept exactly in ticks of `resolution` (see
    /// [`Gcra::with_resolution`](super::Gcra::with_resolution)): the resolution is zero, or the
    /// interval in ticks is a fraction whose denominator exceeds 2^52.
    UnsupportedResolution {
        /// The requested rate.
        rate: u32,
        /// The requested period.
        period: Duration,
        /// The resolution asked for.
        resolution: Duration,
    },
    /// `burst * period / rate` exceeds [`MAX_WINDOW`].
    WindowTooLong {
        /// The burst window that was asked for, exact to the nanosecond (saturated at
        /// `Duration::MAX` only beyond it, for periods near `Duration::MAX` itself).
        window: Duration,
    },
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::ZeroRate => {
                f.write_str("quota rate is 0: use a rate of at least 1 token per period")
            }
            QuotaError::ZeroPeriod => f.write_str(
                "quota period is zero: use a positive period, e.g. Duration::from_secs(1)",
            ),
            QuotaError::ZeroBurst => f.write_str(
                "quota burst is 0: use a burst of at least 1 (a burst of 1 spaces requests evenly)",
            ),
            QuotaError::IntervalTooShort {
                rate,
                period,
                resolution,
            } => write!(
                f,
                "quota of {rate} per {period:?} gives an emission interval below {resolution:?}, \
                 the store's time resolution: lower the rate or lengthen the period"
            ),
            QuotaError::UnsupportedResolution {
                rate,
                period,
                resolution,
            } => write!(
                f,
                "quota of {rate} per {period:?} cannot be kept exactly in ticks of {resolution:?}: \
                 use a non-zero resolution of at most 1 ms (1 ns and 1 µs always work)"
            ),
            QuotaError::WindowTooLong { window } => write!(
                f,
                "quota burst window (burst * period / rate) of {window:?} (about {} years) exceeds \
                 the maximum of {MAX_WINDOW:?} (about {} years): lower the burst or shorten the period",
                years(*window),
                years(MAX_WINDOW),
            ),
        }
    }
}

impl std::error::Error for QuotaError {}

/// Whole years of 365.25 days in `d`, for messages about windows too long to read in seconds.
fn years(d: Duration) -> u64 {
    d.as_secs() / 31_557_600
}

/// `nanos` as a [`Duration`], exact up to `Duration::MAX` and saturated beyond it.
fn duration_from_nanos(nanos: u128) -> Duration {
    const PER_SEC: u128 = 1_000_000_000;
    u64::try_from(nanos / PER_SEC).map_or(Duration::MAX, |secs| {
        Duration::new(secs, (nanos % PER_SEC) as u32) // < 10^9: fits
    })
}

impl Quota {
    /// `rate` tokens per `period`, with a burst equal to `rate`.
    pub fn new(rate: u32, period: Duration) -> Result<Quota, QuotaError> {
        if rate == 0 {
            return Err(QuotaError::ZeroRate);
        }
        if period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        let period_ns = period.as_nanos();
        if period_ns < u128::from(rate) {
            return Err(QuotaError::IntervalTooShort {
                rate,
                period,
                resolution: Duration::from_nanos(1),
            });
        }
        let common = gcd(period_ns, u128::from(rate));
        Quota {
            rate,
            period,
            burst: rate,
            interval_num: period_ns / common,
            // A divisor of `rate`, so it fits.
            interval_den: (u128::from(rate) / common) as u32,
        }
        .checked()
    }

    /// `rate` tokens per second, burst `rate`.
    pub fn per_second(rate: u32) -> Result<Quota, QuotaError> {
        Quota::new(rate, Duration::from_secs(1))
    }

    /// `rate` tokens per minute, burst `rate`.
    pub fn per_minute(rate: u32) -> Result<Quota, QuotaError> {
        Quota::new(rate, Duration::from_secs(60))
    }

    /// `rate` tokens per hour, burst `rate`.
    pub fn per_hour(rate: u32) -> Result<Quota, QuotaError> {
        Quota::new(rate, Duration::from_secs(3600))
    }

    /// The same rate with a different burst: at most `burst` tokens may be spent at once.
    pub fn with_burst(self, burst: u32) -> Result<Quota, QuotaError> {
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        Quota { burst, ..self }.checked()
    }

    fn checked(self) -> Result<Quota, QuotaError> {
        // period <= Duration::MAX < 2^94 ns and burst < 2^32: the product fits in a u128.
        if self.window_nanos_ceil() > MAX_WINDOW.as_nanos() {
            let window = duration_from_nanos(self.window_nanos_ceil());
            return Err(QuotaError::WindowTooLong { window });
        }
        Ok(self)
    }

    /// `B * T` in nanoseconds, rounded up.
    fn window_nanos_ceil(&self) -> u128 {
        (u128::from(self.burst) * self.interval_num).div_ceil(u128::from(self.interval_den))
    }

    /// Tokens per period, as configured.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// The period, as configured.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The largest number of tokens that may be spent at once (`B`).
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The emission interval `T = period / rate`, rounded **up** to whole nanoseconds: waiting
    /// this long always brings back at least one token. The limiters enforce the exact `T`
    /// ([`emission_interval_exact`](Self::emission_interval_exact)); the two differ only when
    /// `period` is not a whole number of nanoseconds times `rate`.
    pub fn emission_interval(&self) -> Duration {
        // ceil(T) <= ceil(B * T) <= MAX_WINDOW < 2^63 ns, checked at construction.
        Duration::from_nanos(self.interval_num.div_ceil(u128::from(self.interval_den)) as u64)
    }

    /// The exact emission interval as `(numerator, denominator)` nanoseconds, in lowest terms:
    /// `T = numerator / denominator` ns. The denominator divides `rate`; it is 1 when `T` is a
    /// whole number of nanoseconds (e.g. any rate dividing 10^9 per second).
    ///
    /// ```
    /// # use flowguard::gcra::Quota;
    /// assert_eq!(Quota::per_second(4)?.emission_interval_exact(), (250_000_000, 1));
    /// assert_eq!(Quota::per_second(3)?.emission_interval_exact(), (1_000_000_000, 3));
    /// # Ok::<(), flowguard::gcra::QuotaError>(())
    /// ```
    pub fn emission_interval_exact(&self) -> (u128, u32) {
        (self.interval_num, self.interval_den)
    }

    /// `B * T`, the time it takes an idle key to go from empty to a full burst, rounded up to
    /// whole nanoseconds.
    pub fn burst_window(&self) -> Duration {
        Duration::from_nanos(self.window_nanos_ceil() as u64) // <= MAX_WINDOW, checked
    }
}

/// The greatest common divisor of `a` and `b` (Euclid).
pub(crate) fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("rate", &self.rate)
            .field("period", &self.period)
            .field("burst", &self.burst)
            .field("emission_interval", &self.emission_interval())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_compute_the_interval() {
        assert_eq!(
            Quota::per_second(10).unwrap().emission_interval(),
            Duration::from_millis(100)
        );
        assert_eq!(
            Quota::per_minute(60).unwrap().emission_interval(),
            Duration::from_secs(1)
        );
        assert_eq!(
            Quota::per_hour(1).unwrap().emission_interval(),
            Duration::from_secs(3600)
        );
        assert_eq!(
            Quota::per_second(3).unwrap().emission_interval(),
            Duration::from_nanos(333_333_334)
        );
        assert_eq!(
            Quota::per_second(3).unwrap().emission_interval_exact(),
            (1_000_000_000, 3)
        );
        // Lowest terms: 6 per 2 s is 3 per second.
        assert_eq!(
            Quota::new(6, Duration::from_secs(2))
                .unwrap()
                .emission_interval_exact(),
            (1_000_000_000, 3)
        );
        let q = Quota::per_minute(7).unwrap().with_burst(3).unwrap();
        assert_eq!(q.burst_window(), Duration::from_nanos(25_714_285_715));
        assert_eq!(Quota::per_second(5).unwrap().burst(), 5);
    }

    #[test]
    fn invalid_quotas_are_typed_errors() {
        assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroRate));
        assert_eq!(Quota::new(1, Duration::ZERO), Err(QuotaError::ZeroPeriod));
        assert_eq!(
            Quota::per_second(1).unwrap().with_burst(0),
            Err(QuotaError::ZeroBurst)
        );
        assert!(matches!(
            Quota::new(10, Duration::from_nanos(5)),
            Err(QuotaError::IntervalTooShort { rate: 10, .. })
        ));
        assert!(matches!(
            Quota::new(1, Duration::MAX),
            Err(QuotaError::WindowTooLong { .. })
        ));
        assert!(matches!(
            Quota::per_hour(1).unwrap().with_burst(u32::MAX),
            Err(QuotaError::WindowTooLong { .. })
        ));
    }

    #[test]
    fn errors_say_what_to_change() {
        let msg = Quota::per_second(0).unwrap_err().to_string();
        assert!(msg.contains("at least 1"), "{msg}");
        let msg = Quota::new(1, Duration::MAX).unwrap_err().to_string();
        assert!(msg.contains("lower the burst"), "{msg}");
    }

    #[test]
    fn a_window_too_long_is_reported_exactly() {
        // 2^32 - 1 hours: more nanoseconds than a u64 holds, still a Duration.
        let err = Quota::per_hour(1)
            .unwrap()
            .with_burst(u32::MAX)
            .unwrap_err();
        let hours = u64::from(u32::MAX);
        assert_eq!(
            err,
            QuotaError::WindowTooLong {
                window: Duration::from_secs(hours * 3600)
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains("15461882262000s (about 489957 years)"),
            "{msg}"
        );
        assert!(msg.contains("(about 146 years)"), "{msg}");
    }
}
