//! [`ServiceLimit`]: one member of the `RateLimit` field.

use std::time::Duration;

use http::{HeaderMap, HeaderValue};

use super::error::FieldError;
use super::name::PolicyName;
use super::names::RATELIMIT;
use super::retry_after::ceil_secs;
use super::structured::{self, Item, MAX_INTEGER};

const FIELD: &str = "ratelimit";

/// The current service limit of one policy as the `RateLimit` field gives it
/// (draft-ietf-httpapi-ratelimit-headers §4): the policy's name, the remaining quota `r`, the
/// optional `t` (whole seconds; flowguard's GCRA writes the time until the quota is fully
/// restored) and optional partition key `pk`.
///
/// Written and parsed by the same code:
///
/// ```
/// use std::time::Duration;
/// use flowguard::headers::{PolicyName, ServiceLimit};
///
/// let limit = ServiceLimit::new(PolicyName::default(), 0).with_reset(Duration::from_millis(200))?;
/// assert_eq!(limit.to_field_value(), r#""default";r=0;t=1"#);
/// assert_eq!(ServiceLimit::parse_list(br#""default";r=0;t=1"#)?, vec![limit]);
/// # Ok::<(), flowguard::headers::FieldError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceLimit {
    policy: PolicyName,
    remaining: u64,
    reset: Option<u64>,
    partition_key: Option<Vec<u8>>,
}

impl ServiceLimit {
    /// `remaining` units left under policy `policy`, without `t` or partition key.
    pub fn new(policy: PolicyName, remaining: u32) -> ServiceLimit {
        ServiceLimit {
            policy,
            remaining: u64::from(remaining),
            reset: None,
            partition_key: None,
        }
    }

    /// The same limit with `t`: `reset` in whole seconds, rounded **up**.
    ///
    /// # Errors
    /// [`FieldError::OutOfRange`] beyond 999,999,999,999,999 seconds.
    pub fn with_reset(self, reset: Duration) -> Result<ServiceLimit, FieldError> {
        match ceil_secs(reset) {
            secs if secs > MAX_INTEGER => Err(FieldError::OutOfRange { parameter: "t" }),
            secs => Ok(ServiceLimit {
                reset: Some(secs),
                ..self
            }),
        }
    }

    /// The same limit with partition key `pk` (any bytes, written as base64).
    pub fn with_partition_key(self, key: impl Into<Vec<u8>>) -> ServiceLimit {
        ServiceLimit {
            partition_key: Some(key.into()),
            ..self
        }
    }

    /// The name of the policy this limit belongs to.
    pub fn policy(&self) -> &PolicyName {
        &self.policy
    }

    /// The remaining quota `r`.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// `t`, if given.
    pub fn reset(&self) -> Option<Duration> {
        self.reset.map(Duration::from_secs)
    }

    /// The partition key `pk`, if given.
    pub fn partition_key(&self) -> Option<&[u8]> {
        self.partition_key.as_deref()
    }

    /// How long this limit asks a client to wait before its next request: `t` when the quota
    /// is exhausted (`r=0`), otherwise nothing.
    pub fn wait(&self) -> Option<Duration> {
        if self.remaining == 0 {
            self.reset()
        } else {
            None
        }
    }

    /// This limit as one member of a `RateLimit` field: `"name";r=R[;t=T][;pk=:…:]`.
    pub fn to_field_value(&self) -> HeaderValue {
        let mut out = String::with_capacity(32);
        structured::write_string(&mut out, self.policy.as_str());
        structured::write_integer_param(&mut out, "r", self.remaining);
        if let Some(t) = self.reset {
            structured::write_integer_param(&mut out, "t", t);
        }
        if let Some(pk) = &self.partition_key {
            out.push_str(";pk=");
            structured::write_bytes(&mut out, pk);
        }
        structured::header_value(out)
    }

    /// Parses one `RateLimit` field line: a non-empty list of service limits. Other
    /// parameters are accepted and not kept.
    ///
    /// # Errors
    /// [`FieldError::Empty`] / [`FieldError::Syntax`] when the value is not a structured list of
    /// items, [`FieldError::NotAPolicyName`] for a member that is not a String (or Token),
    /// [`FieldError::MissingParameter`] without `r`, [`FieldError::WrongType`] or
    /// [`FieldError::Negative`] for an `r` or `t` that is not a non-negative Integer (or a `pk`
    /// that is not a Byte Sequence).
    pub fn parse_list(value: &[u8]) -> Result<Vec<ServiceLimit>, FieldError> {
        structured::parse_list(FIELD, value)?
            .iter()
            .map(Self::of_member)
            .collect()
    }

