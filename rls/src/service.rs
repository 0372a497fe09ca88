//! [`RateLimiter`]: the `envoy.service.ratelimit.v3.RateLimitService` implementation.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit, rate_limit::Unit as PbUnit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

use flowguard::gcra::Decision;
use flowguard::headers::HeaderStyle;

use super::backend::{Backend, Check};
use super::config::{Limit, LimitRule, Lookup, Rate, Unit};
use super::key::limiter_key;
use super::metrics as names;
use super::rules::{RuleLimit, RuleSet, Rules};

/// The gRPC rate limit service: matches each descriptor against the rules in force and decides it
/// with the backend.
///
/// * Empty domain or no descriptors: `INVALID_ARGUMENT`, as the reference service refuses them.
/// * Unknown domain: `OK`, every status `OK` without a limit (as the reference service answers).
/// * A descriptor matching no rule: `OK` without a limit; an `unlimited` rule: `OK` without a
///   limit, `limit_remaining` = `u32::MAX`.
/// * A store failure: `UNAVAILABLE` (unless the backend's failure policy answered).
#[derive(Clone, Debug)]
pub struct RateLimiter {
    rules: Rules,
    backend: Arc<Backend>,
    headers: Option<HeaderStyle>,
    unknown: Arc<UnknownDomains>,
    /// Global shadow mode: every rule is decided and counted as if it had `shadow_mode: true`.
    shadow_mode: bool,
}

/// The most unknown domains logged one by one; beyond, one more warning says so, and the
/// counter still counts every request. A client sending made-up domains cannot grow memory.
const UNKNOWN_DOMAINS_LOGGED: usize = 1000;

/// The unknown domains already logged.
#[derive(Debug, Default)]
struct UnknownDomains(Mutex<HashSet<String>>);

impl UnknownDomains {
    /// Counts a request for `domain`, which no file configures, and logs it at warn the first
    /// time.
    fn seen(&self, domain: &str) {
        ::metrics::counter!(names::UNKNOWN_DOMAIN).increment(1);
        let mut logged = self.0.lock();
        if logged.contains(domain) || logged.len() > UNKNOWN_DOMAINS_LOGGED {
            return;
        }
        if logged.len() == UNKNOWN_DOMAINS_LOGGED {
            tracing::warn!(
                "more than {UNKNOWN_DOMAINS_LOGGED} unknown domains: no longer logged one by one \
                 (still counted in {})",
                names::UNKNOWN_DOMAIN
            );
            logged.insert(String::new());
            return;
        }
        tracing::warn!(
            domain,
            "a request names a domain that no configuration file defines: it is answered OK \
             without limits; add a file with `domain: {domain}` or fix the domain in Envoy's \
             rate limit filter (logged once per domain)"
        );
        logged.insert(domain.to_string());
    }
}

/// How one request descriptor is decided.
enum Plan<'r> {
    NoRule,
    Unlimited(&'r LimitRule),
    Limited {
        rule: &'r LimitRule,
        rate: Rate,
        limit: &'r RuleLimit,
        key: Vec<u8>,
        cost: u64,
        check: usize,
    },
}

impl RateLimiter {
    /// A service answering from `rules` (swapped by reloads) with `backend`, describing the
    /// decisive descriptor in the response headers of `headers` (none when `None`, the
    /// default of envoyproxy/ratelimit).
    pub fn new(rules: Rules, backend: Arc<Backend>, headers: Option<HeaderStyle>) -> RateLimiter {
        RateLimiter {
            rules,
            backend,
            headers,
            unknown: Arc::default(),
            shadow_mode: false,
        }
    }

    /// Global shadow mode (`--shadow-mode`, envoyproxy/ratelimit's `SHADOW_MODE`): every rule is
    /// decided, spent and counted as usual, but the answer is always `OK`, as if each rule said
    /// `shadow_mode: true`. For trying a configuration out on live traffic.
    pub fn shadow_mode(mut self, on: bool) -> RateLimiter {
        self.shadow_mode = on;
        self
    }

    /// Whether `rule` is only observed, not enforced.
    fn shadowed(&self, rule: &LimitRule) -> bool {
        self.shadow_mode || rule.shadow_mode
    }

