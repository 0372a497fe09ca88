//! [`RetryMetrics`]: what the retry engine reports through the `metrics` facade — retries made
//! and calls given up, by reason — labelled with the policy's name.

use super::error::GiveUp;

/// Why a call ended without a final outcome: [`GiveUp`]'s reasons, and an attempt cancelled at
/// the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GaveUpLabel {
    AttemptsExhausted,
    BudgetExhausted,
    DeadlineExceeded,
    RetryAfterTooLarge,
    /// The deadline passed while an attempt ran; the attempt was cancelled.
    DeadlineElapsed,
}

impl From<&GiveUp> for GaveUpLabel {
    fn from(reason: &GiveUp) -> Self {
        match reason {
            GiveUp::AttemptsExhausted { .. } => GaveUpLabel::AttemptsExhausted,
            GiveUp::BudgetExhausted => GaveUpLabel::BudgetExhausted,
            GiveUp::DeadlineExceeded { .. } => GaveUpLabel::DeadlineExceeded,
            GiveUp::RetryAfterTooLarge => GaveUpLabel::RetryAfterTooLarge,
        }
    }
}

/// The metric handles of one retry policy, registered when it is built (with the recorder
/// installed then) and shared by its clones:
///
/// | metric | kind | meaning |
/// |---|---|---|
/// | `flowguard_retry_retries_total{policy}` | counter | attempts after the first, each counted when its wait starts |
/// | `flowguard_retry_give_ups_total{policy,reason}` | counter | calls whose last outcome was retryable but no further attempt was made |
#[derive(Clone)]
pub(crate) struct RetryMetrics {
    retries: metrics::Counter,
    attempts_exhausted: metrics::Counter,
    budget_exhausted: metrics::Counter,
    deadline_exceeded: metrics::Counter,
    retry_after_too_large: metrics::Counter,
    deadline_elapsed: metrics::Counter,
}

impl std::fmt::Debug for RetryMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetryMetrics")
    }
}

impl RetryMetrics {
    /// Registers the counters of the policy called `name`.
    pub(crate) fn register(name: &str) -> Self {
        let name = name.to_owned();
        let gave_up = |reason: &'static str| metrics::counter!("flowguard_retry_give_ups_total", "policy" => name.clone(), "reason" => reason);
        RetryMetrics {
            retries: metrics::counter!("flowguard_retry_retries_total", "policy" => name.clone()),
            attempts_exhausted: gave_up("attempts_exhausted"),
            budget_exhausted: gave_up("budget_exhausted"),
            deadline_exceeded: gave_up("deadline_exceeded"),
            retry_after_too_large: gave_up("retry_after_too_large"),
            deadline_elapsed: gave_up("deadline_elapsed"),
        }
    }

    /// Counts one retry.
    pub(crate) fn retried(&self) {
        self.retries.increment(1);
    }

    /// Counts a call given up for `why`.
    pub(crate) fn gave_up(&self, why: GaveUpLabel) {
        let counter = match why {
            GaveUpLabel::AttemptsExhausted => &self.attempts_exhausted,
            GaveUpLabel::BudgetExhausted => &self.budget_exhausted,
            GaveUpLabel::DeadlineExceeded => &self.deadline_exceeded,
            GaveUpLabel::RetryAfterTooLarge => &self.retry_after_too_large,
            GaveUpLabel::DeadlineElapsed => &self.deadline_elapsed,
        };
        counter.increment(1);
    }
}
