//! Adaptive concurrency (`flowguard::vegas`): the limit algorithms, the limiter and its permits,
//! partitions, metrics, the capacity step, and the outbound tower layer and reqwest middleware.
//!
//! One test binary per module of the crate, one file per concern.

#[path = "../support/mod.rs"]
mod support;

mod algorithms;
mod capacity;
mod common;
mod fleet;
mod layer;
mod limit_metrics;
mod limiter;
mod limiter_props;
mod over_reqwest;
mod partitions;
mod quota_signals;
mod worker_queue;
