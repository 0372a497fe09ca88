//! Permits held and the limit, kept so that an uncontended grant needs no lock.
//!
//! An uncontended grant is one compare-and-swap on a word packing the number of grants made so
//! far (a wrapping counter), the limit and a flag. The permits held are that count minus the
//! number of releases, a counter beside the word. The swap succeeds only if neither the grant
//! count nor the limit changed since they were read, so a grant is always checked against the
//! limit in force at that instant: in-flight never exceeds the limit, also while another thread
//! shrinks it.
//!
//! Releases happen only under the limiter's lock, one at a time, so the release counter has a
//! single writer and is advanced by a plain store (no read-modify-write on the permit path's
//! second half). A lock-free grant reads it before the word: what it reads is never ahead of the
//! grants it sees, so the permits it counts as held are never fewer than are really held. At
//! worst a grant racing a release reports the limiter full; the two were concurrent, so that is
//! the release happening second.
//!
//! A flag in the word says that granting needs arbitration: callers are queued (they come first)
//! or partitions are declared (guarantees decide who goes first). While it is set, grants are
//! made under the limiter's lock only. Releases also happen under the lock, so a caller that
//! found the limiter full under the lock and queued cannot miss the permit that frees up next.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::vegas::algorithms::MAX_LIMIT;

/// Bits 0..32: grants made so far, wrapping.
const GRANTS_MASK: u64 = u32::MAX as u64;
/// Bits 32..63: the limit.
const LIMIT_SHIFT: u32 = 32;
/// The largest limit the word holds: [`MAX_LIMIT`], which every limit setting
/// is validated against, so no configured limit is ever cut down here. Permits held never exceed
/// it, so the wrapping difference of two 32-bit counters counts them exactly.
const LIMIT_MAX: u64 = MAX_LIMIT as u64;
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

/// Permits held and the limit.
#[derive(Debug)]
pub(crate) struct Occupancy {
    /// Grants so far (wrapping), the limit and the arbitration flag.
    word: AtomicU64,
    /// Releases so far (wrapping). Written only under the limiter's lock.
    released: AtomicU32,
}

fn encode_limit(limit: usize) -> u64 {
    u64::try_from(limit).unwrap_or(u64::MAX).min(LIMIT_MAX) << LIMIT_SHIFT
}

/// Grants counted in `word` minus `released`: the permits held.
fn held(word: u64, released: u32) -> usize {
    ((word & GRANTS_MASK) as u32).wrapping_sub(released) as usize
}

fn limit_of(word: u64) -> usize {
    ((word & LIMIT_MASK) >> LIMIT_SHIFT) as usize
}

/// `word` with one more grant, the count wrapping inside its bits.
fn plus_one_grant(word: u64) -> u64 {
    (word & !GRANTS_MASK) | (word.wrapping_add(1) & GRANTS_MASK)
}

impl Occupancy {
    /// No permit held, `limit` in force, no arbitration.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            word: AtomicU64::new(encode_limit(limit)),
            released: AtomicU32::new(0),
        }
    }

    /// Permits held now (exact under the limiter's lock, where no release can interleave).
    pub(crate) fn in_flight(&self) -> usize {
        // Releases first: see the module docs.
        let released = self.released.load(Ordering::Acquire);
        held(self.word.load(Ordering::Acquire), released)
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
        loop {
            // The release count is read before the word, so it never counts a release of a grant
            // the word does not show yet: `in_flight` is never below the permits really held.
            let released = self.released.load(Ordering::Acquire);
            let word = self.word.load(Ordering::Acquire);
            if word & ARBITRATED != 0 && !arbitrated {
                return Take::Arbitrated;
            }
            let (in_flight, limit) = (held(word, released), limit_of(word));
            if in_flight >= limit {
                return Take::Full { in_flight, limit };
            }
            if self
                .word
                .compare_exchange_weak(
                    word,
                    plus_one_grant(word),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
            {
                return Take::Granted {
                    in_flight: in_flight + 1,
                    limit,
                };
            }
        }
    }

    /// Returns one permit taken with [`take_uncontended`](Self::take_uncontended) or
    /// [`take_arbitrated`](Self::take_arbitrated). The caller holds the limiter's lock: releases
    /// are serialised by it, which is what lets the count advance by a plain store.
    #[inline]
    pub(crate) fn give_back(&self) {
        let released = self.released.load(Ordering::Relaxed);
        // A `Grant` only comes from a successful take and is released exactly once (the permit's
        // `finished` flag, the waiter's slot), so a permit is held here.
        debug_assert!(
            held(self.word.load(Ordering::Acquire), released) != 0,
            "a permit given back twice"
        );
        self.released
            .store(released.wrapping_add(1), Ordering::Release);
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

    #[test]
    fn counts_stay_exact_across_the_counters_wrapping() {
        // Both counters two steps before wrapping, no permit held.
        let occupancy = Occupancy {
            word: AtomicU64::new(encode_limit(3) | (GRANTS_MASK - 1)),
            released: AtomicU32::new(u32::MAX - 1),
        };
        for held in 1..=3 {
            assert_eq!(
                occupancy.take_uncontended(),
                Take::Granted {
                    in_flight: held,
                    limit: 3
                }
            );
        }
        assert_eq!(
            occupancy.take_uncontended(),
            Take::Full {
                in_flight: 3,
                limit: 3
            }
        );
        assert_eq!(
            limit_of(occupancy.word.load(Ordering::Relaxed)),
            3,
            "limit untouched"
        );
        for held in (0..3).rev() {
            occupancy.give_back();
            assert_eq!(occupancy.in_flight(), held);
        }
    }
}
