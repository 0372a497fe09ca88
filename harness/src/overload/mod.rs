//! The overload run on real sockets: an HTTP backend with a few workers behind an unbounded queue
//! (in its own process), and a client that offers it several times its capacity through a
//! concurrency limiter, before and after a step in the backend's service time or worker count.
//!
//! - [`backend`]: the server (axum), its workers and the step;
//! - [`gate`]: the limiters compared (none, tower's fixed `ConcurrencyLimit`, flowguard's Vegas
//!   `Limiter`, tower-acc) in front of one reqwest call;
//! - [`client`]: Poisson arrivals, deadlines, and what happened to every request;
//! - [`fleet`]: several instances, each with its own limiter and HTTP client, sharing the backend;
//! - [`instance`]: one fleet instance in a client process of its own;
//! - [`machine`]: the CPU and load average the figures were measured with;
//! - [`report`]: goodput per second around the step, latency percentiles, the limit over time, the
//!   targets, as a table or JSON.

pub mod backend;
pub mod client;
pub mod fleet;
pub mod gate;
pub mod instance;
pub mod machine;
pub mod report;
