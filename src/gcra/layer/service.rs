//! [`QuotaService`]: decides each request against its tier's policies; answers refusals itself.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::answer::{self, Verdict};
use super::config::{ANONYMOUS_KEY, Config, GLOBAL_KEY};
use super::future::ResponseFuture;
use super::key::KeyExtractor;
use super::policy::MissingKey;
use super::refusal::RefusalResponse;
use crate::gcra::observe;
use crate::gcra::{Demand, LimitSet};

/// Demands built on the stack; tiers with more policies use the heap.
const INLINE_POLICIES: usize = 8;

/// The middleware service built by [`QuotaLayer`](super::QuotaLayer).
///
/// Each request is decided against every policy of its tier at once (allowed only if all allow;
/// a denial spends nothing):
///
/// * allowed: the deciding policy's [`Decision`](crate::gcra::Decision) is inserted into the
///   request's extensions (axum: `Extension<Decision>`), the inner service answers, and the
///   rate-limit fields are added to its response: `RateLimit-Policy` lists every policy of the
///   tier, `RateLimit` gives the most restrictive one's remaining quota (by default; see
///   [`HeaderStyle`](crate::headers::HeaderStyle)).
/// * denied: `429 Too Many Requests` from the layer's [`RefusalResponse`] (by default a short
///   JSON body), with `Retry-After` (the longest wait among the denying policies, in whole
///   seconds rounded up, so a client that waits exactly that long fits) and the fields, the
///   `RateLimit` member naming the denying policy; the inner service is not called.
/// * in [shadow mode](super::QuotaLayer::shadow), every request is passed, with the fields its
///   refusal would have carried, and what would have been refused is counted `shadow_denied`
///   (over quota, a cost above a burst, a request without a key under
///   [`MissingKey::Reject`]).
///
/// A degraded decision (a store that answered by its failure policy, or a full in-memory store
/// deciding untracked) lists its policies without a `RateLimit` member: it does not know the
/// numbers.
///
/// When the set returns an error instead of decisions, the answer says what is true of the
/// request, so that clients retry only what can succeed (the inner service is not called):
///
/// | error | answer | why |
/// |---|---|---|
/// | [`InsufficientCapacity`](crate::gcra::GcraError::InsufficientCapacity): cost above a policy's burst | `413 Content Too Large`, **no** `Retry-After`, `RateLimit-Policy` (whose `q` is the burst) | the request can never pass, however long the client waits (RFC 9110 §15.5.14: without `Retry-After` the condition is not temporary). `429` would invite a retry that cannot succeed; flowguard's clients do not retry a `413` without `Retry-After` |
/// | [`KeyLimitReached`](crate::gcra::GcraError::KeyLimitReached): a full in-memory store rejecting new keys | `503 Service Unavailable`, `Retry-After: 1` | temporary: a new key fits as soon as any tracked key expires |
/// | [`Unavailable`](crate::gcra::remote::StoreError::Unavailable) (a store without a failure policy) | `503`, `Retry-After: 1` | temporary. The [remote](crate::gcra::remote) limiter answers unavailability by its [`FailurePolicy`](crate::gcra::remote::FailurePolicy) instead, as a (degraded) decision |
/// | anything else (a Redis key of another type, corrupt state, a refused command) | `500 Internal Server Error`, no `Retry-After` | a fault of the server's configuration that waiting does not fix |
///
/// Every error is counted in `flowguard_rate_limit_errors_total{reason}`; a cost above the burst
/// is logged at debug level (the client's mistake), the others as warnings or errors. Decisions
/// are counted in `flowguard_quota_decisions_total{tier,policy,outcome}` (`allowed`, `denied`,
/// `shadow_denied`, `degraded`), labelled with the deciding policy (a cost above a burst: that
/// policy; a request without a key refused by [`MissingKey::Reject`]: `policy=""`), and made
/// inside a `quota_decision` tracing span (debug level) recording the tier, the policy and the
/// outcome.
///
/// The response future is a named [`ResponseFuture`]: nothing is boxed. An in-memory set decides
/// inside `call`, and the inner service is called from there; a set that does I/O is awaited
/// first, and then the service made ready by `poll_ready` is called (a clone takes its place).
pub struct QuotaService<S, J: ?Sized, K, H> {
    inner: S,
    set: Arc<J>,
    key: K,
    config: Arc<Config>,
    refusal: H,
}

