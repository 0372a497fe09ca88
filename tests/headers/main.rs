//! The rate-limit HTTP fields: what the server writes, the client reads back.
//!
//! One test binary per module of the crate, one file per concern.

#[path = "../support/mod.rs"]
mod support;

mod fields;
