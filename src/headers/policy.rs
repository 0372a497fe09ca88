//! [`QuotaPolicy`]: one member of the `RateLimit-Policy` field.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};

use super::error::FieldError;
use super::name::PolicyName;
use super::names::RATELIMIT_POLICY;
use super::retry_after::ceil_secs;
use super::structured::{self, Item, MAX_INTEGER};

const FIELD: &str = "ratelimit-policy";

/// A quota policy as the `RateLimit-Policy` field advertises it
/// (draft-ietf-httpapi-ratelimit-headers §3): its name, quota `q` (in quota units; requests by
/// default), optional window `w` (whole seconds) and optional partition key `pk`.
///
/// Written and parsed by the same code:
///
/// ```
/// use std::time::Duration;
/// use flowguard::headers::{PolicyName, QuotaPolicy};
///
/// let policy = QuotaPolicy::new(PolicyName::new("per-key")?, 10)
///     .with_window(Duration::from_millis(1500))?;
/// assert_eq!(policy.to_field_value(), r#""per-key";q=10;w=2"#);
/// let parsed = QuotaPolicy::parse_list(br#""per-key";q=10;w=2, "day";q=1000;w=86400"#)?;
/// assert_eq!(parsed[0], policy);
/// assert_eq!(parsed[1].window(), Some(Duration::from_secs(86_400)));
/// # Ok::<(), flowguard::headers::FieldError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaPolicy {
    name: PolicyName,
    quota: u64,
    window: Option<u64>,
    partition_key: Option<Vec<u8>>,
}

impl QuotaPolicy {
    /// A policy named `name` allowing `quota` units, without window or partition key.
    pub fn new(name: PolicyName, quota: u32) -> QuotaPolicy {
        QuotaPolicy {
            name,
            quota: u64::from(quota),
            window: None,
            partition_key: None,
        }
    }

    /// The same policy with window `w`: `window` in whole seconds, rounded **up**.
    ///
    /// # Errors
    /// [`FieldError::ZeroWindow`] for a zero window, [`FieldError::OutOfRange`] beyond
    /// 999,999,999,999,999 seconds.
    pub fn with_window(self, window: Duration) -> Result<QuotaPolicy, FieldError> {
        match ceil_secs(window) {
            0 => Err(FieldError::ZeroWindow),
            secs if secs > MAX_INTEGER => Err(FieldError::OutOfRange { parameter: "w" }),
            secs => Ok(QuotaPolicy {
                window: Some(secs),
                ..self
            }),
        }
    }

