//! The limiter machinery, apart from the algorithms it is fed by: permits up to the current
//! limit, the queue of waiting callers, partitions, RTT statistics and metrics.
//!
//! Layers, each file importing only the ones below it: `occupancy`, `partitions`, `stats`,
//! `clock`, `grant` and `queue` at the bottom; `state` (what the lock guards); `shared` (grant
//! and release); `permit` and `wait` (the RAII permit and the queued future); the `limiter`
//! handle; its `builder` on top.

mod builder;
mod clock;
mod grant;
// The type that gives the folder its name lives in `limiter.rs`, beside its parts.
#[allow(clippy::module_inception)]
mod limiter;
mod occupancy;
mod partitions;
mod permit;
mod queue;
mod shared;
mod state;
mod stats;
mod wait;

pub use builder::LimiterBuilder;
pub use limiter::Limiter;
pub use partitions::{DEFAULT_PARTITION, PartitionId};
pub use permit::{OwnedPermit, Permit};
pub use queue::QueueOrder;
pub use stats::LimiterSnapshot;
pub use wait::DEFAULT_ACQUIRE_TIMEOUT;
