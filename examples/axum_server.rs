//! A rate-limited API on axum. `GET /api` allows each API key (header `x-api-key`) 5 requests per
//! second with a burst of 5; requests without a key are limited per client address. Every answer
//! carries the IETF `RateLimit-Policy` and `RateLimit` fields; over quota the answer is `429` with
//! `Retry-After` and a JSON body.
//!
//! Run: `cargo run --example axum_server --features axum -- --port 3000 [--rate R] [--burst B]`
//! (with `--redis redis://127.0.0.1:6379` to share the quota between instances: `--features
//! axum,redis`), then `curl -i -H 'x-api-key: k1' http://127.0.0.1:3000/api`, or
//! `cargo run --example reqwest_client --features reqwest -- --url http://127.0.0.1:3000/api`.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::map_response;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flowguard::Guard;
use flowguard::gcra::Quota;

const USAGE: &str = "usage: axum_server [--port P] [--redis URL] [--rate R] [--burst B]";

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

/// The key a request is limited by: its API key, or else the address it came from.
fn client_key(request: &Request) -> Option<Vec<u8>> {
    if let Some(api_key) = request.headers().get("x-api-key") {
        return Some([b"key:", api_key.as_bytes()].concat());
    }
    let peer = match request.extensions().get::<ConnectInfo<SocketAddr>>() {
        Some(ConnectInfo(peer)) => peer.ip().to_string(),
        None => "unknown".to_owned(), // served without connect info: one shared quota
    };
    Some(format!("ip:{peer}").into_bytes())
}

/// Gives a `429` a JSON body saying when to come back.
async fn json_429(response: Response) -> Response {
    if response.status() != StatusCode::TOO_MANY_REQUESTS {
        return response;
    }
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(1);
    let (mut parts, _) = response.into_parts();
    let json = HeaderValue::from_static("application/json");
    parts.headers.insert(header::CONTENT_TYPE, json);
    let body = format!(r#"{{"error":"rate_limited","retry_after_seconds":{retry_after}}}"#);
    Response::from_parts(parts, body.into())
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

    let app = Router::new()
        .route("/api", get(api))
        .layer(guard.inbound_layer(client_key)?)
        .layer(map_response(json_429));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}