    /// The same policy with partition key `pk` (any bytes, written as base64). Leave it out
    /// when the key is a secret, such as an API key.
    pub fn with_partition_key(self, key: impl Into<Vec<u8>>) -> QuotaPolicy {
        QuotaPolicy {
            partition_key: Some(key.into()),
            ..self
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &PolicyName {
        &self.name
    }

    /// The quota `q`, in quota units.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The window `w`, if advertised.
    pub fn window(&self) -> Option<Duration> {
        self.window.map(Duration::from_secs)
    }

    /// The partition key `pk`, if advertised.
    pub fn partition_key(&self) -> Option<&[u8]> {
        self.partition_key.as_deref()
    }

    /// This policy as one member of a `RateLimit-Policy` field: `"name";q=Q[;w=W][;pk=:…:]`.
    pub fn to_field_value(&self) -> HeaderValue {
        let mut out = String::with_capacity(32);
        structured::write_string(&mut out, self.name.as_str());
        structured::write_integer_param(&mut out, "q", self.quota);
        if let Some(w) = self.window {
            structured::write_integer_param(&mut out, "w", w);
        }
        if let Some(pk) = &self.partition_key {
            out.push_str(";pk=");
            structured::write_bytes(&mut out, pk);
        }
        structured::header_value(out)
    }

    /// Parses one `RateLimit-Policy` field line: a non-empty list of policies. Other parameters
    /// (such as the quota unit `qu`) are accepted and not kept.
    ///
    /// # Errors
    /// [`FieldError::Empty`] / [`FieldError::Syntax`] when the value is not a structured list of
    /// items, [`FieldError::NotAPolicyName`] for a member that is not a String (or Token),
    /// [`FieldError::MissingParameter`] without `q`, [`FieldError::WrongType`] or
    /// [`FieldError::Negative`] for a `q` or `w` that is not a non-negative Integer (or a `pk`
    /// that is not a Byte Sequence), [`FieldError::ZeroWindow`] for `w=0`.
    pub fn parse_list(value: &[u8]) -> Result<Vec<QuotaPolicy>, FieldError> {
        structured::parse_list(FIELD, value)?
            .iter()
            .map(Self::of_member)
            .collect()
    }

    /// Every policy of the response's `RateLimit-Policy` field lines, in order.
    ///
    /// # Errors
    /// As [`parse_list`](Self::parse_list), for the first line that does not parse.
    pub fn from_headers(headers: &HeaderMap) -> Result<Vec<QuotaPolicy>, FieldError> {
        structured::parse_field(headers, &RATELIMIT_POLICY, FIELD, Self::of_member)
    }

    fn of_member(item: &Item) -> Result<QuotaPolicy, FieldError> {
        let name = PolicyName::of_member(FIELD, item)?;
        let quota = item
            .non_negative(FIELD, "q")?
            .ok_or(FieldError::MissingParameter {
                field: FIELD,
                parameter: "q",
            })?;
        let window = item.non_negative(FIELD, "w")?;
        if window == Some(0) {
            return Err(FieldError::ZeroWindow);
        }
        Ok(QuotaPolicy {
            name,
            quota,
            window,
            partition_key: item.bytes(FIELD, "pk")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draft_examples() {
        let policies =
            QuotaPolicy::parse_list(br#""permin";q=50;w=60,"perhr";q=1000;w=3600"#).unwrap();
        assert_eq!(policies.len(), 2);
        assert_eq!(policies[1].name().as_str(), "perhr");
        assert_eq!(policies[1].quota(), 1000);
        assert_eq!(policies[1].window(), Some(Duration::from_secs(3600)));
        let unit = QuotaPolicy::parse_list(
            br#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#,
        )
        .unwrap();
        assert_eq!(unit[0].quota(), 65535);
        assert!(unit[0].partition_key().is_some());
        let bare = QuotaPolicy::parse_list(br#""default";q=100"#).unwrap();
        assert_eq!(bare[0].window(), None);
    }

    #[test]
    fn rejects_bad_values() {
        let field = FIELD;
        for (bad, error) in [
            (&b""[..], FieldError::Empty { field }),
            (
                b"\"default\";w=60",
                FieldError::MissingParameter {
                    field,
                    parameter: "q",
                },
            ),
            (b"\"default\";q=10;w=0", FieldError::ZeroWindow),
            (b"\"default\";q=-10", FieldError::Negative { field }),
            (
                b"\"default\";q=10;w=?1",
                FieldError::WrongType {
                    field,
                    parameter: "w",
                    expected: "a non-negative Integer",
                },
            ),
            (b":AQI=:;q=1", FieldError::NotAPolicyName { field }),
            (
                b"\"a\";q=1, (\"b\");q=1",
                FieldError::Syntax { field, at: 9 },
            ),
        ] {
            assert_eq!(
                QuotaPolicy::parse_list(bad),
                Err(error),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let name = PolicyName::default();
        assert_eq!(
            QuotaPolicy::new(name.clone(), 1).with_window(Duration::ZERO),
            Err(FieldError::ZeroWindow)
        );
        assert_eq!(
            QuotaPolicy::new(name, 1).with_window(Duration::from_secs(MAX_INTEGER + 1)),
            Err(FieldError::OutOfRange { parameter: "w" })
        );
    }
}
