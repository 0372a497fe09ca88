//! Vegas-style adaptive concurrency limiting.
//!
//! Wrap outbound calls in [`Permit`]s from a [`Limiter`]. The number of permits adapts to measured
//! round-trip times, so a slowing dependency sheds load instead of building queues.
//!
//! - [`LimitAlgorithm`]: pure algorithms fed [`Sample`]s (RTT, in-flight at grant, [`Outcome`]):
//!   [`Vegas`] (recommended; its defaults share a dependency fairly when every instance of a
//!   service limits its calls to it, see [`Vegas`], section "In a fleet"), [`Aimd`],
//!   [`Gradient`], [`Fixed`]. Each is built with its builder ([`Vegas::builder`]) or with
//!   defaults ([`Vegas::new`]).
//! - [`Limiter`]: `try_acquire` / `acquire(timeout)` (FIFO or LIFO), RAII [`Permit`]s that
//!   borrow the limiter ([`OwnedPermit`]s from the `_owned` forms move into spawned tasks),
//!   [partitions](LimiterBuilder::partition) with guaranteed shares, RTT [`LimiterSnapshot`]s
//!   and [metrics](#metrics). Built with [`Limiter::builder`].
//! - Outbound HTTP calls: `vegas::layer` (tower, feature `tower`) and `vegas::reqwest`
//!   (reqwest-middleware, feature `reqwest`) hold a permit per request, one per attempt under a
//!   retry layer placed outside them; outcomes come from an [`OutcomeClassifier`]
//!   ([`HttpClassifier`] by default), and a request without a permit is not sent and fails with
//!   [`Shed`].
//! - The dependency's side: `vegas::worker_queue` (feature `tower`) serves an HTTP service's
//!   requests a few at a time and reports each one's wait for a worker (`Server-Timing`), which
//!   the callers' [`HttpClassifier`] reads by default to keep a fleet's shares even.
//! - Time: the limiter reads a [`MonotonicClock`](crate::clock::MonotonicClock) by default; give
//!   it a [`ManualClock`](crate::clock::ManualClock) with [`LimiterBuilder::clock`] in tests and
//!   simulations.
//!
//! ```
//! use flowguard::vegas::{Limiter, LimitBounds, Vegas};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let vegas = Vegas::builder().bounds(LimitBounds::new(4, 500, 20)?).build()?;
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
//!
//! # Metrics
//!
//! Metrics are registered once per limiter with the recorder installed when it is built (install
//! your `metrics` recorder first), labelled `limiter = <name>` ([`LimiterBuilder::name`]):
//!
//! | metric | kind | meaning |
//! |---|---|---|
//! | `flowguard_vegas_limit` | gauge | current concurrency limit |
//! | `flowguard_vegas_in_flight` | gauge | permits held |
//! | `flowguard_vegas_rtt_base_seconds` | gauge | the algorithm's unloaded-RTT estimate ([`LimitAlgorithm::rtt_base`]; Vegas's baseline, once learned), as of the last change of the limit; across a fleet's instances, baselines that differ by more than the band mean uneven shares |
//! | `flowguard_vegas_rtt_seconds` | histogram | RTT of successful calls |
//! | `flowguard_vegas_outcomes_total` | counter, label `outcome` | completed permits by outcome |
//! | `flowguard_vegas_shed_total` | counter | callers refused a permit, whose calls are shed: `try_acquire` at the limit, `acquire` timed out (so the tower layer, the reqwest middleware and [`Guard::call`](crate::Guard::call) count every shed call here) |
//!
//! # Layout
//!
//! `algorithms/` holds the limit algorithms (pure, fed samples, no clock) and `limiter/` the
//! machinery that hands out permits; the limiter imports the algorithms' contract, never the
//! reverse. Both report [`ConfigError`]. The outbound glue sits beside them: `classify` (outcomes
//! of finished calls), `queue_timing` (the dependency's report of a call's queueing),
//! `admission` (how a middleware takes its permits), `layer/` and `reqwest`. The dependency's
//! side of queue reports is `worker_queue/`.

#[cfg(any(feature = "tower", feature = "reqwest"))]
mod admission;
mod algorithms;
mod classify;
mod error;
#[cfg(feature = "tower")]
pub mod layer;
mod limiter;
mod queue_timing;
#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "tower")]
pub mod worker_queue;

pub use algorithms::{
    Aimd, AimdBuilder, Fixed, Gradient, GradientBuilder, LimitAlgorithm, LimitBounds, MAX_LIMIT,
    Outcome, Sample, Vegas, VegasBuilder,
};
pub use classify::{HttpClassifier, OutcomeClassifier};
pub use error::{AcquireError, ConfigError, MaybeShed, Shed};
pub use limiter::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_PARTITION, Limiter, LimiterBuilder, LimiterSnapshot,
    OwnedPermit, PartitionId, Permit, QueueOrder,
};
pub use queue_timing::QueueTiming;