    /// Every service limit of the response's `RateLimit` field lines, in order.
    ///
    /// # Errors
    /// As [`parse_list`](Self::parse_list), for the first line that does not parse.
    pub fn from_headers(headers: &HeaderMap) -> Result<Vec<ServiceLimit>, FieldError> {
        structured::parse_field(headers, &RATELIMIT, FIELD, Self::of_member)
    }

    fn of_member(item: &Item) -> Result<ServiceLimit, FieldError> {
        Ok(ServiceLimit {
            policy: PolicyName::of_member(FIELD, item)?,
            remaining: item
                .non_negative(FIELD, "r")?
                .ok_or(FieldError::MissingParameter {
                    field: FIELD,
                    parameter: "r",
                })?,
            reset: item.non_negative(FIELD, "t")?,
            partition_key: item.bytes(FIELD, "pk")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest wait the field asks for, as a client reads it.
    fn wait(value: &[u8]) -> Result<Option<Duration>, FieldError> {
        ServiceLimit::parse_list(value)
            .map(|limits| limits.iter().filter_map(ServiceLimit::wait).max())
    }

    fn secs(n: u64) -> Result<Option<Duration>, FieldError> {
        Ok(Some(Duration::from_secs(n)))
    }

    #[test]
    fn draft_examples() {
        assert_eq!(wait(br#""default";r=0;t=30"#), secs(30));
        assert_eq!(
            wait(br#"default;r=0;t=5"#),
            secs(5),
            "a Token name, as older servers send"
        );
        assert_eq!(wait(br#""a,b";r=0;t=7;pk=:cHsdsRA=:"#), secs(7));
        assert_eq!(wait(br#""hour";r=0;t=60 , "day";r=0;t=3600"#), secs(3600));
        assert_eq!(wait(br#""default";r=0"#), Ok(None));
        assert_eq!(wait(br#""default";r=1;t=9"#), Ok(None));
        let limits = ServiceLimit::parse_list(br#""default";r=300000000;t=60;pk=:QXBwLTk5OQ==:"#);
        let limit = &limits.unwrap()[0];
        assert_eq!(limit.remaining(), 300_000_000);
        assert_eq!(limit.partition_key(), Some(&b"App-999"[..]));
    }

    #[test]
    fn rejects_bad_values() {
        let field = FIELD;
        for (bad, error) in [
            (&b""[..], FieldError::Empty { field }),
            (b"   ", FieldError::Empty { field }),
            (b"\"default\";r=0;t=", FieldError::Syntax { field, at: 16 }),
            (
                b"\"default\";r=0;t=30,",
                FieldError::Syntax { field, at: 19 },
            ),
            (b"\"default\" r=0", FieldError::Syntax { field, at: 10 }),
            (
                b"\"unterminated;r=0;t=1",
                FieldError::Syntax { field, at: 21 },
            ),
            (b"\"default\";R=0;t=1", FieldError::Syntax { field, at: 10 }),
            (
                b"\"default\";r=0;t=\"30\"",
                FieldError::WrongType {
                    field,
                    parameter: "t",
                    expected: "a non-negative Integer",
                },
            ),
            (
                b"\"default\";r=0;t=1.5",
                FieldError::WrongType {
                    field,
                    parameter: "t",
                    expected: "a non-negative Integer",
                },
            ),
            (
                b"\"default\";t=1",
                FieldError::MissingParameter {
                    field,
                    parameter: "r",
                },
            ),
            (
                b"\"default\";r=0;pk=abc",
                FieldError::WrongType {
                    field,
                    parameter: "pk",
                    expected: "a Byte Sequence",
                },
            ),
            (b"5;r=0", FieldError::NotAPolicyName { field }),
            (b"\"default\";r=0;t=-1", FieldError::Negative { field }),
            (b"\"default\";r=-1", FieldError::Negative { field }),
        ] {
            assert_eq!(
                ServiceLimit::parse_list(bad),
                Err(error),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
