//! How long the queue may grow: [`Unbounded`] (the default) or [`Bounded`], which answers a
//! request that finds [`max_waiting`](super::WorkerQueueLayerBuilder::max_waiting) requests
//! already waiting with a [`FullQueueResponse`] ([`ServiceUnavailable`] by default).

use http::{Response, StatusCode};

/// A request that found the queue full: what a [`FullQueueResponse`] builds its answer from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueFull {
    pub(super) workers: usize,
    pub(super) max_waiting: usize,
}

impl QueueFull {
    /// The queue's workers, all busy.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The requests that may wait, all waiting.
    pub fn max_waiting(&self) -> usize {
        self.max_waiting
    }
}

/// Builds the answer to a request that found the queue full. Implemented by
/// [`ServiceUnavailable`] (the default) and by any `Fn(&QueueFull) -> Response<R>`, set with
/// [`WorkerQueueLayerBuilder::when_full`](super::WorkerQueueLayerBuilder::when_full).
pub trait FullQueueResponse<R>: Clone + Send + Sync + 'static {
    /// The answer to a request that found the queue `full`.
    fn respond(&self, full: &QueueFull) -> Response<R>;
}

impl<R, F> FullQueueResponse<R> for F
where
    F: Fn(&QueueFull) -> Response<R> + Clone + Send + Sync + 'static,
{
    fn respond(&self, full: &QueueFull) -> Response<R> {
        self(full)
    }
}

/// The default [`FullQueueResponse`]: `503 Service Unavailable` with an empty body (the body
/// type's `Default`), and no `Retry-After`: the queue frees up within a few service times, and
/// when a client retries is for its own backoff to decide. Load shedders answer the same (Envoy's
/// adaptive concurrency filter, for one), and the crate's
/// [`HttpClassifier`](crate::vegas::HttpClassifier) counts a `503` as a dropped call, so a caller
/// whose limiter reads it cuts its limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceUnavailable;

impl<R: Default> FullQueueResponse<R> for ServiceUnavailable {
    fn respond(&self, _full: &QueueFull) -> Response<R> {
        let mut response = Response::new(R::default());
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        response
    }
}

/// The queue's bound, a type parameter of [`WorkerQueueLayer`](super::WorkerQueueLayer) and
/// [`WorkerQueueService`](super::WorkerQueueService): [`Unbounded`] or [`Bounded`]. Sealed: only
/// those two implement it.
pub trait QueueBound<R>: sealed::Sealed + Clone + Send + Sync + 'static {
    /// The answer to a request that found the queue `full`; `None` when it never is.
    #[doc(hidden)]
    fn respond(&self, full: &QueueFull) -> Option<Response<R>>;
}

/// No bound (the default): every request waits for a worker, as in a server's accept queue. The
/// callers bound the queue, with their deadlines and their own concurrency limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unbounded;

impl<R> QueueBound<R> for Unbounded {
    fn respond(&self, _full: &QueueFull) -> Option<Response<R>> {
        None
    }
}

/// At most [`max_waiting`](super::WorkerQueueLayerBuilder::max_waiting) requests wait; the next
/// one is answered at once with `P`'s response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounded<P = ServiceUnavailable> {
    pub(super) respond: P,
}

impl<R, P: FullQueueResponse<R>> QueueBound<R> for Bounded<P> {
    fn respond(&self, full: &QueueFull) -> Option<Response<R>> {
        Some(self.respond.respond(full))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Unbounded {}
    impl<P> Sealed for super::Bounded<P> {}
}
