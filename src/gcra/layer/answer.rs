//! What the layer does with a set's answer: pass the request (with the fields to add to the
//! response) or refuse it (with a response), counted and logged.

use std::cmp::Reverse;
use std::time::Duration;

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::config::{Config, Tier};
use super::refusal::{Refusal, RefusalKind, RefusalResponse};
use crate::gcra::observe::{self, Outcome};
use crate::gcra::remote::StoreError;
use crate::gcra::{CheckError, Decision, Decisions, GcraError, SetError};
use crate::headers::{HeaderStyle, RATELIMIT, RATELIMIT_POLICY, write_retry_after};

/// What to do with a decided request.
pub(super) enum Verdict<R> {
    /// Call the service; insert `decision` (the deciding policy's) into the request's
    /// extensions, add `fields` to its response.
    Pass {
        decision: Option<Decision>,
        fields: Option<Fields>,
    },
    /// Answer with this response.
    Refuse(Response<R>),
}

/// The rate-limit fields of a passed request, written once the service answered: the tier's
/// policies, and the current limit of policy `deciding` when its `decision` knows it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Fields {
    tier: usize,
    deciding: usize,
    decision: Option<Decision>,
}

impl Fields {
    /// The fields made ready to write once the service answers: in the IETF style (the default)
    /// the two field values themselves, so that the response future keeps nothing shared;
    /// otherwise the decision and the configuration, since the legacy fields depend on what the
    /// response already carries.
    pub(super) fn prepare(self, config: &Arc<Config>) -> Prepared {
        let tier = &config.tiers[self.tier];
        match config.style {
            HeaderStyle::Ietf => Prepared::Ietf {
                policy: tier.list.field_value().clone(),
                limit: match self.decision {
                    Some(d) if d.degraded.is_none() => {
                        tier.list
                            .limit_value(self.deciding, d.remaining, d.reset_after)
                    }
                    // Degraded: the numbers are not the shared state's, so none are advertised.
                    _ => None,
                },
            },
            _ => Prepared::Styled(self, config.clone()),
        }
    }
}

/// The rate-limit fields of a passed request, ready for its response.
#[derive(Debug)]
pub(super) enum Prepared {
    /// `RateLimit-Policy`, and `RateLimit` when the numbers are known.
    Ietf {
        policy: HeaderValue,
        limit: Option<HeaderValue>,
    },
    /// Written from the decision in the configured style.
    Styled(Fields, Arc<Config>),
}

impl Prepared {
    /// Adds the fields to `headers`, keeping those already there (stacked layers).
    pub(super) fn write(self, headers: &mut HeaderMap) {
        match self {
            Prepared::Ietf { policy, limit } => {
                headers.append(RATELIMIT_POLICY, policy);
                if let Some(limit) = limit {
                    headers.append(RATELIMIT, limit);
                }
            }
            Prepared::Styled(fields, config) => write_fields(
                &config,
                &config.tiers[fields.tier],
                fields.deciding,
                fields.decision.as_ref(),
                headers,
            ),
        }
    }
}

/// The tier's policies, and the current limit of policy `deciding` when its `decision` knows it
/// (not degraded).
fn write_fields(
    config: &Config,
    tier: &Tier,
    deciding: usize,
    decision: Option<&Decision>,
    headers: &mut HeaderMap,
) {
    match decision {
        Some(d) if d.degraded.is_none() => {
            tier.list
                .write_remaining(config.style, headers, deciding, d.remaining, d.reset_after);
        }
        // Degraded: the numbers are not the shared state's, so none are advertised.
        _ => tier.list.write(config.style, headers, deciding, None),
    }
}

/// The policy whose decision the fields report: for a denial, the denied policy with the
/// longest wait; otherwise the one with the fewest tokens left (then the longest time to
/// refill) among those whose numbers are known.
pub(super) fn deciding(decisions: &Decisions) -> usize {
    let all = decisions.as_slice().iter().enumerate();
    if decisions.allowed() {
        all.filter(|(_, d)| d.degraded.is_none())
            .min_by_key(|(_, d)| (d.remaining, Reverse(d.reset_after)))
            .map_or(0, |(i, _)| i)
    } else {
        all.filter(|(_, d)| !d.allowed)
            .min_by_key(|(_, d)| Reverse(d.retry_after))
            .map_or(0, |(i, _)| i)
    }
}

/// The verdict on a request of tier `tier` that the set answered `answer`; `span` gets the
/// deciding policy and the outcome.
pub(super) fn verdict<R, H: RefusalResponse<R>>(
    config: &Config,
    tier_index: usize,
    answer: Result<Decisions, SetError>,
    refusal: &H,
    span: &tracing::Span,
) -> Verdict<R> {
    let tier = &config.tiers[tier_index];
    let decisions = match answer {
        Ok(decisions) => decisions,
        Err(error) => return failed(config, tier_index, &error, refusal, span),
    };
    let deciding = deciding(&decisions);
    let decision = decisions[deciding];
    let policy = &tier.policies[deciding];
    let allowed = decisions.allowed();
    let outcome = Outcome::of(&decision, allowed, config.shadow);
    observe::record(span, &policy.counters, policy.name.as_str(), outcome);
    if allowed || config.shadow {
        if !allowed {
            tracing::debug!(policy = %policy.name, "shadow mode: would have refused (429)");
        }
        return Verdict::Pass {
            decision: Some(decision),
            fields: Some(Fields {
                tier: tier_index,
                deciding,
                decision: Some(decision),
            }),
        };
    }
    let retry_after = decisions.retry_after();
    let mut response = refusal.respond(&Refusal {
        kind: RefusalKind::OverQuota,
        status: StatusCode::TOO_MANY_REQUESTS,
        policy: Some(&policy.name),
        decision: Some(&decision),
        decisions: Some(&decisions),
        retry_after,
        error: None,
    });
    write_fields(
        config,
        tier,
        deciding,
        Some(&decision),
        response.headers_mut(),
    );
    if let Some(wait) = retry_after {
        write_retry_after(response.headers_mut(), wait);
    }
    Verdict::Refuse(response)
}

