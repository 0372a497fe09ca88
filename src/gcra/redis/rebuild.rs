//! When a failing connection is replaced by a new one: the [`Verdict`] of a check made beside the
//! connection, and the [`RebuildSchedule`] that spaces those checks out.
//!
//! A probe that fails says only that the call did not get an answer. The check asks the node that
//! should have answered, on a fresh connection, for the failing key (`GET`), and (for a cluster)
//! another node for the slot map:
//!
//! * the node answers on a fresh connection, or the slot map names another master for the key:
//!   the connection is what fails (wedged, or routing to a master that was replaced): rebuild it;
//! * the node is silent and still the key's master, or Redis refuses the key (`CLUSTERDOWN`
//!   while a failover is under way, `LOADING`): a new connection would fail the same way; wait.
//!
//! Rebuilding only on evidence matters in a cluster: a new client that cannot reach a silent
//! master refreshes its slot map on every request for that master's slots, and a refresh holds
//! every other request while it tries to connect.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The shortest wait between two checks.
pub(crate) const MIN_CHECK_DELAY: Duration = Duration::from_millis(50);

/// The longest wait between two checks: the wait doubles from [`MIN_CHECK_DELAY`] while the
/// failure lasts. It bounds how long a promoted replica can go unnoticed.
pub(crate) const MAX_CHECK_DELAY: Duration = Duration::from_millis(250);

/// What the node that should serve the failing key did, asked on a fresh connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeAnswer {
    /// It served the key (or refused it for lack of permission, which proves it is listening).
    Served,
    /// It redirected the key to another node (`MOVED`/`ASK`).
    Redirected,
    /// It refused to serve keys for now (`CLUSTERDOWN`, `TRYAGAIN`, `MASTERDOWN`, `LOADING`).
    Refused,
    /// No connection or no answer in time.
    Silent,
}

/// What a fresh slot map says about the failing key's master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapAnswer {
    /// Standalone: there is no slot map.
    NotCluster,
    /// The same masters as the map the connection was built from.
    Unchanged,
    /// Another master serves some slots, or the connection was built without a map.
    Changed,
    /// No node gave a map in time.
    Unavailable,
}

/// What to do about the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Replace the connection (new client, fresh slot map).
    Rebuild,
    /// Keep it: Redis itself is not answering; the circuit and the failure policy cover the wait.
    Wait,
}

/// Decides from the two answers of a check.
pub(crate) fn verdict(node: NodeAnswer, map: MapAnswer) -> Verdict {
    match (node, map) {
        (NodeAnswer::Served | NodeAnswer::Redirected, _) | (_, MapAnswer::Changed) => {
            Verdict::Rebuild
        }
        (NodeAnswer::Refused | NodeAnswer::Silent, _) => Verdict::Wait,
    }
}

/// One check at a time, spaced by a wait that doubles while failures go on and resets when the
/// store answers again. Times are nanoseconds on the caller's clock.
#[derive(Debug)]
pub(crate) struct RebuildSchedule {
    running: AtomicBool,
    not_before: AtomicU64,
    delay: AtomicU64,
}

impl RebuildSchedule {
    pub(crate) fn new() -> RebuildSchedule {
        RebuildSchedule {
            running: AtomicBool::new(false),
            not_before: AtomicU64::new(0),
            delay: AtomicU64::new(nanos(MIN_CHECK_DELAY)),
        }
    }

    /// Claims the next check at `now`: false while one runs or the wait after the last one lasts.
    pub(crate) fn try_start(&self, now: u64) -> bool {
        now >= self.not_before.load(Ordering::Acquire)
            && self
                .running
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// The check claimed by [`try_start`](Self::try_start) ended at `now`: the next may start
    /// after the current wait, and the wait after that is twice as long (up to the maximum).
    pub(crate) fn finished(&self, now: u64) {
        let delay = self.delay.load(Ordering::Acquire);
        self.not_before
            .store(now.saturating_add(delay), Ordering::Release);
        self.delay.store(
            delay.saturating_mul(2).min(nanos(MAX_CHECK_DELAY)),
            Ordering::Release,
        );
        self.running.store(false, Ordering::Release);
    }

    /// The store answers again: the next failure is checked after the shortest wait.
    pub(crate) fn reset(&self) {
        self.delay.store(nanos(MIN_CHECK_DELAY), Ordering::Release);
        self.not_before.store(0, Ordering::Release);
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn rebuilds_only_on_evidence_that_the_connection_fails() {
        use MapAnswer::*;
        use NodeAnswer::*;
        // The node answers a fresh connection: the old one is what fails.
        assert_eq!(verdict(Served, Unchanged), Verdict::Rebuild);
        assert_eq!(verdict(Served, NotCluster), Verdict::Rebuild);
        assert_eq!(verdict(Redirected, Unavailable), Verdict::Rebuild);
        // A silent master whose replica took over (the SIGSTOP case).
        assert_eq!(verdict(Silent, Changed), Verdict::Rebuild);
        // A silent master still in charge, a cluster refusing keys, a server down: wait.
        assert_eq!(verdict(Silent, Unchanged), Verdict::Wait);
        assert_eq!(verdict(Refused, Unchanged), Verdict::Wait);
        assert_eq!(verdict(Silent, NotCluster), Verdict::Wait);
        assert_eq!(verdict(Silent, Unavailable), Verdict::Wait);
    }

    #[test]
    fn one_check_at_a_time_with_doubling_waits_and_a_reset() {
        let s = RebuildSchedule::new();
        assert!(s.try_start(0));
        assert!(!s.try_start(0), "one check at a time");
        s.finished(10 * MS);
        assert!(!s.try_start(59 * MS), "50 ms after the first check");
        assert!(s.try_start(60 * MS));
        s.finished(60 * MS);
        assert!(!s.try_start(159 * MS), "then 100 ms");
        assert!(s.try_start(160 * MS));
        for _ in 0..5 {
            s.finished(0);
            assert!(s.try_start(u64::MAX));
        }
        s.finished(1000 * MS);
        assert!(!s.try_start(1249 * MS), "capped at 250 ms");
        assert!(s.try_start(1250 * MS));
        s.finished(1250 * MS);
        s.reset();
        assert!(s.try_start(1250 * MS), "an answer ends the wait");
        s.finished(1250 * MS);
        assert!(!s.try_start(1299 * MS));
        assert!(s.try_start(1300 * MS), "and starts again from 50 ms");
    }
}
