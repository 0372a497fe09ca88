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

mod algorithms;
mod error;
mod limiter;

pub use crate::clock::{Clock, ManualClock, MonotonicClock};
pub use algorithms::{
    Aimd, AimdConfig, Fixed, Gradient, GradientConfig, LimitAlgorithm, LimitBounds, MAX_LIMIT,
    Outcome, Sample, Vegas, VegasConfig,
};
pub use error::{AcquireError, ConfigError};
pub use limiter::partitions as partition;
pub use limiter::stats;
pub use limiter::{
    Limiter, LimiterBuilder, LimiterSnapshot, OwnedPermit, PartitionId, Permit, QueueOrder,
};
