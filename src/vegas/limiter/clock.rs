//! How the limiter reads time to measure round trips: the crate's [`Clock`], dispatched
//! without a virtual call for the two built-in clocks ([`MonotonicClock`], cheap enough for every
//! permit, and [`ManualClock`] for tests and simulations).

use std::any::Any;
use std::sync::Arc;

use crate::clock::{Clock, ManualClock, MonotonicClock};

/// The clock a limiter reads: the two built-in clocks are called directly (no dynamic dispatch
/// on the permit path), any other [`Clock`] through a trait object.
#[derive(Clone)]
// An explicit tag: the built-in clock is found by one byte compare, not by decoding a niche in
// the wrapped clocks' own enums.
#[repr(u8)]
pub(crate) enum LimiterClock {
    /// [`MonotonicClock`].
    System(MonotonicClock),
    /// [`ManualClock`].
    Manual(ManualClock),
    /// Any other clock.
    Custom(Arc<dyn Clock>),
}

impl LimiterClock {
    /// Wraps `clock`, recognising the built-in clocks.
    pub(crate) fn of<C: Clock + 'static>(clock: C) -> Self {
        let any: &dyn Any = &clock;
        if let Some(system) = any.downcast_ref::<MonotonicClock>() {
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
            LimiterClock::of(MonotonicClock::new()),
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
