//! The RAII permit: holds one unit of the limit and reports how its call ended.

use std::time::Duration;

use super::algorithm::Outcome;
use super::limiter::{Grant, Limiter};
use super::partition::PartitionId;

/// One call's right to run. Measures its round-trip time from grant to outcome on the limiter's
/// clock and feeds it to the limit algorithm when finished.
///
/// Finish it with [`success`](Self::success), [`dropped`](Self::dropped) (the dependency
/// rejected or timed out: a congestion signal) or [`ignore`](Self::ignore). A permit dropped
/// without an outcome (an early return, a cancelled future) is released as ignored, never leaked.
///
/// ```
/// use flowguard::vegas::{Fixed, Limiter};
///
/// let limiter = Limiter::new(Fixed::new(1)?)?;
/// let permit = limiter.try_acquire()?;
/// assert!(limiter.try_acquire().is_err()); // full
/// drop(permit); // released, sample ignored
/// limiter.try_acquire()?.success();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use = "a permit is released as soon as it is dropped"]
pub struct Permit {
    limiter: Limiter,
    grant: Grant,
    finished: bool,
}

impl Permit {
    pub(crate) fn new(limiter: Limiter, grant: Grant) -> Self {
        Self {
            limiter,
            grant,
            finished: false,
        }
    }

    /// The call completed: its RTT is a latency sample.
    pub fn success(self) {
        self.finish(Outcome::Success);
    }

    /// The call was dropped by an overloaded dependency (rejection, timeout): cuts the limit.
    pub fn dropped(self) {
        self.finish(Outcome::Dropped);
    }

    /// The call says nothing about load (e.g. a client error): release without a sample.
    pub fn ignore(self) {
        self.finish(Outcome::Ignored);
    }

    /// Releases the permit with `outcome`.
    pub fn finish(mut self, outcome: Outcome) {
        self.finished = true;
        self.limiter.release(&self.grant, outcome);
    }

    /// Time since the permit was granted, on the limiter's clock.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(
            self.limiter
                .now_nanos()
                .saturating_sub(self.grant.start_nanos),
        )
    }

    /// Permits in flight when this one was granted, counting itself.
    pub fn in_flight_at_grant(&self) -> usize {
        self.grant.in_flight
    }

    /// The limit when this permit was granted (never below
    /// [`in_flight_at_grant`](Self::in_flight_at_grant)).
    pub fn limit_at_grant(&self) -> usize {
        self.grant.limit
    }

    /// The partition this permit counts against.
    pub fn partition(&self) -> PartitionId {
        self.grant.partition
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.finished {
            self.limiter.release(&self.grant, Outcome::Ignored);
        }
    }
}
