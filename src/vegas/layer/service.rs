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

/// Where the service stands between `poll_ready` and `call`.
enum Readiness {
    /// No permit taken yet.
    Idle,
    /// Queued for a permit. In a mutex only so that the service is `Sync` (frameworks such as
    /// axum ask for it); it is reached through `&mut self`, so never locked.
    Waiting(Mutex<Wait>),
    /// A permit for the next call. While it waits for the call it reports
    /// [`Outcome::Ignored`] if dropped; `on_cancel` is what it reports once spent.
    Ready {
        permit: OwnedPermit,
        on_cancel: Outcome,
    },
    /// No permit within the bound: the next call is shed.
    Shed(AcquireError),
}

impl Readiness {
    /// Holds `permit` for the next call.
    fn ready(mut permit: OwnedPermit) -> Self {
        let on_cancel = permit.unfinished();
        // Not spent yet: dropped unused, it measured no call.
        permit.set_unfinished(Outcome::Ignored);
        Readiness::Ready { permit, on_cancel }
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
            readiness: Readiness::Idle,
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
        loop {
            match &mut self.readiness {
                Readiness::Idle => match self.admission.try_acquire() {
                    Ok(permit) => self.readiness = Readiness::ready(permit.into_owned()),
                    Err(full) if self.admission.max_wait().is_zero() => {
                        self.readiness = Readiness::Shed(full);
                    }
                    Err(_) => {
                        let admission = self.admission.clone();
                        let wait: Wait =
                            Box::pin(
                                async move { admission.acquire().await.map(Permit::into_owned) },
                            );
                        self.readiness = Readiness::Waiting(Mutex::new(wait));
                    }
                },
                Readiness::Waiting(wait) => match wait.get_mut().as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(permit)) => self.readiness = Readiness::ready(permit),
                    Poll::Ready(Err(cause)) => self.readiness = Readiness::Shed(cause),
                },
                Readiness::Ready { .. } => return self.inner.poll_ready(cx).map_err(Into::into),
                // Ready to answer the next call with the shed.
                Readiness::Shed(_) => return Poll::Ready(Ok(())),
            }
        }
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let permit = match std::mem::replace(&mut self.readiness, Readiness::Idle) {
            Readiness::Ready {
                mut permit,
                on_cancel,
            } => {
                permit.set_unfinished(on_cancel);
                permit
            }
            Readiness::Shed(cause) => {
                tracing::debug!(%cause, "outbound call shed by the concurrency limit");
                return ResponseFuture::shed(cause);
            }
            // Called without `poll_ready` answering ready (a breach of tower's contract): a
            // permit now, or the call is shed; never more calls than the limit.
            Readiness::Idle | Readiness::Waiting(_) => match self.admission.try_acquire() {
                Ok(permit) => permit.into_owned(),
                Err(cause) => return ResponseFuture::shed(cause),
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
        let readiness = match &self.readiness {
            Readiness::Idle => "idle",
            Readiness::Waiting(_) => "waiting for a permit",
            Readiness::Ready { .. } => "holding a permit",
            Readiness::Shed(_) => "shedding the next call",
        };
        f.debug_struct("AdaptiveConcurrencyService")
            .field("inner", &self.inner)
            .field("admission", &self.admission)
            .field("classifier", &self.classifier)
            .field("readiness", &readiness)
            .finish()
    }
}
