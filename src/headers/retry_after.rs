//! [`RetryAfter`]: the `Retry-After` field (RFC 9110 §10.2.3), written as delay-seconds rounded
//! up and parsed in all its forms. Parsing is pure: the current wall-clock time is an argument.

use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue};

use super::error::FieldError;

const FIELD: &str = "retry-after";

/// The longest wait accepted from a server: one day.
///
/// A larger `Retry-After` (or a date further ahead, or a `RateLimit` reset) is rejected with
/// [`FieldError::TooLarge`] rather than capped: capping would make the client come back
/// earlier than the server asked. Retry policies treat it as "do not retry".
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// A validated wait requested by a server, relative to the response.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use flowguard::headers::RetryAfter;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
/// assert_eq!(RetryAfter::parse(b"120", now)?.delay(), Duration::from_secs(120));
/// let date = RetryAfter::parse(b"Wed, 21 Oct 2015 07:28:30 GMT", now)?;
/// assert_eq!(date.delay(), Duration::from_secs(30));
/// // A date in the past means "now".
/// assert_eq!(RetryAfter::parse(b"Wed, 21 Oct 2015 07:00:00 GMT", now)?.delay(), Duration::ZERO);
/// assert!(RetryAfter::parse(b"-1", now).is_err());
/// # Ok::<(), flowguard::headers::FieldError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RetryAfter(Duration);

impl RetryAfter {
    /// A wait of `delay`; [`FieldError::TooLarge`] above [`MAX_RETRY_AFTER`].
    pub fn from_delay(delay: Duration) -> Result<Self, FieldError> {
        if delay > MAX_RETRY_AFTER {
            return Err(FieldError::TooLarge {
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
    /// [`FieldError::Negative`] for `-N`, [`FieldError::TooLarge`] beyond
    /// [`MAX_RETRY_AFTER`], [`FieldError::Syntax`] for anything else that is not valid.
    pub fn parse(value: &[u8], now: SystemTime) -> Result<Self, FieldError> {
        let value = value.trim_ascii();
        let syntax = FieldError::Syntax {
            field: FIELD,
            at: 0,
        };
        if let Some(digits) = value.strip_prefix(b"-") {
            return match parse_delay_seconds(FIELD, digits) {
                Ok(_) | Err(FieldError::TooLarge { .. }) => {
                    Err(FieldError::Negative { field: FIELD })
                }
                Err(_) => Err(syntax),
            };
        }
        if value.first().is_some_and(u8::is_ascii_digit) {
            return Self::from_delay(Duration::from_secs(parse_delay_seconds(FIELD, value)?));
        }
        let text = std::str::from_utf8(value).map_err(|_| syntax.clone())?;
        let at = httpdate::parse_http_date(text).map_err(|_| syntax)?;
        Self::from_delay(at.duration_since(now).unwrap_or(Duration::ZERO))
    }

    /// The wait.
    pub fn delay(self) -> Duration {
        self.0
    }
}

/// Writes `Retry-After: <delay-seconds>` with `wait` rounded **up** to whole seconds, so a
/// client that waits exactly that long is not early.
///
/// An earlier `Retry-After` of more delay-seconds is kept (two stacked rate limits: the
/// client must wait for both); any other earlier value is replaced.
///
/// ```
/// use std::time::Duration;
/// use flowguard::headers::write_retry_after;
/// use http::HeaderMap;
///
/// let mut headers = HeaderMap::new();
/// write_retry_after(&mut headers, Duration::from_millis(1500));
/// assert_eq!(headers["retry-after"], "2");
/// write_retry_after(&mut headers, Duration::from_secs(1));
/// assert_eq!(headers["retry-after"], "2", "the longer wait stays");
/// ```
pub fn write_retry_after(headers: &mut HeaderMap, wait: Duration) {
    let secs = ceil_secs(wait);
    let longer = headers
        .get(RETRY_AFTER)
        .and_then(|v| parse_delay_seconds(FIELD, v.as_bytes().trim_ascii()).ok())
        .is_some_and(|existing| existing >= secs);
    if !longer {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Parses delay-seconds (`1*DIGIT`) of `field`; an overflow is a too-large wait, not garbage.
pub(super) fn parse_delay_seconds(field: &'static str, digits: &[u8]) -> Result<u64, FieldError> {
    if let Some(at) = digits.iter().position(|d| !d.is_ascii_digit()) {
        return Err(FieldError::Syntax { field, at });
    }
    if digits.is_empty() {
        return Err(FieldError::Syntax { field, at: 0 });
    }
    digits.iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(u64::from(d - b'0')))
            .ok_or(FieldError::TooLarge {
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
        let too_large = Err(FieldError::TooLarge {
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
        let negative = Err(FieldError::Negative { field: FIELD });
        assert_eq!(RetryAfter::parse(b"-3", now), negative);
        assert_eq!(
            RetryAfter::parse(b"-99999999999999999999999", now),
            negative
        );
        for bad in [
            &b""[..],
            b"+3",
            b"3.5",
            b"1e3",
            b"soon",
            b"-",
            b"-x",
            b"\xff\xfe",
            b"3 4",
        ] {
            assert!(
                matches!(
                    RetryAfter::parse(bad, now),
                    Err(FieldError::Syntax { field: FIELD, .. })
                ),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn writes_delay_seconds_rounded_up_and_keeps_the_longer_wait() {
        let mut h = HeaderMap::new();
        write_retry_after(&mut h, Duration::ZERO);
        assert_eq!(h[RETRY_AFTER], "0");
        write_retry_after(&mut h, Duration::from_nanos(1));
        assert_eq!(h[RETRY_AFTER], "1");
        write_retry_after(&mut h, Duration::from_secs(30));
        write_retry_after(&mut h, Duration::from_secs(29));
        assert_eq!(h[RETRY_AFTER], "30");
        h.insert(RETRY_AFTER, HeaderValue::from_static("garbage"));
        write_retry_after(&mut h, Duration::from_secs(5));
        assert_eq!(h[RETRY_AFTER], "5");
        assert_eq!(h.get_all(RETRY_AFTER).iter().count(), 1);
    }
}
