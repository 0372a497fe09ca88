//! The backend of the real-socket overload run: `GET /work` waits in an unbounded FIFO queue for
//! one of N workers that sleep S ms per request; from `--step-at` seconds after `POST /run`, the
//! service time becomes `--step-to` ms and the worker count `--workers-to`.
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin overload_backend -- --port 8080 \
//!     [--workers 4] [--service-ms 10] [--step-at 10|none] [--step-to 25] [--workers-to M] \
//!     [--queue own|layer [--max-waiting N]]
//! ```
//!
//! `--queue layer` queues the requests in flowguard's `WorkerQueueLayer` instead of the backend's
//! own channel (the worker count then cannot step); `--max-waiting N` bounds that queue, and
//! answers the request that finds it full 503 at once.
//!
//! It listens on 127.0.0.1 only, prints `listening on http://ADDR/` first (`--port 0` picks a free
//! port), and serves until killed. The `overload` client drives it (`--backend URL`), or starts
//! its own.

use std::process::ExitCode;

use clap::Parser;
use flowguard_harness::overload::backend::{self, BACKEND_USAGE, BackendArgs};

/// The backend of the real-socket overload run: `GET /work` waits in an unbounded FIFO queue for
/// one of N workers that sleep S ms per request, with a step in the middle of each run.
#[derive(Parser)]
#[command(name = "overload_backend", override_usage = format!("overload_backend {BACKEND_USAGE}"))]
struct Cli {
    #[command(flatten)]
    args: BackendArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    match backend::run(Cli::parse().args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("overload_backend: {e}");
            ExitCode::from(2)
        }
    }
}
