//! The RAII permit: holds one unit of the limit and reports how its call ended.

use std::sync::Arc;
use std::time::Duration;

use super::grant::Grant;
use super::partitions::PartitionId;
use super::shared::Shared;
use crate::vegas::algorithms::Outcome;

/// How a permit reaches its limiter: borrowed from the caller's handle (no reference count on
/// the hot path, like tokio's `SemaphorePermit<'_>`), or owned (a reference of its own, for a
/// permit that must outlive the borrow, e.g. one moved into a spawned task).
#[derive(Debug)]
enum Holder<'a> {
    Borrowed(&'a Arc<Shared>),
    Owned(Arc<Shared>),
}

impl Holder<'_> {
    #[inline]
    fn limiter(&self) -> &Arc<Shared> {
        match self {
            Holder::Borrowed(limiter) => limiter,
            Holder::Owned(limiter) => limiter,
        }
    }
}

/// One call's right to run. Measures its round-trip time from grant to outcome on the limiter's
/// clock and feeds it to the limit algorithm when finished.
///
/// Finish it with [`success`](Self::success), [`dropped`](Self::dropped) (the dependency
/// rejected or timed out: a congestion signal) or [`ignore`](Self::ignore). A permit dropped
/// without an outcome is released, never leaked, and reports its limiter's
/// [`unfinished`](super::LimiterBuilder::unfinished) outcome: by default
/// [`Outcome::Ignored`], as suits an abandoned call (an early return, a cancelled future), so
/// it feeds no sample. Code that drops permits when calls complete must either finish them or
/// build its limiter with `.unfinished(Outcome::Success)`, or the limit never adapts. A
/// middleware that knows the outcome before the caller does (a timeout fired, a response
/// arrived) sets what a drop will report with [`set_unfinished`](Self::set_unfinished).
///
/// A permit from [`Limiter::try_acquire`] or [`Limiter::acquire`] borrows the limiter handle it
/// came from, which keeps the uncontended round trip free of reference counting. One that must
/// outlive that borrow (moved into a spawned task, stored in a struct) is an [`OwnedPermit`]:
/// take it with [`Limiter::try_acquire_owned`] / [`Limiter::acquire_owned`], or convert with
/// [`into_owned`](Self::into_owned).
///
/// ```
/// use flowguard::vegas::{Fixed, Limiter};
///
/// let limiter = Limiter::builder(Fixed::new(1)?).build()?;
/// let permit = limiter.try_acquire()?;
/// assert!(limiter.try_acquire().is_err()); // full
/// drop(permit); // released, sample ignored (the default for unfinished permits)
/// limiter.try_acquire()?.success();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Limiter::try_acquire`]: super::Limiter::try_acquire
/// [`Limiter::acquire`]: super::Limiter::acquire
/// [`Limiter::try_acquire_owned`]: super::Limiter::try_acquire_owned
/// [`Limiter::acquire_owned`]: super::Limiter::acquire_owned
#[derive(Debug)]
#[must_use = "a permit is released as soon as it is dropped"]
pub struct Permit<'a> {
    holder: Holder<'a>,
    grant: Grant,
    /// What dropping the permit reports; `None` once it is finished (or handed over).
    unfinished: Option<Outcome>,
}

/// A permit that holds its own handle on the limiter: `'static`, so it can be moved into a
/// spawned task or kept in a struct. Costs one reference-count increment and decrement more than
/// a borrowed [`Permit`].
///
/// ```
/// use flowguard::vegas::{Fixed, Limiter, OwnedPermit};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::builder(Fixed::new(4)?).build()?;
/// let permit: OwnedPermit = limiter.try_acquire_owned()?;
/// tokio::spawn(async move {
///     // ... call the dependency ...
///     permit.success();
/// })
/// .await?;
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok(()) }
/// ```
pub type OwnedPermit = Permit<'static>;

impl<'a> Permit<'a> {
    /// Hands `grant` to its caller as a permit borrowing `limiter`.
    #[inline]
    pub(super) fn new(limiter: &'a Arc<Shared>, grant: Grant) -> Self {
        limiter.granted();
        Self {
            holder: Holder::Borrowed(limiter),
            grant,
            unfinished: Some(limiter.unfinished()),
        }
    }

    /// Sets what this permit reports if it is dropped without an outcome (by default, its
    /// limiter's [`unfinished`](super::LimiterBuilder::unfinished) outcome). For middleware
    /// that learns how a call ended before its caller finishes the permit, or that drops it: a
    /// timeout layer sets [`Outcome::Dropped`] when the timer fires, a response future sets
    /// [`Outcome::Success`] when the response arrives.
    ///
    /// ```
    /// use flowguard::vegas::{Fixed, Limiter, Outcome};
    ///
    /// let limiter = Limiter::builder(Fixed::new(4)?).build()?;
    /// let mut permit = limiter.try_acquire()?;
    /// permit.set_unfinished(Outcome::Dropped); // e.g. the deadline passed
    /// drop(permit); // reports a dropped call: a congestion signal
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_unfinished(&mut self, outcome: Outcome) {
        self.unfinished = Some(outcome);
    }

    /// What this permit reports if it is dropped without an outcome.
    pub fn unfinished(&self) -> Outcome {
        // `None` only once finished, which consumes the permit.
        self.unfinished.unwrap_or(Outcome::Ignored)
    }

    /// The call completed: its RTT is a latency sample.
    #[inline]
    pub fn success(self) {
        self.finish(Outcome::Success);
    }

    /// The call completed, and the dependency reports that it waited `queued` in its own queue
    /// before it was served (a `Server-Timing` metric, say). An algorithm that knows what to do
    /// with it ([`Vegas`](crate::vegas::Vegas)) takes `rtt - queued` as a sample of the
    /// dependency's unloaded RTT, so instances of a fleet agree on it whatever queue the others
    /// keep; the others treat this as [`success`](Self::success).
    ///
    /// ```
    /// use flowguard::vegas::{Limiter, Vegas};
    /// use std::time::Duration;
    ///
    /// let limiter = Limiter::builder(Vegas::new()).build()?;
    /// let permit = limiter.try_acquire()?;
    /// // ... the response says the call waited 4 ms in the dependency's queue ...
    /// permit.success_queued(Duration::from_millis(4));
    /// assert_eq!(limiter.in_flight(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn success_queued(mut self, queued: Duration) {
        self.unfinished = None;
        let queued = u64::try_from(queued.as_nanos()).unwrap_or(u64::MAX);
        self.holder
            .limiter()
            .release_queued(&self.grant, Outcome::Success, Some(queued));
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
    #[inline]
    pub fn finish(mut self, outcome: Outcome) {
        self.unfinished = None;
        self.holder.limiter().release(&self.grant, outcome);
    }

    /// This permit with its own handle on the limiter, so it no longer borrows the handle it was
    /// acquired from. Still the same permit: its RTT runs from the original grant.
    #[inline]
    pub fn into_owned(mut self) -> OwnedPermit {
        // Taken here so that dropping `self` releases nothing; the new permit takes over.
        let unfinished = self.unfinished.take();
        Permit {
            holder: Holder::Owned(Arc::clone(self.holder.limiter())),
            grant: self.grant,
            unfinished,
        }
    }

    /// Time since the permit was granted, on the limiter's clock.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(
            self.holder
                .limiter()
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

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(outcome) = self.unfinished {
            self.holder.limiter().release(&self.grant, outcome);
        }
    }
}
