//! Tower middleware for inbound HTTP quotas (feature `tower`): each request counts against
//! every policy of its tier (per key, global), is allowed only if all allow, and a denial spends
//! nothing. Refused requests get `429 Too Many Requests` with `Retry-After` and a short JSON
//! body; every response carries the rate-limit fields of [`crate::headers`] (by default the IETF
//! `RateLimit-Policy` and `RateLimit`); the deciding [`Decision`](crate::gcra::Decision)
//! reaches the handler in the request's extensions.
//!
//! * Keys: [`HeaderKey`] (an API key), [`PeerIpKey`] (axum's `ConnectInfo` with feature `axum`,
//!   or a `SocketAddr` extension), [`XForwardedForKey`] and [`ForwardedKey`] behind trusted
//!   proxies, [`GlobalKey`], or any closure ([`KeyExtractor`]); the first of two that has a key
//!   with [`Or`] (`HeaderKey::new("x-api-key")?.or(PeerIpKey::new())`); a cost and a tier per
//!   request with [`KeyExtractor::with_cost`] and [`KeyExtractor::with_tier`]. Requests without
//!   a key: [`MissingKey`] (by default they share one quota).
//! * Policies: [`Policy::per_key`] and [`Policy::global`], in tiers
//!   ([`QuotaLayerBuilder::tier`]), kept in one [`LimitSet`](crate::gcra::LimitSet): in memory
//!   by default ([`MemoryLimitSet`](crate::gcra::MemoryLimitSet), atomic), or any other
//!   ([`QuotaLayerBuilder::build_with`]); [`QuotaLayer::new`] wraps one existing keyed limiter.
//! * Answers: [`Refusal`] and [`RefusalResponse`] ([`JsonRefusal`] by default, [`GrpcRefusal`]
//!   for gRPC servers such as tonic); shadow mode ([`QuotaLayer::shadow`]) decides and reports
//!   without refusing.
//!
//! In axum (`Router::layer`, or `route_layer` for matched routes only):
//!
//! ```
//! use axum::{Extension, Router, routing::get};
//! use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
//! use flowguard::gcra::{Decision, Quota};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let quotas = QuotaLayer::builder(HeaderKey::new("x-api-key")?)
//!     .policy(Policy::per_key("per-second", Quota::per_second(10)?))
//!     .policy(Policy::per_key("per-day", Quota::new(10_000, Duration::from_secs(86_400))?))
//!     .policy(Policy::global("global", Quota::per_second(5_000)?))
//!     .build()?;
//! let app: Router = Router::new()
//!     .route("/api", get(|Extension(d): Extension<Decision>| async move {
//!         // `None` when a shared store failed open or closed: no numbers are made up.
//!         d.remaining().map_or("quota unknown".to_owned(), |left| format!("{left} left"))
//!     }))
//!     .layer(quotas);
//! # Ok(())
//! # }
//! ```
//!
//! With tower directly:
//!
//! ```
//! use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
//! use flowguard::gcra::Quota;
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let layer = QuotaLayer::builder(HeaderKey::new("x-api-key")?)
//!     .policy(Policy::per_key("per-minute", Quota::per_minute(1)?))
//!     .build()?;
//! let svc = ServiceBuilder::new()
//!     .layer(layer)
//!     .service_fn(|_req: Request<()>| async { Ok::<_, std::convert::Infallible>(Response::new(String::from("hi"))) });
//!
//! let req = || Request::builder().header("x-api-key", "k1").body(()).unwrap();
//! let first = svc.clone().oneshot(req()).await?;
//! assert_eq!(first.status(), StatusCode::OK);
//! assert_eq!(first.headers()["ratelimit-policy"], r#""per-minute";q=1;w=60"#);
//! assert_eq!(first.headers()["ratelimit"], r#""per-minute";r=0;t=60"#);
//! let second = svc.clone().oneshot(req()).await?;
//! assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(second.headers()["retry-after"], "60");
//! assert_eq!(second.headers()["content-type"], "application/json");
//! # Ok(())
//! # }
//! ```

mod answer;
mod builder;
mod client_ip;
mod config;
mod future;
mod grpc;
mod key;
#[allow(clippy::module_inception)]
mod layer;
mod policy;
mod refusal;
mod service;

pub use builder::{LayerBuildError, QuotaLayerBuilder};
pub use client_ip::{ForwardedKey, NO_PEER_ADDRESS, PeerIpKey, XForwardedForKey};
pub use future::ResponseFuture;
pub use grpc::GrpcRefusal;
pub use key::{GlobalKey, HeaderKey, KeyExtractor, Or, RequestKey, WithCost, WithTier};
pub use layer::QuotaLayer;
pub use policy::{MissingKey, Policy, Scope};
pub use refusal::{JsonRefusal, Refusal, RefusalKind, RefusalResponse};
pub use service::QuotaService;
