//! [`GrpcRefusal`]: refusals as gRPC statuses, for the layer in front of a gRPC server (tonic).

use std::fmt::Write as _;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};

use super::refusal::{Refusal, RefusalKind, RefusalResponse};

/// `grpc-status`: the status code of a gRPC call.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: its message, percent-encoded.
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-retry-pushback-ms`: how long a gRPC client that retries this status should wait first.
const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// Answers refusals as gRPC statuses, for a [`QuotaLayer`](super::QuotaLayer) in front of a
/// gRPC server (a tonic `Server::builder().layer(…)`): a "trailers-only" response, that is
/// HTTP `200` with `content-type: application/grpc`, `grpc-status`, `grpc-message`, and no
/// body, which gRPC clients read as the call's status (tonic: a `tonic::Status` whose
/// metadata carries `retry-after` and the rate-limit fields the layer adds). For any response
/// body with a [`Default`] (tonic's `tonic::body::Body`).
///
/// | refusal | gRPC status | retry |
/// |---|---|---|
/// | [`OverQuota`](RefusalKind::OverQuota) | `RESOURCE_EXHAUSTED` (8) | `grpc-retry-pushback-ms`, `retry-after` |
/// | [`CostAboveBurst`](RefusalKind::CostAboveBurst) | `FAILED_PRECONDITION` (9): final, the call can never pass | none |
/// | [`MissingKey`](RefusalKind::MissingKey) | `UNAUTHENTICATED` (16) for a `401`, `PERMISSION_DENIED` (7) for a `403`, otherwise `INVALID_ARGUMENT` (3) | none |
/// | [`StoreFull`](RefusalKind::StoreFull), [`StoreUnavailable`](RefusalKind::StoreUnavailable) | `UNAVAILABLE` (14) | `grpc-retry-pushback-ms`, `retry-after` |
/// | [`StoreFault`](RefusalKind::StoreFault) | `INTERNAL` (13) | none |
///
/// `grpc-retry-pushback-ms` is the server pushback of gRPC's retry design: clients whose retry
/// policy covers the status wait that long before the next attempt.
///
/// ```
/// use flowguard::gcra::layer::{GrpcRefusal, HeaderKey, Policy, QuotaLayer};
/// use flowguard::gcra::Quota;
/// use http::{Request, Response, StatusCode};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// // With tonic: `Server::builder().layer(layer).add_service(…)`, keyed by a metadata entry.
/// let layer = QuotaLayer::builder(HeaderKey::new("x-api-key")?)
///     .policy(Policy::per_key("per-minute", Quota::per_minute(1)?))
///     .build()?
///     .refusal(GrpcRefusal);
/// let svc = ServiceBuilder::new()
///     .layer(layer)
///     .service_fn(|_req: Request<()>| async { Ok::<_, std::convert::Infallible>(Response::new(String::new())) });
/// let call = || Request::builder().header("x-api-key", "k1").body(()).unwrap();
/// svc.clone().oneshot(call()).await?;
/// let refused = svc.oneshot(call()).await?;
/// assert_eq!(refused.status(), StatusCode::OK, "gRPC carries its status in headers");
/// assert_eq!(refused.headers()["content-type"], "application/grpc");
/// assert_eq!(refused.headers()["grpc-status"], "8", "RESOURCE_EXHAUSTED");
/// assert_eq!(refused.headers()["grpc-message"], "over%20quota%20%22per-minute%22");
/// let pushback: u64 = refused.headers()["grpc-retry-pushback-ms"].to_str()?.parse()?;
/// assert!(pushback > 59_000 && pushback <= 60_000, "wait 60 s, in ms");
/// assert_eq!(refused.headers()["retry-after"], "60");
/// assert_eq!(refused.headers()["ratelimit"], r#""per-minute";r=0;t=60"#);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct GrpcRefusal;

impl<R: Default> RefusalResponse<R> for GrpcRefusal {
    fn respond(&self, refusal: &Refusal<'_>) -> Response<R> {
        let mut response = Response::new(R::default());
        *response.status_mut() = StatusCode::OK;
        write_status(refusal, response.headers_mut());
        response
    }
}

/// The gRPC status code of `refusal` (see the table of [`GrpcRefusal`]).
fn code(refusal: &Refusal<'_>) -> u16 {
    match refusal.kind() {
        RefusalKind::OverQuota => 8,
        RefusalKind::CostAboveBurst { .. } => 9,
        RefusalKind::MissingKey => match refusal.status() {
            StatusCode::UNAUTHORIZED => 16,
            StatusCode::FORBIDDEN => 7,
            _ => 3,
        },
        RefusalKind::StoreFull | RefusalKind::StoreUnavailable => 14,
        RefusalKind::StoreFault => 13,
    }
}

