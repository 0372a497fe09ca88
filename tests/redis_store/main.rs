//! The Redis and Redis Cluster stores against real `redis-server` processes: the specification, the
//! script's paths, coalescing, faults, failover, ACL, TLS, two-tier and the remote limiter's
//! failure policies. Long chaos runs are `#[ignore]`d: `cargo test --all-features --test
//! redis_store -- --ignored`.
//!
//! One test binary per module of the crate, one file per concern.

#[path = "../support/mod.rs"]
mod support;

mod acl;
mod batch;
mod cluster;
mod cluster_chaos;
mod cluster_silent;
mod cold_start;
mod degraded_numbers;
mod differential;
mod faults;
mod global_bound;
mod hostile_state;
mod key_space;
mod rebuild;
mod remote;
mod repeated_keys;
mod script_paths;
mod spec;
mod tls;
mod two_tier;
