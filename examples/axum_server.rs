//! A rate-limited API on axum. `GET /api` allows each API key (header `x-api-key`) 5 requests per
//! second with a burst of 5; requests without a key are limited per peer address. Every answer
//! carries the IETF `RateLimit-Policy` and `RateLimit` fields; over quota the answer is `429`
//! with `Retry-After` and a JSON body (`{"error":"too_many_requests",...,"retry_after":1}`).
//!
//! Run: `cargo run --example axum_server --features axum -- --port 3000 [--redis URL] [--rate R]
//! [--burst B]` (`--port` defaults to 3000; with `--redis redis://127.0.0.1:6379` the quota is
//! shared between instances: `--features axum,redis`), then
//! `curl -i -H 'x-api-key: k1' http://127.0.0.1:3000/api`, or
//! `cargo run --example reqwest_client --features reqwest -- --url http://127.0.0.1:3000/api`.

use std::net::SocketAddr;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use flowguard::Guard;
use flowguard::gcra::Quota;
use flowguard::gcra::layer::{HeaderKey, PeerIpKey};

const USAGE: &str =
    "usage: axum_server [--port P (default 3000)] [--redis URL] [--rate R] [--burst B]";

struct Args {
    port: u16,
    redis: Option<String>,
    rate: u32,
    burst: u32,
}

fn parse_args() -> Result<Args, lexopt::Error> {
    use lexopt::prelude::*;
    let mut args = Args {
        port: 3000,
        redis: None,
        rate: 5,
        burst: 5,
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("port") => args.port = parser.value()?.parse()?,
            Long("redis") => args.redis = Some(parser.value()?.string()?),
            Long("rate") => args.rate = parser.value()?.parse()?,
            Long("burst") => args.burst = parser.value()?.parse()?,
            Long("help") => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    Ok(args)
}

async fn api() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        r#"{"message":"hello"}"#,
    )
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args().map_err(|e| format!("{e}\n{USAGE}"))?;
    let quota = Quota::per_second(args.rate)?.with_burst(args.burst)?;
    let guard = Guard::builder().quota(quota);
    #[cfg(feature = "redis")]
    let guard = match &args.redis {
        Some(url) => guard.redis(url),
        None => guard,
    };
    #[cfg(not(feature = "redis"))]
    if args.redis.is_some() {
        return Err("--redis needs the `redis` feature: --features axum,redis".into());
    }
    let guard = guard.build().await?;

    // The API key, else the peer address (from `ConnectInfo`): each has its own quota.
    let key = HeaderKey::new("x-api-key")?.or(PeerIpKey::new());
    let app = Router::new()
        .route("/api", get(api))
        .layer(guard.inbound_layer(key)?);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
