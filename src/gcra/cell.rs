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
        let step = gcra.decide(current, now, cost)?;
        let Some(new_tat) = step.new_tat else {
            return Ok(step.decision);
        };
        match cell.compare_exchange_weak(current, new_tat, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(step.decision),
            Err(actual) => current = actual,
        }
    }
}
