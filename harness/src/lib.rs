//! Code shared by the harness binaries and their tests. Not part of the published crate.

pub mod cli;
pub mod exponential;
pub mod fairness;
pub mod fleet_report;
pub mod naive;
pub mod overload;
pub mod rollout;
pub mod service_spread;
pub mod vegas_settings;

/// A load client's tokio runtime: with 0 or 1 `threads`, the current-thread scheduler (the
/// tasks and their connections on one thread, so that one connection's requests leave in one
/// write), else the multi-thread scheduler with that many workers.
pub fn client_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    match threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
}
