//! GCRA rate limiting: exact quotas with one scalar of state per key.
//!
//! The Generic Cell Rate Algorithm keeps, per key, one number: the *Theoretical Arrival Time*
//! (TAT), the time at which the key would be back to empty if it sent nothing more. A request of
//! cost `n` is allowed when pushing the TAT forward by `n` emission intervals keeps it within the
//! burst window of now. The emission interval `period / rate` is kept exactly, as a fraction, in
//! every store (see [`Gcra`]): no quota is ever exceeded by rounding.
//!
//! * [`Quota`]: rate per period and burst, validated.
//! * [`Gcra`]: the pure decision rule (stored TAT, now, cost) → [`Decision`] + new TAT, in exact
//!   [`Ticks`] (whole ticks and a fraction of a tick).
//! * [`RateLimiter`]: one key, lock-free. [`KeyedRateLimiter`]: many keys, bounded memory.
//! * [`Clock`]: [`MonotonicClock`] for production, [`ManualClock`] for tests and simulations.
//!
//! ```
//! use flowguard::gcra::{KeyedRateLimiter, ManualClock, Quota};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let limiter = KeyedRateLimiter::builder(Quota::per_second(5)?)
//!     .clock(clock.clone())
//!     .build::<u64>()?;
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
mod decision;
mod error;
mod headers;
mod keyed;
#[cfg(feature = "tower")]
pub mod layer;
mod limit_key;
mod limiter;
mod quota;
#[cfg(feature = "redis")]
pub mod redis;
mod store;
mod table;
pub mod two_tier;

pub use crate::clock::{Clock, ManualClock, MonotonicClock};
pub use algorithm::{Gcra, Step, Ticks};
pub use decision::{Decision, Degradation};
pub use error::{ConfigError, GcraError};
pub use keyed::{
    DEFAULT_MAX_KEYS, KeyedRateLimiter, KeyedRateLimiterBuilder, MAX_HEAP_BYTES_PER_KEY,
    MAX_HEAP_FIXED_BYTES, Overflow,
};
pub use limit_key::{FixedSizeKey, LimitKey, MAX_VERBATIM_KEY_LEN};
pub use limiter::RateLimiter;
pub use quota::{MAX_WINDOW, Quota, QuotaError};
#[cfg(feature = "redis")]
pub use redis::{FailurePolicy, RedisRateLimiter, RedisStore};
pub use store::{BoxFuture, RateLimitStore};
