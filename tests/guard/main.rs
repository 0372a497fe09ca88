//! The `Guard` facade: building it (and every refusal), calls, its layers, its HTTP client, quotas
//! through its layer, metrics and spans.
//!
//! One test binary per module of the crate, one file per concern.

#[path = "../support/mod.rs"]
mod support;

mod build;
mod facade;
mod guard_metrics;
mod http_client;
mod layers;
mod queue_reports;
mod quota_layer;