/// The verdict on a request the set returned `error` for (see the table in
/// [`QuotaService`](super::QuotaService)), logged and counted. Shadow mode passes it, with the
/// rate-limit fields its refusal would carry (a cost above the burst: the policies).
fn failed<R, H: RefusalResponse<R>>(
    config: &Config,
    tier_index: usize,
    error: &SetError,
    refusal: &H,
    span: &tracing::Span,
) -> Verdict<R> {
    let tier = &config.tiers[tier_index];
    let demand = error.demand().min(tier.policies.len().saturating_sub(1));
    let check_error = match error {
        SetError::Check { error, .. } => Some(error),
        _ => None,
    };
    let (kind, status, reason) = match check_error {
        Some(CheckError::Gcra(GcraError::InsufficientCapacity { cost, burst })) => {
            tracing::debug!(%error, "request costs more than the burst; answering 413 (final)");
            let kind = RefusalKind::CostAboveBurst {
                cost: *cost,
                burst: *burst,
            };
            (kind, StatusCode::PAYLOAD_TOO_LARGE, "insufficient_capacity")
        }
        Some(CheckError::Gcra(GcraError::KeyLimitReached { .. })) => {
            tracing::warn!(%error, "rate-limit store is full; answering 503");
            (
                RefusalKind::StoreFull,
                StatusCode::SERVICE_UNAVAILABLE,
                "key_limit_reached",
            )
        }
        Some(CheckError::Store(StoreError::Unavailable(_))) => {
            tracing::error!(%error, "rate-limit store did not answer; answering 503");
            (
                RefusalKind::StoreUnavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
            )
        }
        _ => {
            tracing::error!(%error, "rate-limit store failed; answering 500");
            (
                RefusalKind::StoreFault,
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_fault",
            )
        }
    };
    metrics::counter!("flowguard_rate_limit_errors_total", "reason" => reason).increment(1);
    let policy = &tier.policies[demand];
    let outcome = match check_error {
        Some(CheckError::Gcra(error)) => Outcome::of_error(error, config.shadow),
        _ => None,
    };
    match outcome {
        Some(outcome) => observe::record(span, &policy.counters, policy.name.as_str(), outcome),
        None => {
            span.record("policy", policy.name.as_str());
        }
    }
    let final_refusal = matches!(kind, RefusalKind::CostAboveBurst { .. });
    if config.shadow {
        if final_refusal {
            tracing::debug!(policy = %policy.name, "shadow mode: would have refused (413)");
        }
        return Verdict::Pass {
            decision: None,
            fields: final_refusal.then_some(Fields {
                tier: tier_index,
                deciding: demand,
                decision: None,
            }),
        };
    }
    let retry_after = (status == StatusCode::SERVICE_UNAVAILABLE).then_some(Duration::from_secs(1));
    let mut response = refusal.respond(&Refusal {
        kind,
        status,
        policy: final_refusal.then_some(&policy.name),
        decision: None,
        decisions: None,
        retry_after,
        error: check_error,
    });
    if final_refusal {
        // The policy's quota `q` is its burst: the largest cost that can pass.
        write_fields(config, tier, demand, None, response.headers_mut());
    }
    if let Some(wait) = retry_after {
        write_retry_after(response.headers_mut(), wait);
    }
    Verdict::Refuse(response)
}

/// The verdict on a request of tier `tier_index` without a key when the layer rejects those
/// with `status`: refused, or passed in shadow mode (without a decision or fields: its refusal
/// carries none); counted and traced under no policy.
pub(super) fn missing_key<R, H: RefusalResponse<R>>(
    config: &Config,
    tier_index: usize,
    status: StatusCode,
    refusal: &H,
) -> Verdict<R> {
    let tier = &config.tiers[tier_index];
    let span = observe::span(&tier.name);
    observe::record(
        &span,
        &tier.keyless,
        observe::NO_POLICY,
        Outcome::refused(config.shadow),
    );
    if config.shadow {
        tracing::debug!(%status, "shadow mode: would have refused a request without a rate-limit key");
        return Verdict::Pass {
            decision: None,
            fields: None,
        };
    }
    tracing::debug!(%status, "request without a rate-limit key refused");
    Verdict::Refuse(refusal.respond(&Refusal {
        kind: RefusalKind::MissingKey,
        status,
        policy: None,
        decision: None,
        decisions: None,
        retry_after: None,
        error: None,
    }))
}
