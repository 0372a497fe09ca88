//! The service as an operator runs it: its configuration, the gRPC API in memory and on Redis,
//! TLS, and the operations around it (debug endpoints, logs, start, reload). One test binary, one
//! file per concern; the binary under test is started as a process of its own.

mod support;

mod config;
mod operations;
mod redis;
mod service;
mod tls;
