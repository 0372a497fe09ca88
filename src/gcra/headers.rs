//! The HTTP fields of GCRA, written through [`crate::headers`]: a [`Quota`] as a
//! `RateLimit-Policy` member, a [`Decision`] as a `RateLimit` member and `Retry-After`.

use http::HeaderMap;

use super::decision::Decision;
use super::quota::Quota;
use crate::headers::{HeaderStyle, PolicyName, QuotaPolicy, ServiceLimit, write_retry_after};

impl Quota {
    /// This quota as the `RateLimit-Policy` member `name`: quota `q` = the burst `B`, window
    /// `w` = `B * T` (the time a drained key takes to earn its whole burst back) in seconds,
    /// rounded up.
    ///
    /// ```
    /// use flowguard::gcra::Quota;
    /// use flowguard::headers::PolicyName;
    ///
    /// let policy = Quota::per_minute(100)?.with_burst(20)?.rate_limit_policy(PolicyName::default());
    /// assert_eq!(policy.to_field_value(), r#""default";q=20;w=12"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rate_limit_policy(&self, name: PolicyName) -> QuotaPolicy {
        let policy = QuotaPolicy::new(name, self.burst());
        // `B * T` is positive and at most `MAX_WINDOW` (about 146 years), far inside what the
        // field can carry, so `w` is always written; were it not, the policy would go out
        // without its optional `w` rather than with a made-up one.
        policy
            .clone()
            .with_window(self.burst_window())
            .unwrap_or(policy)
    }
}

impl Decision {
    /// This decision's `RateLimit` member under policy `name`: remaining `r` = [`remaining`],
    /// `t` = [`reset_after`] (the time until the full burst is back) in seconds, rounded up.
    ///
    /// `None` for a [degraded](Decision::degraded) decision: its numbers do not come from the
    /// shared state (failing open knows nothing; a local fallback knows only this instance's
    /// share of the quota), so none are advertised.
    ///
    /// [`remaining`]: Decision::remaining
    /// [`reset_after`]: Decision::reset_after
    pub fn service_limit(&self, name: &PolicyName) -> Option<ServiceLimit> {
        if self.degraded.is_some() {
            return None;
        }
        let limit = ServiceLimit::new(name.clone(), self.remaining);
        // `reset_after` is at most the quota's window, far inside what `t` can carry.
        Some(limit.clone().with_reset(self.reset_after).unwrap_or(limit))
    }

    /// Writes this decision, taken under `policy`, into `headers` in `style`:
    ///
    /// * the policy (`RateLimit-Policy`, or `X-RateLimit-Limit`), always: it is configuration;
    /// * its [`service_limit`](Self::service_limit) (`RateLimit`, or `X-RateLimit-Remaining`
    ///   and `X-RateLimit-Reset`), unless the decision is degraded;
    /// * for a denial, `Retry-After` = [`retry_after`](Decision::retry_after) in seconds,
    ///   rounded **up**, so a client that waits exactly that long is allowed. A degraded
    ///   denial carries its failure policy's wait (the time until the store is probed again,
    ///   or the local fallback's answer).
    ///
    /// Earlier fields are kept (see [`HeaderStyle::write`]), so stacked limits add up.
    ///
    /// ```
    /// use flowguard::gcra::{Quota, RateLimiter};
    /// use flowguard::clock::ManualClock;
    /// use flowguard::headers::{HeaderStyle, PolicyName};
    /// use http::HeaderMap;
    ///
    /// let quota = Quota::per_minute(2)?;
    /// let limiter = RateLimiter::builder(quota).clock(ManualClock::new()).build()?;
    /// limiter.check_n(2)?;
    /// let policy = quota.rate_limit_policy(PolicyName::default());
    /// let mut headers = HeaderMap::new();
    /// limiter.check()?.write_headers(&policy, HeaderStyle::Ietf, &mut headers);
    /// assert_eq!(headers["retry-after"], "30");
    /// assert_eq!(headers["ratelimit-policy"], r#""default";q=2;w=60"#);
    /// assert_eq!(headers["ratelimit"], r#""default";r=0;t=60"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_headers(&self, policy: &QuotaPolicy, style: HeaderStyle, headers: &mut HeaderMap) {
        style.write(headers, policy, self.service_limit(policy.name()).as_ref());
        if let Some(wait) = self.retry_after {
            write_retry_after(headers, wait);
        }
    }
}
