#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backoff;
pub mod clock;
pub mod gcra;
mod guard;
pub mod vegas;

pub use guard::{DEFAULT_ACQUIRE_TIMEOUT, Guard, GuardBuilder, GuardError};
