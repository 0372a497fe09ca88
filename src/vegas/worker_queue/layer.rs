//! [`WorkerQueueLayer`]: how many workers, the metric that reports the wait, and the clock that
//! times it; wraps services in [`WorkerQueueService`].

use std::fmt;
use std::sync::Arc;

use tower::Layer;

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
#[derive(Clone)]
pub struct WorkerQueueLayer {
    queue: Arc<Queue>,
}

impl WorkerQueueLayer {
    /// A layer with `workers` workers that reports each wait under `timing`, timed by a
    /// [`MonotonicClock`]; [`ConfigError::ZeroCount`] when `workers` is 0 and
    /// [`ConfigError::LimitTooLarge`] above [`MAX_LIMIT`](crate::vegas::MAX_LIMIT).
    pub fn new(workers: usize, timing: QueueTiming) -> Result<Self, ConfigError> {
        Self::builder(workers, timing).build()
    }

    /// Starts configuring a layer with `workers` workers that reports each wait under `timing`.
    pub fn builder(workers: usize, timing: QueueTiming) -> WorkerQueueLayerBuilder {
        WorkerQueueLayerBuilder {
            workers,
            timing,
            clock: None,
            name: "default".into(),
        }
    }

    /// How many calls are served at once.
    pub fn workers(&self) -> usize {
        self.queue.capacity
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

impl fmt::Debug for WorkerQueueLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerQueueLayer")
            .field("workers", &self.workers())
            .field("timing", self.timing())
            .field("busy", &self.busy())
            .field("waiting", &self.waiting())
            .finish()
    }
}

impl<S> Layer<S> for WorkerQueueLayer {
    type Service = WorkerQueueService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WorkerQueueService::new(inner, self.queue.clone())
    }
}

/// Configures a [`WorkerQueueLayer`]; from [`WorkerQueueLayer::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct WorkerQueueLayerBuilder {
    workers: usize,
    timing: QueueTiming,
    clock: Option<Arc<dyn Clock>>,
    name: String,
}

impl WorkerQueueLayerBuilder {
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
    pub fn build(self) -> Result<WorkerQueueLayer, ConfigError> {
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
        Ok(WorkerQueueLayer {
            queue: Arc::new(Queue::new(self.workers, self.timing, clock, &self.name)),
        })
    }
}

impl fmt::Debug for WorkerQueueLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerQueueLayerBuilder")
            .field("workers", &self.workers)
            .field("timing", &self.timing)
            .field("clock", &self.clock.as_ref().map(|_| "custom"))
            .field("name", &self.name)
            .finish()
    }
}
