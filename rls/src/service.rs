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

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use flowguard::gcra::Decision;
use flowguard::headers::{HeaderStyle, PolicyName};

use super::backend::{Backend, Check};
use super::config::{Limit, LimitRule, Location, Lookup, Rate, Unit};
use super::key::limiter_key;
use super::metrics::{self as names, Series};
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
    /// [`LATENCY`](names::LATENCY), from the recorder installed when the service was made.
    latency: ::metrics::Histogram,
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

/// The rule a descriptor is limited by, and its limit.
enum Applied<'r> {
    /// A rule of the configuration.
    Configured(&'r LimitRule, &'r RuleLimit),
    /// A request's limit override (boxed: rare, and larger than a reference).
    Override(Box<(LimitRule, RuleLimit)>),
}

impl Applied<'_> {
    fn rule(&self) -> &LimitRule {
        match self {
            Applied::Configured(rule, _) => rule,
            Applied::Override(both) => &both.0,
        }
    }

    fn limit(&self) -> &RuleLimit {
        match self {
            Applied::Configured(_, limit) => limit,
            Applied::Override(both) => &both.1,
        }
    }
}

/// How one request descriptor is decided.
enum Plan<'r> {
    NoRule,
    Unlimited(&'r LimitRule),
    Limited {
        /// The configured rule, or one made for a request's limit override.
        applied: Applied<'r>,
        rate: Rate,
        key: Vec<u8>,
        cost: u64,
        check: usize,
    },
}