    /// Decides one request.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(Status::invalid_argument(
                "rate limit domain must not be empty",
            ));
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument(
                "rate limit descriptor list must not be empty",
            ));
        }
        let rules = self.rules.current();
        let domain = request.domain.as_str();
        if !rules.config().has_domain(domain) {
            self.unknown.seen(domain);
        }
        let plans = plan_descriptors(&rules, request)?;
        let checks: Vec<Check<'_>> = plans
            .iter()
            .filter_map(|p| match p {
                Plan::Limited {
                    rule,
                    limit,
                    key,
                    cost,
                    ..
                } => Some(Check {
                    limit: limit.limit,
                    key,
                    cost: *cost,
                    enforce: !self.shadowed(rule),
                }),
                _ => None,
            })
            .collect();
        let verdicts = if checks.is_empty() {
            Vec::new()
        } else {
            self.backend.decide(rules.limits(), &checks).await.map_err(|e| {
                ::metrics::counter!(names::BACKEND_ERRORS, "kind" => e.kind()).increment(1);
                tracing::warn!(error = %e, domain, "rate limit store failed; answering UNAVAILABLE \
                    (Envoy's failure_mode_deny decides; --on-redis-failure answers instead)");
                Status::unavailable(format!(
                    "rate limit store failed: {e}; Envoy's failure_mode_deny decides what this \
                     means, or start flowguard-rls with --on-redis-failure fail-open, fail-closed, \
                     local-share=F or local-instances=N to answer without the store"
                ))
            })?
        };
        Ok(self.respond(domain, request, &plans, &verdicts))
    }

    fn respond(
        &self,
        domain: &str,
        request: &RateLimitRequest,
        plans: &[Plan<'_>],
        verdicts: &[Decision],
    ) -> RateLimitResponse {
        let mut over_limit = false;
        let mut statuses = Vec::with_capacity(plans.len());
        // The decisive descriptor, for the headers: its decision and policy.
        let mut described: Vec<(&Decision, &RuleLimit)> = Vec::new();
        for (plan, descriptor) in plans.iter().zip(&request.descriptors) {
            let status = match plan {
                Plan::NoRule => {
                    ::metrics::counter!(names::DECISIONS, "domain" => domain.to_string(),
                        "descriptor" => "", "outcome" => "no_rule")
                    .increment(1);
                    DescriptorStatus {
                        code: Code::Ok as i32,
                        ..Default::default()
                    }
                }
                Plan::Unlimited(rule) => {
                    count(domain, rule, descriptor, "unlimited", None);
                    DescriptorStatus {
                        code: Code::Ok as i32,
                        limit_remaining: u32::MAX,
                        ..Default::default()
                    }
                }
                Plan::Limited {
                    rule,
                    rate,
                    check,
                    limit,
                    ..
                } => {
                    let verdict = &verdicts[*check];
                    let degraded = verdict.degraded.is_some();
                    let outcome = match (verdict.allowed, self.shadowed(rule)) {
                        (true, _) => "ok",
                        (false, true) => "shadow_over_limit",
                        (false, false) => "over_limit",
                    };
                    let extra = match outcome {
                        "over_limit" => Some(names::OVER_LIMIT),
                        "shadow_over_limit" => Some(names::SHADOW_OVER_LIMIT),
                        _ => None,
                    };
                    count(domain, rule, descriptor, outcome, extra);
                    if degraded {
                        count_degraded(domain, rule, descriptor);
                    }
                    let enforced = !self.shadowed(rule);
                    let denied = !verdict.allowed && enforced;
                    over_limit |= denied;
                    if enforced && !degraded {
                        described.push((verdict, limit));
                    }
                    let code = if denied { Code::OverLimit } else { Code::Ok } as i32;
                    if degraded {
                        // A failure policy answered: the store's numbers are not known, so
                        // none are reported (Envoy leaves a status without a current limit
                        // out of its rate-limit headers).
                        DescriptorStatus {
                            code,
                            ..Default::default()
                        }
                    } else {
                        DescriptorStatus {
                            code,
                            current_limit: Some(current_limit(rule, rate)),
                            limit_remaining: verdict.remaining().unwrap_or(0),
                            duration_until_reset: verdict.reset_after().map(pb_duration),
                            quota: None,
                        }
                    }
                }
            };
            statuses.push(status);
        }
        let response_headers_to_add = match self.headers {
            Some(style) => response_headers(style, over_limit, &described),
            None => Vec::new(),
        };
        RateLimitResponse {
            overall_code: if over_limit {
                Code::OverLimit
            } else {
                Code::Ok
            } as i32,
            statuses,
            response_headers_to_add,
            ..Default::default()
        }
    }
}

