//! [`HttpRetryPolicy`]: the HTTP rules shared by the `tower` and `reqwest` retry glue —
//! which methods, statuses and transport errors are retried, and how long the server asked
//! us to wait.

use std::time::SystemTime;

use http::{HeaderMap, Method, StatusCode, header::RETRY_AFTER};

use super::classify::{ErrorClassifier, TransientErrors};
use super::policy::RetryPolicy;
use super::retry::Classification;
use crate::headers::{FieldError, LegacyReset, RetryAfter, requested_wait};

/// The header by which a client marks a non-idempotent request as safe to repeat.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// HTTP retry rules on top of a [`RetryPolicy`].
///
/// By default: retries `429 Too Many Requests` and `503 Service Unavailable`, honouring
/// `Retry-After` and the IETF `RateLimit` field (and `X-RateLimit-Reset` when
/// [`legacy_reset`](Self::legacy_reset) says how to read it; see
/// [`requested_wait`](crate::headers::requested_wait)), and transport errors accepted by the error classifier
/// (default [`TransientErrors`]: connection failures and timeouts); only idempotent methods
/// (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or requests carrying an
/// `Idempotency-Key` header, unless [`retry_non_idempotent`](Self::retry_non_idempotent).
///
/// A final answer is never retried, whatever [`retry_statuses`](Self::retry_statuses) lists:
/// `413 Content Too Large` without `Retry-After` says the request can never be served as it is
/// (RFC 9110 §15.5.14; flowguard's `gcra::layer::QuotaLayer` answers it to a request
/// costing more than the quota's burst). With `Retry-After` the server
/// says the condition is temporary, and a listed `413` is retried.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderMap, Method, StatusCode, header::RETRY_AFTER};
/// use flowguard::backoff::{Classification, HttpRetryPolicy, RetryPolicy};
///
/// let rules = HttpRetryPolicy::new(RetryPolicy::builder().build()?);
/// assert!(rules.allows(&Method::GET, &HeaderMap::new()));
/// assert!(!rules.allows(&Method::POST, &HeaderMap::new()));
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "2".parse()?);
/// assert_eq!(
///     rules.classify_response(StatusCode::TOO_MANY_REQUESTS, &headers, SystemTime::now()),
///     Classification::Retryable { retry_after: Some(Duration::from_secs(2)) },
/// );
/// assert_eq!(
///     rules.classify_response(StatusCode::NOT_FOUND, &headers, SystemTime::now()),
///     Classification::NotRetryable,
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct HttpRetryPolicy<C = TransientErrors> {
    policy: RetryPolicy,
    classifier: C,
    retry_non_idempotent: bool,
    statuses: Vec<StatusCode>,
    legacy_reset: Option<LegacyReset>,
}

impl HttpRetryPolicy<TransientErrors> {
    /// The default HTTP rules over `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        Self {
            policy,
            classifier: TransientErrors,
            retry_non_idempotent: false,
            statuses: vec![
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::SERVICE_UNAVAILABLE,
            ],
            legacy_reset: None,
        }
    }
}

impl<C> HttpRetryPolicy<C> {
    /// Replaces the classifier of transport errors.
    pub fn with_error_classifier<C2>(self, classifier: C2) -> HttpRetryPolicy<C2> {
        HttpRetryPolicy {
            policy: self.policy,
            classifier,
            retry_non_idempotent: self.retry_non_idempotent,
            statuses: self.statuses,
            legacy_reset: self.legacy_reset,
        }
    }

    /// Opts in to retrying non-idempotent methods (POST, PATCH, ...) too.
    pub fn retry_non_idempotent(mut self, yes: bool) -> Self {
        self.retry_non_idempotent = yes;
        self
    }

