//! The metrics `flowguard-rls` records, and the Prometheus exporter that serves them on the
//! debug listener's `/metrics` ([`install_exporter`]).
//!
//! Label values come from the configuration (domain, the configured descriptor path), never from
//! request values, unless a rule sets `detailed_metric: true`; unknown domains are counted without
//! their name, so clients cannot grow the label space. The library's own metrics (for example
//! [`DEGRADED_METRIC`](flowguard::gcra::remote::DEGRADED_METRIC) while Redis is down) are
//! exported beside them.

use std::sync::OnceLock;

use metrics::Counter;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Counter `{domain, descriptor, outcome}`: one per descriptor decided in a configured domain;
/// `outcome` is `ok`, `over_limit`, `shadow_over_limit`, `unlimited` or `no_rule`.
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
/// Counter: requests for a domain that is not configured (each such domain is also logged at
/// warn, once).
pub const UNKNOWN_DOMAIN: &str = "flowguard_rls_unknown_domain_total";
/// Histogram (seconds): time to answer a `ShouldRateLimit` call, errors included.
pub const LATENCY: &str = "flowguard_rls_request_duration_seconds";
/// Counter `{result}`: configuration reloads, `ok` or `rejected` (the old configuration stays).
pub const RELOADS: &str = "flowguard_rls_config_reloads_total";

/// The counters one rule's descriptors are counted in, labelled with the rule's domain and
/// configured path: a `{domain, descriptor, outcome}` series of [`DECISIONS`] per outcome, and its
/// series of [`OVER_LIMIT`], [`SHADOW_OVER_LIMIT`] and [`DEGRADED`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Series {
    /// [`DECISIONS`], outcome `ok`.
    Ok,
    /// [`DECISIONS`], outcome `over_limit`.
    OverLimit,
    /// [`DECISIONS`], outcome `shadow_over_limit`.
    ShadowOverLimit,
    /// [`DECISIONS`], outcome `unlimited`.
    Unlimited,
    /// [`OVER_LIMIT`].
    OverLimitTotal,
    /// [`SHADOW_OVER_LIMIT`].
    ShadowOverLimitTotal,
    /// [`DEGRADED`].
    Degraded,
}

impl Series {
    /// How many series there are.
    const COUNT: usize = 7;

    /// The series' counter for `domain` and `descriptor`, looked up (or created) in the global
    /// recorder.
    pub fn register(self, domain: &str, descriptor: &str) -> Counter {
        let (domain, descriptor) = (domain.to_string(), descriptor.to_string());
        let decisions = |outcome: &'static str| {
            metrics::counter!(DECISIONS, "domain" => domain.clone(),
                "descriptor" => descriptor.clone(), "outcome" => outcome)
        };
        match self {
            Series::Ok => decisions("ok"),
            Series::OverLimit => decisions("over_limit"),
            Series::ShadowOverLimit => decisions("shadow_over_limit"),
            Series::Unlimited => decisions("unlimited"),
            Series::OverLimitTotal => {
                metrics::counter!(OVER_LIMIT, "domain" => domain, "descriptor" => descriptor)
            }
            Series::ShadowOverLimitTotal => {
                metrics::counter!(SHADOW_OVER_LIMIT, "domain" => domain, "descriptor" => descriptor)
            }
            Series::Degraded => {
                metrics::counter!(DEGRADED, "domain" => domain, "descriptor" => descriptor)
            }
        }
    }
}

/// The [`Series`] counters of one rule, each registered with the global recorder on its first
/// use and kept: counting a descriptor then costs one atomic add, not a registry lookup with
/// labels made for it. Registered on first use rather than at load, so that a series appears
/// once it counts something, and so that the recorder installed after the configuration was
/// loaded is the one used.
#[derive(Debug, Default)]
pub struct RuleCounters([OnceLock<Counter>; Series::COUNT]);

impl RuleCounters {
    /// The counter of `series`, registered with `domain` and `descriptor` as labels on first use
    /// (every later call must pass the same: they are the rule's).
    pub fn get(&self, series: Series, domain: &str, descriptor: &str) -> &Counter {
        self.0[series as usize].get_or_init(|| series.register(domain, descriptor))
    }
}

/// The buckets of [`LATENCY`], in seconds: 50 us to 1 s.
const LATENCY_BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

/// Installs the global `metrics` recorder that keeps every metric for Prometheus, with the
/// service's metrics described (their `# HELP` lines) and [`LATENCY`] as a histogram. The handle
/// renders the text format; call [`PrometheusHandle::run_upkeep`] now and then (the debug
/// listener does). Fails if a recorder is installed already.
pub fn install_exporter() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(LATENCY.to_string()), &LATENCY_BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| format!("cannot install the metrics exporter: {e}"))?;
    describe();
    Ok(handle)
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(
        DECISIONS,
        "Descriptors decided, by domain, configured descriptor and outcome"
    );
    describe_counter!(OVER_LIMIT, "Enforced descriptors over their limit");
    describe_counter!(
        SHADOW_OVER_LIMIT,
        "Shadow-mode descriptors over their limit (answered OK)"
    );
    describe_counter!(
        DEGRADED,
        "Descriptors answered by the --on-redis-failure policy instead of Redis"
    );
    describe_counter!(
        BACKEND_ERRORS,
        "Requests answered UNAVAILABLE because the store failed"
    );
    describe_counter!(UNKNOWN_DOMAIN, "Requests for a domain no file configures");
    describe_histogram!(
        LATENCY,
        Unit::Seconds,
        "Time to answer a ShouldRateLimit call"
    );
    describe_counter!(RELOADS, "Configuration reloads, ok or rejected");
}