/// The message of `refusal`, as written (before percent-encoding).
fn message(refusal: &Refusal<'_>) -> String {
    let mut out = String::with_capacity(64);
    let _ = match refusal.kind() {
        RefusalKind::OverQuota => write!(out, "over quota"),
        RefusalKind::CostAboveBurst { cost, burst } => write!(
            out,
            "the call costs {cost}, more than the burst {burst}: it can never pass"
        ),
        RefusalKind::MissingKey => write!(out, "the call has no rate-limit key"),
        RefusalKind::StoreFull | RefusalKind::StoreUnavailable => {
            write!(out, "the rate limiter is unavailable")
        }
        RefusalKind::StoreFault => write!(out, "the rate limiter failed"),
    };
    if let Some(policy) = refusal.policy() {
        let _ = write!(out, " \"{}\"", policy.as_str());
    }
    out
}

/// `grpc-message` encoding: every byte outside printable ASCII, `%`, and (as tonic does) the
/// space and the characters URLs reserve, as `%XX`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len() * 3 / 2);
    for &b in message.as_bytes() {
        if (0x21..=0x7e).contains(&b) && !b"\"#%<>`?{}".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Writes the gRPC status of `refusal` into `headers`.
fn write_status(refusal: &Refusal<'_>, headers: &mut HeaderMap) {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS, HeaderValue::from(code(refusal)));
    // Percent-encoded: visible ASCII only, a valid field value.
    if let Ok(value) = HeaderValue::try_from(percent_encode(&message(refusal))) {
        headers.insert(GRPC_MESSAGE, value);
    }
    if let Some(wait) = refusal.retry_after() {
        // Rounded up, so that a client waiting exactly that long fits.
        let ms = wait.as_nanos().div_ceil(1_000_000);
        let ms = u64::try_from(ms).unwrap_or(u64::MAX);
        headers.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from(ms));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::headers::PolicyName;

    fn refusal<'a>(
        kind: RefusalKind,
        status: StatusCode,
        policy: Option<&'a PolicyName>,
        wait: Option<Duration>,
    ) -> Refusal<'a> {
        Refusal {
            kind,
            status,
            policy,
            decision: None,
            decisions: None,
            retry_after: wait,
            error: None,
        }
    }

    fn answer(r: &Refusal<'_>) -> Response<()> {
        GrpcRefusal.respond(r)
    }

    #[test]
    fn every_refusal_is_a_trailers_only_grpc_status() {
        let name = PolicyName::new("50% \"off\"").unwrap();
        let second = Duration::from_secs(1);
        let cases = [
            (RefusalKind::OverQuota, StatusCode::TOO_MANY_REQUESTS, "8"),
            (
                RefusalKind::CostAboveBurst { cost: 3, burst: 2 },
                StatusCode::PAYLOAD_TOO_LARGE,
                "9",
            ),
            (RefusalKind::MissingKey, StatusCode::UNAUTHORIZED, "16"),
            (RefusalKind::MissingKey, StatusCode::FORBIDDEN, "7"),
            (RefusalKind::MissingKey, StatusCode::BAD_REQUEST, "3"),
            (
                RefusalKind::StoreFull,
                StatusCode::SERVICE_UNAVAILABLE,
                "14",
            ),
            (
                RefusalKind::StoreUnavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                "14",
            ),
            (
                RefusalKind::StoreFault,
                StatusCode::INTERNAL_SERVER_ERROR,
                "13",
            ),
        ];
        for (kind, status, code) in cases {
            let response = answer(&refusal(kind, status, None, None));
            assert_eq!(response.status(), StatusCode::OK, "{kind:?}");
            assert_eq!(response.headers()["content-type"], "application/grpc");
            assert_eq!(response.headers()["grpc-status"], code, "{kind:?}");
            assert!(response.headers().contains_key("grpc-message"));
            assert!(!response.headers().contains_key("grpc-retry-pushback-ms"));
        }
        let over = answer(&refusal(
            RefusalKind::OverQuota,
            StatusCode::TOO_MANY_REQUESTS,
            Some(&name),
            Some(second + Duration::from_micros(1500)),
        ));
        assert_eq!(
            over.headers()["grpc-message"],
            "over%20quota%20%2250%25%20%22off%22%22"
        );
        assert_eq!(
            over.headers()["grpc-retry-pushback-ms"],
            "1002",
            "rounded up"
        );
    }

    #[test]
    fn messages_decode_to_what_was_written() {
        let text = "a b%c\"d\u{e9}";
        let encoded = percent_encode(text);
        assert!(encoded.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        let mut decoded = Vec::new();
        let bytes = encoded.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                decoded.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
        assert_eq!(String::from_utf8(decoded).unwrap(), text);
    }
}
