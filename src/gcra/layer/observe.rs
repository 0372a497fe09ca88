//! What the layer reports: `flowguard_quota_decisions_total{tier,policy,outcome}` and the
//! `quota_decision` tracing span.

use metrics::{Key, Label, Level, Metadata};

/// The decision counter's name.
pub(super) const DECISIONS: &str = "flowguard_quota_decisions_total";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// How one request's decision came out, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Every policy allowed it.
    Allowed,
    /// Refused (429).
    Denied,
    /// Would have been refused; shadow mode let it through.
    ShadowDenied,
    /// The policy that decided answered by a failure policy (fail open, fail closed, local
    /// fallback): its numbers are not the shared state's.
    Degraded,
}

impl Outcome {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::Degraded => "degraded",
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
pub(super) struct Counters {
    keys: [Key; 4],
}

impl Counters {
    pub(super) fn new(tier: &str, policy: &str) -> Counters {
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
    pub(super) fn count(&self, outcome: Outcome) {
        let key = &self.keys[outcome as usize];
        metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
    }
}
