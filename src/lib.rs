#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backoff;
pub mod gcra;
pub mod vegas;
