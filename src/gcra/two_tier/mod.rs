//! Two-tier GCRA: each instance reserves tokens from the shared (Redis) quota in batches and
//! spends them locally, so most decisions need no round trip. Built on [`KeyedLimit`]: the shared
//! quota is any keyed limiter, typically the [remote](crate::gcra::remote) limiter over Redis.
//!
//! ```
//! use flowguard::gcra::two_tier::TwoTierLimiter;
//! use flowguard::gcra::{KeyedRateLimiter, Quota};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let quota = Quota::per_second(1000)?.with_burst(100)?;
//! let shared = KeyedRateLimiter::<Vec<u8>>::new(quota);
//! let limiter = TwoTierLimiter::builder(shared, 50)
//!     .refill_below(5)
//!     .max_token_age(Duration::from_secs(1))
//!     .build()?;
//! assert_eq!((limiter.batch(), limiter.refill_below()), (50, 5));
//! // A batch above the burst could never be granted: a typed error, not a silent clamp.
//! let shared = KeyedRateLimiter::<Vec<u8>>::new(quota);
//! assert!(TwoTierLimiter::builder(shared, 101).build().is_err());
//! # Ok(())
//! # }
//! ```
//!
//! [`KeyedLimit`]: crate::gcra::KeyedLimit
//!
//! How it works, per key:
//!
//! * A request of cost `n <= batch` is decided from the local reservoir. When the reservoir falls
//!   below the refill threshold (default 20% of the batch), **one** background reservation of
//!   `batch` tokens is started (never more than one in flight per key). When it is empty, one
//!   caller reserves inline and concurrent callers wait for that same reservation.
//! * A denied reservation makes local decisions deny with the `retry_after` the store gave,
//!   without asking the store again until then.
//! * Reserved tokens stand for time slots of the global quota; they are dropped once they are
//!   `max_token_age` old (default: the quota's burst window `B*T`, the time the global quota
//!   takes to forget a whole burst), so an idle instance cannot hoard them.
//! * When the shared store fails, the shared limiter's failure policy answers the reservation
//!   (for the [remote](crate::gcra::remote) limiter: fail open, fail
//!   closed, local fallback); tokens already on hand keep being served.
//! * A background refill answered by the failure policy while tokens are still on hand (the
//!   store did not answer in time: it is down, or the client was too busy to read its reply) is
//!   set aside and counted in `flowguard_two_tier_late_refills_total`: the tokens on hand keep
//!   being served as the store granted them, not degraded, and the next take below the
//!   threshold asks again. Only a reservoir that runs dry, whose caller reserves inline and
//!   waits, takes the failure policy's answer; those decisions are the degraded ones.
//! * Reservoirs are kept in a bounded table like the in-memory limiter's; idle ones are reclaimed.
//!
//! What a [`Decision`](crate::gcra::Decision) means here: `allowed`, `retry_after` and `limit`
//! (the global burst) as usual; **`remaining` counts the tokens left in this instance's
//! reservoir**, not globally; `reset_after` is the store's answer to the last reservation, aged
//! by the local clock.
//!
//! Accuracy: the shared store never grants more than `B + t/T` tokens in any window of length `t`
//! (plus the round-trip time), and every token an instance spends was granted to it. An instance
//! holds at most `batch + refill_below` unspent tokens, so in any window at most
//! `B + t/T + N * (batch + refill_below)` tokens are admitted across `N` instances; a run that
//! starts from empty reservoirs admits at most `B + t/T`.

mod config;
mod limiter;
mod reservoir;

pub use limiter::{TwoTierLimiter, TwoTierLimiterBuilder};
