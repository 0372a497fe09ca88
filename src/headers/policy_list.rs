//! [`PolicyList`]: every policy a server applies to a request, written as one `RateLimit-Policy`
//! field line.

use http::{HeaderMap, HeaderValue};

use super::legacy;
use super::names::{RATELIMIT, RATELIMIT_POLICY};
use super::policy::QuotaPolicy;
use super::service_limit::ServiceLimit;
use super::style::HeaderStyle;

/// The policies that apply to a request together (several quotas per request), with their
/// `RateLimit-Policy` field line built once, so that writing them costs a reference count.
///
/// ```
/// use flowguard::headers::{HeaderStyle, PolicyList, PolicyName, QuotaPolicy, ServiceLimit};
/// use http::HeaderMap;
///
/// let second = QuotaPolicy::new(PolicyName::new("second")?, 10);
/// let day = QuotaPolicy::new(PolicyName::new("day")?, 10_000);
/// let list = PolicyList::new(vec![second.clone(), day.clone()])?;
/// let mut headers = HeaderMap::new();
/// let limit = ServiceLimit::new(second.name().clone(), 0);
/// list.write(HeaderStyle::Ietf, &mut headers, 0, Some(&limit));
/// assert_eq!(headers["ratelimit-policy"], r#""second";q=10, "day";q=10000"#);
/// assert_eq!(headers["ratelimit"], r#""second";r=0"#);
/// assert_eq!(QuotaPolicy::from_headers(&headers)?, vec![second, day]);
/// # Ok::<(), flowguard::headers::FieldError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyList {
    policies: Vec<QuotaPolicy>,
    field: HeaderValue,
}

impl PolicyList {
    /// The list of `policies`, in the order they are advertised;
    /// [`FieldError::Empty`](super::FieldError::Empty) for none.
    pub fn new(policies: Vec<QuotaPolicy>) -> Result<PolicyList, super::FieldError> {
        if policies.is_empty() {
            return Err(super::FieldError::Empty {
                field: "ratelimit-policy",
            });
        }
        let mut line = Vec::new();
        for (i, policy) in policies.iter().enumerate() {
            if i > 0 {
                line.extend_from_slice(b", ");
            }
            line.extend_from_slice(policy.to_field_value().as_bytes());
        }
        // Each member is a valid field value, and so is their list.
        let field = HeaderValue::from_bytes(&line).unwrap_or_else(|_| HeaderValue::from_static(""));
        Ok(PolicyList { policies, field })
    }

    /// The policies.
    pub fn policies(&self) -> &[QuotaPolicy] {
        &self.policies
    }

    /// The `RateLimit-Policy` field line listing every policy.
    pub fn field_value(&self) -> &HeaderValue {
        &self.field
    }

    /// Writes the list in `style`: every policy (`RateLimit-Policy`), and `limit`, the current
    /// service limit of policy number `deciding` (the one that decided the request), or nothing
    /// when it is not known. The legacy style writes the deciding policy alone (those fields hold
    /// one policy). Earlier fields are kept, as [`HeaderStyle::write`] does.
    pub fn write(
        &self,
        style: HeaderStyle,
        headers: &mut HeaderMap,
        deciding: usize,
        limit: Option<&ServiceLimit>,
    ) {
        if matches!(style, HeaderStyle::Ietf | HeaderStyle::Both) {
            headers.append(RATELIMIT_POLICY, self.field.clone());
            if let Some(limit) = limit {
                headers.append(RATELIMIT, limit.to_field_value());
            }
        }
        if matches!(style, HeaderStyle::Legacy | HeaderStyle::Both)
            && let Some(policy) = self.policies.get(deciding)
        {
            legacy::write(headers, policy, limit);
        }
    }
}