impl<S, J: ?Sized, K, H> QuotaService<S, J, K, H> {
    pub(super) fn new(inner: S, set: Arc<J>, key: K, config: Arc<Config>, refusal: H) -> Self {
        QuotaService {
            inner,
            set,
            key,
            config,
            refusal,
        }
    }
}

impl<S, J, K, H, B, R> Service<Request<B>> for QuotaService<S, J, K, H>
where
    S: Service<Request<B>, Response = Response<R>> + Clone,
    J: LimitSet + ?Sized,
    K: KeyExtractor<B>,
    H: RefusalResponse<R>,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B, H>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let config = &*self.config;
        let tier_index = config.tier(self.key.tier(&req));
        let tier = &config.tiers[tier_index];
        let key = self.key.key(&req);
        let key_bytes = match key.as_ref().map(|k| k.as_bytes()) {
            Some(bytes) if !bytes.is_empty() => bytes,
            _ => match config.missing {
                MissingKey::Anonymous => ANONYMOUS_KEY,
                MissingKey::Bypass => {
                    drop(key);
                    return ResponseFuture::calling(self.inner.call(req), None);
                }
                MissingKey::Reject(status) => {
                    match answer::missing_key(config, tier_index, status, &self.refusal) {
                        Verdict::Pass { .. } => {
                            drop(key);
                            return ResponseFuture::calling(self.inner.call(req), None);
                        }
                        Verdict::Refuse(response) => return ResponseFuture::done(response),
                    }
                }
            },
        };
        let cost = self.key.cost(&req);
        let demand = |rule: &super::config::PolicyRule| Demand {
            limit: rule.limit,
            key: if rule.global { GLOBAL_KEY } else { key_bytes },
            cost,
        };
        let span = observe::span(&tier.name);
        let check = {
            let _entered = (!span.is_disabled()).then(|| span.enter());
            if tier.policies.len() <= INLINE_POLICIES {
                let mut demands = [Demand {
                    limit: 0,
                    key: &[],
                    cost: 0,
                }; INLINE_POLICIES];
                for (slot, rule) in demands.iter_mut().zip(tier.policies.iter()) {
                    *slot = demand(rule);
                }
                self.set.check_all(&demands[..tier.policies.len()])
            } else {
                let demands: Vec<Demand<'_>> = tier.policies.iter().map(demand).collect();
                self.set.check_all(&demands)
            }
        };
        drop(key);
        match check.into_ready() {
            Ok(answer) => {
                let verdict = {
                    let _entered = (!span.is_disabled()).then(|| span.enter());
                    answer::verdict(config, tier_index, answer, &self.refusal, &span)
                };
                match verdict {
                    Verdict::Pass { decision, fields } => {
                        if let Some(decision) = decision {
                            req.extensions_mut().insert(decision);
                        }
                        let fields = fields.map(|f| f.prepare(&self.config));
                        ResponseFuture::calling(self.inner.call(req), fields)
                    }
                    Verdict::Refuse(response) => ResponseFuture::done(response),
                }
            }
            Err(pending) => {
                // The ready service (driven by poll_ready) serves this request once decided;
                // a fresh clone takes its place.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::deciding(
                    pending,
                    inner,
                    req,
                    self.config.clone(),
                    self.refusal.clone(),
                    tier_index,
                    span,
                )
            }
        }
    }
}

impl<S: Clone, J: ?Sized, K: Clone, H: Clone> Clone for QuotaService<S, J, K, H> {
    fn clone(&self) -> Self {
        QuotaService {
            inner: self.inner.clone(),
            set: self.set.clone(),
            key: self.key.clone(),
            config: self.config.clone(),
            refusal: self.refusal.clone(),
        }
    }
}

impl<S, J: ?Sized, K, H> std::fmt::Debug for QuotaService<S, J, K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
