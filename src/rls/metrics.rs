//! The metrics `flowguard-rls` records through the `metrics` facade (install any recorder, e.g. a
//! Prometheus exporter, to see them).
//!
//! Label values come from the configuration (domain, the configured descriptor path), never from
//! request values, unless a rule sets `detailed_metric: true`; unknown domains are counted without
//! their name, so clients cannot grow the label space.

/// Counter `{domain, descriptor, outcome}`: one per decided descriptor; `outcome` is `ok`,
/// `over_limit`, `shadow_over_limit`, `unlimited` or `no_rule`.
pub const DECISIONS: &str = "flowguard_rls_decisions_total";
/// Counter `{domain, descriptor}`: enforced descriptors over their limit.
pub const OVER_LIMIT: &str = "flowguard_rls_over_limit_total";
/// Counter `{domain, descriptor}`: shadow-mode descriptors over their limit (answered OK).
pub const SHADOW_OVER_LIMIT: &str = "flowguard_rls_shadow_over_limit_total";
/// Counter `{domain, descriptor}`: descriptors answered by a failure policy instead of the store.
pub const DEGRADED: &str = "flowguard_rls_degraded_total";
/// Counter `{kind}`: requests answered `UNAVAILABLE` because the store failed (`unavailable`,
/// `full`, `rejected`).
pub const BACKEND_ERRORS: &str = "flowguard_rls_backend_errors_total";
/// Counter: requests for a domain that is not configured.
pub const UNKNOWN_DOMAIN: &str = "flowguard_rls_unknown_domain_total";
/// Histogram (seconds): time to answer a `ShouldRateLimit` call, errors included.
pub const LATENCY: &str = "flowguard_rls_request_duration_seconds";
/// Counter `{result}`: configuration reloads, `ok` or `rejected` (the old configuration stays).
pub const RELOADS: &str = "flowguard_rls_config_reloads_total";