impl RateLimiter {
    /// A service answering from `rules` (swapped by reloads) with `backend`, describing the
    /// decisive descriptor in the response headers of `headers` (none when `None`, the
    /// default of envoyproxy/ratelimit). Its latency histogram is registered now: install the
    /// metrics recorder first.
    pub fn new(rules: Rules, backend: Arc<Backend>, headers: Option<HeaderStyle>) -> RateLimiter {
        RateLimiter {
            rules,
            backend,
            headers,
            unknown: Arc::default(),
            shadow_mode: false,
            latency: ::metrics::histogram!(names::LATENCY),
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
        let known = rules.config().has_domain(domain);
        if !known {
            self.unknown.seen(domain);
        }
        let (plans, added) = plan_descriptors(&rules, known, &self.backend, request)?;
        let checks: Vec<Check<'_>> = plans
            .iter()
            .filter_map(|p| match p {
                Plan::Limited {
                    applied, key, cost, ..
                } => Some(Check {
                    limit: applied.limit().limit,
                    key,
                    cost: *cost,
                    enforce: !self.shadowed(applied.rule()),
                }),
                _ => None,
            })
            .collect();
        let verdicts = if checks.is_empty() {
            Vec::new()
        } else {
            let newest;
            let limits = if added {
                newest = self.backend.limits();
                &newest
            } else {
                rules.limits()
            };
            self.backend.decide(limits, &checks).await.map_err(|e| {
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
        Ok(self.respond(&rules, known, request, &plans, &verdicts))
    }

    /// The answer to `request` (in a configured domain when `known`) from its plans and the
    /// backend's verdicts, with every descriptor counted.
    fn respond(
        &self,
        rules: &RuleSet,
        known: bool,
        request: &RateLimitRequest,
        plans: &[Plan<'_>],
        verdicts: &[Decision],
    ) -> RateLimitResponse {
        let domain = request.domain.as_str();
        let mut over_limit = false;
        let mut statuses = Vec::with_capacity(plans.len());
        // The decisive descriptor, for the headers: its decision and policy.
        let mut described: Vec<(&Decision, &RuleLimit)> = Vec::new();
        for (plan, descriptor) in plans.iter().zip(&request.descriptors) {
            let status = match plan {
                Plan::NoRule => {
                    // An unknown domain is counted in UNKNOWN_DOMAIN alone: its name comes from
                    // the request, and labels never do.
                    if known {
                        ::metrics::counter!(names::DECISIONS, "domain" => domain.to_string(),
                            "descriptor" => "", "outcome" => "no_rule")
                        .increment(1);
                    }
                    DescriptorStatus {
                        code: Code::Ok as i32,
                        ..Default::default()
                    }
                }
                Plan::Unlimited(rule) => {
                    count(rules, domain, rule, descriptor, &[Series::Unlimited]);
                    DescriptorStatus {
                        code: Code::Ok as i32,
                        limit_remaining: u32::MAX,
                        ..Default::default()
                    }
                }
                Plan::Limited {
                    applied,
                    rate,
                    check,
                    ..
                } => {
                    let (rule, limit) = (applied.rule(), applied.limit());
                    let verdict = &verdicts[*check];
                    let degraded = verdict.degraded.is_some();
                    let outcome: &[Series] = match (verdict.allowed, self.shadowed(rule)) {
                        (true, _) => &[Series::Ok],
                        (false, true) => &[Series::ShadowOverLimit, Series::ShadowOverLimitTotal],
                        (false, false) => &[Series::OverLimit, Series::OverLimitTotal],
                    };
                    count(rules, domain, rule, descriptor, outcome);
                    if degraded {
                        count(rules, domain, rule, descriptor, &[Series::Degraded]);
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

/// The most distinct rates the service tracks, configured and requested as limit overrides
/// together: every rate is a limit with state of its own, so clients cannot grow them unbounded.
const MAX_RATES: usize = 10_000;

/// Matches every descriptor and computes its key and cost. A descriptor with a `limit`
/// override (in a configured domain) is limited by that rate instead of the configuration's, as
/// envoyproxy/ratelimit does; a rule whose `name` another matched rule `replaces` is not applied.
/// The second value is whether an override's rate came after the rules were compiled: then the
/// request is decided through the backend's newest set, which has it.
fn plan_descriptors<'r>(
    rules: &'r RuleSet,
    known: bool,
    backend: &Backend,
    request: &RateLimitRequest,
) -> Result<(Vec<Plan<'r>>, bool), Status> {
    let domain = request.domain.as_str();
    let mut found = Vec::with_capacity(request.descriptors.len());
    for descriptor in &request.descriptors {
        if descriptor.is_negative_hits {
            return Err(Status::invalid_argument(
                "is_negative_hits is not supported: flowguard-rls does not refund tokens (a \
                 denied request spends nothing, so there is nothing to give back)",
            ));
        }
        let entries = descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()));
        found.push(match (&descriptor.limit, known) {
            (Some(over), true) => Err(override_rate(over)?),
            _ => Ok(rules.config().lookup(domain, entries)),
        });
    }
    let replaced: HashSet<&str> = found
        .iter()
        .filter_map(|f| match f {
            Ok(Lookup::Rule(rule)) => Some(rule.replaces.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect();
    let mut checks = 0;
    let mut added = false;
    let mut plans = Vec::with_capacity(found.len());
    for (descriptor, found) in request.descriptors.iter().zip(found) {
        let (applied, rate) = match found {
            Ok(Lookup::UnknownDomain | Lookup::NoRule) => {
                plans.push(Plan::NoRule);
                continue;
            }
            Ok(Lookup::Rule(rule)) => match rule.limit {
                Limit::Unlimited => {
                    plans.push(Plan::Unlimited(rule));
                    continue;
                }
                Limit::Rate(_) if rule.name.as_deref().is_some_and(|n| replaced.contains(n)) => {
                    plans.push(Plan::NoRule);
                    continue;
                }
                Limit::Rate(rate) => {
                    let limit = rules.limit(rule).ok_or_else(|| {
                        Status::internal(format!(
                            "rule at {} has no limit: the configuration was not compiled",
                            rule.location
                        ))
                    })?;
                    (Applied::Configured(rule, limit), rate)
                }
            },
            Err(rate) => {
                let (rule, limit) = override_limit(backend, rate)?;
                // A rate added after the rules were compiled is only in the newest set.
                added |= limit.limit >= rules.limits().len();
                (Applied::Override(Box::new((rule, limit))), rate)
            }
        };
        let shared = &applied.rule().shared_values;
        let entries = descriptor.entries.iter().enumerate().map(|(i, e)| {
            let value = shared
                .iter()
                .find(|(at, _)| *at == i)
                .map_or(e.value.as_str(), |(_, pattern)| pattern.as_str());
            (e.key.as_str(), value)
        });
        let key = limiter_key(domain, entries);
        plans.push(Plan::Limited {
            applied,
            rate,
            key,
            cost: descriptor
                .hits_addend
                .as_ref()
                .map_or(u64::from(request.hits_addend.max(1)), |h| h.value),
            check: checks,
        });
        checks += 1;
    }
    Ok((plans, added))
}

/// The rate of a request's `limit` override; what cannot be a GCRA quota is `INVALID_ARGUMENT`.
fn override_rate(over: &RateLimitOverride) -> Result<Rate, Status> {
    let unit = match RateLimitUnit::try_from(over.unit) {
        Ok(RateLimitUnit::Second) => Unit::Second,
        Ok(RateLimitUnit::Minute) => Unit::Minute,
        Ok(RateLimitUnit::Hour) => Unit::Hour,
        Ok(RateLimitUnit::Day) => Unit::Day,
        Ok(RateLimitUnit::Month) => Unit::Month,
        Ok(RateLimitUnit::Year) => Unit::Year,
        _ => {
            return Err(Status::invalid_argument(format!(
                "the descriptor's limit override has unit {}: set SECOND, MINUTE, HOUR, DAY, \
                 MONTH or YEAR in the metadata Envoy reads it from",
                over.unit
            )));
        }
    };
    if over.requests_per_unit == 0 {
        return Err(Status::invalid_argument(
            "the descriptor's limit override has requests_per_unit 0: a GCRA quota admits at least \
             1 request per unit; send at least 1",
        ));
    }
    Ok(Rate {
        requests_per_unit: over.requests_per_unit,
        unit,
        burst: None,
    })
}

/// The rule and limit of an override `rate` (shared by every descriptor with that rate, its
/// keys those of the descriptor as for a configured rule).
fn override_limit(backend: &Backend, rate: Rate) -> Result<(LimitRule, RuleLimit), Status> {
    if backend.rate_count() >= MAX_RATES && !backend.has_rate(&rate) {
        return Err(Status::invalid_argument(format!(
            "more than {MAX_RATES} distinct rates (configured and sent as limit overrides): \
             send fewer distinct overrides, or configure the limits"
        )));
    }
    let limit = backend
        .limit(&rate)
        .map_err(|e| Status::invalid_argument(format!("the descriptor's limit override: {e}")))?;
    let quota = crate::backend::quota(&rate)
        .map_err(|e| Status::invalid_argument(format!("the descriptor's limit override: {e}")))?;
    let name = "limit_override";
    let rule = LimitRule {
        limit: Limit::Rate(rate),
        name: None,
        replaces: Vec::new(),
        shared_values: Vec::new(),
        shadow_mode: false,
        detailed_metric: false,
        stat_path: name.to_string(),
        location: Location {
            file: "(request)".into(),
            path: String::new(),
        },
        id: usize::MAX,
    };
    let policy = quota.rate_limit_policy(PolicyName::new(name).unwrap_or_default());
    Ok((rule, RuleLimit { limit, policy }))
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
            Unit::Week => PbUnit::Week,
            Unit::Month => PbUnit::Month,
            Unit::Year => PbUnit::Year,
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

/// Counts a descriptor decided by `rule` in each of `series`: through the rule's counters kept
/// in `rules` when its labels are the configuration's, else (labels made of the request's
/// entries, or a limit override's rule) through the recorder's registry.
fn count(
    rules: &RuleSet,
    domain: &str,
    rule: &LimitRule,
    descriptor: &RateLimitDescriptor,
    series: &[Series],
) {
    match rules.counters(rule) {
        Some(counters) if !rule.detailed_metric => {
            for &s in series {
                counters.get(s, domain, &rule.stat_path).increment(1);
            }
        }
        _ => {
            let label = descriptor_label(rule, descriptor);
            for &s in series {
                s.register(domain, &label).increment(1);
            }
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let answer = self.decide(request.get_ref()).await;
        self.latency.record(started.elapsed().as_secs_f64());
        answer.map(Response::new)
    }
}
