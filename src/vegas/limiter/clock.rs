//! How the limiter reads time to measure round trips: the default [`MonotonicClock`] called
//! directly (cheap enough for every permit, no dynamic dispatch on the permit path), or any
//! [`Clock`] the builder was given (a [`ManualClock`](crate::clock::ManualClock) in tests and
//! simulations) through a trait object.

use std::sync::Arc;

use crate::clock::{Clock, MonotonicClock};

/// The clock a limiter reads.
#[derive(Clone)]
// An explicit tag: the default clock is found by one byte compare, not by decoding a niche in
// the wrapped clock.
#[repr(u8)]
pub(super) enum LimiterClock {
    /// The default: a [`MonotonicClock`] of the limiter's own.
    Monotonic(MonotonicClock),
    /// A clock chosen by the caller.
    Custom(Arc<dyn Clock>),
}

impl LimiterClock {
    /// Reads `clock`.
    pub(super) fn custom(clock: impl Clock + 'static) -> Self {
        Self::Custom(Arc::new(clock))
    }

    /// Nanoseconds since the clock's origin.
    #[inline]
    pub(super) fn now_nanos(&self) -> u64 {
        match self {
            Self::Monotonic(clock) => clock.now_nanos(),
            Self::Custom(clock) => clock.now_nanos(),
        }
    }
}

impl Default for LimiterClock {
    fn default() -> Self {
        Self::Monotonic(MonotonicClock::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    struct Fixed(u64);

    impl Clock for Fixed {
        fn now_nanos(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn the_default_is_monotonic_and_chosen_clocks_are_kept() {
        assert!(matches!(
            LimiterClock::default(),
            LimiterClock::Monotonic(_)
        ));
        let manual = ManualClock::new();
        let wrapped = LimiterClock::custom(manual.clone());
        manual.advance(std::time::Duration::from_nanos(7));
        assert_eq!(wrapped.now_nanos(), 7, "shares the caller's manual clock");
        assert_eq!(LimiterClock::custom(Fixed(42)).now_nanos(), 42);
    }
}
