//! [`AdaptiveConcurrencyService`]: takes a permit in `poll_ready` (waiting up to the bound), spends
//! it in `call`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tower::Service;

use super::future::ResponseFuture;
use crate::backoff::BoxError;
use crate::vegas::admission::Admission;
use crate::vegas::algorithms::Outcome;
use crate::vegas::classify::OutcomeClassifier;
use crate::vegas::error::AcquireError;
use crate::vegas::limiter::{OwnedPermit, Permit};

/// Waiting for a permit, up to the bound: boxed, as it outlives the `poll_ready` that started it.
type Wait = Pin<Box<dyn Future<Output = Result<OwnedPermit, AcquireError>> + Send>>;

/// Where the service stands between `poll_ready` and `call`: at most one of the three is set
/// (none: no permit taken yet). Separate fields rather than one enum, so that the common path
/// (take a permit, hold it, spend it) moves nothing but the permit.
struct Readiness {
    /// A permit for the next call. While it waits for the call it reports
    /// [`Outcome::Ignored`] if dropped; `on_cancel` is what it reports once spent.
    permit: Option<OwnedPermit>,
    on_cancel: Outcome,
    /// Queued for a permit. In a mutex only so that the service is `Sync` (frameworks such as
    /// axum ask for it); it is reached through `&mut self`, so never locked.
    waiting: Option<Mutex<Wait>>,
    /// No permit within the bound: the next call is shed.
    shed: Option<AcquireError>,
}

impl Readiness {
    const IDLE: Readiness = Readiness {
        permit: None,
        on_cancel: Outcome::Ignored,
        waiting: None,
        shed: None,
    };

    /// Holds `permit` for the next call.
    #[inline]
    fn hold(&mut self, mut permit: OwnedPermit) {
        self.on_cancel = permit.unfinished();
        // Not spent yet: dropped unused, it measured no call.
        permit.set_unfinished(Outcome::Ignored);
        self.permit = Some(permit);
    }
}

/// The middleware service built by [`AdaptiveConcurrencyLayer`](super::AdaptiveConcurrencyLayer):
/// every call holds a permit of the layer's limiter while in flight (see the
/// [module docs](super) for readiness, the wait bound and cancellation).
///
/// Errors are `BoxError`s: the inner service's error, or [`Shed`](crate::vegas::Shed) when no
/// permit was free within the bound (the inner service was not called).
pub struct AdaptiveConcurrencyService<S, C> {
    inner: S,
    admission: Admission,
    classifier: C,
    readiness: Readiness,
}

impl<S, C> AdaptiveConcurrencyService<S, C> {
    pub(super) fn new(inner: S, admission: Admission, classifier: C) -> Self {
        Self {
            inner,
            admission,
            classifier,
            readiness: Readiness::IDLE,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service; a permit taken for a next call is released (ignored).
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, C, Request> Service<Request> for AdaptiveConcurrencyService<S, C>
where
    S: Service<Request>,
    S::Error: Into<BoxError>,
    C: OutcomeClassifier<S::Response, S::Error> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        let readiness = &mut self.readiness;
        if readiness.permit.is_none() {
            if readiness.shed.is_some() {
                // Ready to answer the next call with the shed.
                return Poll::Ready(Ok(()));
            }
            if readiness.waiting.is_none() {
                match self.admission.try_acquire() {
                    Ok(permit) => readiness.hold(permit.into_owned()),
                    Err(full) if self.admission.max_wait().is_zero() => {
                        readiness.shed = Some(full);
                        return Poll::Ready(Ok(()));
                    }
                    Err(_) => {
                        let admission = self.admission.clone();
                        let wait: Wait =
                            Box::pin(
                                async move { admission.acquire().await.map(Permit::into_owned) },
                            );
                        readiness.waiting = Some(Mutex::new(wait));
                    }
                }
            }
            if let Some(wait) = &mut readiness.waiting {
                let waited = match wait.get_mut().as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(waited) => waited,
                };
                readiness.waiting = None;
                match waited {
                    Ok(permit) => readiness.hold(permit),
                    Err(cause) => {
                        readiness.shed = Some(cause);
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let permit = match self.readiness.permit.take() {
            Some(mut permit) => {
                permit.set_unfinished(self.readiness.on_cancel);
                permit
            }
            None => match self.readiness.shed.take() {
                Some(cause) => {
                    tracing::debug!(%cause, "outbound call shed by the concurrency limit");
                    return ResponseFuture::shed(cause);
                }
                // Called without `poll_ready` answering ready (a breach of tower's contract): a
                // permit now, or the call is shed; never more calls than the limit.
                None => {
                    self.readiness.waiting = None;
                    match self.admission.try_acquire() {
                        Ok(permit) => permit.into_owned(),
                        Err(cause) => return ResponseFuture::shed(cause),
                    }
                }
            },
        };
        ResponseFuture::called(self.inner.call(request), permit, self.classifier.clone())
    }
}

impl<S: Clone, C: Clone> Clone for AdaptiveConcurrencyService<S, C> {
    /// A clone shares the limiter and starts without a permit (as tower's `ConcurrencyLimit`).
    fn clone(&self) -> Self {
        Self::new(
            self.inner.clone(),
            self.admission.clone(),
            self.classifier.clone(),
        )
    }
}

impl<S: fmt::Debug, C: fmt::Debug> fmt::Debug for AdaptiveConcurrencyService<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.readiness;
        let readiness = if r.permit.is_some() {
            "holding a permit"
        } else if r.shed.is_some() {
            "shedding the next call"
        } else if r.waiting.is_some() {
            "waiting for a permit"
        } else {
            "idle"
        };
        f.debug_struct("AdaptiveConcurrencyService")
            .field("inner", &self.inner)
            .field("admission", &self.admission)
            .field("classifier", &self.classifier)
            .field("readiness", &readiness)
            .finish()
    }
}
