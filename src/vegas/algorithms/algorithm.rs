//! The contract between the limiter and its limit algorithms.
//!
//! An algorithm is a pure state machine: it is fed one [`Sample`] per completed call and answers
//! with the new concurrency limit. It never reads a clock, so simulations and tests drive it with
//! whatever timing they like.

use std::time::Duration;

/// How a call that held a permit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The call completed; its round-trip time is a valid latency sample.
    Success,
    /// The call was dropped because the dependency is overloaded (rejection, timeout): a
    /// congestion signal that cuts the limit.
    Dropped,
    /// The call says nothing about the dependency's load (client error, cancelled): the permit is
    /// released and the sample is not used.
    Ignored,
}

/// One completed call, as seen by a limit algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Round-trip time: from permit grant to outcome.
    pub rtt: Duration,
    /// Permits in flight when this call's permit was granted, counting itself.
    pub in_flight: usize,
    /// How the call ended.
    pub outcome: Outcome,
}

/// A concurrency limit algorithm: fed samples, answers with the new limit.
///
/// Implementations are pure (no clock, no I/O) and must keep the limit inside their
/// [`LimitBounds`] (hence at most [`MAX_LIMIT`]; the limiter never grants more than that).
///
/// [`LimitBounds`]: super::LimitBounds
/// [`MAX_LIMIT`]: super::MAX_LIMIT
///
/// ```
/// use flowguard::vegas::{Fixed, LimitAlgorithm, Outcome, Sample};
/// use std::time::Duration;
///
/// let mut fixed = Fixed::new(8)?;
/// let sample = Sample { rtt: Duration::from_millis(3), in_flight: 8, outcome: Outcome::Success };
/// assert_eq!(fixed.update(&sample), 8);
/// # Ok::<(), flowguard::vegas::ConfigError>(())
/// ```
pub trait LimitAlgorithm: Send + 'static {
    /// Short name for logs, metrics and reports (`"vegas"`, `"aimd"`, ...).
    fn name(&self) -> &'static str;

    /// The current limit.
    fn limit(&self) -> usize;

    /// Feeds one completed call and returns the new limit.
    fn update(&mut self, sample: &Sample) -> usize;

    /// [`update`](Self::update) with the sample's parts, the RTT in whole nanoseconds as the
    /// limiter measures it: what the limiter calls for every finished permit.
    ///
    /// The provided method builds the [`Sample`] and calls `update`. An algorithm that works
    /// in nanoseconds may override it to skip the `Duration` round trip ([`Vegas`] does); both
    /// methods must then answer the same for the same call.
    ///
    /// [`Vegas`]: super::Vegas
    #[inline]
    fn update_nanos(&mut self, rtt_nanos: u64, in_flight: usize, outcome: Outcome) -> usize {
        self.update(&Sample {
            rtt: Duration::from_nanos(rtt_nanos),
            in_flight,
            outcome,
        })
    }

    /// A successful call whose dependency reports that it waited `queued_nanos` in its own
    /// queue before it was served ([`Permit::success_queued`]). `rtt_nanos - queued_nanos` is
    /// then a sample of the dependency's unloaded RTT that no other caller's queue inflates.
    ///
    /// The provided method ignores the report: `update_nanos(rtt_nanos, in_flight, Success)`.
    ///
    /// [`Permit::success_queued`]: crate::vegas::Permit::success_queued
    fn update_queued(&mut self, rtt_nanos: u64, in_flight: usize, queued_nanos: u64) -> usize {
        let _ = queued_nanos;
        self.update_nanos(rtt_nanos, in_flight, Outcome::Success)
    }

    /// The algorithm's estimate of the dependency's unloaded RTT, the baseline it reads queues
    /// against, if it keeps one and has learned it ([`Vegas::rtt_base`] does; the provided
    /// method answers `None`).
    ///
    /// The limiter publishes it in [`LimiterSnapshot::rtt_base`] and as the
    /// `flowguard_vegas_rtt_base_seconds` gauge, so that the instances of a fleet can be
    /// compared: instances whose baselines differ read different queues from the same RTT.
    ///
    /// [`Vegas::rtt_base`]: super::Vegas::rtt_base
    /// [`LimiterSnapshot::rtt_base`]: crate::vegas::LimiterSnapshot::rtt_base
    fn rtt_base(&self) -> Option<Duration> {
        None
    }
}

impl LimitAlgorithm for Box<dyn LimitAlgorithm> {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn limit(&self) -> usize {
        (**self).limit()
    }

    fn update(&mut self, sample: &Sample) -> usize {
        (**self).update(sample)
    }

    #[inline]
    fn update_nanos(&mut self, rtt_nanos: u64, in_flight: usize, outcome: Outcome) -> usize {
        (**self).update_nanos(rtt_nanos, in_flight, outcome)
    }

    fn update_queued(&mut self, rtt_nanos: u64, in_flight: usize, queued_nanos: u64) -> usize {
        (**self).update_queued(rtt_nanos, in_flight, queued_nanos)
    }

    fn rtt_base(&self) -> Option<Duration> {
        (**self).rtt_base()
    }
}

/// Nanoseconds in `duration`, saturating at `u64::MAX` (585 years), without 128-bit arithmetic.
pub(crate) fn duration_nanos(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(duration.subsec_nanos()))
}
