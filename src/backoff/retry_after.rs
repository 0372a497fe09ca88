//! [`RetryAfter`]: how long a server asked us to wait, from `Retry-After` (RFC 9110 §10.2.3)
//! or the `t` parameter of the IETF `RateLimit` header.
//!
//! Parsing is pure: the current wall-clock time is an argument.

use std::time::{Duration, SystemTime};

use http::HeaderMap;
use http::header::RETRY_AFTER;

use super::error::HeaderError;
use super::rate_limit::parse_rate_limit_reset;

/// The longest wait accepted from a server: one day.
///
/// A larger `Retry-After` (or a date further ahead) is rejected with
/// [`HeaderError::TooLarge`] rather than capped: capping would make the client come back
/// earlier than the server asked. Retry policies treat it as "do not retry".
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// A validated wait requested by a server, relative to the response.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use flowguard::backoff::RetryAfter;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
/// assert_eq!(RetryAfter::parse(b"120", now)?.delay(), Duration::from_secs(120));
/// let date = RetryAfter::parse(b"Wed, 21 Oct 2015 07:28:30 GMT", now)?;
/// assert_eq!(date.delay(), Duration::from_secs(30));
/// // A date in the past means "now".
/// assert_eq!(RetryAfter::parse(b"Wed, 21 Oct 2015 07:00:00 GMT", now)?.delay(), Duration::ZERO);
/// assert!(RetryAfter::parse(b"-1", now).is_err());
/// # Ok::<(), flowguard::backoff::HeaderError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RetryAfter(Duration);

impl RetryAfter {
    /// A wait of `delay`, rejected when above [`MAX_RETRY_AFTER`].
    pub fn from_delay(delay: Duration) -> Result<Self, HeaderError> {
        if delay > MAX_RETRY_AFTER {
            return Err(HeaderError::TooLarge {
                max: MAX_RETRY_AFTER,
            });
        }
        Ok(Self(delay))
    }

    /// Parses a `Retry-After` value: delay-seconds (`1*DIGIT`) or an HTTP-date in any of
    /// the three forms of RFC 9110 (IMF-fixdate, obsolete RFC 850, asctime).
    ///
    /// Surrounding spaces/tabs are ignored. A date at or before `now` yields a zero wait.
    /// Two-digit RFC 850 years are read as 1970–2069.
    ///
    /// # Errors
    /// [`HeaderError::Negative`] for `-N`, [`HeaderError::TooLarge`] beyond
    /// [`MAX_RETRY_AFTER`], [`HeaderError::Malformed`] for anything else that is not valid.
    pub fn parse(value: &[u8], now: SystemTime) -> Result<Self, HeaderError> {
        let value = value.trim_ascii();
        if let Some(digits) = value.strip_prefix(b"-") {
            if is_digits(digits) {
                return Err(HeaderError::Negative);
            }
            return Err(HeaderError::Malformed);
        }
        if is_digits(value) {
            return Self::from_delay(Duration::from_secs(parse_seconds(value)?));
        }
        let text = std::str::from_utf8(value).map_err(|_| HeaderError::Malformed)?;
        let at = httpdate::parse_http_date(text).map_err(|_| HeaderError::Malformed)?;
        Self::from_delay(at.duration_since(now).unwrap_or(Duration::ZERO))
    }

    /// The wait a response asks for: the larger of its `Retry-After` and the `t` of any
    /// exhausted (`r=0`) `RateLimit` policy, so the client is never early.
    ///
    /// Returns `Ok(None)` when neither header asks for a wait. A malformed header is an error
    /// only when no other header gives a valid wait; a too-large wait is always an error.
    ///
    /// Clock skew: a `Retry-After` date is measured from the earlier of `now` and the
    /// response's `Date` header, so a client whose clock runs ahead of the server's still
    /// waits until the server's time (the `Date` header's whole seconds only lengthen the wait).
    pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> Result<Option<Self>, HeaderError> {
        let mut best: Option<Self> = None;
        let mut invalid: Option<HeaderError> = None;
        let server_now = headers
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok());
        let since = server_now.map_or(now, |server| server.min(now));
        let retry_after = headers
            .get_all(RETRY_AFTER)
            .iter()
            .map(|v| RetryAfter::parse(v.as_bytes(), since).map(Some));
        let rate_limit = headers.get_all("ratelimit").iter().map(|v| {
            parse_rate_limit_reset(v.as_bytes()).and_then(|d| d.map(Self::from_delay).transpose())
        });
        for parsed in retry_after.chain(rate_limit) {
            match parsed {
                Ok(found) => best = best.max(found),
                Err(e @ HeaderError::TooLarge { .. }) => return Err(e),
                Err(e) => invalid = Some(e),
            }
        }
        match (best, invalid) {
            (Some(wait), _) => Ok(Some(wait)),
            (None, Some(e)) => Err(e),
            (None, None) => Ok(None),
        }
    }

    /// The wait.
    pub fn delay(self) -> Duration {
        self.0
    }
}

