//! GCRA rate limiting: exact quotas with one scalar of state per key.
//!
//! The Generic Cell Rate Algorithm keeps, per key, one number: the *Theoretical Arrival Time*
//! (TAT), the time at which the key would be back to empty if it sent nothing more. A request of
//! cost `n` is allowed when pushing the TAT forward by `n` emission intervals keeps it within the
//! burst window of now. The emission interval `period / rate` is kept exactly, as a fraction, in
//! every store (see [`Gcra`]): no quota is ever exceeded by rounding.
//!
//! The pure core (no I/O, time is an argument or an injected [`Clock`](crate::clock::Clock)):
//!
//! * [`Quota`]: rate per period and burst, validated.
//! * [`Gcra`]: the pure decision rule (stored TAT, now, cost) → [`Decision`] + new TAT, in exact
//!   [`Ticks`] (whole ticks and a fraction of a tick).
//! * [`RateLimiter`]: one key, lock-free. [`KeyedRateLimiter`]: many keys, bounded memory.
//! * [`GcraError`]: what the core reports instead of a decision; [`ConfigError`]: what a builder
//!   of this module reports.
//!
//! On top of it:
//!
//! * [`KeyedLimit`]: the async face every keyed limiter shares (in memory, remote, two-tier), so
//!   that middleware and [`Guard`](crate::Guard) take any of them; its error [`CheckError`] is the
//!   core's or a store's.
//! * [`remote`]: state shared by every instance through a store, and the one limiter that applies
//!   a failure policy when the store does not answer; [`redis`] (feature `redis`) is that store.
//! * [`two_tier`]: tokens reserved from a shared quota in batches and spent locally.
//! * `layer` (feature `tower`): the inbound HTTP middleware.
//!
//! ```
//! use flowguard::clock::ManualClock;
//! use flowguard::gcra::{KeyedRateLimiter, Quota};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let limiter = KeyedRateLimiter::<u64>::builder(Quota::per_second(5)?)
//!     .clock(clock.clone())
//!     .build()?;
//! for _ in 0..5 {
//!     assert!(limiter.check_key(&42)?.allowed);
//! }
//! let denied = limiter.check_key(&42)?;
//! assert_eq!(denied.retry_after, Some(Duration::from_millis(200)));
//! clock.advance(Duration::from_millis(200));
//! assert!(limiter.check_key(&42)?.allowed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod algorithm;
mod cell;
mod check;
mod decision;
mod error;
mod headers;
mod keyed;
#[cfg(feature = "tower")]
pub mod layer;
mod limit_key;
mod limiter;
pub(crate) mod observe;
mod quota;
#[cfg(feature = "redis")]
pub mod redis;
pub mod remote;
mod share;
mod table;
pub mod two_tier;

pub use algorithm::{Gcra, Step, Ticks};
pub use check::{
    CheckError, CheckFuture, Decisions, Demand, KeyedLimit, LimitSet, LimitSpec, MemoryLimitSet,
    MemoryLimitSetBuilder, SeparateLimits, SetError, SetFuture,
};
pub use decision::{Decision, Degradation, DegradedReason};
pub use error::{ConfigError, GcraError};
pub use keyed::{
    BytesKey, DEFAULT_MAX_KEYS, KeyedRateLimiter, KeyedRateLimiterBuilder, MAX_HEAP_BYTES_PER_KEY,
    MAX_HEAP_FIXED_BYTES, Overflow,
};
pub use limit_key::{FixedSizeKey, FromKeyBytes, LimitKey, MAX_VERBATIM_KEY_LEN};
pub use limiter::{RateLimiter, RateLimiterBuilder};
pub use quota::{MAX_WINDOW, Quota, QuotaError};
pub use share::LocalShare;
