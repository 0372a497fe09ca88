//! Vegas-style adaptive concurrency limiting.
//!
//! Wrap outbound calls in [`Permit`]s from a [`Limiter`]. The number of permits adapts to measured
//! round-trip times, so a slowing dependency sheds load instead of building queues.
//!
//! - [`LimitAlgorithm`]: pure algorithms fed [`Sample`]s (RTT, in-flight at grant, [`Outcome`]):
//!   [`Vegas`] (recommended), [`Aimd`], [`Gradient`], [`Fixed`].
//! - [`Limiter`]: `try_acquire` / `acquire(timeout)` (FIFO or LIFO), RAII [`Permit`]s that
//!   borrow the limiter ([`OwnedPermit`]s from the `_owned` forms move into spawned tasks),
//!   [partitions](partition) with guaranteed shares, RTT [`LimiterSnapshot`]s and
//!   [metrics](stats).
//! - [`Clock`]: [`MonotonicClock`] in production, [`ManualClock`] in tests and simulations.
//!
//! ```
//! use flowguard::vegas::{Limiter, LimitBounds, Vegas, VegasConfig};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let vegas = Vegas::new(VegasConfig {
//!     bounds: LimitBounds::new(4, 500, 20)?,
//!     ..VegasConfig::default()
//! })?;
//! let limiter = Limiter::builder(vegas).name("payments").build()?;
//! match limiter.acquire(Duration::from_millis(20)).await {
//!     Ok(permit) => {
//!         let response: Result<(), &str> = Ok(()); // call the dependency here
//!         match response {
//!             Ok(()) => permit.success(),
//!             Err(_) => permit.dropped(),
//!         }
//!     }
//!     Err(_full) => { /* shed: answer 503 without calling */ }
//! }
//! # Ok(()) }
//! ```

mod acquire;
mod aimd;
mod algorithm;
mod baseline;
mod clock;
mod error;
mod fixed;
mod gradient;
mod limiter;
mod occupancy;
pub mod partition;
mod permit;
pub mod stats;
// The algorithm that gives the module its name lives in `vegas.rs`, beside its peers.
#[allow(clippy::module_inception)]
mod vegas;

pub use aimd::{Aimd, AimdConfig};
pub use algorithm::{LimitAlgorithm, LimitBounds, MAX_LIMIT, Outcome, Sample};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use error::{AcquireError, ConfigError};
pub use fixed::Fixed;
pub use gradient::{Gradient, GradientConfig};
pub use limiter::{Limiter, LimiterBuilder, QueueOrder};
pub use partition::PartitionId;
pub use permit::{OwnedPermit, Permit};
pub use stats::LimiterSnapshot;
pub use vegas::{Vegas, VegasConfig};
