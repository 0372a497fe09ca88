//! [`PolicyList`]: every policy a server applies to a request, written as one `RateLimit-Policy`
//! field line.

use std::collections::BTreeSet;
use std::time::Duration;

use parking_lot::Mutex;

use http::{HeaderMap, HeaderValue};

use super::decimal::Decimal;
use super::legacy;
use super::names::{RATELIMIT, RATELIMIT_POLICY};
use super::policy::QuotaPolicy;
use super::retry_after::ceil_secs;
use super::service_limit::ServiceLimit;
use super::structured::MAX_INTEGER;
use super::style::HeaderStyle;

/// The policies that apply to a request together (several quotas per request), with their
/// `RateLimit-Policy` field line built once, so that writing them costs a copy of a pointer.
///
/// The field line is kept for the life of the process, once per distinct line (lists of the same
/// policies share it): a server builds a few lists at start-up and writes them on every response.
/// Past 4,096 distinct lines, new lines are shared by reference count instead, so a program
/// that builds lists on the fly does not grow without bound.
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
    /// Each policy's `RateLimit` member up to its remaining quota: `"name";r=`.
    members: Vec<Vec<u8>>,
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
        // Each member is visible ASCII (names are printable ASCII), and so is their list: a
        // value `from_static` takes (checked, so that it cannot panic).
        let field = match String::from_utf8(line) {
            Ok(line)
                if line
                    .bytes()
                    .all(|b| b == b'\t' || (0x20..0x7f).contains(&b)) =>
            {
                match intern(&line) {
                    Some(kept) => HeaderValue::from_static(kept),
                    // Past the interned lines: a shared value, counted per copy.
                    None => HeaderValue::from_str(&line)
                        .unwrap_or_else(|_| HeaderValue::from_static("")),
                }
            }
            _ => HeaderValue::from_static(""),
        };
        let members = policies
            .iter()
            .map(|p| {
                let mut member = String::new();
                super::structured::write_string(&mut member, p.name().as_str());
                member.push_str(";r=");
                member.into_bytes()
            })
            .collect();
        Ok(PolicyList {
            policies,
            field,
            members,
        })
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

    /// [`write`](Self::write) with the current limit of policy `deciding` given as its
    /// `remaining` quota and the time until it is fully restored, `reset` (written in whole
    /// seconds, rounded up): the same fields, built without intermediate values, for servers
    /// that write them on every response.
    ///
    /// ```
    /// use flowguard::headers::{HeaderStyle, PolicyList, PolicyName, QuotaPolicy};
    /// use http::HeaderMap;
    /// use std::time::Duration;
    ///
    /// let list = PolicyList::new(vec![QuotaPolicy::new(PolicyName::new("day")?, 100)])?;
    /// let mut headers = HeaderMap::new();
    /// list.write_remaining(HeaderStyle::Ietf, &mut headers, 0, 7, Duration::from_millis(1500));
    /// assert_eq!(headers["ratelimit"], r#""day";r=7;t=2"#);
    /// # Ok::<(), flowguard::headers::FieldError>(())
    /// ```
    pub fn write_remaining(
        &self,
        style: HeaderStyle,
        headers: &mut HeaderMap,
        deciding: usize,
        remaining: u32,
        reset: Duration,
    ) {
        let Some(policy) = self.policies.get(deciding) else {
            return;
        };
        if style == HeaderStyle::Ietf {
            headers.append(RATELIMIT_POLICY, self.field.clone());
            if let Some(value) = self.limit_value(deciding, remaining, reset) {
                headers.append(RATELIMIT, value);
            }
            return;
        }
        let limit = ServiceLimit::new(policy.name().clone(), remaining);
        let limit = limit.clone().with_reset(reset).unwrap_or(limit);
        self.write(style, headers, deciding, Some(&limit));
    }
}

impl PolicyList {
    /// The `RateLimit` field value of policy `deciding` with `remaining` quota, fully restored in
    /// `reset` (whole seconds, rounded up): `"name";r=7;t=2`, in one allocation of its exact
    /// size. `None` for a policy the list does not have.
    pub(crate) fn limit_value(
        &self,
        deciding: usize,
        remaining: u32,
        reset: Duration,
    ) -> Option<HeaderValue> {
        let member = self.members.get(deciding)?;
        let remaining = Decimal::new(u64::from(remaining));
        let reset = Decimal::new(ceil_secs(reset).min(MAX_INTEGER));
        let mut value = Vec::with_capacity(member.len() + remaining.len() + 3 + reset.len());
        value.extend_from_slice(member);
        value.extend_from_slice(remaining.as_bytes());
        value.extend_from_slice(b";t=");
        value.extend_from_slice(reset.as_bytes());
        // Exactly as long as its capacity: the value takes the vector's buffer as it is.
        HeaderValue::try_from(value).ok()
    }
}

/// Most distinct lines kept for the life of the process; lists built past them (a program that
/// makes lists on the fly) share their line by reference count instead.
const MAX_INTERNED: usize = 4096;

/// `line`, kept for the life of the process: one copy per distinct line, however many lists
/// are built with it; `None` once [`MAX_INTERNED`] lines are kept.
fn intern(line: &str) -> Option<&'static str> {
    static LINES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut lines = LINES.lock();
    if let Some(kept) = lines.get(line) {
        return Some(kept);
    }
    if lines.len() >= MAX_INTERNED {
        return None;
    }
    let kept: &'static str = Box::leak(Box::from(line));
    lines.insert(kept);
    Some(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::PolicyName;

    #[test]
    fn lists_of_the_same_policies_share_one_static_line() {
        let list = || {
            PolicyList::new(vec![
                QuotaPolicy::new(PolicyName::new("interned a").unwrap(), 10),
                QuotaPolicy::new(PolicyName::new("interned b").unwrap(), 20),
            ])
            .unwrap()
        };
        let (one, two) = (list(), list());
        assert_eq!(one.field_value(), r#""interned a";q=10, "interned b";q=20"#);
        assert_eq!(
            one.field_value().as_bytes().as_ptr(),
            two.field_value().as_bytes().as_ptr(),
            "one copy of the line"
        );
        let value = one.limit_value(1, 7, Duration::from_millis(1500)).unwrap();
        assert_eq!(value, r#""interned b";r=7;t=2"#);
        assert_eq!(one.limit_value(2, 7, Duration::ZERO), None);
    }
}
