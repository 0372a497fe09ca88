//! The HTTP rate-limit fields, written by flowguard's servers and read by its clients through
//! the same code: `Retry-After`, the IETF `RateLimit-Policy` and `RateLimit` structured fields
//! (draft-ietf-httpapi-ratelimit-headers), and the legacy `X-RateLimit-*` fields.
//!
//! A denied request under a quota of 10 per second (burst 10), in the default
//! [`HeaderStyle::Ietf`], as `gcra::layer::QuotaLayer` answers it:
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! ratelimit-policy: "default";q=10;w=1
//! ratelimit: "default";r=0;t=1
//! retry-after: 1
//! ```
//!
//! * [`QuotaPolicy`]: a `RateLimit-Policy` member: the policy's name, quota `q`, window `w`
//!   (seconds), partition key `pk`. For GCRA (`Quota::rate_limit_policy`) `q` is the burst `B`
//!   and `w` the time to earn it back, `B * T`, rounded up.
//! * [`ServiceLimit`]: a `RateLimit` member: remaining quota `r` and `t`, which flowguard's
//!   GCRA writes as the seconds until the quota is fully restored, rounded up.
//! * [`RetryAfter`] / [`write_retry_after`]: delay-seconds rounded up when written; delay-seconds
//!   and all three HTTP-date forms when read, bounded by [`MAX_RETRY_AFTER`].
//! * [`PolicyList`]: the policies applied to a request together, as one `RateLimit-Policy` line.
//! * [`HeaderStyle`]: which fields a server writes (IETF by default, legacy, or both), merged so
//!   that stacked rate limits keep each other's fields.
//! * [`requested_wait`]: the wait a response asks a client for, as the retry policies read it.
//! * [`FieldError`]: why a value was rejected.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use flowguard::headers::{
//!     HeaderStyle, PolicyName, QuotaPolicy, ServiceLimit, requested_wait, write_retry_after,
//! };
//! use http::HeaderMap;
//!
//! // The server writes...
//! let policy = QuotaPolicy::new(PolicyName::default(), 10).with_window(Duration::from_secs(1))?;
//! let limit = ServiceLimit::new(PolicyName::default(), 0).with_reset(Duration::from_millis(900))?;
//! let mut headers = HeaderMap::new();
//! HeaderStyle::Ietf.write(&mut headers, &policy, Some(&limit));
//! write_retry_after(&mut headers, Duration::from_millis(100));
//! assert_eq!(headers["ratelimit-policy"], r#""default";q=10;w=1"#);
//! assert_eq!(headers["ratelimit"], r#""default";r=0;t=1"#);
//! assert_eq!(headers["retry-after"], "1");
//!
//! // ...and the client reads the same fields back.
//! let wait = requested_wait(&headers, SystemTime::now(), None)?;
//! assert_eq!(wait.map(|w| w.delay()), Some(Duration::from_secs(1)));
//! assert_eq!(QuotaPolicy::from_headers(&headers)?, vec![policy]);
//! assert_eq!(ServiceLimit::from_headers(&headers)?, vec![limit]);
//! # Ok::<(), flowguard::headers::FieldError>(())
//! ```

mod decimal;
mod error;
mod legacy;
mod name;
mod names;
mod policy;
mod policy_list;
mod retry_after;
mod service_limit;
mod structured;
mod style;
mod wait;

pub(crate) use decimal::Decimal;
pub use error::FieldError;
pub use legacy::LegacyReset;
pub use name::PolicyName;
pub use names::{
    RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
pub use policy::QuotaPolicy;
pub use policy_list::PolicyList;
pub(crate) use retry_after::ceil_secs;
pub use retry_after::{MAX_RETRY_AFTER, RetryAfter, write_retry_after};
pub use service_limit::ServiceLimit;
pub use style::HeaderStyle;
pub use wait::requested_wait;
