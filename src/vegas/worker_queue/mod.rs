//! The dependency's side of queue reports (feature `tower`): a tower middleware for an HTTP
//! service that serves at most `workers` requests at a time, queues the others in arrival order,
//! and answers each one with how long it waited for a worker, as a `Server-Timing` metric
//! (`Server-Timing: flowguard-queue;dur=3.200`).
//!
//! The instances that call the service read that report, with the default
//! [`HttpClassifier`](crate::vegas::HttpClassifier) of a `Guard`'s outbound layer and reqwest
//! middleware, and learn the service's unloaded round-trip time from it, whatever queue the other
//! instances keep: that is what keeps a fleet's shares even, and what keeps a lone instance at
//! the service's capacity on a host whose own delays come and go (see the guide's "When the
//! dependency reports its queue"). Neither side needs a setting for it; both can name another
//! metric ([`WorkerQueueLayerBuilder::queue_timing`] here,
//! [`HttpClassifier::queue_timing`](crate::vegas::HttpClassifier::queue_timing) there).
//!
//! - [`WorkerQueueLayer`]: the configuration (workers, metric, clock, and how many may wait),
//!   built with [`WorkerQueueLayer::new`] or [`WorkerQueueLayer::builder`].
//! - [`WorkerQueueService`]: always ready; each call waits for a worker inside its future, so
//!   the wait is timed from the moment the request reached the layer.
//!
//! A service that already bounds its own concurrency (a thread pool, a pool of database
//! connections) can report its own wait instead, with
//! [`QueueTiming::append`](crate::vegas::QueueTiming::append).
//!
//! ```
//! use std::time::Duration;
//! use flowguard::vegas::QueueTiming;
//! use flowguard::vegas::worker_queue::WorkerQueueLayer;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // With axum: `Router::new().route(..).layer(WorkerQueueLayer::new(4)?)`.
//! let service = ServiceBuilder::new()
//!     .layer(WorkerQueueLayer::new(4)?)
//!     .service(service_fn(|_request: http::Request<()>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new("done"))
//!     }));
//!
//! let response = service.oneshot(http::Request::new(())).await?;
//! // `server-timing: flowguard-queue;dur=0.004`: a worker was free, the wait was microseconds.
//! let waited: Duration = QueueTiming::default()
//!     .read(response.headers())
//!     .expect("every answer reports its wait");
//! # let _ = waited;
//! # Ok(())
//! # }
//! ```
//!
//! # What the wait covers
//!
//! The clock starts when the layer is called and stops when the inner service is called, so the
//! report covers the wait for a worker and for the inner service to be ready. Place the layer
//! outside everything else that may wait (outermost, or just inside tracing and the quota): a
//! wait before it, in the kernel's accept queue or in a layer outside it, is not reported, and
//! the callers take that much of the queue for the service's own time. A worker is held until
//! the inner service's response head is ready (or its error); the body is sent after the worker
//! is free.
//!
//! A request that is dropped while it waits (its client went away, a timeout outside the layer)
//! leaves the queue and takes no worker.
//!
//! # How long the queue may grow
//!
//! By default the queue is unbounded, as a server's accept queue is: the callers bound it, with
//! their deadlines and their own concurrency limits. When some callers do not, bound it with
//! [`max_waiting`](WorkerQueueLayerBuilder::max_waiting): a request that finds that many
//! already waiting is answered at once, without calling the service, with an empty
//! `503 Service Unavailable` ([`ServiceUnavailable`]), or with a response of one's own
//! ([`when_full`](WorkerQueueLayerBuilder::when_full)). It takes no worker and no place in the
//! queue, and carries no report of a wait. A caller whose limiter reads the `503` (the crate's
//! [`HttpClassifier`](crate::vegas::HttpClassifier) counts it as a dropped call) cuts its limit.
//!
//! Choose the bound from the wait the callers accept. The last request admitted waits for about
//! `max_waiting / workers` service times, so `workers * deadline / service time` answers at once
//! the requests that would otherwise wait past their callers' deadline: 8 workers at 10 ms for
//! callers that give up after 250 ms, `max_waiting(200)`. Adaptive callers (Vegas) keep the queue
//! far shorter than that and never meet the bound; it is for the callers that do not adapt.
//!
//! ```
//! use flowguard::vegas::worker_queue::WorkerQueueLayer;
//! use http::StatusCode;
//! use std::sync::Arc;
//! use tokio::sync::Semaphore;
//! use tower::{Layer, Service, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // One worker, and no place to wait: a request that finds the worker busy is shed.
//! let queue = WorkerQueueLayer::builder(1)
//!     .max_waiting(0)
//!     .build()?;
//! let work_done = Arc::new(Semaphore::new(0)); // each request works until a permit comes
//! let done = work_done.clone();
//! let mut service = queue.layer(service_fn(move |_request: http::Request<()>| {
//!     let done = done.clone();
//!     async move {
//!         done.acquire().await?.forget();
//!         Ok::<_, tokio::sync::AcquireError>(http::Response::new(String::from("done")))
//!     }
//! }));
//! let first = tokio::spawn(service.ready().await?.call(http::Request::new(())));
//! tokio::task::yield_now().await;
//! assert_eq!(queue.busy(), 1);
//!
//! let shed = service.ready().await?.call(http::Request::new(())).await?;
//! assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
//! work_done.add_permits(1);
//! assert_eq!(first.await??.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```
//!
//! # Metrics
//!
//! Registered once per layer with the recorder installed when it is built, labelled
//! `queue = <name>` ([`WorkerQueueLayerBuilder::name`], default `"default"`):
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `flowguard_worker_queue_busy` | gauge | calls holding a worker |
//! | `flowguard_worker_queue_waiting` | gauge | calls waiting for one |
//! | `flowguard_worker_queue_wait_seconds` | histogram | each call's wait, as reported |
//! | `flowguard_worker_queue_refused_total` | counter | calls answered at once, the queue full |

mod bound;
mod layer;
mod queue;
mod service;

pub use bound::{Bounded, FullQueueResponse, QueueBound, QueueFull, ServiceUnavailable, Unbounded};
pub use layer::{WorkerQueueLayer, WorkerQueueLayerBuilder};
pub use service::{ResponseFuture, WorkerQueueService};
