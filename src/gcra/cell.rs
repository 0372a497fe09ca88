//! One key's state: its Theoretical Arrival Time in one atomic cell, updated by compare-and-swap.
//!
//! Two cell types, chosen once per limiter from its quota ([`Gcra::is_whole`]):
//! [`WholeTat`], one `u64` of whole ticks, when the emission interval is a whole number of ticks
//! (the common case: every TAT is then whole); and [`ExactTat`], one `u128` holding whole ticks and
//! a fraction of a tick, when it is not. A 64-bit word cannot hold nanosecond ticks and a fraction
//! for the lifetime of a process, so the exact cell is twice as wide; it is lock-free wherever the
//! CPU has a 128-bit compare-and-swap (every x86-64 of the last 15 years, aarch64), and falls back
//! to `portable-atomic`'s short global locks elsewhere.

use std::sync::atomic::{AtomicU64, Ordering};

use portable_atomic::AtomicU128;

use super::algorithm::{Gcra, Ticks, Verdict, pack};
use super::decision::Decision;
use super::error::GcraError;
use super::table::Expiring;

/// A key's TAT in a form a store can update atomically.
pub(crate) trait TatCell: Expiring + Send + Sync {
    /// A cell holding `tat`.
    fn holding(tat: Ticks) -> Self;

    /// Decides `cost` at `now` against the TAT in this cell, storing the new TAT if tokens were spent.
    ///
    /// Lock-free: a lost race re-reads the winner's TAT and decides again. A thread whose `now` is
    /// older than the stored TAT's author's only ever decides more strictly, never more leniently.
    /// A cost above the burst is [`GcraError::InsufficientCapacity`] and reads nothing.
    #[inline]
    fn spend(&self, gcra: &Gcra, now: u64, cost: u32) -> Result<Decision, GcraError> {
        gcra.admissible(cost)?;
        Ok(self.spend_within(gcra, now, cost))
    }

    /// [`spend`](Self::spend) for a cost already found [`admissible`](Gcra::admissible): infallible,
    /// so a caller dispatching between cells checks the cost once and merges plain decisions.
    fn spend_within(&self, gcra: &Gcra, now: u64, cost: u32) -> Decision;

    /// Gives back `cost` tokens granted by [`spend`](Self::spend): moves the TAT back by
    /// `cost * T`. Exact when nothing else spent on the key in between, which callers ensure by
    /// holding a lock every spender of the key holds (a joint decision that was denied after
    /// earlier demands were granted). A TAT moved back to before `now` reads as idle, which is
    /// what it was (a grant moves the TAT to `max(tat, now) + cost * T`).
    fn refund(&self, gcra: &Gcra, cost: u32);
}

/// The compare-and-swap loop of both cells: decide against `current`, and on a spend swap in the
/// candidate TAT; a lost race decides again against the winner's TAT. Only the cheap `verdict` is
/// inside the retry loop; the decision is spelled out once, by `report`.
#[inline(always)]
fn compare_and_swap<W: Copy>(
    mut current: W,
    cost: u32,
    verdict: impl Fn(W) -> Verdict<W>,
    swap: impl Fn(W, W) -> Result<W, W>,
    report: impl Fn(Verdict<W>) -> Decision,
) -> Decision {
    loop {
        let v = verdict(current);
        if !v.allowed || cost == 0 {
            return report(v);
        }
        match swap(current, v.candidate) {
            Ok(_) => return report(v),
            Err(actual) => current = actual,
        }
    }
}

/// A TAT of whole ticks, for rules whose emission interval is a whole number of ticks.
#[derive(Debug)]
pub(crate) struct WholeTat(AtomicU64);

impl TatCell for WholeTat {
    fn holding(tat: Ticks) -> Self {
        debug_assert_eq!(tat.frac, 0, "a whole rule never makes a fraction");
        WholeTat(AtomicU64::new(tat.whole))
    }

    #[inline(always)]
    fn spend_within(&self, gcra: &Gcra, now: u64, cost: u32) -> Decision {
        compare_and_swap(
            self.0.load(Ordering::Acquire),
            cost,
            |tat| gcra.verdict_within(tat, now, cost),
            |current, new| {
                self.0
                    .compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
            },
            |verdict| gcra.report(verdict, now),
        )
    }

    fn refund(&self, gcra: &Gcra, cost: u32) {
        // `fetch_update` retries on a lost race; the closure never declines.
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                Some(gcra.refund(tat, cost))
            });
    }
}

impl Expiring for WholeTat {
    #[inline]
    fn is_expired(&self, now: u64) -> bool {
        self.0.load(Ordering::Acquire) <= now
    }
}

/// A TAT of whole ticks and a fraction of a tick, packed as `whole << 64 | frac` so that the
/// packed values order like the times they denote.
#[derive(Debug)]
pub(crate) struct ExactTat(AtomicU128);

