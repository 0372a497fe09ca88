//! Where the limiter reads time to measure round trips.
//!
//! Kept minimal and local to this module: a monotonic nanosecond counter. [`SystemClock`] is
//! the real one (TSC-backed through `quanta`, cheap enough for every permit); [`ManualClock`] is
//! advanced by hand in tests and simulations.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonic clock in nanoseconds since an arbitrary origin.
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since this clock's origin; never decreases.
    fn now_nanos(&self) -> u64;
}

/// The real monotonic clock.
#[derive(Debug, Clone)]
pub struct SystemClock {
    clock: quanta::Clock,
    origin: u64,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// A clock that only moves when told to; clones share the same time.
///
/// ```
/// use flowguard::vegas::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.now_nanos(), 5_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating).
    pub fn advance(&self, by: std::time::Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // fetch_update cannot fail with a closure that always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Sets the clock to `nanos`, if that is not in the past.
    pub fn set_nanos(&self, nanos: u64) {
        self.nanos.fetch_max(nanos, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}

/// The clock a limiter reads: the two built-in clocks are called directly (no dynamic dispatch
/// on the permit path), any other [`Clock`] through a trait object.
#[derive(Clone)]
pub(crate) enum LimiterClock {
    /// [`SystemClock`].
    System(SystemClock),
    /// [`ManualClock`].
    Manual(ManualClock),
    /// Any other clock.
    Custom(Arc<dyn Clock>),
}

impl LimiterClock {
    /// Wraps `clock`, recognising the built-in clocks.
    pub(crate) fn of<C: Clock>(clock: C) -> Self {
        let any: &dyn Any = &clock;
        if let Some(system) = any.downcast_ref::<SystemClock>() {
            Self::System(system.clone())
        } else if let Some(manual) = any.downcast_ref::<ManualClock>() {
            Self::Manual(manual.clone())
        } else {
            Self::Custom(Arc::new(clock))
        }
    }

    /// Nanoseconds since the clock's origin.
    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        match self {
            Self::System(clock) => clock.now_nanos(),
            Self::Manual(clock) => clock.now_nanos(),
            Self::Custom(clock) => clock.now_nanos(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(u64);

    impl Clock for Fixed {
        fn now_nanos(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn built_in_clocks_are_recognised_and_others_kept() {
        assert!(matches!(
            LimiterClock::of(SystemClock::new()),
            LimiterClock::System(_)
        ));
        let manual = ManualClock::new();
        let wrapped = LimiterClock::of(manual.clone());
        manual.advance(std::time::Duration::from_nanos(7));
        assert!(matches!(wrapped, LimiterClock::Manual(_)));
        assert_eq!(wrapped.now_nanos(), 7, "shares the caller's manual clock");
        let custom = LimiterClock::of(Fixed(42));
        assert!(matches!(custom, LimiterClock::Custom(_)));
        assert_eq!(custom.now_nanos(), 42);
    }
}
