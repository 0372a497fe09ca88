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

/// The real clock: monotonic, cheap to read (TSC-based through the `quanta` crate where available).
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    start: u64,
}

impl MonotonicClock {
    /// A clock whose zero is now.
    pub fn new() -> MonotonicClock {
        let clock = quanta::Clock::new();
        let start = clock.raw();
        MonotonicClock { clock, start }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.clock.delta_as_nanos(self.start, self.clock.raw())
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
