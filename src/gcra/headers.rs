//! Rate-limit HTTP headers for a [`Decision`]: `RateLimit-Limit`, `RateLimit-Remaining`,
//! `RateLimit-Reset` and, when denied, `Retry-After`.

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use super::decision::Decision;

/// `RateLimit-Limit`: the burst, the most requests a client can make at once.
pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining`: requests that would be allowed right now.
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset`: whole seconds (rounded up) until the full burst is available again.
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");

impl Decision {
    /// Writes the rate-limit headers of this decision into `headers`, replacing earlier values.
    ///
    /// `Retry-After` (delay-seconds, rounded **up** so a client that waits exactly that long is
    /// allowed) is only written for a denied decision.
    ///
    /// ```
    /// use flowguard::gcra::{ManualClock, Quota, RateLimiter};
    /// use http::HeaderMap;
    ///
    /// let limiter = RateLimiter::with_clock(Quota::per_minute(2)?, ManualClock::new());
    /// limiter.check_n(2)?;
    /// let mut headers = HeaderMap::new();
    /// limiter.check()?.write_headers(&mut headers);
    /// assert_eq!(headers["retry-after"], "30");
    /// assert_eq!(headers["ratelimit-limit"], "2");
    /// assert_eq!(headers["ratelimit-remaining"], "0");
    /// assert_eq!(headers["ratelimit-reset"], "60");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        headers.insert(RATELIMIT_LIMIT, HeaderValue::from(self.limit));
        headers.insert(RATELIMIT_REMAINING, HeaderValue::from(self.remaining));
        headers.insert(RATELIMIT_RESET, HeaderValue::from(self.reset_after_secs()));
        match self.retry_after_secs() {
            Some(secs) => headers.insert(RETRY_AFTER, HeaderValue::from(secs)),
            None => headers.remove(RETRY_AFTER),
        };
    }
}
