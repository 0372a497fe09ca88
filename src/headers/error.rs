//! [`FieldError`]: why a rate-limit field value was not accepted.

use std::fmt;
use std::time::Duration;

/// Why a `Retry-After`, `RateLimit`, `RateLimit-Policy` or `X-RateLimit-*` value (or a value
/// about to be written into one) was not accepted.
///
/// `field` names the field (lower case, e.g. `"ratelimit"`), `parameter` the structured-field
/// parameter (`"r"`, `"t"`, `"q"`, `"w"`, `"pk"`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FieldError {
    /// The field is present but its value is empty (the rate-limit fields are non-empty lists).
    Empty {
        /// The field.
        field: &'static str,
    },
    /// The value is not valid syntax: for `Retry-After` neither delay-seconds nor an HTTP-date
    /// (RFC 9110 §10.2.3), for `X-RateLimit-*` not a non-negative integer, for the structured
    /// fields not an RFC 9651 list of items.
    Syntax {
        /// The field.
        field: &'static str,
        /// Byte offset in the value where parsing stopped.
        at: usize,
    },
    /// A list member names its policy with something other than a String (or Token).
    NotAPolicyName {
        /// The field.
        field: &'static str,
    },
    /// A parameter the field requires is missing (`q` of a policy, `r` of a service limit).
    MissingParameter {
        /// The field.
        field: &'static str,
        /// The missing parameter.
        parameter: &'static str,
    },
    /// A parameter has a value of the wrong type (e.g. `t="30"` or `t=1.5` for an Integer).
    WrongType {
        /// The field.
        field: &'static str,
        /// The parameter.
        parameter: &'static str,
        /// The type the draft requires.
        expected: &'static str,
    },
    /// A negative number where only non-negative ones are allowed (`Retry-After: -1`, `r=-1`).
    Negative {
        /// The field.
        field: &'static str,
    },
    /// A policy window `w` of zero; the draft requires a positive number of seconds.
    ZeroWindow,
    /// A number beyond what a structured-field Integer can hold (999,999,999,999,999); use a
    /// smaller window or reset.
    OutOfRange {
        /// The parameter.
        parameter: &'static str,
    },
    /// A policy name with a character outside printable ASCII (`0x20..=0x7e`); structured-field
    /// Strings cannot carry it.
    InvalidPolicyName,
    /// The value asks for a wait longer than the documented bound
    /// ([`MAX_RETRY_AFTER`](super::MAX_RETRY_AFTER)). The server does not want us back soon: a
    /// retry policy treats this as "do not retry", never as a shorter wait.
    TooLarge {
        /// The largest wait accepted.
        max: Duration,
    },
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty { field } => write!(f, "{field}: the field is empty"),
            Self::Syntax { field, at } => write!(
                f,
                "{field}: invalid value at byte {at} (Retry-After takes delay-seconds or an \
                 HTTP-date, X-RateLimit-* a non-negative integer, RateLimit and \
                 RateLimit-Policy an RFC 9651 list)"
            ),
            Self::NotAPolicyName { field } => {
                write!(
                    f,
                    "{field}: a member is not a policy name (a quoted String)"
                )
            }
            Self::MissingParameter { field, parameter } => {
                write!(
                    f,
                    "{field}: a member lacks the required parameter `{parameter}`"
                )
            }
            Self::WrongType {
                field,
                parameter,
                expected,
            } => write!(f, "{field}: parameter `{parameter}` must be {expected}"),
            Self::Negative { field } => {
                write!(
                    f,
                    "{field}: a negative number where only non-negative ones are allowed"
                )
            }
            Self::ZeroWindow => write!(f, "ratelimit-policy: window `w` must be at least 1 second"),
            Self::OutOfRange { parameter } => write!(
                f,
                "parameter `{parameter}` exceeds 999,999,999,999,999, the largest structured-field \
                 Integer; use a smaller value"
            ),
            Self::InvalidPolicyName => write!(
                f,
                "a policy name may hold only printable ASCII (space to `~`); rename the policy"
            ),
            Self::TooLarge { max } => {
                write!(f, "the server asks to wait longer than the bound {max:?}")
            }
        }
    }
}

impl std::error::Error for FieldError {}
