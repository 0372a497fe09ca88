//! One key's state: a single atomic word holding its Theoretical Arrival Time, updated by compare-and-swap.

use std::sync::atomic::{AtomicU64, Ordering};

use super::algorithm::Gcra;
use super::decision::Decision;
use super::error::GcraError;

/// Decides `cost` at `now` against the TAT in `cell`, storing the new TAT if tokens were spent.
///
/// Lock-free: a lost race re-reads the winner's TAT and decides again. A thread whose `now` is
/// older than the stored TAT's author's only ever decides more strictly, never more leniently.
#[inline]
pub(crate) fn spend(
    gcra: &Gcra,
    cell: &AtomicU64,
    now: u64,
    cost: u32,
) -> Result<Decision, GcraError> {
    let mut current = cell.load(Ordering::Acquire);
    loop {
        // Only the cheap verdict is inside the retry loop; the decision is spelled out once.
        let verdict = gcra.verdict(current, now, cost)?;
        if !verdict.allowed || cost == 0 {
            return Ok(gcra.report(verdict, now));
        }
        match cell.compare_exchange_weak(
            current,
            verdict.candidate,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return Ok(gcra.report(verdict, now)),
            Err(actual) => current = actual,
        }
    }
}