    /// Replaces the set of retried response statuses (default: 429 and 503). A final answer
    /// (`413` without `Retry-After`) is not retried even when listed.
    pub fn retry_statuses(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Also reads the legacy `X-RateLimit-Reset` field, in the way `reset` says, when neither
    /// `Retry-After` nor `RateLimit` asks for a wait (off by default: servers write it in two
    /// incompatible ways).
    pub fn legacy_reset(mut self, reset: LegacyReset) -> Self {
        self.legacy_reset = Some(reset);
        self
    }

    /// The underlying retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Whether a request with this method and headers may be sent more than once.
    pub fn allows(&self, method: &Method, headers: &HeaderMap) -> bool {
        self.retry_non_idempotent
            || headers.contains_key(IDEMPOTENCY_KEY)
            || matches!(
                *method,
                Method::GET
                    | Method::HEAD
                    | Method::OPTIONS
                    | Method::TRACE
                    | Method::PUT
                    | Method::DELETE
            )
    }

    /// Classifies a response received at wall-clock time `now`.
    ///
    /// A retried status carries the wait of [`requested_wait`]. A malformed field is ignored
    /// (logged at debug); a wait beyond [`MAX_RETRY_AFTER`](crate::headers::MAX_RETRY_AFTER)
    /// is [`Classification::RetryAfterTooLarge`], so the policy gives up with
    /// [`GiveUp::RetryAfterTooLarge`](super::GiveUp::RetryAfterTooLarge) instead of coming
    /// back early.
    pub fn classify_response(
        &self,
        status: StatusCode,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Classification {
        if !self.statuses.contains(&status) || is_final(status, headers) {
            return Classification::NotRetryable;
        }
        let retry_after = match requested_wait(headers, now, self.legacy_reset) {
            Ok(wait) => wait.map(RetryAfter::delay),
            Err(FieldError::TooLarge { .. }) => return Classification::RetryAfterTooLarge,
            Err(error) => {
                tracing::debug!(%status, %error, "ignoring an unusable rate-limit field");
                None
            }
        };
        Classification::Retryable { retry_after }
    }

    /// Classifies a transport error with the configured [`ErrorClassifier`].
    pub fn classify_error<E>(&self, error: &E) -> Classification
    where
        C: ErrorClassifier<E>,
    {
        if self.classifier.is_retryable(error) {
            Classification::Retryable { retry_after: None }
        } else {
            Classification::NotRetryable
        }
    }
}

/// Whether a response says that repeating the request cannot succeed: `413` without `Retry-After`.
fn is_final(status: StatusCode, headers: &HeaderMap) -> bool {
    status == StatusCode::PAYLOAD_TOO_LARGE && !headers.contains_key(RETRY_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> HttpRetryPolicy {
        HttpRetryPolicy::new(RetryPolicy::builder().seed(1).build().unwrap())
    }

    #[test]
    fn methods_and_idempotency_key() {
        let r = rules();
        let mut h = HeaderMap::new();
        for m in [Method::GET, Method::PUT, Method::DELETE, Method::HEAD] {
            assert!(r.allows(&m, &h));
        }
        assert!(!r.allows(&Method::PATCH, &h));
        h.insert(IDEMPOTENCY_KEY, "abc".parse().unwrap());
        assert!(r.allows(&Method::POST, &h));
        assert!(
            rules()
                .retry_non_idempotent(true)
                .allows(&Method::POST, &HeaderMap::new())
        );
    }

    #[test]
    fn statuses_and_headers() {
        let r = rules().retry_statuses([StatusCode::BAD_GATEWAY]);
        let mut h = HeaderMap::new();
        let now = SystemTime::now();
        assert_eq!(
            r.classify_response(StatusCode::TOO_MANY_REQUESTS, &h, now),
            Classification::NotRetryable
        );
        h.insert("retry-after", "nonsense".parse().unwrap());
        assert_eq!(
            r.classify_response(StatusCode::BAD_GATEWAY, &h, now),
            Classification::Retryable { retry_after: None }
        );
        h.insert("retry-after", "999999".parse().unwrap());
        assert_eq!(
            r.classify_response(StatusCode::BAD_GATEWAY, &h, now),
            Classification::RetryAfterTooLarge
        );
    }
}
