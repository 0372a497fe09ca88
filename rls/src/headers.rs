//! The rate-limit headers the service asks Envoy to add to the response (`response_headers_to_add`).
//!
//! Off by default (as in envoyproxy/ratelimit). The headers describe the one descriptor that
//! decided: when the request is over limit, the enforced descriptor that frees up last; otherwise
//! the enforced descriptor with the fewest tokens left. Descriptors answered by a failure policy
//! (degraded) are never described: their numbers are not known.

use std::time::Duration;

use super::plan::Verdict;

/// Which header fields to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HeaderStyle {
    /// None.
    #[default]
    Off,
    /// The IETF fields (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy: "name";q=B;w=W`,
    /// `RateLimit: "name";r=R;t=T`, and `Retry-After` when over limit.
    Ietf,
    /// `X-RateLimit-Limit: B, B;w=W`, `X-RateLimit-Remaining: R`, `X-RateLimit-Reset: T`, as the
    /// reference service sends them.
    Legacy,
}

/// One descriptor's verdict and what the headers call it.
#[derive(Clone, Copy, Debug)]
pub struct Described<'a> {
    /// The policy name: the rule's `name`, else its configured path.
    pub name: &'a str,
    /// The verdict.
    pub verdict: &'a Verdict,
    /// Whether the descriptor is enforced (not shadow mode).
    pub enforce: bool,
}

/// The headers for a response, as (name, value) pairs.
pub fn response_headers(
    style: HeaderStyle,
    over_limit: bool,
    described: &[Described<'_>],
) -> Vec<(&'static str, String)> {
    if style == HeaderStyle::Off {
        return Vec::new();
    }
    let candidates = described
        .iter()
        .filter(|d| d.enforce && !d.verdict.degraded && d.verdict.allowed != over_limit);
    let chosen = if over_limit {
        // `None` (never fits) sorts last, i.e. frees up last.
        candidates.max_by_key(|d| d.verdict.retry_after.map_or(Duration::MAX, |r| r))
    } else {
        candidates.min_by_key(|d| d.verdict.remaining)
    };
    let Some(chosen) = chosen else {
        return Vec::new();
    };
    let v = chosen.verdict;
    let window = ceil_secs(v.interval.saturating_mul(v.limit));
    let reset = ceil_secs(v.reset_after);
    let mut out = match style {
        HeaderStyle::Off => Vec::new(),
        HeaderStyle::Ietf => {
            let name = sf_string(chosen.name);
            vec![
                (
                    "ratelimit-policy",
                    format!("{name};q={};w={window}", v.limit),
                ),
                ("ratelimit", format!("{name};r={};t={reset}", v.remaining)),
            ]
        }
        HeaderStyle::Legacy => vec![
            (
                "x-ratelimit-limit",
                format!("{}, {};w={window}", v.limit, v.limit),
            ),
            ("x-ratelimit-remaining", v.remaining.to_string()),
            ("x-ratelimit-reset", reset.to_string()),
        ],
    };
    if over_limit
        && style == HeaderStyle::Ietf
        && let Some(retry) = v.retry_after
    {
        out.push(("retry-after", ceil_secs(retry).to_string()));
    }
    out
}

/// Whole seconds, rounded up (a client that waits this long is not early).
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// A structured-field string (RFC 8941): quoted, `"` and `\` escaped, other non-printable or
/// non-ASCII bytes replaced by `?` (sf-strings are printable ASCII only).
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(allowed: bool, remaining: u32, retry_ms: Option<u64>) -> Verdict {
        Verdict {
            allowed,
            limit: 10,
            remaining,
            reset_after: Duration::from_millis(1500),
            retry_after: retry_ms.map(Duration::from_millis),
            interval: Duration::from_millis(150),
            degraded: false,
        }
    }

    #[test]
    fn ietf_fields_describe_the_descriptor_with_least_room() {
        let (a, b) = (verdict(true, 7, None), verdict(true, 3, None));
        let d = [
            Described {
                name: "a",
                verdict: &a,
                enforce: true,
            },
            Described {
                name: "b\"x",
                verdict: &b,
                enforce: true,
            },
        ];
        let h = response_headers(HeaderStyle::Ietf, false, &d);
        assert_eq!(
            h,
            vec![
                ("ratelimit-policy", r#""b\"x";q=10;w=2"#.to_string()),
                ("ratelimit", r#""b\"x";r=3;t=2"#.to_string()),
            ]
        );
    }

    #[test]
    fn over_limit_describes_the_denial_that_frees_up_last_with_retry_after() {
        let (a, b, shadow) = (
            verdict(false, 0, Some(100)),
            verdict(false, 0, Some(1200)),
            verdict(false, 0, Some(9000)),
        );
        let d = [
            Described {
                name: "a",
                verdict: &a,
                enforce: true,
            },
            Described {
                name: "b",
                verdict: &b,
                enforce: true,
            },
            Described {
                name: "s",
                verdict: &shadow,
                enforce: false,
            },
        ];
        let h = response_headers(HeaderStyle::Legacy, true, &d);
        assert_eq!(h[0], ("x-ratelimit-limit", "10, 10;w=2".to_string()));
        let h = response_headers(HeaderStyle::Ietf, true, &d);
        assert_eq!(h[2], ("retry-after", "2".to_string()));
        assert!(h[1].1.starts_with("\"b\""));
    }

    #[test]
    fn degraded_verdicts_advertise_nothing() {
        let mut v = verdict(true, 9, None);
        v.degraded = true;
        let d = [Described {
            name: "a",
            verdict: &v,
            enforce: true,
        }];
        assert!(response_headers(HeaderStyle::Ietf, false, &d).is_empty());
        assert!(response_headers(HeaderStyle::Off, false, &d).is_empty());
    }
}
