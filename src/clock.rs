//! Clocks: where "now" comes from, for every part of the crate. A real monotonic clock, and a
//! manual one for tests and simulations. Pure cores never read a clock; limiters read one per
//! decision (GCRA) or per permit (Vegas), so tests inject a [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of monotonic time in nanoseconds since the clock's own start.
///
/// Limiters read the clock once per decision; the GCRA math never reads it, it is given `now`.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's start. Never decreases.
    fn now_nanos(&self) -> u64;
}

/// The real clock: monotonic, cheap to read.
///
/// Where the processor has an invariant time-stamp counter (every x86-64 server of the last
/// decade), a reading is one inline `rdtsc` and a multiply: the clock read is most of the cost of
/// an in-memory rate-limit check and two of them are in every Vegas permit, so it is kept out of
/// any function call. The counter's rate is the one the `quanta` crate calibrates against the
/// operating system's monotonic clock, and `quanta` decides whether the counter can be trusted;
/// where it cannot (no invariant counter, another architecture), readings go through `quanta`'s
/// own clock.
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    source: Source,
    start: u64,
}

#[derive(Clone, Debug)]
enum Source {
    /// The time-stamp counter, read inline: nanoseconds are `ticks * per_2_40 >> 40`.
    #[cfg(target_arch = "x86_64")]
    Tsc {
        /// Nanoseconds per 2^40 ticks.
        per_2_40: u64,
    },
    /// Whatever `quanta` reads on this machine.
    Quanta(quanta::Clock),
}

impl MonotonicClock {
    /// A clock whose zero is now.
    pub fn new() -> MonotonicClock {
        let source = tsc::source().unwrap_or_else(|| Source::Quanta(quanta::Clock::new()));
        let start = source.raw();
        MonotonicClock { source, start }
    }
}

impl Source {
    #[inline(always)]
    fn raw(&self) -> u64 {
        match self {
            #[cfg(target_arch = "x86_64")]
            Source::Tsc { .. } => tsc::read(),
            Source::Quanta(clock) => clock.raw(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline(always)]
    fn now_nanos(&self) -> u64 {
        match &self.source {
            #[cfg(target_arch = "x86_64")]
            Source::Tsc { per_2_40 } => {
                tsc::nanos(tsc::read().saturating_sub(self.start), *per_2_40)
            }
            Source::Quanta(clock) => clock.delta_as_nanos(self.start, clock.raw()),
        }
    }
}

/// The time-stamp counter, where `quanta` found it trustworthy.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod tsc {
    use std::sync::OnceLock;

    use super::Source;

    /// The counter. It has no memory effects, and it is only read where `quanta`, which reads it
    /// the same way, found it present and invariant (see [`source`]).
    #[inline(always)]
    pub(super) fn read() -> u64 {
        // SAFETY: `rdtsc` reads a register; it touches no memory. It is only called on a
        // `Source::Tsc`, which `source` builds only after seeing `quanta` return the counter's
        // own values, so the instruction is available and not trapped on this machine.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// `ticks` in nanoseconds at `per_2_40` nanoseconds per 2^40 ticks (exact to the product's
    /// last bit: the product of two `u64` always fits in a `u128`).
    #[inline(always)]
    pub(super) fn nanos(ticks: u64, per_2_40: u64) -> u64 {
        ((u128::from(ticks) * u128::from(per_2_40)) >> 40) as u64
    }

    /// The counter as a [`Source`], or `None` where `quanta` reads something else. Decided once
    /// per process.
    pub(super) fn source() -> Option<Source> {
        static SOURCE: OnceLock<Option<u64>> = OnceLock::new();
        let per_2_40 = (*SOURCE.get_or_init(|| {
            let clock = quanta::Clock::new();
            // quanta reads the counter itself when it trusts it (an invariant TSC); otherwise its
            // raw readings are the OS clock's nanoseconds, which two counter reads taken around
            // them do not bracket (a move to another core between reads can spoil one try).
            let bracketed = (0..5)
                .filter(|_| {
                    let before = read();
                    let raw = clock.raw();
                    let after = read();
                    before <= raw && raw <= after
                })
                .count();
            let counts = bracketed >= 2;
            let per_2_40 = clock.delta_as_nanos(0, 1 << 40);
            (counts && per_2_40 > 0).then_some(per_2_40)
        }))?;
        Some(Source::Tsc { per_2_40 })
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use flowguard::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(shared.now_nanos(), 250_000_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// Moves time forward by `by` (saturating at the end of the representable range).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the time since start; a value earlier than the current time is ignored (time is monotonic).
    pub fn set(&self, since_start: Duration) {
        self.set_nanos(u64::try_from(since_start.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Sets the time to `nanos` since start, if that is not in the past.
    pub fn set_nanos(&self, nanos: u64) {
        self.nanos.fetch_max(nanos, Ordering::AcqRel);
    }

    /// The current time since start.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_real_clock_measures_what_the_os_clock_measures() {
        // The clock's interval is nested inside the OS clock's, and holds a sleep of 30 ms: the
        // bounds hold however the test is scheduled. 2% allows for the counter's calibration.
        let clock = MonotonicClock::new();
        let os_start = Instant::now();
        let start = clock.now_nanos();
        std::thread::sleep(Duration::from_millis(30));
        let end = clock.now_nanos();
        let os = os_start.elapsed().as_nanos() as f64;
        let ours = (end - start) as f64;
        assert!(ours >= 30e6 * 0.98, "{ours} ns measured over a 30 ms sleep");
        assert!(ours <= os * 1.02, "{ours} ns measured inside {os} ns");
    }

    #[test]
    fn the_real_clock_never_goes_back_and_starts_at_zero() {
        let clock = MonotonicClock::new();
        let first = clock.now_nanos();
        assert!(first < 1_000_000_000, "a new clock reads {first} ns");
        let mut last = first;
        for _ in 0..100_000 {
            let now = clock.now_nanos();
            assert!(now >= last, "{now} after {last}");
            last = now;
        }
        let copy = clock.clone();
        assert!(copy.now_nanos() >= last, "a clone shares the start");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn counter_ticks_scale_without_overflow() {
        assert_eq!(tsc::nanos(0, 3 << 40), 0);
        assert_eq!(tsc::nanos(1 << 40, 123_456_789), 123_456_789);
        // A 1 GHz counter: ticks are nanoseconds, up to the last one.
        assert_eq!(tsc::nanos(u64::MAX, 1 << 40), u64::MAX);
        // A 3 GHz counter: a third of a nanosecond per tick, rounded down.
        let per_2_40 = (1u64 << 40) / 3;
        assert_eq!(tsc::nanos(3_000_000_000, per_2_40), 999_999_999);
    }
}
