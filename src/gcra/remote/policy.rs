//! [`FailurePolicy`]: what a limiter over a shared store answers when the store is slow or down.

use crate::gcra::LocalShare;
use crate::gcra::error::ConfigError;

/// What a [`RemoteRateLimiter`](super::RemoteRateLimiter) answers when its store does not answer
/// in time (timeout, connection failure, cluster failover in progress). Every such decision
/// carries [`Decision::degraded`](crate::gcra::Decision::degraded), is logged (`tracing::warn!`,
/// at most once per second per limiter) and counted ([`DEGRADED_METRIC`](super::DEGRADED_METRIC)).
/// The store is asked again automatically; the first answer ends the degradation.
///
/// The default is [`FailOpen`](FailurePolicy::FailOpen): an outage of the rate limiter should not
/// become an outage of the service. Choose [`FailClosed`](FailurePolicy::FailClosed) when over-admission
/// is worse than rejection, or [`LocalFallback`](FailurePolicy::LocalFallback) to keep enforcing an
/// approximate quota.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Allow the request. The decision reads no state, so it reports no numbers
    /// ([`Decision::remaining`](crate::gcra::Decision::remaining) and
    /// [`reset_after`](crate::gcra::Decision::reset_after) are `None`).
    #[default]
    FailOpen,
    /// Deny the request; `retry_after` is the store's probe interval (when it is next asked).
    /// No numbers, as for `FailOpen`.
    FailClosed,
    /// Decide with a local in-memory GCRA holding this instance's share of the quota. With `N`
    /// instances each holding `1/N`, the fleet admits about the global quota during an outage.
    /// The decision's numbers are real, but this instance's share's: `limit` is the share's
    /// burst, `remaining` and `reset_after` its local state. A denial's `retry_after` is the
    /// share's own wait, or the probe interval for a cost above the share's burst and for a
    /// request of several quotas.
    ///
    /// The local limiter is bounded like the in-memory store: it tracks at most
    /// [`local_max_keys`](super::RemoteRateLimiterBuilder::local_max_keys) live keys, and when it
    /// is full a key it does not track is **denied** (retry after the probe interval), marked
    /// [`Degradation::LocalFallbackFull`](crate::gcra::Degradation::LocalFallbackFull); it is
    /// never allowed untracked, so a flood of distinct keys during an outage cannot make any key
    /// unlimited. Keys already tracked keep their share, and keys whose state has expired are
    /// reclaimed to make room.
    LocalFallback(LocalShare),
}

impl FailurePolicy {
    /// `LocalFallback` with a fraction of the quota.
    pub fn local_share(share: f64) -> FailurePolicy {
        FailurePolicy::LocalFallback(LocalShare::Fraction(share))
    }

    /// `LocalFallback` with one of `instances` equal shares.
    pub fn local_instances(instances: u32) -> FailurePolicy {
        FailurePolicy::LocalFallback(LocalShare::Instances(instances))
    }

    /// The label used in logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            FailurePolicy::FailOpen => "fail_open",
            FailurePolicy::FailClosed => "fail_closed",
            FailurePolicy::LocalFallback(_) => "local_fallback",
        }
    }

    /// Checks the share (if any) without a quota: a fraction must lie in `(0, 1]`, instances be at least 1.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match self {
            FailurePolicy::LocalFallback(share) => share.validate(),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_shares_are_errors() {
        for bad in [0.0, -0.5, 1.5, f64::NAN, f64::INFINITY] {
            assert!(FailurePolicy::local_share(bad).validate().is_err());
        }
        assert!(FailurePolicy::local_instances(0).validate().is_err());
        assert!(FailurePolicy::local_instances(3).validate().is_ok());
        assert!(FailurePolicy::FailClosed.validate().is_ok());
    }
}