impl TatCell for ExactTat {
    fn holding(tat: Ticks) -> Self {
        ExactTat(AtomicU128::new(pack(tat)))
    }

    #[inline]
    fn spend_within(&self, gcra: &Gcra, now: u64, cost: u32) -> Decision {
        let step = gcra.exact_step_within(cost);
        compare_and_swap(
            self.0.load(Ordering::Acquire),
            cost,
            |tat| gcra.verdict_exact(tat, now, step),
            |current, new| {
                self.0
                    .compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire)
            },
            |verdict| gcra.report_exact(verdict, now),
        )
    }

    fn refund(&self, gcra: &Gcra, cost: u32) {
        // A cost the rule granted is at most the burst, so the step exists.
        let Ok(step) = gcra.exact_step(cost) else {
            return;
        };
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                Some(gcra.refund_exact(tat, step))
            });
    }
}

impl Expiring for ExactTat {
    #[inline]
    fn is_expired(&self, now: u64) -> bool {
        // `whole << 64 | frac <= now << 64` iff the TAT is at or before `now`.
        self.0.load(Ordering::Acquire) <= u128::from(now) << 64
    }
}

/// The state of a single-key limiter: the cell its rule needs, chosen once at construction.
#[derive(Debug)]
pub(crate) enum TatState {
    /// The emission interval is a whole number of ticks.
    Whole(WholeTat),
    /// The emission interval has a fraction of a tick.
    Exact(ExactTat),
}

impl TatState {
    /// An idle state for `gcra`.
    pub(crate) fn idle(gcra: &Gcra) -> TatState {
        if gcra.is_whole() {
            TatState::Whole(WholeTat::holding(Ticks::ZERO))
        } else {
            TatState::Exact(ExactTat::holding(Ticks::ZERO))
        }
    }

    /// [`TatCell::spend`] on whichever cell this is.
    #[inline(always)]
    pub(crate) fn spend(&self, gcra: &Gcra, now: u64, cost: u32) -> Result<Decision, GcraError> {
        // The cost is checked once, before the dispatch, so both arms are plain decisions: a
        // caller that only reads `allowed` pays nothing for the fields it ignores, and the wider
        // exact arithmetic stays out of line, off the common whole-tick path.
        gcra.admissible(cost)?;
        Ok(match self {
            TatState::Whole(cell) => cell.spend_within(gcra, now, cost),
            TatState::Exact(cell) => spend_exact(cell, gcra, now, cost),
        })
    }
}

/// The exact cell's spend, out of line: most quotas have a whole emission interval.
#[cold]
#[inline(never)]
fn spend_exact(cell: &ExactTat, gcra: &Gcra, now: u64, cost: u32) -> Decision {
    cell.spend_within(gcra, now, cost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::Quota;

    #[test]
    fn exact_cells_expire_exactly_at_their_tat() {
        let cell = ExactTat::holding(Ticks { whole: 10, frac: 1 });
        assert!(!cell.is_expired(10), "a third of a tick is left");
        assert!(cell.is_expired(11));
        let cell = ExactTat::holding(Ticks::from(10));
        assert!(cell.is_expired(10));
        assert!(!cell.is_expired(9));
    }

    /// A refund undoes a grant: every later decision is the one it would have been without it,
    /// for whole and fractional intervals, from an idle key and from a busy one.
    #[test]
    fn a_refund_undoes_a_grant() {
        for quota in [Quota::per_second(4).unwrap(), Quota::per_second(3).unwrap()] {
            let gcra = Gcra::new(&quota);
            for before in [0u32, 1] {
                let (with, without) = (TatState::idle(&gcra), TatState::idle(&gcra));
                for state in [&with, &without] {
                    for _ in 0..before {
                        assert!(state.spend(&gcra, 10, 1).unwrap().allowed);
                    }
                }
                assert!(with.spend(&gcra, 20, 2).unwrap().allowed);
                match &with {
                    TatState::Whole(cell) => cell.refund(&gcra, 2),
                    TatState::Exact(cell) => cell.refund(&gcra, 2),
                }
                for now in [20, 100_000_000, 333_333_354, 1_000_000_000] {
                    assert_eq!(
                        with.spend(&gcra, now, 0).unwrap(),
                        without.spend(&gcra, now, 0).unwrap(),
                        "{quota:?}, {before} spent before, peek at {now}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_cell_follows_the_rule() {
        let whole = Gcra::new(&Quota::per_second(4).unwrap());
        assert!(matches!(TatState::idle(&whole), TatState::Whole(_)));
        let exact = Gcra::new(&Quota::per_second(3).unwrap());
        let state = TatState::idle(&exact);
        assert!(matches!(state, TatState::Exact(_)));
        for _ in 0..3 {
            assert!(state.spend(&exact, 0, 1).unwrap().allowed);
        }
        assert!(!state.spend(&exact, 333_333_333, 1).unwrap().allowed);
        assert!(state.spend(&exact, 333_333_334, 1).unwrap().allowed);
    }
}
