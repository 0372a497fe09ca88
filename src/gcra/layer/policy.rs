//! [`Policy`]: one named quota a request counts against; [`MissingKey`]: what a request without
//! a key gets.

use http::StatusCode;

use crate::gcra::Quota;

/// Whose requests a [`Policy`] counts together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scope {
    /// Each key has its own quota.
    PerKey,
    /// All requests share one quota, whatever their key (e.g. what the backend can take).
    Global,
}

/// A named quota that requests count against: per key, or global. A request is allowed only if
/// every policy of its tier allows it, and a denial spends nothing from any of them. The name is
/// what the rate-limit fields advertise (`RateLimit-Policy: "per-second";q=10;w=1`), labels
/// metrics, and must be printable ASCII.
///
/// ```
/// use flowguard::gcra::layer::Policy;
/// use flowguard::gcra::Quota;
/// use std::time::Duration;
///
/// let policies = [
///     Policy::per_key("per-second", Quota::per_second(10)?),
///     Policy::per_key("per-day", Quota::new(10_000, Duration::from_secs(86_400))?),
///     Policy::global("global", Quota::per_second(5_000)?),
/// ];
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    name: String,
    quota: Quota,
    scope: Scope,
}

impl Policy {
    /// `quota` for each key, named `name`.
    pub fn per_key(name: impl Into<String>, quota: Quota) -> Policy {
        Policy {
            name: name.into(),
            quota,
            scope: Scope::PerKey,
        }
    }

    /// `quota` shared by every request, named `name`. A global policy of the same name in
    /// several tiers is one quota (the tiers must give it the same one).
    pub fn global(name: impl Into<String>, quota: Quota) -> Policy {
        Policy {
            name: name.into(),
            quota,
            scope: Scope::Global,
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Whose requests it counts together.
    pub fn scope(&self) -> Scope {
        self.scope
    }
}

/// What the layer does with a request that has no key (the extractor found none, or an empty
/// one): never a silent unlimited pass unless asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer with this status (a client error: `401 Unauthorized` when the key is a
    /// credential, `400 Bad Request` when the request is malformed), without calling the service.
    /// Counted in `flowguard_quota_decisions_total` under the request's tier and `policy=""`
    /// (no policy decided) as `denied`; in [shadow mode](super::QuotaLayer::shadow) the request
    /// passes, counted as `shadow_denied`.
    Reject(StatusCode),
    /// Count every request without a key as one client: they share one quota per per-key
    /// policy (global policies count them as usual). The default: keyless requests are limited
    /// together, and a misconfigured extractor degrades to one shared quota rather than to no
    /// limit or to refusing everyone.
    #[default]
    Anonymous,
    /// Let it through unlimited, without rate-limit fields (health checks, internal callers).
    Bypass,
}
