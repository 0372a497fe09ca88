//! [`WorkerQueueLayer`]: how many workers, how many requests may wait, the metric that reports
//! the wait, and the clock that times it; wraps services in [`WorkerQueueService`].

use std::fmt;
use std::sync::Arc;

use tower::Layer;

use super::bound::{Bounded, ServiceUnavailable, Unbounded};
use super::queue::Queue;
use super::service::WorkerQueueService;
use crate::clock::{Clock, MonotonicClock};
use crate::vegas::algorithms::MAX_LIMIT;
use crate::vegas::error::ConfigError;
use crate::vegas::queue_timing::QueueTiming;

/// Serves at most [`workers`](Self::workers) calls of the wrapped service at a time, queues the
/// others in arrival order, and reports each call's wait in its response's `Server-Timing`
/// header. See the [module docs](super) for what the wait covers and an example.
///
/// Cheap to clone; every service it wraps (and every clone of those) shares the one queue and
/// its workers, so one layer on an axum `Router` bounds the whole router.
///
/// `B` is the queue's bound: [`Unbounded`] (the default), or [`Bounded`] when built with
/// [`max_waiting`](WorkerQueueLayerBuilder::max_waiting).
#[derive(Clone)]
pub struct WorkerQueueLayer<B = Unbounded> {
    queue: Arc<Queue>,
    bound: B,
}

impl WorkerQueueLayer {
    /// A layer with `workers` workers that reports each wait in the `Server-Timing` metric
    /// `flowguard-queue` ([`QueueTiming::default()`], what the callers' default classifier
    /// reads), timed by a [`MonotonicClock`], with no bound on the queue;
    /// [`ConfigError::ZeroCount`] when `workers` is 0 and [`ConfigError::LimitTooLarge`] above
    /// [`MAX_LIMIT`](crate::vegas::MAX_LIMIT).
    pub fn new(workers: usize) -> Result<Self, ConfigError> {
        Self::builder(workers).build()
    }

    /// Starts configuring a layer with `workers` workers.
    pub fn builder(workers: usize) -> WorkerQueueLayerBuilder {
        WorkerQueueLayerBuilder {
            workers,
            timing: QueueTiming::default(),
            clock: None,
            name: "default".into(),
            max_waiting: None,
            bound: Unbounded,
        }
    }
}

impl<B> WorkerQueueLayer<B> {
    /// How many calls are served at once.
    pub fn workers(&self) -> usize {
        self.queue.capacity
    }

    /// How many calls may wait for a worker: `None` for any number (the default).
    pub fn max_waiting(&self) -> Option<usize> {
        self.queue.max_waiting
    }

    /// The metric each wait is reported under.
    pub fn timing(&self) -> &QueueTiming {
        &self.queue.timing
    }

    /// Calls being served now (holding a worker).
    pub fn busy(&self) -> usize {
        self.queue.busy()
    }

    /// Calls waiting for a worker now.
    pub fn waiting(&self) -> usize {
        self.queue.waiting()
    }
}

impl<B> fmt::Debug for WorkerQueueLayer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerQueueLayer")
            .field("workers", &self.workers())
            .field("max_waiting", &self.max_waiting())
            .field("timing", self.timing())
            .field("busy", &self.busy())
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl<S, B: Clone> Layer<S> for WorkerQueueLayer<B> {
    type Service = WorkerQueueService<S, B>;

    fn layer(&self, inner: S) -> Self::Service {
        WorkerQueueService::new(inner, self.queue.clone(), self.bound.clone())
    }
}

/// Configures a [`WorkerQueueLayer`]; from [`WorkerQueueLayer::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct WorkerQueueLayerBuilder<B = Unbounded> {
    workers: usize,
    timing: QueueTiming,
    clock: Option<Arc<dyn Clock>>,
    name: String,
    max_waiting: Option<usize>,
    bound: B,
}

impl WorkerQueueLayerBuilder {
    /// Lets at most `max_waiting` requests wait for a worker; the next one is answered at once,
    /// without calling the service, with `503 Service Unavailable` ([`ServiceUnavailable`]; set
    /// another answer with [`when_full`](WorkerQueueLayerBuilder::when_full)). 0 queues nothing:
    /// a request that finds every worker busy is answered so at once.
    ///
    /// Without a bound (the default) the callers bound the queue, with their deadlines and
    /// concurrency limits. Set one when some callers do not, so that a flood of requests is
    /// answered at once rather than held, each waiting longer than its caller will.
    pub fn max_waiting(self, max_waiting: usize) -> WorkerQueueLayerBuilder<Bounded> {
        WorkerQueueLayerBuilder {
            workers: self.workers,
            timing: self.timing,
            clock: self.clock,
            name: self.name,
            max_waiting: Some(max_waiting),
            bound: Bounded {
                respond: ServiceUnavailable,
            },
        }
    }
}

impl<P> WorkerQueueLayerBuilder<Bounded<P>> {
    /// Changes how many requests may wait, keeping the answer to the one that finds them all
    /// waiting.
    pub fn max_waiting(mut self, max_waiting: usize) -> Self {
        self.max_waiting = Some(max_waiting);
        self
    }

    /// Answers a request that finds the queue full with `respond`, a
    /// [`FullQueueResponse`](super::FullQueueResponse) such as a closure
    /// `|full: &QueueFull| -> Response<_>`, instead of an empty `503`.
    pub fn when_full<Q>(self, respond: Q) -> WorkerQueueLayerBuilder<Bounded<Q>> {
        WorkerQueueLayerBuilder {
            workers: self.workers,
            timing: self.timing,
            clock: self.clock,
            name: self.name,
            max_waiting: self.max_waiting,
            bound: Bounded { respond },
        }
    }
}

impl<B> WorkerQueueLayerBuilder<B> {
    /// Reports each wait under `timing`'s metric instead of the default `flowguard-queue`: for
    /// callers that read another name (see
    /// [`HttpClassifier::queue_timing`](crate::vegas::HttpClassifier::queue_timing)).
    pub fn queue_timing(mut self, timing: QueueTiming) -> Self {
        self.timing = timing;
        self
    }

    /// Names the queue in its [metrics](super#metrics) (label `queue`, default `"default"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Times the waits with `clock` (default: a [`MonotonicClock`]); e.g. a
    /// [`ManualClock`](crate::clock::ManualClock) in tests.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The layer; [`ConfigError::ZeroCount`] when `workers` is 0 and
    /// [`ConfigError::LimitTooLarge`] above [`MAX_LIMIT`](crate::vegas::MAX_LIMIT). Registers the
    /// queue's [metrics](super#metrics) with the `metrics` recorder installed now.
    pub fn build(self) -> Result<WorkerQueueLayer<B>, ConfigError> {
        if self.workers == 0 {
            return Err(ConfigError::ZeroCount { field: "workers" });
        }
        if self.workers > MAX_LIMIT {
            return Err(ConfigError::LimitTooLarge {
                field: "workers",
                value: self.workers,
                max: MAX_LIMIT,
            });
        }
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(MonotonicClock::new()));
        let queue = Queue::new(
            self.workers,
            self.max_waiting,
            self.timing,
            clock,
            &self.name,
        );
        Ok(WorkerQueueLayer {
            queue: Arc::new(queue),
            bound: self.bound,
        })
    }
}

impl<B> fmt::Debug for WorkerQueueLayerBuilder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerQueueLayerBuilder")
            .field("workers", &self.workers)
            .field("max_waiting", &self.max_waiting)
            .field("timing", &self.timing)
            .field("clock", &self.clock.as_ref().map(|_| "custom"))
            .field("name", &self.name)
            .finish()
    }
}
