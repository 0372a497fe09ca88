//! [`requested_wait`]: how long a response asks a client to wait before it repeats the request.

use std::time::SystemTime;

use http::HeaderMap;
use http::header::{DATE, RETRY_AFTER};

use super::error::FieldError;
use super::legacy::LegacyReset;
use super::retry_after::RetryAfter;
use super::service_limit::ServiceLimit;

/// The wait a response (received at wall-clock time `now`) asks for, from the first of these
/// that gives one:
///
/// 1. `Retry-After`, in any RFC 9110 form (the largest, if the field is repeated). The draft
///    says it takes precedence over `RateLimit`, and flowguard's server writes it as the exact
///    wait, rounded up, after which the request passes.
/// 2. `RateLimit`: the largest `t` among the policies with `r=0` (an exhausted policy asks for
///    its reset; policies with quota left ask for nothing).
/// 3. `X-RateLimit-Reset` read as `legacy` says, if given (see [`LegacyReset::wait`]).
///
/// `Ok(None)` when none asks for a wait. A malformed field is skipped (the draft: malformed
/// fields MUST be ignored), and its error returned only when no later field gives a wait. A
/// wait beyond [`MAX_RETRY_AFTER`](super::MAX_RETRY_AFTER) from the field that decides is
/// [`FieldError::TooLarge`]: never shortened, so the client never comes back early.
///
/// Clock skew: dates are measured from the earlier of `now` and the response's `Date`, so a
/// client whose clock runs ahead of the server's still waits until the server's time.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use flowguard::headers::requested_wait;
/// use http::HeaderMap;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", r#""burst";r=5;t=1, "day";r=0;t=600"#.parse()?);
/// let wait = requested_wait(&headers, SystemTime::now(), None)?.map(|w| w.delay());
/// assert_eq!(wait, Some(Duration::from_secs(600)));
/// headers.insert("retry-after", "7".parse()?);
/// let wait = requested_wait(&headers, SystemTime::now(), None)?.map(|w| w.delay());
/// assert_eq!(wait, Some(Duration::from_secs(7)), "Retry-After takes precedence");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`FieldError::TooLarge`] as above; otherwise the error of a malformed field when no field
/// gives a wait.
pub fn requested_wait(
    headers: &HeaderMap,
    now: SystemTime,
    legacy: Option<LegacyReset>,
) -> Result<Option<RetryAfter>, FieldError> {
    let server_now = headers
        .get(DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok());
    let since = server_now.map_or(now, |server| server.min(now));
    let mut malformed = None;

    let mut retry_after: Option<RetryAfter> = None;
    for value in headers.get_all(RETRY_AFTER) {
        match RetryAfter::parse(value.as_bytes(), since) {
            Ok(wait) => retry_after = retry_after.max(Some(wait)),
            Err(e @ FieldError::TooLarge { .. }) => return Err(e),
            Err(e) => malformed = Some(e),
        }
    }
    if retry_after.is_some() {
        return Ok(retry_after);
    }

    match ServiceLimit::from_headers(headers) {
        Ok(limits) => {
            let mut longest: Option<RetryAfter> = None;
            for wait in limits.iter().filter_map(ServiceLimit::wait) {
                longest = longest.max(Some(RetryAfter::from_delay(wait)?));
            }
            if longest.is_some() {
                return Ok(longest);
            }
        }
        Err(e) => malformed = Some(e),
    }

    if let Some(legacy) = legacy {
        match legacy.wait(headers, since) {
            Ok(Some(wait)) => return Ok(Some(wait)),
            Ok(None) => {}
            Err(e @ FieldError::TooLarge { .. }) => return Err(e),
            Err(e) => malformed = Some(e),
        }
    }
    malformed.map_or(Ok(None), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    use crate::headers::MAX_RETRY_AFTER;

    // Sun, 06 Nov 1994 08:49:37 GMT (the RFC 9110 example date).
    fn rfc_date() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn wait(h: &HeaderMap, legacy: Option<LegacyReset>) -> Result<Option<Duration>, FieldError> {
        requested_wait(h, rfc_date(), legacy).map(|w| w.map(RetryAfter::delay))
    }

    fn secs(n: u64) -> Result<Option<Duration>, FieldError> {
        Ok(Some(Duration::from_secs(n)))
    }

    #[test]
    fn retry_after_takes_precedence_and_dates_follow_the_server_clock() {
        let mut h = HeaderMap::new();
        assert_eq!(wait(&h, None), Ok(None));
        h.insert(RETRY_AFTER, "garbage".parse().unwrap());
        assert!(matches!(wait(&h, None), Err(FieldError::Syntax { .. })));
        h.insert("ratelimit", "\"default\";r=0;t=30".parse().unwrap());
        assert_eq!(
            wait(&h, None),
            secs(30),
            "a malformed Retry-After is skipped"
        );
        h.insert(RETRY_AFTER, "45".parse().unwrap());
        assert_eq!(wait(&h, None), secs(45));
        h.insert(
            RETRY_AFTER,
            "Sun, 06 Nov 1994 08:49:40 GMT".parse().unwrap(),
        );
        assert_eq!(
            wait(&h, None),
            secs(3),
            "Retry-After, even when shorter than t"
        );
        // Our clock runs 60 s ahead of the server's: its date is still honoured in full.
        h.insert(DATE, "Sun, 06 Nov 1994 08:48:37 GMT".parse().unwrap());
        assert_eq!(wait(&h, None), secs(63));
        h.insert(RETRY_AFTER, "100000".parse().unwrap());
        let too_large = Err(FieldError::TooLarge {
            max: MAX_RETRY_AFTER,
        });
        assert_eq!(wait(&h, None), too_large);
        h.remove(RETRY_AFTER);
        h.insert("ratelimit", "\"default\";r=0;t=86401".parse().unwrap());
        assert_eq!(wait(&h, None), too_large);
    }

    #[test]
    fn rate_limit_waits_only_for_exhausted_policies() {
        let mut h = HeaderMap::new();
        h.append("ratelimit", "\"hour\";r=0;t=60".parse().unwrap());
        h.append(
            "ratelimit",
            "\"day\";r=0;t=3600, \"burst\";r=3;t=99999999"
                .parse()
                .unwrap(),
        );
        assert_eq!(wait(&h, None), secs(3600), "both field lines are one list");
        h.insert("ratelimit", "\"default\";r=0".parse().unwrap());
        assert_eq!(wait(&h, None), Ok(None), "no t, no wait");
        h.append("ratelimit", "\"x\";r=0;t=1.5".parse().unwrap());
        assert!(
            matches!(
                wait(&h, None),
                Err(FieldError::WrongType { parameter: "t", .. })
            ),
            "one malformed line makes the whole field malformed"
        );
    }

    #[test]
    fn legacy_reset_only_when_asked() {
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-remaining", "0".parse().unwrap());
        h.insert("x-ratelimit-reset", "20".parse().unwrap());
        assert_eq!(wait(&h, None), Ok(None));
        assert_eq!(wait(&h, Some(LegacyReset::DelaySeconds)), secs(20));
        h.insert("x-ratelimit-reset", "784111797".parse().unwrap());
        assert_eq!(wait(&h, Some(LegacyReset::UnixSeconds)), secs(20));
        h.insert("x-ratelimit-remaining", "1".parse().unwrap());
        assert_eq!(wait(&h, Some(LegacyReset::UnixSeconds)), Ok(None));
        h.insert("x-ratelimit-remaining", "-1".parse().unwrap());
        assert_eq!(
            wait(&h, Some(LegacyReset::UnixSeconds)),
            Err(FieldError::Negative {
                field: "x-ratelimit-remaining"
            })
        );
        h.remove("x-ratelimit-remaining");
        h.insert("ratelimit", "\"default\";r=0;t=5".parse().unwrap());
        assert_eq!(
            wait(&h, Some(LegacyReset::DelaySeconds)),
            secs(5),
            "the IETF field comes first"
        );
    }
}
