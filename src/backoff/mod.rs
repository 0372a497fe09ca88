//! Decorrelated-jitter backoff, `Retry-After` parsing, retry loop and retry budget.
//!
//! Clients that get `429` or `503` must back off without synchronising into retry storms,
//! and never come back sooner than the server asked. The pieces, pure cores first:
//!
//! - [`jitter`]: backoff sequences as seedable iterators over `Duration` —
//!   [`DecorrelatedJitter`] (`min(cap, uniform(base, prev * 3))`), [`CapAwareJitter`] (keeps
//!   its jitter at the cap instead of clamping onto it), [`FullJitter`] and [`Exponential`].
//! - [`RetryAfter`] / [`parse_rate_limit_reset`]: the server's requested wait from
//!   `Retry-After` (delay-seconds and all three HTTP-date forms) and the IETF `RateLimit`
//!   header's `t`, bounded by [`MAX_RETRY_AFTER`]; parsing takes `now` as an argument.
//! - [`RetryBudget`]: retries limited to a share of recent requests plus a floor per second.
//! - [`RetryPolicy`] / [`RetryState`]: attempts, deadline (fail fast), budget, and
//!   `max(backoff, Retry-After)` waits; [`RetryPolicy::run`] is the one retry engine on
//!   `tokio::time`, with an [`AttemptHook`] around each attempt ([`RetryPolicy::retry`] without one).
//! - [`HttpRetryPolicy`]: which methods, statuses and errors are retried, used by
//!   `tower` (feature `tower`) and `reqwest-middleware` (feature `reqwest`) glue.
//!
//! ```
//! use std::time::Duration;
//! use flowguard::backoff::{BackoffBounds, CapAwareJitter};
//!
//! let bounds = BackoffBounds::new(Duration::from_millis(100), Duration::from_secs(10))?;
//! let delays: Vec<Duration> = CapAwareJitter::new(bounds, 42).take(5).collect();
//! assert!(delays.iter().all(|d| *d >= bounds.base() && *d <= bounds.cap()));
//! # Ok::<(), flowguard::backoff::ConfigError>(())
//! ```

mod budget;
mod classify;
mod error;
mod http_policy;
pub mod jitter;
mod policy;
mod rate_limit;
mod retry;
mod retry_after;
mod strategy;

#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "tower")]
pub mod tower;

pub use budget::RetryBudget;
pub use classify::{BoxError, ErrorClassifier, TransientErrors, is_transient};
pub use error::{ConfigError, GiveUp, HeaderError, RetryError};
pub use http_policy::{HttpRetryPolicy, IDEMPOTENCY_KEY};
pub use jitter::{BackoffBounds, CapAwareJitter, DecorrelatedJitter, Exponential, FullJitter};
pub use policy::{RetryPolicy, RetryPolicyBuilder, RetryState};
pub use rate_limit::parse_rate_limit_reset;
pub use retry::{AttemptEnd, AttemptHook, Classification, NoHook};
pub use retry_after::{MAX_RETRY_AFTER, RetryAfter};
pub use strategy::{Backoff, BackoffStrategy};
