//! Limit algorithms: pure state machines fed one [`Sample`] per completed call, answering with
//! the new concurrency limit. They never read a clock and know nothing of permits or queues.

mod aimd;
mod algorithm;
mod baseline;
mod bounds;
mod fixed;
mod gradient;
mod percentile;
mod raise_spacing;
mod reported;
mod vegas;

pub use aimd::{Aimd, AimdBuilder};
pub(crate) use algorithm::duration_nanos;
pub use algorithm::{LimitAlgorithm, Outcome, Sample};
pub(crate) use bounds::check_limit;
pub use bounds::{LimitBounds, MAX_LIMIT};
pub use fixed::Fixed;
pub use gradient::{Gradient, GradientBuilder};
pub use vegas::{Vegas, VegasBuilder};
