//! Decorrelated-jitter backoff, retry loop and retry budget, honouring the server's `Retry-After`.
//!
//! Clients that get `429` or `503` must back off without synchronising into retry storms,
//! and never come back sooner than the server asked. The pieces, pure cores first:
//!
//! - Backoff sequences as seedable iterators over `Duration` —
//!   [`DecorrelatedJitter`] (`min(cap, uniform(base, prev * 3))`), [`CapAwareJitter`] (keeps
//!   its jitter at the cap instead of clamping onto it), [`FullJitter`] and [`Exponential`].
//! - [`RetryBudget`]: retries limited to a share of recent requests plus a floor per second.
//! - [`RetryPolicy`] / [`RetryState`]: attempts, deadline (fail fast), budget, and
//!   `max(backoff, Retry-After)` waits; [`RetryPolicy::run`] is the one retry engine on
//!   `tokio::time`, with an [`AttemptHook`] around each attempt ([`RetryPolicy::retry`] without one).
//! - [`HttpRetryPolicy`]: which methods, statuses and errors are retried, used by
//!   `tower` (feature `tower`) and `reqwest-middleware` (feature `reqwest`) glue; it reads the
//!   server's requested wait (`Retry-After`, the IETF `RateLimit` field, optionally
//!   `X-RateLimit-Reset`) through [`crate::headers`], the module flowguard's servers write
//!   them with.
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
mod jitter;
mod metrics;
mod policy;
mod retry;
mod strategy;

#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "tower")]
pub mod tower;

/// How a retry reads `X-RateLimit-Reset` ([`HttpRetryPolicy::legacy_reset`],
/// `GuardBuilder::legacy_reset`): the [`crate::headers`] type, named here beside the rules that
/// take it.
pub use crate::headers::LegacyReset;
pub use budget::RetryBudget;
pub use classify::{BoxError, ErrorClassifier, TransientErrors, is_transient};
pub use error::{ConfigError, GiveUp, RetryError};
pub use http_policy::{HttpRetryPolicy, IDEMPOTENCY_KEY};
pub use jitter::{
    BackoffBounds, CapAwareJitter, DecorrelatedJitter, Exponential, FullJitter, MAX_CAP,
};
pub use policy::{RetryPolicy, RetryPolicyBuilder, RetryState};
pub use retry::{AttemptEnd, AttemptHook, Classification, NoHook};
pub use strategy::{Backoff, BackoffStrategy};
