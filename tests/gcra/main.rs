//! The GCRA core and its in-memory stores: the specification table, properties over long simulated
//! spans, keyed limiters (bounds, memory), concurrency and the two-tier reservoir.
//!
//! One test binary per module of the crate, one file per concern.

#[path = "../support/mod.rs"]
mod support;

mod concurrency;
mod keyed_bounds;
mod keyed_memory;
mod properties;
mod spec;
mod two_tier;
