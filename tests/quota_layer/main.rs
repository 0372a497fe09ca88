//! The inbound quota layer (`flowguard::gcra::layer`): the tower service, over axum, hyper and
//! tonic, on Redis and two-tier stores, typed keys, end to end over loopback, its metrics and
//! spans.
//!
//! One test binary per module of the crate, one file per concern.

#[path = "../support/mod.rs"]
mod support;

mod axum_app;
mod decision_metrics;
mod e2e;
mod hyper_app;
mod redis_store;
mod service;
mod two_tier;
mod typed_keys;
