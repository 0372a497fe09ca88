//! [`ResponseFuture`]: the response of [`QuotaService`](super::QuotaService), without a box.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use super::answer::{self, Prepared, Verdict};
use super::config::Config;
use super::refusal::RefusalResponse;
use crate::gcra::SetFuture;

pin_project! {
    /// The response future of [`QuotaService`](super::QuotaService): the set's decision when it
    /// does I/O, then the inner service's response with the rate-limit fields added, or the
    /// layer's own answer. A named type: nothing is boxed per request.
    pub struct ResponseFuture<S, B, H>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, H>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, H>
    where
        S: Service<Request<B>>,
    {
        /// Waiting for a set that does I/O (boxed: that path allocates anyway, and the future
        /// of the in-memory path stays small).
        Deciding {
            pending: Box<Pending<S, B, H>>,
        },
        /// The inner service is answering.
        Calling {
            #[pin]
            future: S::Future,
            fields: Option<Prepared>,
        },
        /// The layer answered; `None` once taken.
        Done {
            response: Option<S::Response>,
        },
    }
}

/// The set's work, and what the request keeps meanwhile.
struct Pending<S, B, H> {
    check: SetFuture,
    waiting: Option<Waiting<S, B, H>>,
}

/// What a request waiting for its decision keeps.
struct Waiting<S, B, H> {
    inner: S,
    request: Request<B>,
    config: Arc<Config>,
    refusal: H,
    tier: usize,
    span: tracing::Span,
}

impl<S, B, H> ResponseFuture<S, B, H>
where
    S: Service<Request<B>>,
{
    pub(super) fn calling(future: S::Future, fields: Option<Prepared>) -> Self {
        ResponseFuture {
            state: State::Calling { future, fields },
        }
    }

    pub(super) fn done(response: S::Response) -> Self {
        ResponseFuture {
            state: State::Done {
                response: Some(response),
            },
        }
    }

    pub(super) fn deciding(
        check: SetFuture,
        inner: S,
        request: Request<B>,
        config: Arc<Config>,
        refusal: H,
        tier: usize,
        span: tracing::Span,
    ) -> Self {
        ResponseFuture {
            state: State::Deciding {
                pending: Box::new(Pending {
                    check,
                    waiting: Some(Waiting {
                        inner,
                        request,
                        config,
                        refusal,
                        tier,
                        span,
                    }),
                }),
            },
        }
    }
}

impl<S, B, H, R> Future for ResponseFuture<S, B, H>
where
    S: Service<Request<B>, Response = Response<R>>,
    H: RefusalResponse<R>,
{
    type Output = Result<Response<R>, S::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            match state.as_mut().project() {
                StateProj::Deciding { pending } => {
                    let answer = {
                        let _entered = pending.waiting.as_ref().map(|w| w.span.enter());
                        ready!(Pin::new(&mut pending.check).poll(cx))
                    };
                    // Polled again after completion: a caller's bug, answered without a panic.
                    let Some(mut w) = pending.waiting.take() else {
                        return Poll::Pending;
                    };
                    let verdict = {
                        let _entered = w.span.enter();
                        answer::verdict(&w.config, w.tier, answer, &w.refusal, &w.span)
                    };
                    match verdict {
                        Verdict::Pass { decision, fields } => {
                            if let Some(decision) = decision {
                                w.request.extensions_mut().insert(decision);
                            }
                            let fields = fields.map(|f| f.prepare(&w.config));
                            let future = w.inner.call(w.request);
                            state.set(State::Calling { future, fields });
                        }
                        Verdict::Refuse(response) => {
                            state.set(State::Done { response: None });
                            return Poll::Ready(Ok(response));
                        }
                    }
                }
                StateProj::Calling { future, fields } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(fields) = fields.take() {
                        fields.write(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Done { response } => {
                    return match response.take() {
                        Some(response) => Poll::Ready(Ok(response)),
                        None => Poll::Pending,
                    };
                }
            }
        }
    }
}

impl<S, B, H> std::fmt::Debug for ResponseFuture<S, B, H>
where
    S: Service<Request<B>>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Deciding { .. } => "deciding",
            State::Calling { .. } => "calling",
            State::Done { .. } => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
