//! What a quota decision reports, wherever it is made (the inbound layer, `Guard::admit`):
//! `flowguard_quota_decisions_total{tier,policy,outcome}` and the `quota_decision` tracing span.
//! One place, so that both count and trace alike.

use metrics::{Key, Label, Level, Metadata};

use super::decision::Decision;
use super::error::GcraError;

/// The decision counter's name.
pub(crate) const DECISIONS: &str = "flowguard_quota_decisions_total";

/// The tier and policy labels of a single quota (`QuotaLayer::new`, `Guard::admit`): what the
/// rate-limit fields name it.
pub(crate) const SINGLE: &str = "default";

/// The policy label of a decision that no policy made: a request without a key refused by
/// `MissingKey::Reject` (counted `denied`, or `shadow_denied` in shadow mode, which lets it
/// through). Only the layer refuses requests without a key.
#[cfg(feature = "tower")]
pub(crate) const NO_POLICY: &str = "";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// How one request's decision came out, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every policy allowed it.
    Allowed,
    /// Refused (429, or 413 for a cost above the burst, or a request without a key).
    Denied,
    /// Would have been refused; shadow mode let it through.
    ShadowDenied,
    /// The policy that decided answered by a failure policy (fail open, fail closed, local
    /// fallback): its numbers are not the shared state's.
    Degraded,
}

impl Outcome {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Degraded => "degraded",
        }
    }

    /// The outcome of a request that `decision` (the deciding policy's) decided and that was
    /// `allowed` by all of its policies; `shadow`: refusals are let through.
    #[inline]
    pub(crate) fn of(decision: &Decision, allowed: bool, shadow: bool) -> Outcome {
        match () {
            _ if decision.degraded.is_some() => Outcome::Degraded,
            _ if allowed => Outcome::Allowed,
            _ => Outcome::refused(shadow),
        }
    }

    /// A request refused, or let through by shadow mode.
    pub(crate) fn refused(shadow: bool) -> Outcome {
        if shadow {
            Outcome::ShadowDenied
        } else {
            Outcome::Denied
        }
    }

    /// The outcome of a request the core answered `error` for: a cost above the burst is a
    /// refusal (it can never pass); other errors are no decision (`None`).
    pub(crate) fn of_error(error: &GcraError, shadow: bool) -> Option<Outcome> {
        match error {
            GcraError::InsufficientCapacity { .. } => Some(Outcome::refused(shadow)),
            _ => None,
        }
    }
}

const OUTCOMES: [Outcome; 4] = [
    Outcome::Allowed,
    Outcome::Denied,
    Outcome::ShadowDenied,
    Outcome::Degraded,
];

/// The counter keys of one policy, built once so that counting allocates nothing.
#[derive(Clone, Debug)]
pub(crate) struct Counters {
    keys: [Key; 4],
}

impl Counters {
    pub(crate) fn new(tier: &str, policy: &str) -> Counters {
        let key = |outcome: Outcome| {
            Key::from_parts(
                DECISIONS,
                vec![
                    Label::new("tier", tier.to_owned()),
                    Label::new("policy", policy.to_owned()),
                    Label::new("outcome", outcome.as_str()),
                ],
            )
        };
        Counters {
            keys: OUTCOMES.map(key),
        }
    }

    /// Counts one decision with `outcome`.
    #[inline]
    pub(crate) fn count(&self, outcome: Outcome) {
        let key = &self.keys[outcome as usize];
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
    }
}

/// The span a decision of tier `tier` is made in (debug level): `record` fills in the policy
/// that decided and the outcome.
#[inline]
pub(crate) fn span(tier: &str) -> tracing::Span {
    tracing::debug_span!(
        "quota_decision",
        tier,
        policy = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// Counts a decision of `policy` (its `counters`) with `outcome`, and records both in `span`.
#[inline]
pub(crate) fn record(span: &tracing::Span, counters: &Counters, policy: &str, outcome: Outcome) {
    counters.count(outcome);
    if !span.is_disabled() {
        span.record("policy", policy);
        span.record("outcome", outcome.as_str());
    }
}
