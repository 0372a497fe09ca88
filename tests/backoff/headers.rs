//! Property tests of the rate-limit field parsers: never panic, and valid values round-trip
//! (what the writers write, the parsers read back).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowguard::headers::{
    FieldError, MAX_RETRY_AFTER, PolicyName, QuotaPolicy, RetryAfter, ServiceLimit, requested_wait,
};
use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;

/// The last second httpdate can format (31 Dec 9999 23:59:59).
const MAX_HTTP_DATE: u64 = 253_402_300_799;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// The obsolete RFC 850 form of an IMF-fixdate (two-digit year, 1970-2069 only).
fn rfc850(imf: &str) -> String {
    // "Sun, 06 Nov 1994 08:49:37 GMT" -> "Sunday, 06-Nov-94 08:49:37 GMT"
    let day = match &imf[..3] {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    };
    format!(
        "{day}, {}-{}-{} {}",
        &imf[5..7],
        &imf[8..11],
        &imf[14..16],
        &imf[17..]
    )
}

/// The asctime form: "Sun Nov  6 08:49:37 1994".
fn asctime(imf: &str) -> String {
    let mday = imf[5..7].trim_start_matches('0');
    format!(
        "{} {} {mday:>2} {} {}",
        &imf[..3],
        &imf[8..11],
        &imf[17..25],
        &imf[12..16]
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn retry_after_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64), now in 0..MAX_HTTP_DATE) {
        if let Ok(wait) = RetryAfter::parse(&bytes, at(now)) {
            prop_assert!(wait.delay() <= MAX_RETRY_AFTER);
        }
    }

    #[test]
    fn retry_after_never_panics_on_strings(s in "\\PC{0,40}", now in 0..MAX_HTTP_DATE) {
        let _ = RetryAfter::parse(s.as_bytes(), at(now));
    }

    #[test]
    fn retry_after_date_like_garbage(s in "[A-Za-z]{3}, [0-9]{1,2} [A-Za-z]{3} [0-9]{1,5} [0-9:]{1,9} GMT") {
        let _ = RetryAfter::parse(s.as_bytes(), at(1_000_000_000));
    }

    #[test]
    fn rate_limit_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = ServiceLimit::parse_list(&bytes);
        let _ = QuotaPolicy::parse_list(&bytes);
    }

    #[test]
    fn rate_limit_never_panics_on_near_valid(s in "(\"[a-z,;=]{0,6}\"|[a-z*]{1,5}|-?[0-9]{1,17}|\\?[01]|:[a-zA-Z0-9+/=]{0,8}:|@-?[0-9]{1,3}|%\"[a-z%0-9]{0,6}\")(;[a-z]{1,2}(=(-?[0-9]{1,17}|\"x\"|[a-z]{1,3}|[0-9]\\.[0-9]{1,4}|:[a-zA-Z0-9+/=]{0,8}:))?){0,3}(, ?[a-z]{1,3};[qrt]=[0-9];[tw]=[0-9]{1,3}){0,2}") {
        let _ = ServiceLimit::parse_list(s.as_bytes());
        let _ = QuotaPolicy::parse_list(s.as_bytes());
    }

    #[test]
    fn from_headers_never_panics(a in proptest::collection::vec(any::<u8>(), 0..40), b in proptest::collection::vec(any::<u8>(), 0..40)) {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&a) { h.append("retry-after", v); }
        if let Ok(v) = HeaderValue::from_bytes(&b) { h.append("ratelimit", v); }
        if let Ok(v) = HeaderValue::from_bytes(&a) { h.append("x-ratelimit-reset", v); }
        let legacy = Some(flowguard::headers::LegacyReset::UnixSeconds);
        if let Ok(Some(wait)) = requested_wait(&h, at(1_000_000_000), legacy) {
            prop_assert!(wait.delay() <= MAX_RETRY_AFTER);
        }
    }

    #[test]
    fn delay_seconds_round_trip(secs in 0u64..200_000, pad in "[ \t]{0,2}") {
        let text = format!("{pad}{secs}{pad}");
        let parsed = RetryAfter::parse(text.as_bytes(), at(0)).map(RetryAfter::delay);
        if secs <= MAX_RETRY_AFTER.as_secs() {
            prop_assert_eq!(parsed, Ok(Duration::from_secs(secs)));
        } else {
            prop_assert_eq!(parsed, Err(FieldError::TooLarge { max: MAX_RETRY_AFTER }));
        }
        let negative = format!("-{secs}");
        prop_assert_eq!(
            RetryAfter::parse(negative.as_bytes(), at(0)),
            Err(FieldError::Negative { field: "retry-after" })
        );
    }

    #[test]
    fn http_dates_round_trip_in_all_three_forms(date in 0u64..MAX_HTTP_DATE, offset in -200_000i64..200_000) {
        let now = date.saturating_add_signed(offset);
        let imf = httpdate::fmt_http_date(at(date));
        let expected = if date <= now {
            Ok(Duration::ZERO)
        } else if date - now <= MAX_RETRY_AFTER.as_secs() {
            Ok(Duration::from_secs(date - now))
        } else {
            Err(FieldError::TooLarge { max: MAX_RETRY_AFTER })
        };
        let mut forms = vec![imf.clone(), asctime(&imf)];
        let year: u64 = imf[12..16].parse().unwrap();
        if year < 2070 {
            forms.push(rfc850(&imf));
        }
        for form in forms {
            let got = RetryAfter::parse(form.as_bytes(), at(now)).map(RetryAfter::delay);
            prop_assert_eq!(got, expected.clone(), "{}", form);
        }
    }

    #[test]
    fn rate_limit_round_trip(name in "[a-z][a-z0-9_-]{0,8}", quoted in any::<bool>(), r in 0u64..5, t in 0u64..1_000_000) {
        let item = if quoted { format!("\"{name}\"") } else { name.clone() };
        let value = format!("{item};r={r};t={t}, \"other\";r=9;t=1");
        let limits = ServiceLimit::parse_list(value.as_bytes()).unwrap();
        prop_assert_eq!(limits[0].policy().as_str(), name.as_str());
        prop_assert_eq!((limits[0].remaining(), limits[0].reset()), (r, Some(Duration::from_secs(t))));
        let expected = match (r, t) {
            (0, t) if t > MAX_RETRY_AFTER.as_secs() => Err(FieldError::TooLarge { max: MAX_RETRY_AFTER }),
            (0, t) => Ok(Some(Duration::from_secs(t))),
            _ => Ok(None),
        };
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_str(&value).unwrap());
        prop_assert_eq!(requested_wait(&h, at(0), None).map(|w| w.map(RetryAfter::delay)), expected);
    }

    #[test]
    fn written_fields_parse_back(
        name in "[ -~]{0,12}",
        q in any::<u32>(),
        w_ms in 1u64..10_000_000_000,
        r in any::<u32>(),
        t_ms in 0u64..10_000_000_000,
        pk in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
    ) {
        let name = PolicyName::new(name).unwrap();
        let mut policy = QuotaPolicy::new(name.clone(), q).with_window(Duration::from_millis(w_ms)).unwrap();
        let mut limit = ServiceLimit::new(name, r).with_reset(Duration::from_millis(t_ms)).unwrap();
        if let Some(pk) = pk {
            policy = policy.with_partition_key(pk.clone());
            limit = limit.with_partition_key(pk);
        }
        prop_assert_eq!(QuotaPolicy::parse_list(policy.to_field_value().as_bytes()), Ok(vec![policy.clone()]));
        prop_assert_eq!(ServiceLimit::parse_list(limit.to_field_value().as_bytes()), Ok(vec![limit.clone()]));
        prop_assert_eq!(policy.window(), Some(Duration::from_secs(w_ms.div_ceil(1000))));
        prop_assert_eq!(limit.reset(), Some(Duration::from_secs(t_ms.div_ceil(1000))));
    }
}
