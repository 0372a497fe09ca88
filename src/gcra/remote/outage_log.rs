//! [`OutageLog`]: counts every degraded decision and logs them without flooding the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::gcra::check::Unavailable;

/// At most one warning per this interval per limiter; the ones in between are counted in the next.
const WARN_EVERY: Duration = Duration::from_secs(1);

/// The metric counting decisions made by a failure policy, labelled `policy`, `topology` (the
/// store's, e.g. `standalone` or `cluster` for Redis) and `reason` (why the store did not decide:
/// [`DegradedReason::as_str`](crate::gcra::DegradedReason::as_str)). The name predates other
/// stores than Redis and is kept for existing dashboards.
pub const DEGRADED_METRIC: &str = "flowguard_redis_degraded_total";

#[derive(Debug)]
pub(crate) struct OutageLog {
    origin: Instant,
    /// Nanoseconds since `origin` (+1) of the last warning; 0 = none since the last recovery.
    last_warn: AtomicU64,
    suppressed: AtomicU64,
    topology: &'static str,
}

impl OutageLog {
    pub(crate) fn new(topology: &'static str) -> OutageLog {
        OutageLog {
            origin: Instant::now(),
            last_warn: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            topology,
        }
    }

    /// One decision was made by `policy` because the store did not answer (`reason`).
    pub(crate) fn degraded(&self, policy: &'static str, reason: Unavailable) {
        let why = crate::gcra::DegradedReason::from(reason).as_str();
        metrics::counter!(
            DEGRADED_METRIC,
            "policy" => policy,
            "topology" => self.topology,
            "reason" => why
        )
        .increment(1);
        let now = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1;
        let last = self.last_warn.load(Ordering::Acquire);
        let due = last == 0 || now.saturating_sub(last) >= WARN_EVERY.as_nanos() as u64;
        if due
            && self
                .last_warn
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let suppressed = self.suppressed.swap(0, Ordering::AcqRel);
            tracing::warn!(
                policy,
                topology = self.topology,
                %reason,
                suppressed,
                "rate-limit store unavailable; deciding by failure policy"
            );
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The store answered again after failing (a group of its circuit closed).
    /// Logs once per outage that was warned about (a cluster store recovers group by group).
    pub(crate) fn recovered(&self) {
        if self.last_warn.swap(0, Ordering::AcqRel) == 0 {
            return;
        }
        let suppressed = self.suppressed.swap(0, Ordering::AcqRel);
        tracing::info!(
            topology = self.topology,
            suppressed,
            "rate-limit store answering again"
        );
    }
}
