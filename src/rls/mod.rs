//! `flowguard-rls`: a global rate limit service for Envoy (gRPC
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on flowguard's GCRA stores.
//! Feature `rls`; the binary is `flowguard-rls` (see the README for running it).
//!
//! * [`config`]: envoyproxy/ratelimit's YAML format, parsed and checked, and descriptor matching.
//! * [`source`] / [`reload`]: reading the files, and swapping in changed ones.
//! * [`plan`]: deciding several descriptors as one request (what to peek, what to spend).
//! * [`backend`]: the only place that calls the GCRA stores (memory, Redis, two-tier).
//! * [`service`]: the gRPC service; [`headers`]: the response headers; [`metrics`]: metric names.

pub mod backend;
pub mod config;
pub mod headers;
mod key;
pub mod metrics;
pub mod plan;
pub mod reload;
pub mod rules;
pub mod service;
pub mod source;

pub use key::limiter_key;
