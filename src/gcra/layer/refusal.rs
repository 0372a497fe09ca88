//! [`Refusal`]: why the layer answers a request itself; [`RefusalResponse`]: the response it
//! answers with ([`JsonRefusal`] by default, or any closure).

use std::fmt::Write as _;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};

use crate::gcra::{CheckError, Decision, Decisions};
use crate::headers::PolicyName;

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// A policy's quota is spent: `429 Too Many Requests`, with `Retry-After`.
    OverQuota,
    /// The request costs more than a policy's burst, so it can never pass: `413 Content Too
    /// Large`, final, without `Retry-After`.
    CostAboveBurst {
        /// The request's cost (summed over the demands on the same quota).
        cost: u32,
        /// The policy's burst.
        burst: u32,
    },
    /// The request has no key and the layer rejects such requests
    /// ([`MissingKey::Reject`](super::MissingKey::Reject)): that status.
    MissingKey,
    /// An in-memory store is full of live keys and rejects new ones: `503 Service Unavailable`,
    /// `Retry-After: 1`.
    StoreFull,
    /// A shared store did not answer and no failure policy decided: `503`, `Retry-After: 1`.
    StoreUnavailable,
    /// A store failed in a way waiting does not fix (a key of another type, corrupt state, a
    /// refused command): `500 Internal Server Error`.
    StoreFault,
}

/// A request the layer answers itself, without calling the service: what a
/// [`RefusalResponse`] builds its response from. The layer adds `Retry-After` and the
/// rate-limit fields to whatever response is built.
#[derive(Clone, Copy, Debug)]
pub struct Refusal<'a> {
    pub(super) kind: RefusalKind,
    pub(super) status: StatusCode,
    pub(super) policy: Option<&'a PolicyName>,
    pub(super) decision: Option<&'a Decision>,
    pub(super) decisions: Option<&'a Decisions>,
    pub(super) retry_after: Option<Duration>,
    pub(super) error: Option<&'a CheckError>,
}

impl<'a> Refusal<'a> {
    /// Why.
    pub fn kind(&self) -> RefusalKind {
        self.kind
    }

    /// The status the layer answers by default: 429, 413, the configured status for a missing
    /// key, 503 or 500.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The policy that refused (over quota, cost above its burst).
    pub fn policy(&self) -> Option<&'a PolicyName> {
        self.policy
    }

    /// That policy's decision (over quota).
    pub fn decision(&self) -> Option<&'a Decision> {
        self.decision
    }

    /// Every policy's decision, in the order of the tier's policies (over quota).
    pub fn decisions(&self) -> Option<&'a Decisions> {
        self.decisions
    }

    /// How long the client should wait before trying again (`Retry-After`, which the layer
    /// writes in whole seconds rounded up); `None` when waiting does not help.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// What the store reported (store errors, cost above the burst).
    pub fn error(&self) -> Option<&'a CheckError> {
        self.error
    }
}

/// Builds the response to a [`Refusal`]. Implemented by [`JsonRefusal`] (the default) and by
/// any `Fn(&Refusal<'_>) -> Response<R>`:
///
/// ```
/// use flowguard::gcra::layer::{QuotaLayer, Policy, HeaderKey, Refusal};
/// use flowguard::gcra::Quota;
/// use http::Response;
///
/// let layer = QuotaLayer::builder(HeaderKey::new("x-api-key")?)
///     .policy(Policy::per_key("per-second", Quota::per_second(10)?))
///     .build()?
///     .refusal(|refusal: &Refusal<'_>| {
///         let mut response = Response::new(format!("slow down ({})", refusal.status()));
///         *response.status_mut() = refusal.status();
///         response
///     });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait RefusalResponse<R>: Clone + Send + Sync + 'static {
    /// The response to `refusal`.
    fn respond(&self, refusal: &Refusal<'_>) -> Response<R>;
}

impl<R, F> RefusalResponse<R> for F
where
    F: Fn(&Refusal<'_>) -> Response<R> + Clone + Send + Sync + 'static,
{
    fn respond(&self, refusal: &Refusal<'_>) -> Response<R> {
        self(refusal)
    }
}

/// The default [`RefusalResponse`]: the refusal's status with a short JSON body
/// (`content-type: application/json`), for any body type made from a `String`:
///
/// ```text
/// {"error":"too_many_requests","policy":"per-second","retry_after":1}
/// {"error":"cost_above_burst","policy":"per-second","cost":12,"burst":10}
/// {"error":"missing_key"}
/// {"error":"rate_limiter_unavailable","retry_after":1}
/// {"error":"rate_limiter_fault"}
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct JsonRefusal;

impl<R: From<String>> RefusalResponse<R> for JsonRefusal {
    fn respond(&self, refusal: &Refusal<'_>) -> Response<R> {
        let mut response = Response::new(R::from(json(refusal)));
        *response.status_mut() = refusal.status();
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}

/// The body [`JsonRefusal`] writes.
fn json(refusal: &Refusal<'_>) -> String {
    let mut out = String::with_capacity(80);
    let error = match refusal.kind {
        RefusalKind::OverQuota => "too_many_requests",
        RefusalKind::CostAboveBurst { .. } => "cost_above_burst",
        RefusalKind::MissingKey => "missing_key",
        RefusalKind::StoreFull | RefusalKind::StoreUnavailable => "rate_limiter_unavailable",
        RefusalKind::StoreFault => "rate_limiter_fault",
    };
    let _ = write!(out, r#"{{"error":"{error}""#);
    if let Some(policy) = refusal.policy {
        out.push_str(r#","policy":""#);
        // Policy names are printable ASCII; only `"` and `\` need escaping.
        for c in policy.as_str().chars() {
            if matches!(c, '"' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
    if let RefusalKind::CostAboveBurst { cost, burst } = refusal.kind {
        let _ = write!(out, r#","cost":{cost},"burst":{burst}"#);
    }
    if let Some(wait) = refusal.retry_after {
        let _ = write!(out, r#","retry_after":{}"#, crate::headers::ceil_secs(wait));
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(kind: RefusalKind, policy: Option<&PolicyName>, wait: Option<u64>) -> String {
        json(&Refusal {
            kind,
            status: StatusCode::TOO_MANY_REQUESTS,
            policy,
            decision: None,
            decisions: None,
            retry_after: wait.map(Duration::from_millis),
            error: None,
        })
    }

    #[test]
    fn bodies_are_short_json_with_escaped_names_and_rounded_up_waits() {
        let name = PolicyName::new(r#"a"b\c"#).unwrap();
        assert_eq!(
            refusal(RefusalKind::OverQuota, Some(&name), Some(1001)),
            r#"{"error":"too_many_requests","policy":"a\"b\\c","retry_after":2}"#
        );
        assert_eq!(
            refusal(
                RefusalKind::CostAboveBurst {
                    cost: 12,
                    burst: 10
                },
                Some(&name),
                None
            ),
            r#"{"error":"cost_above_burst","policy":"a\"b\\c","cost":12,"burst":10}"#
        );
        assert_eq!(
            refusal(RefusalKind::MissingKey, None, None),
            r#"{"error":"missing_key"}"#
        );
    }
}
