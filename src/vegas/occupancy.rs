//! Permits held and the limit, packed in one atomic word.
//!
//! An uncontended grant is one compare-and-swap on this word, without the limiter's lock. The
//! swap succeeds only if neither the count nor the limit changed since they were read, so a
//! grant is always checked against the limit in force at that instant: in-flight never exceeds
//! the limit, also while another thread shrinks it.
//!
//! A flag in the same word says that granting needs arbitration: callers are queued (they come
//! first) or partitions are declared (guarantees decide who goes first). While it is set, grants
//! are made under the limiter's lock only. Releases also happen under the lock, so a caller that
//! found the limiter full under the lock and queued cannot miss the permit that frees up next.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits 0..32: permits held.
const IN_FLIGHT_MASK: u64 = u32::MAX as u64;
/// Bits 32..63: the limit.
const LIMIT_SHIFT: u32 = 32;
/// The largest limit the word holds: [`MAX_LIMIT`](super::MAX_LIMIT), which every limit setting
/// is validated against, so no configured limit is ever cut down here.
const LIMIT_MAX: u64 = super::MAX_LIMIT as u64;
const LIMIT_MASK: u64 = LIMIT_MAX << LIMIT_SHIFT;
/// Bit 63: grants need arbitration under the lock.
const ARBITRATED: u64 = 1 << 63;

/// The result of trying to take one permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// Taken: permits held after the grant (counting it) and the limit it was checked against.
    Granted {
        /// Permits held after the grant, counting it.
        in_flight: usize,
        /// The limit the grant was checked against.
        limit: usize,
    },
    /// No room under the limit.
    Full {
        /// Permits held.
        in_flight: usize,
        /// The limit.
        limit: usize,
    },
    /// Queued callers or partitions must be considered first, under the lock.
    Arbitrated,
}

/// Permits held and the limit, updated atomically together.
#[derive(Debug)]
pub(crate) struct Occupancy {
    word: AtomicU64,
}

fn encode_limit(limit: usize) -> u64 {
    u64::try_from(limit).unwrap_or(u64::MAX).min(LIMIT_MAX) << LIMIT_SHIFT
}

fn in_flight_of(word: u64) -> usize {
    (word & IN_FLIGHT_MASK) as usize
}

fn limit_of(word: u64) -> usize {
    ((word & LIMIT_MASK) >> LIMIT_SHIFT) as usize
}

impl Occupancy {
    /// No permit held, `limit` in force, no arbitration.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            word: AtomicU64::new(encode_limit(limit)),
        }
    }

    /// Permits held now.
    pub(crate) fn in_flight(&self) -> usize {
        in_flight_of(self.word.load(Ordering::Acquire))
    }

    /// Takes one permit without the lock, if one is free under the limit and no arbitration is
    /// needed.
    #[inline]
    pub(crate) fn take_uncontended(&self) -> Take {
        self.take(false)
    }

    /// Takes one permit if one is free under the limit, for a caller that holds the limiter's
    /// lock and has decided (arbitrated) that it may be granted.
    pub(crate) fn take_arbitrated(&self) -> Take {
        self.take(true)
    }

    #[inline]
    fn take(&self, arbitrated: bool) -> Take {
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            if word & ARBITRATED != 0 && !arbitrated {
                return Take::Arbitrated;
            }
            let (in_flight, limit) = (in_flight_of(word), limit_of(word));
            if in_flight >= limit {
                return Take::Full { in_flight, limit };
            }
            // in_flight < limit <= LIMIT_MAX, so the increment stays inside the count's bits.
            match self.word.compare_exchange_weak(
                word,
                word + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Take::Granted {
                        in_flight: in_flight + 1,
                        limit,
                    };
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// Returns one permit taken with [`take_uncontended`](Self::take_uncontended) or
    /// [`take_arbitrated`](Self::take_arbitrated).
    #[inline]
    pub(crate) fn give_back(&self) {
        // A `Grant` only comes from a successful take and is released exactly once (the permit's
        // `finished` flag, the waiter's slot), so the count is positive here and the decrement
        // cannot borrow from the limit bits.
        let before = self.word.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before & IN_FLIGHT_MASK != 0, "a permit given back twice");
    }

    /// Puts `limit` in force; permits already held stay held.
    pub(crate) fn set_limit(&self, limit: usize) {
        let limit = encode_limit(limit);
        // fetch_update cannot fail with a closure that always returns Some.
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                Some((word & !LIMIT_MASK) | limit)
            });
    }

    /// Turns arbitration on or off.
    pub(crate) fn set_arbitrated(&self, arbitrated: bool) {
        if arbitrated {
            self.word.fetch_or(ARBITRATED, Ordering::AcqRel);
        } else {
            self.word.fetch_and(!ARBITRATED, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_up_to_the_limit_then_reports_full() {
        let occupancy = Occupancy::new(2);
        assert_eq!(
            occupancy.take_uncontended(),
            Take::Granted {
                in_flight: 1,
                limit: 2
            }
        );
        assert_eq!(
            occupancy.take_uncontended(),
            Take::Granted {
                in_flight: 2,
                limit: 2
            }
        );
        assert_eq!(
            occupancy.take_uncontended(),
            Take::Full {
                in_flight: 2,
                limit: 2
            }
        );
        occupancy.give_back();
        assert_eq!(occupancy.in_flight(), 1);
    }

    #[test]
    fn a_shrunk_limit_keeps_held_permits_and_grants_nothing_more() {
        let occupancy = Occupancy::new(3);
        for _ in 0..3 {
            assert!(matches!(occupancy.take_uncontended(), Take::Granted { .. }));
        }
        occupancy.set_limit(1);
        assert_eq!(
            occupancy.take_uncontended(),
            Take::Full {
                in_flight: 3,
                limit: 1
            }
        );
        occupancy.give_back();
        occupancy.give_back();
        assert!(matches!(occupancy.take_uncontended(), Take::Full { .. }));
        occupancy.give_back();
        assert!(matches!(
            occupancy.take_uncontended(),
            Take::Granted {
                in_flight: 1,
                limit: 1
            }
        ));
    }

    #[test]
    fn arbitration_refuses_lock_free_grants_only() {
        let occupancy = Occupancy::new(2);
        occupancy.set_arbitrated(true);
        assert_eq!(occupancy.take_uncontended(), Take::Arbitrated);
        assert!(matches!(occupancy.take_arbitrated(), Take::Granted { .. }));
        occupancy.set_arbitrated(false);
        assert!(matches!(occupancy.take_uncontended(), Take::Granted { .. }));
    }

    #[test]
    fn a_huge_limit_is_enforced_as_the_largest_the_word_holds() {
        let occupancy = Occupancy::new(usize::MAX);
        assert_eq!(
            occupancy.take_uncontended(),
            Take::Granted {
                in_flight: 1,
                limit: LIMIT_MAX as usize
            }
        );
    }
}
