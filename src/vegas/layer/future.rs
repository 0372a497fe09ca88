//! [`ResponseFuture`]: owns a call's permit until the response arrives, then reports how the call
//! ended.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::backoff::BoxError;
use crate::vegas::admission;
use crate::vegas::classify::OutcomeClassifier;
use crate::vegas::error::{AcquireError, Shed};
use crate::vegas::limiter::OwnedPermit;

pin_project! {
    /// The future of an [`AdaptiveConcurrencyService`](super::AdaptiveConcurrencyService) call.
    ///
    /// It owns the call's permit. When the inner call finishes, the classifier's
    /// [`Outcome`](crate::vegas::Outcome) for its result (and, for a success, the queueing the
    /// dependency reports, if the classifier reads it) is reported on the permit, which is
    /// released before the result is handed on. Dropped before that (the caller gave up, a
    /// timeout outside the layer fired, the task was aborted), it releases the permit, which
    /// reports its limiter's [`unfinished`](crate::vegas::LimiterBuilder::unfinished) outcome:
    /// never leaked. A shed call resolves at once to a [`Shed`] error.
    pub struct ResponseFuture<F, C> {
        #[pin]
        state: State<F, C>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, C> {
        /// The inner call is in flight under `permit` (taken once it has finished).
        Called {
            #[pin]
            future: F,
            permit: Option<OwnedPermit>,
            classifier: C,
        },
        /// No permit: the call was not made.
        Shed { cause: AcquireError },
    }
}

impl<F, C> ResponseFuture<F, C> {
    /// The inner call `future`, in flight under `permit`.
    pub(super) fn called(future: F, permit: OwnedPermit, classifier: C) -> Self {
        Self {
            state: State::Called {
                future,
                permit: Some(permit),
                classifier,
            },
        }
    }

    /// A call that was not made: no permit, for `cause`.
    #[inline]
    pub(super) fn shed(cause: AcquireError) -> Self {
        Self {
            state: State::Shed { cause },
        }
    }
}

impl<F, C, R, E> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<R, E>>,
    E: Into<BoxError>,
    C: OutcomeClassifier<R, E>,
{
    type Output = Result<R, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called {
                future,
                permit,
                classifier,
            } => {
                let result = ready!(future.poll(cx));
                if let Some(permit) = permit.take() {
                    admission::finish(permit, classifier, &result);
                }
                Poll::Ready(result.map_err(Into::into))
            }
            StateProj::Shed { cause } => Poll::Ready(Err(Box::new(Shed::from(*cause)))),
        }
    }
}

impl<F, C> fmt::Debug for ResponseFuture<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            State::Called { permit, .. } => f
                .debug_struct("ResponseFuture")
                .field("permit", permit)
                .finish_non_exhaustive(),
            State::Shed { cause } => f
                .debug_struct("ResponseFuture")
                .field("shed", cause)
                .finish(),
        }
    }
}
