//! The legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset` fields, for
//! clients that know only those: one policy at a time, plain integers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

use super::error::FieldError;
use super::names::{X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET};
use super::policy::QuotaPolicy;
use super::retry_after::{RetryAfter, parse_delay_seconds};
use super::service_limit::ServiceLimit;

/// How a client reads `X-RateLimit-Reset`, which servers write in two ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LegacyReset {
    /// Seconds until the quota is restored, as flowguard (in [`HeaderStyle::Legacy`]) and most
    /// servers write it.
    ///
    /// [`HeaderStyle::Legacy`]: super::HeaderStyle::Legacy
    DelaySeconds,
    /// The Unix time in seconds at which the quota is restored (GitHub's convention).
    UnixSeconds,
}

impl LegacyReset {
    /// The wait the legacy fields ask for: `X-RateLimit-Reset` read this way when
    /// `X-RateLimit-Remaining` is `0` or absent; `Ok(None)` without a reset or with quota left.
    /// A Unix time at or before `now` is no wait.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use flowguard::headers::LegacyReset;
    /// use http::HeaderMap;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-ratelimit-remaining", "0".parse()?);
    /// headers.insert("x-ratelimit-reset", "1000000030".parse()?);
    /// let now = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    /// let wait = LegacyReset::UnixSeconds.wait(&headers, now)?.map(|w| w.delay());
    /// assert_eq!(wait, Some(Duration::from_secs(30)));
    /// headers.insert("x-ratelimit-reset", "30".parse()?);
    /// let wait = LegacyReset::DelaySeconds.wait(&headers, now)?.map(|w| w.delay());
    /// assert_eq!(wait, Some(Duration::from_secs(30)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`FieldError::Syntax`] for a remaining count or reset that is not a non-negative integer
    /// ([`FieldError::Negative`] for a negative one), [`FieldError::TooLarge`] for a wait beyond
    /// [`MAX_RETRY_AFTER`](super::MAX_RETRY_AFTER).
    pub fn wait(
        self,
        headers: &HeaderMap,
        now: SystemTime,
    ) -> Result<Option<RetryAfter>, FieldError> {
        if let Some(remaining) = headers.get(X_RATELIMIT_REMAINING)
            && integer("x-ratelimit-remaining", remaining)? > 0
        {
            return Ok(None);
        }
        let Some(reset) = headers.get(X_RATELIMIT_RESET) else {
            return Ok(None);
        };
        let reset = integer("x-ratelimit-reset", reset)?;
        let wait = match self {
            LegacyReset::DelaySeconds => Duration::from_secs(reset),
            LegacyReset::UnixSeconds => UNIX_EPOCH
                .checked_add(Duration::from_secs(reset))
                .map_or(Duration::MAX, |at| {
                    at.duration_since(now).unwrap_or(Duration::ZERO)
                }),
        };
        RetryAfter::from_delay(wait).map(Some)
    }
}

/// A non-negative integer field value.
fn integer(field: &'static str, value: &HeaderValue) -> Result<u64, FieldError> {
    let value = value.as_bytes().trim_ascii();
    if value.first() == Some(&b'-') && value.len() > 1 && value[1..].iter().all(u8::is_ascii_digit)
    {
        return Err(FieldError::Negative { field });
    }
    match parse_delay_seconds(field, value) {
        Err(FieldError::TooLarge { .. }) => Err(FieldError::Syntax { field, at: 0 }),
        other => other,
    }
}

/// Writes the legacy trio for `policy` and, when known, its current `limit` (`X-RateLimit-Reset`
/// only when the limit has a reset).
///
/// The fields hold one policy: when another one already wrote them (stacked rate limits), the
/// one closer to exhaustion stays, as is the convention for these fields: the new trio replaces
/// the old only when the old has no `X-RateLimit-Remaining` or a larger one. Without a current
/// limit only `X-RateLimit-Limit` is written, and only if absent.
pub(super) fn write(headers: &mut HeaderMap, policy: &QuotaPolicy, limit: Option<&ServiceLimit>) {
    let existing = headers
        .get(X_RATELIMIT_REMAINING)
        .and_then(|v| integer("x-ratelimit-remaining", v).ok());
    let Some(limit) = limit else {
        if !headers.contains_key(X_RATELIMIT_LIMIT) {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(policy.quota()));
        }
        return;
    };
    if existing.is_some_and(|old| old <= limit.remaining()) {
        return;
    }
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(policy.quota()));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(limit.remaining()));
    match limit.reset() {
        Some(reset) => headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset.as_secs())),
        None => headers.remove(X_RATELIMIT_RESET),
    };
}
