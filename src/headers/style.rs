//! [`HeaderStyle`]: which rate-limit fields a server writes, and how stacked limits share them.

use http::HeaderMap;

use super::legacy;
use super::names::{RATELIMIT, RATELIMIT_POLICY};
use super::policy::QuotaPolicy;
use super::service_limit::ServiceLimit;

/// Which rate-limit fields a server writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// The IETF structured fields (draft-ietf-httpapi-ratelimit-headers): `RateLimit-Policy`
    /// lists the policy, `RateLimit` gives its current limit. The default.
    #[default]
    Ietf,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (delay-seconds), for
    /// clients that know only those.
    Legacy,
    /// Both sets, while clients move from the legacy fields to the IETF ones.
    Both,
}

impl HeaderStyle {
    /// Writes what `policy` tells the client about this response, `limit` being its current
    /// service limit, or `None` when it is not known (then no numbers are made up: the IETF
    /// style lists the policy without a `RateLimit` member, the legacy one writes only
    /// `X-RateLimit-Limit`).
    ///
    /// Nothing is overwritten, so stacked rate limits each keep their say: the IETF members are
    /// appended to the fields (one field line each, which RFC 9651 reads as one list); the
    /// legacy fields hold the policy closest to exhaustion.
    ///
    /// ```
    /// use flowguard::headers::{HeaderStyle, PolicyName, QuotaPolicy, ServiceLimit};
    /// use http::HeaderMap;
    ///
    /// let second = QuotaPolicy::new(PolicyName::new("second")?, 10);
    /// let day = QuotaPolicy::new(PolicyName::new("day")?, 1000);
    /// let mut headers = HeaderMap::new();
    /// HeaderStyle::Both.write(&mut headers, &second, Some(&ServiceLimit::new(second.name().clone(), 4)));
    /// HeaderStyle::Both.write(&mut headers, &day, Some(&ServiceLimit::new(day.name().clone(), 999)));
    /// assert_eq!(QuotaPolicy::from_headers(&headers)?, vec![second, day]);
    /// assert_eq!(ServiceLimit::from_headers(&headers)?.len(), 2);
    /// assert_eq!(headers["x-ratelimit-remaining"], "4");
    /// # Ok::<(), flowguard::headers::FieldError>(())
    /// ```
    pub fn write(
        self,
        headers: &mut HeaderMap,
        policy: &QuotaPolicy,
        limit: Option<&ServiceLimit>,
    ) {
        if matches!(self, HeaderStyle::Ietf | HeaderStyle::Both) {
            headers.append(RATELIMIT_POLICY, policy.to_field_value());
            if let Some(limit) = limit {
                headers.append(RATELIMIT, limit.to_field_value());
            }
        }
        if matches!(self, HeaderStyle::Legacy | HeaderStyle::Both) {
            legacy::write(headers, policy, limit);
        }
    }
}
