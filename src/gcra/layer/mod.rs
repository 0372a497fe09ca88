//! Tower middleware for inbound HTTP: requests over their key's quota get `429 Too Many Requests`
//! with `Retry-After` and the rate-limit fields of [`crate::headers`] (by default the IETF
//! `RateLimit-Policy` and `RateLimit`); allowed responses carry the rate-limit fields too.
//!
//! ```
//! use flowguard::gcra::layer::QuotaLayer;
//! use flowguard::gcra::{KeyedRateLimiter, Quota};
//! use http::{Request, Response, StatusCode};
//! use std::sync::Arc;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let store = Arc::new(KeyedRateLimiter::<Vec<u8>>::new(Quota::per_minute(1)?));
//! let svc = ServiceBuilder::new()
//!     .layer(QuotaLayer::new(store, |req: &Request<String>| {
//!         req.headers().get("x-api-key").map(|v| v.as_bytes().to_vec())
//!     }))
//!     .service_fn(|_req: Request<String>| async { Ok::<_, std::convert::Infallible>(Response::new(String::from("hi"))) });
//!
//! let req = || Request::builder().header("x-api-key", "k1").body(String::new()).unwrap();
//! let first = svc.clone().oneshot(req()).await?;
//! assert_eq!(first.status(), StatusCode::OK);
//! assert_eq!(first.headers()["ratelimit-policy"], r#""default";q=1;w=60"#);
//! assert_eq!(first.headers()["ratelimit"], r#""default";r=0;t=60"#);
//! let second = svc.clone().oneshot(req()).await?;
//! assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(second.headers()["retry-after"], "60");
//! # Ok(())
//! # }
//! ```

mod key;
#[allow(clippy::module_inception)]
mod layer;
mod service;

pub use key::KeyExtractor;
pub use layer::QuotaLayer;
pub use service::QuotaService;