fn is_digits(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit)
}

/// Parses ASCII digits; an overflow is a too-large wait, not garbage.
pub(super) fn parse_seconds(digits: &[u8]) -> Result<u64, HeaderError> {
    digits.iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(u64::from(d - b'0')))
            .ok_or(HeaderError::TooLarge {
                max: MAX_RETRY_AFTER,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    // Sun, 06 Nov 1994 08:49:37 GMT (the RFC 9110 example date).
    fn rfc_date() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    #[test]
    fn all_three_http_date_forms() {
        let now = rfc_date() - Duration::from_secs(10);
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            let got = RetryAfter::parse(form.as_bytes(), now).map(RetryAfter::delay);
            assert_eq!(got, Ok(Duration::from_secs(10)), "{form}");
        }
    }

    #[test]
    fn seconds_bounds_and_garbage() {
        let now = rfc_date();
        assert_eq!(
            RetryAfter::parse(b" 0\t", now).unwrap().delay(),
            Duration::ZERO
        );
        assert_eq!(
            RetryAfter::parse(b"86400", now).unwrap().delay(),
            MAX_RETRY_AFTER
        );
        let too_large = Err(HeaderError::TooLarge {
            max: MAX_RETRY_AFTER,
        });
        assert_eq!(RetryAfter::parse(b"86401", now), too_large);
        assert_eq!(
            RetryAfter::parse(b"99999999999999999999999999", now),
            too_large
        );
        assert_eq!(
            RetryAfter::parse(b"Mon, 07 Nov 1994 08:49:38 GMT", now),
            too_large
        );
        assert_eq!(RetryAfter::parse(b"-3", now), Err(HeaderError::Negative));
        for bad in [
            &b""[..],
            b"+3",
            b"3.5",
            b"1e3",
            b"soon",
            b"-",
            b"\xff\xfe",
            b"3 4",
        ] {
            assert_eq!(RetryAfter::parse(bad, now), Err(HeaderError::Malformed));
        }
    }

    #[test]
    fn headers_take_the_longest_wait() {
        let now = rfc_date();
        let mut h = HeaderMap::new();
        assert_eq!(RetryAfter::from_headers(&h, now), Ok(None));
        h.insert(RETRY_AFTER, "garbage".parse().unwrap());
        assert_eq!(
            RetryAfter::from_headers(&h, now),
            Err(HeaderError::Malformed)
        );
        h.insert("ratelimit", "\"default\";r=0;t=30".parse().unwrap());
        assert_eq!(
            RetryAfter::from_headers(&h, now)
                .unwrap()
                .map(RetryAfter::delay),
            Some(Duration::from_secs(30))
        );
        h.insert(RETRY_AFTER, "45".parse().unwrap());
        assert_eq!(
            RetryAfter::from_headers(&h, now)
                .unwrap()
                .map(RetryAfter::delay),
            Some(Duration::from_secs(45))
        );
        h.insert(
            RETRY_AFTER,
            "Sun, 06 Nov 1994 08:49:40 GMT".parse().unwrap(),
        );
        assert_eq!(
            RetryAfter::from_headers(&h, now)
                .unwrap()
                .map(RetryAfter::delay),
            Some(Duration::from_secs(30)),
            "the RateLimit wait is longer than 3 s"
        );
        // Our clock runs 60 s ahead of the server's: its date is still honoured in full.
        h.insert(
            http::header::DATE,
            "Sun, 06 Nov 1994 08:48:37 GMT".parse().unwrap(),
        );
        assert_eq!(
            RetryAfter::from_headers(&h, now)
                .unwrap()
                .map(RetryAfter::delay),
            Some(Duration::from_secs(63))
        );
        h.insert(RETRY_AFTER, "100000".parse().unwrap());
        assert!(matches!(
            RetryAfter::from_headers(&h, now),
            Err(HeaderError::TooLarge { .. })
        ));
    }
}
