//! [`Guard`]: the three protections behind one API — a quota for inbound requests, an adaptive
//! concurrency limit for outbound calls, and polite retries for those calls — built by one
//! [`GuardBuilder`] and handed out as tower layers and a reqwest client.
//!
//! One concept per file: `guard` (the guard, [`Guard::admit`] and [`Guard::call`]), `builder`,
//! `store` (where the quota is kept), `redis_url` (the store URL), `hook` (the permit per attempt
//! of [`Guard::call`]), `layers` (tower) and `middleware` (reqwest), `error`.

mod builder;
mod error;
// The guard lives in `guard.rs`, beside its builder, as `vegas::layer` keeps its layer.
#[allow(clippy::module_inception)]
mod guard;
mod hook;
#[cfg(feature = "tower")]
mod layers;
#[cfg(feature = "reqwest")]
mod middleware;
#[cfg(feature = "redis")]
mod redis_url;
mod store;

pub use builder::GuardBuilder;
#[cfg(feature = "tower")]
pub use error::QuotaLayerError;
pub use error::{AdmitError, BuildError, NoRateLimit};
pub use guard::{Guard, GuardError};
#[cfg(feature = "redis")]
pub use redis_url::{RedisTarget, RedisUrlError};
