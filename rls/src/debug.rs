//! The debug listener (`--debug-listen`, by default `127.0.0.1:6070`, envoyproxy/ratelimit's
//! debug port): plain HTTP/1 for operators and scrapers, apart from the gRPC port.
//!
//! | path | answers |
//! |---|---|
//! | `GET /metrics` | every metric in the Prometheus text format |
//! | `GET /healthcheck` | `200 OK` while serving; `503` once shutting down, and while the configured Redis does not answer or has not answered the first probe yet (see [`crate::redis_health`]: a probe every second on a connection of its own; the body names the Redis host and the `--on-redis-failure` policy answering meanwhile) |
//! | `GET /rlconfig` | the configuration in force, one line per rule |
//! | `POST /json` | `ShouldRateLimit` for clients without gRPC (see [`crate::json`]) |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::json;
use crate::redis_health::RedisHealth;
use crate::rules::Rules;
use crate::service::RateLimiter;

/// How often the exporter's histograms are drained, whether or not anyone scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Whether the service is serving: `true` from start until shutdown begins. Cheap to clone;
/// every clone shares the state.
#[derive(Clone, Debug)]
pub struct Health(Arc<AtomicBool>);

impl Health {
    /// Serving.
    pub fn serving() -> Health {
        Health(Arc::new(AtomicBool::new(true)))
    }

    /// Marks the service as shutting down: `/healthcheck` answers `503` from now on.
    pub fn stop(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether the service is serving.
    pub fn is_serving(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// What the debug endpoints read.
#[derive(Clone, Debug)]
pub struct Debug {
    /// Renders `/metrics`; `None` answers `/metrics` with `404` (no exporter installed).
    pub metrics: Option<PrometheusHandle>,
    /// The state `/healthcheck` reports.
    pub health: Health,
    /// Whether the configured Redis answers, also reported by `/healthcheck`; `None` in memory.
    pub redis: Option<RedisHealth>,
    /// The rules in force, for `/rlconfig`.
    pub rules: Rules,
    /// The service `/json` asks.
    pub service: RateLimiter,
}

/// The debug endpoints as an axum router.
pub fn router(debug: Debug) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthcheck", get(healthcheck))
        .route("/rlconfig", get(rlconfig))
        .route("/json", post(should_rate_limit))
        .with_state(Arc::new(debug))
}

/// Serves [`router`] on `listener` until `shutdown` completes, and drains the exporter's
/// histograms every few seconds meanwhile.
pub async fn serve(
    listener: tokio::net::TcpListener,
    debug: Debug,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Some(handle) = debug.metrics.clone() {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(UPKEEP_EVERY);
            loop {
                ticks.tick().await;
                handle.run_upkeep();
            }
        });
    }
    axum::serve(listener, router(debug))
        .with_graceful_shutdown(shutdown)
        .await
}

type Shared = State<Arc<Debug>>;

async fn metrics(State(debug): Shared) -> Response {
    match &debug.metrics {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no metrics exporter is installed\n").into_response(),
    }
}

async fn healthcheck(State(debug): Shared) -> Response {
    if !debug.health.is_serving() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    match debug.redis.as_ref().and_then(RedisHealth::problem) {
        Some(problem) => (StatusCode::SERVICE_UNAVAILABLE, format!("{problem}\n")).into_response(),
        None => (StatusCode::OK, "OK\n").into_response(),
    }
}

async fn rlconfig(State(debug): Shared) -> String {
    debug.rules.current().config().dump()
}

async fn should_rate_limit(State(debug): Shared, body: Bytes) -> Response {
    let request = match json::request(&body) {
        Ok(request) => request,
        Err(problem) => return (StatusCode::BAD_REQUEST, format!("{problem}\n")).into_response(),
    };
    match debug.service.decide(&request).await {
        Ok(response) => {
            let (status, body) = json::response(&response);
            (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
        }
        Err(status) => {
            let code = match status.code() {
                tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (code, format!("{}\n", status.message())).into_response()
        }
    }
}