/// The headers describing the descriptor that decided, written by the library's header model:
/// when the request is over limit, the enforced descriptor that frees up last (one that never
/// fits first); otherwise the enforced descriptor with the fewest tokens left. Descriptors a
/// failure policy answered are never described: their numbers are not known.
fn response_headers(
    style: HeaderStyle,
    over_limit: bool,
    described: &[(&Decision, &RuleLimit)],
) -> Vec<HeaderValue> {
    let candidates = described
        .iter()
        .filter(|(decision, _)| decision.allowed != over_limit);
    let chosen = if over_limit {
        candidates.max_by_key(|(d, _)| d.retry_after.map_or(Duration::MAX, |r| r))
    } else {
        candidates.min_by_key(|(d, _)| d.remaining())
    };
    let Some((decision, limit)) = chosen else {
        return Vec::new();
    };
    let mut headers = axum::http::HeaderMap::new();
    decision.write_headers(&limit.policy, style, &mut headers);
    headers
        .iter()
        .map(|(name, value)| HeaderValue {
            key: name.as_str().to_string(),
            value: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            raw_value: Vec::new(),
        })
        .collect()
}

/// Matches every descriptor and computes its key and cost.
fn plan_descriptors<'r>(
    rules: &'r RuleSet,
    request: &RateLimitRequest,
) -> Result<Vec<Plan<'r>>, Status> {
    let mut checks = 0;
    request
        .descriptors
        .iter()
        .map(|descriptor| {
            if descriptor.limit.is_some() {
                return Err(Status::invalid_argument(
                    "descriptor limit overrides are not supported by flowguard-rls: configure the \
                     limit in the service's configuration instead",
                ));
            }
            if descriptor.is_negative_hits {
                return Err(Status::invalid_argument(
                    "is_negative_hits is not supported: flowguard-rls does not refund tokens",
                ));
            }
            let entries = || {
                descriptor
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
            };
            Ok(match rules.config().lookup(&request.domain, entries()) {
                Lookup::UnknownDomain | Lookup::NoRule => Plan::NoRule,
                Lookup::Rule(rule) => match rule.limit {
                    Limit::Unlimited => Plan::Unlimited(rule),
                    Limit::Rate(rate) => {
                        let limit = rules.limit(rule).ok_or_else(|| {
                            Status::internal(format!(
                                "rule at {} has no limiter: the configuration was not compiled",
                                rule.location
                            ))
                        })?;
                        let check = checks;
                        checks += 1;
                        Plan::Limited {
                            rule,
                            rate,
                            limit,
                            key: limiter_key(&request.domain, entries()),
                            cost: descriptor
                                .hits_addend
                                .as_ref()
                                .map_or(u64::from(request.hits_addend.max(1)), |h| h.value),
                            check,
                        }
                    }
                },
            })
        })
        .collect()
}

fn current_limit(rule: &LimitRule, rate: &Rate) -> RateLimit {
    RateLimit {
        name: rule.name.clone().unwrap_or_default(),
        requests_per_unit: rate.requests_per_unit,
        unit: match rate.unit {
            Unit::Second => PbUnit::Second,
            Unit::Minute => PbUnit::Minute,
            Unit::Hour => PbUnit::Hour,
            Unit::Day => PbUnit::Day,
        } as i32,
    }
}

fn pb_duration(d: std::time::Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The metric label of a descriptor: its configured path, or with `detailed_metric` the request's
/// own entries.
fn descriptor_label(rule: &LimitRule, descriptor: &RateLimitDescriptor) -> String {
    if rule.detailed_metric {
        descriptor
            .entries
            .iter()
            .map(|e| format!("{}_{}", e.key, e.value))
            .collect::<Vec<_>>()
            .join(".")
    } else {
        rule.stat_path.clone()
    }
}

fn count(
    domain: &str,
    rule: &LimitRule,
    descriptor: &RateLimitDescriptor,
    outcome: &'static str,
    extra: Option<&'static str>,
) {
    let label = descriptor_label(rule, descriptor);
    ::metrics::counter!(names::DECISIONS, "domain" => domain.to_string(),
        "descriptor" => label.clone(), "outcome" => outcome)
    .increment(1);
    if let Some(name) = extra {
        ::metrics::counter!(name, "domain" => domain.to_string(), "descriptor" => label)
            .increment(1);
    }
}

fn count_degraded(domain: &str, rule: &LimitRule, descriptor: &RateLimitDescriptor) {
    ::metrics::counter!(names::DEGRADED, "domain" => domain.to_string(),
        "descriptor" => descriptor_label(rule, descriptor))
    .increment(1);
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let answer = self.decide(request.get_ref()).await;
        ::metrics::histogram!(names::LATENCY).record(started.elapsed().as_secs_f64());
        answer.map(Response::new)
    }
}
