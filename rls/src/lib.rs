//! `flowguard-rls`: a global rate limit service for Envoy (gRPC
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on flowguard's GCRA stores.
//! The binary is `flowguard-rls` (see the README for running it); this library is what it is
//! made of, built on flowguard's public API only.
//!
//! * [`config`]: envoyproxy/ratelimit's YAML format, parsed and checked, and descriptor matching.
//! * [`source`] / [`reload`]: reading the files, and swapping in changed ones.
//! * [`backend`]: the only place that calls flowguard's GCRA: every rate a limit of one
//!   `LimitSet` (in memory, Redis, two-tier), a request's descriptors decided through it.
//! * [`service`]: the gRPC service (its response headers are written by `flowguard::headers`);
//!   [`metrics`]: metric names and the Prometheus exporter.
//! * [`debug`]: the debug HTTP listener (`/metrics`, `/healthcheck`, `/rlconfig`, `/json`);
//!   [`redis_health`]: the Redis probe behind `/healthcheck`; [`json`]: the JSON form of
//!   `ShouldRateLimit`; [`logging`]: text or JSON logs.

#![warn(missing_docs)]

pub mod backend;
pub mod config;
pub mod debug;
pub mod json;
mod key;
pub mod logging;
pub mod metrics;
pub mod redis_health;
pub mod reload;
pub mod rules;
pub mod service;
pub mod source;

pub use key::limiter_key;
