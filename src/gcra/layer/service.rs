//! [`QuotaService`]: checks each request's key, answers 429 when over quota.

use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use http::{Request, Response, StatusCode};
use tower::Service;

use std::future::Future;
use std::pin::Pin;

use super::key::KeyExtractor;
use crate::gcra::remote::StoreError;
use crate::gcra::{CheckError, GcraError, KeyedLimit};
use crate::headers::{HeaderStyle, QuotaPolicy, write_retry_after};

/// The middleware service built by [`QuotaLayer`](super::QuotaLayer).
///
/// * allowed: the inner service answers; the rate-limit fields are added to its response.
/// * denied: `429 Too Many Requests` with `Retry-After` and the rate-limit fields; the inner
///   service is not called.
///
/// The rate-limit fields are those of the layer's [`HeaderStyle`] (by default the IETF
/// `RateLimit-Policy: "default";q=B;w=W` and `RateLimit: "default";r=R;t=T`; see
/// [`Decision::write_headers`](crate::gcra::Decision::write_headers)). They are added to what
/// the response already has, so stacked layers keep each other's. A degraded decision (the
/// store answered by its failure policy) lists the policy without a `RateLimit` member: it
/// does not know the numbers.
///
/// When the store returns an error instead of a decision, the answer says what is true of the
/// request, so that clients retry only what can succeed (the inner service is not called):
///
/// | store error | answer | why |
/// |---|---|---|
/// | [`InsufficientCapacity`](GcraError::InsufficientCapacity): cost above the burst | `413 Content Too Large`, **no** `Retry-After`, the policy (`RateLimit-Policy`, whose `q` is the burst, or `X-RateLimit-Limit: <burst>`) | the request can never pass, however long the client waits. RFC 9110 §15.5.14: the request is larger than the server is willing to process, and without `Retry-After` the condition is not temporary. `429` would say "too many requests in a given amount of time" (RFC 6585) and invite a retry that cannot succeed; generic clients, flowguard's included, do not retry a `413` without `Retry-After` |
/// | [`KeyLimitReached`](GcraError::KeyLimitReached): a full in-memory store rejecting new keys | `503 Service Unavailable`, `Retry-After: 1` | a temporary condition of the server: a new key fits as soon as any tracked key expires, which the server cannot predict |
/// | [`Unavailable`](StoreError::Unavailable) (a store without a failure policy) | `503 Service Unavailable`, `Retry-After: 1` | temporary. The [remote](crate::gcra::remote) limiter answers unavailability by its [`FailurePolicy`](crate::gcra::remote::FailurePolicy) instead, as a decision (allowed, denied with `429`, or decided locally) |
/// | anything else (a Redis key of another type, corrupt state, a refused command) | `500 Internal Server Error`, no `Retry-After` | a fault of the server's configuration that waiting does not fix |
///
/// Every error is counted in `flowguard_rate_limit_errors_total{reason}`; a cost above the burst
/// is logged at debug level (the client's mistake), the others as warnings or errors.
pub struct QuotaService<S, St: ?Sized, K> {
    inner: S,
    store: Arc<St>,
    key: K,
    policy: Arc<QuotaPolicy>,
    style: HeaderStyle,
}

impl<S, St: ?Sized, K> QuotaService<S, St, K> {
    pub(super) fn new(
        inner: S,
        store: Arc<St>,
        key: K,
        policy: Arc<QuotaPolicy>,
        style: HeaderStyle,
    ) -> Self {
        QuotaService {
            inner,
            store,
            key,
            policy,
            style,
        }
    }
}

/// The response future: `Send + 'static`, boxed.
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

// `St` needs no `'static` bound: the check's future owns what it needs, so the response future
// holds no reference to the store. (A store type in that future, e.g. `dyn KeyedLimit + '_` with
// its erased lifetime, kept hyper's `serve_connection` inside `tokio::spawn` from proving `Send`.)
impl<S, St, K, B, R> Service<Request<B>> for QuotaService<S, St, K>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    St: KeyedLimit + ?Sized,
    K: KeyExtractor<B>,
    B: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone is fresh; the ready one (driven by poll_ready) serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(key) = self.key.key(&req) else {
            return Box::pin(inner.call(req));
        };
        let check = self.store.check(&key, self.key.cost(&req));
        let (policy, style) = (self.policy.clone(), self.style);
        Box::pin(async move {
            match check.await {
                Ok(decision) if decision.allowed => {
                    let mut response = inner.call(req).await?;
                    decision.write_headers(&policy, style, response.headers_mut());
                    Ok(response)
                }
                Ok(decision) => {
                    let mut response = status(StatusCode::TOO_MANY_REQUESTS);
                    decision.write_headers(&policy, style, response.headers_mut());
                    Ok(response)
                }
                Err(error) => Ok(refusal(&error, &policy, style)),
            }
        })
    }
}

fn status<R: Default>(code: StatusCode) -> Response<R> {
    let mut response = Response::new(R::default());
    *response.status_mut() = code;
    response
}

/// The answer to a request the store returned `error` for (see [`QuotaService`]), logged and counted.
fn refusal<R: Default>(
    error: &CheckError,
    policy: &QuotaPolicy,
    style: HeaderStyle,
) -> Response<R> {
    let (reason, response) = match error {
        CheckError::Gcra(GcraError::InsufficientCapacity { .. }) => {
            tracing::debug!(%error, "request costs more than the burst; answering 413 (final)");
            let mut response = status(StatusCode::PAYLOAD_TOO_LARGE);
            // The policy's quota is the burst: the largest cost that can pass.
            style.write(response.headers_mut(), policy, None);
            ("insufficient_capacity", response)
        }
        CheckError::Gcra(GcraError::KeyLimitReached { .. }) => {
            tracing::warn!(%error, "rate-limit store is full; answering 503");
            ("key_limit_reached", retry_soon())
        }
        CheckError::Store(StoreError::Unavailable(_)) => {
            tracing::error!(%error, "rate-limit store did not answer; answering 503");
            ("store_unavailable", retry_soon())
        }
        _ => {
            tracing::error!(%error, "rate-limit store failed; answering 500");
            ("store_fault", status(StatusCode::INTERNAL_SERVER_ERROR))
        }
    };
    metrics::counter!("flowguard_rate_limit_errors_total", "reason" => reason).increment(1);
    response
}

/// `503 Service Unavailable` with `Retry-After: 1`: a temporary condition of the server.
fn retry_soon<R: Default>() -> Response<R> {
    let mut response = status(StatusCode::SERVICE_UNAVAILABLE);
    write_retry_after(response.headers_mut(), Duration::from_secs(1));
    response
}

impl<S: Clone, St: ?Sized, K: Clone> Clone for QuotaService<S, St, K> {
    fn clone(&self) -> Self {
        QuotaService {
            inner: self.inner.clone(),
            store: self.store.clone(),
            key: self.key.clone(),
            policy: self.policy.clone(),
            style: self.style,
        }
    }
}
