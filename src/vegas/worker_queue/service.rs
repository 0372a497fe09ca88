//! [`WorkerQueueService`]: waits for a worker inside each call's future, times the wait, and
//! reports it on the response.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower::{Service, ServiceExt};

use super::bound::{QueueBound, Unbounded};
use super::queue::{Admission, Queue};

/// The future of a [`WorkerQueueService`] call: waits for a worker and for the inner service to
/// be ready, calls it, and answers its response with the wait in `Server-Timing`. Dropped before
/// it is done, it leaves the queue (or frees its worker).
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

/// Serves the inner service's calls a few at a time; from [`WorkerQueueLayer`](super::WorkerQueueLayer).
///
/// Always ready: a call joins the queue when it is made, so its wait is timed from then, and
/// the service never pushes back on the server that accepted the request. Each call runs on a
/// clone of the inner service (cheap for an axum `Router` or a `service_fn`), which is driven to
/// readiness once the call holds a worker. `B` is the queue's bound, as in
/// [`WorkerQueueLayer`](super::WorkerQueueLayer).
pub struct WorkerQueueService<S, B = Unbounded> {
    inner: S,
    queue: Arc<Queue>,
    bound: B,
}

impl<S, B> WorkerQueueService<S, B> {
    pub(super) fn new(inner: S, queue: Arc<Queue>, bound: B) -> Self {
        Self {
            inner,
            queue,
            bound,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, B: Clone> Clone for WorkerQueueService<S, B> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            queue: self.queue.clone(),
            bound: self.bound.clone(),
        }
    }
}

impl<S: std::fmt::Debug, B> std::fmt::Debug for WorkerQueueService<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerQueueService")
            .field("inner", &self.inner)
            .field("workers", &self.queue.capacity)
            .field("max_waiting", &self.queue.max_waiting)
            .field("timing", &self.queue.timing)
            .finish()
    }
}

impl<S, B, ReqBody, ResBody> Service<Request<ReqBody>> for WorkerQueueService<S, B>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: QueueBound<ResBody>,
    ReqBody: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<ResBody>, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let arrived = self.queue.clock.now_nanos();
        // Each call drives a clone of its own to readiness once it holds a worker: the inner
        // service's readiness is not asked in `poll_ready`, which would hold the call back
        // before its wait is timed.
        let mut inner = self.inner.clone();
        let queue = self.queue.clone();
        let bound = self.bound.clone();
        Box::pin(async move {
            let worker = match queue.admit() {
                Admission::Served(worker) => worker,
                Admission::Queued(waiting) => queue.worker(waiting).await,
                // Answered at once, without a worker or a report of a wait it did not have.
                Admission::Full(full) => {
                    if let Some(response) = bound.respond(&full) {
                        return Ok(response);
                    }
                    queue.worker_past_bound().await
                }
            };
            let ready = inner.ready().await?;
            let queued = Duration::from_nanos(queue.clock.now_nanos().saturating_sub(arrived));
            queue.waited(queued);
            let mut response = ready.call(request).await?;
            drop(worker);
            queue.timing.append(response.headers_mut(), queued);
            Ok(response)
        })
    }
}
