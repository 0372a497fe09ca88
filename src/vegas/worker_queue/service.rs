//! [`WorkerQueueService`]: waits for a worker inside each call's future, times the wait, and
//! reports it on the response.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower::{Service, ServiceExt};

use super::queue::Queue;

/// The future of a [`WorkerQueueService`] call: waits for a worker and for the inner service to
/// be ready, calls it, and answers its response with the wait in `Server-Timing`. Dropped before
/// it is done, it leaves the queue (or frees its worker).
pub type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

/// Serves the inner service's calls a few at a time; from [`WorkerQueueLayer`](super::WorkerQueueLayer).
///
/// Always ready: a call joins the queue when it is made, so its wait is timed from then, and
/// the service never pushes back on the server that accepted the request. Each call runs on a
/// clone of the inner service (cheap for an axum `Router` or a `service_fn`), which is driven to
/// readiness once the call holds a worker.
pub struct WorkerQueueService<S> {
    inner: S,
    queue: Arc<Queue>,
}

impl<S> WorkerQueueService<S> {
    pub(super) fn new(inner: S, queue: Arc<Queue>) -> Self {
        Self { inner, queue }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone> Clone for WorkerQueueService<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            queue: self.queue.clone(),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for WorkerQueueService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerQueueService")
            .field("inner", &self.inner)
            .field("workers", &self.queue.capacity)
            .field("timing", &self.queue.timing)
            .finish()
    }
}

impl<S, B, ResBody> Service<Request<B>> for WorkerQueueService<S>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<Response<ResBody>, S::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let arrived = self.queue.clock.now_nanos();
        // Each call drives a clone of its own to readiness once it holds a worker: the inner
        // service's readiness is not asked in `poll_ready`, which would hold the call back
        // before its wait is timed.
        let mut inner = self.inner.clone();
        let queue = self.queue.clone();
        Box::pin(async move {
            let worker = queue.worker().await;
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
