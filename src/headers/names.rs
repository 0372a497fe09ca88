//! The names of the rate-limit fields flowguard writes and reads (`Retry-After` is
//! [`http::header::RETRY_AFTER`]).

use http::HeaderName;

/// `RateLimit-Policy`: the quota policies of the server, one list member per policy
/// (IETF draft-ietf-httpapi-ratelimit-headers, section 3).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// `RateLimit`: the current service limit (remaining quota, seconds until it is restored) of the
/// policies that decided a request (IETF draft, section 4).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `X-RateLimit-Limit`: the legacy field for the quota (the burst of a GCRA quota).
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");

/// `X-RateLimit-Remaining`: the legacy field for the remaining quota.
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");

/// `X-RateLimit-Reset`: the legacy field for when the quota is restored; flowguard writes
/// delay-seconds (see [`LegacyReset`](super::LegacyReset) for reading the other convention).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
