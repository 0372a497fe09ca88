//! [`RateLimitService`]: checks each request's key, answers 429 when over quota.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{HeaderValue, Request, Response, StatusCode, header::RETRY_AFTER};
use tower::Service;

use super::key::KeyExtractor;
use crate::gcra::{BoxFuture, GcraError, RateLimitStore};

/// The middleware service built by [`RateLimitLayer`](super::RateLimitLayer).
///
/// * allowed: the inner service answers; `RateLimit-*` headers are added to its response.
/// * denied: `429 Too Many Requests` with `Retry-After` and `RateLimit-*`; the inner service is not called.
/// * the store fails (a full in-memory store, a Redis error not covered by the store's failure
///   policy): `503 Service Unavailable` with `Retry-After: 1`, and an error is logged.
pub struct RateLimitService<S, St: ?Sized, K> {
    inner: S,
    store: Arc<St>,
    key: K,
}

impl<S, St: ?Sized, K> RateLimitService<S, St, K> {
    pub(super) fn new(inner: S, store: Arc<St>, key: K) -> Self {
        RateLimitService { inner, store, key }
    }
}

impl<S, St, K, B, R> Service<Request<B>> for RateLimitService<S, St, K>
where
    S: Service<Request<B>, Response = Response<R>> + Clone + Send + 'static,
    S::Future: Send,
    St: RateLimitStore + ?Sized + 'static,
    K: KeyExtractor<B>,
    B: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = Response<R>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<R>, S::Error>>;

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
        let cost = self.key.cost(&req);
        let store = self.store.clone();
        Box::pin(async move {
            match store.check(&key, cost).await {
                Ok(decision) if decision.allowed => {
                    let mut response = inner.call(req).await?;
                    decision.write_headers(response.headers_mut());
                    Ok(response)
                }
                Ok(decision) => {
                    let mut response = status(StatusCode::TOO_MANY_REQUESTS);
                    decision.write_headers(response.headers_mut());
                    Ok(response)
                }
                Err(error) => {
                    log_store_error(&error);
                    let mut response = status(StatusCode::SERVICE_UNAVAILABLE);
                    response
                        .headers_mut()
                        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
                    Ok(response)
                }
            }
        })
    }
}

fn status<R: Default>(code: StatusCode) -> Response<R> {
    let mut response = Response::new(R::default());
    *response.status_mut() = code;
    response
}

fn log_store_error(error: &GcraError) {
    tracing::error!(%error, "rate-limit store failed; answering 503");
    metrics::counter!("flowguard_rate_limit_errors_total").increment(1);
}

impl<S: Clone, St: ?Sized, K: Clone> Clone for RateLimitService<S, St, K> {
    fn clone(&self) -> Self {
        RateLimitService {
            inner: self.inner.clone(),
            store: self.store.clone(),
            key: self.key.clone(),
        }
    }
}
