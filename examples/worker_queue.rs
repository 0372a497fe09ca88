//! A dependency that reports its queue: `GET /work` takes `--service-ms` milliseconds, at most
//! `--workers` requests are served at once, the others wait in arrival order, and every answer
//! says how long its request waited for a worker (`Server-Timing: flowguard-queue;dur=<ms>`).
//! Callers that read the report (a `Guard`'s outbound layer and reqwest client do, by default)
//! share the service evenly. At most
//! `--max-waiting` requests wait; the next one gets `503 Service Unavailable` at once.
//!
//! Run: `cargo run --example worker_queue --features axum -- [--port 3001] [--workers 4]
//! [--max-waiting 100] [--service-ms 10]`, then call it with
//! `cargo run --example reqwest_client --features reqwest -- --url http://127.0.0.1:3001/work
//! --requests 200 --concurrency 16`, or `curl -i http://127.0.0.1:3001/work`.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use flowguard::vegas::worker_queue::WorkerQueueLayer;

const USAGE: &str = "usage: worker_queue [--port P (default 3001)] [--workers N (default 4)] [--max-waiting N (default 100)] [--service-ms MS (default 10)]";

struct Args {
    port: u16,
    workers: usize,
    max_waiting: usize,
    service_ms: u64,
}

fn parse_args() -> Result<Args, lexopt::Error> {
    use lexopt::prelude::*;
    let mut args = Args {
        port: 3001,
        workers: 4,
        max_waiting: 100,
        service_ms: 10,
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("port") => args.port = parser.value()?.parse()?,
            Long("workers") => args.workers = parser.value()?.parse()?,
            Long("max-waiting") => args.max_waiting = parser.value()?.parse()?,
            Long("service-ms") => args.service_ms = parser.value()?.parse()?,
            Long("help") => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().map_err(|e| format!("{e}\n{USAGE}"))?;
    // Refuses 0 workers with a typed error that says so.
    let workers = WorkerQueueLayer::builder(args.workers)
        .max_waiting(args.max_waiting)
        .build()?;
    let service = Duration::from_millis(args.service_ms);
    let app = Router::new()
        .route(
            "/work",
            get(move || async move {
                tokio::time::sleep(service).await; // the work
                "done\n"
            }),
        )
        // Outermost, so the reported wait is the whole queue.
        .layer(workers.clone());

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!(
        "serving http://{}/work: {} workers, at most {} waiting, {} ms a request",
        listener.local_addr()?,
        workers.workers(),
        args.max_waiting,
        args.service_ms
    );
    axum::serve(listener, app).await?;
    Ok(())
}
