//! The limiter machinery: permits up to the current limit, the queue of waiting callers,
//! partitions, RTT statistics and metrics. Generic over the limit algorithm it is fed by.

mod acquire;
mod clock;
// The type that gives the folder its name lives in `limiter.rs`, beside its parts.
#[allow(clippy::module_inception)]
mod limiter;
mod occupancy;
pub mod partitions;
mod permit;
pub mod stats;

pub use limiter::{Limiter, LimiterBuilder, QueueOrder};
pub use partitions::PartitionId;
pub use permit::{OwnedPermit, Permit};
pub use stats::LimiterSnapshot;
