//! [`RuleSet`]: a loaded configuration with a limit for every rate, and the handle through which
//! requests see the current one while reloads swap it.

use std::sync::Arc;

use parking_lot::RwLock;

use flowguard::headers::{PolicyName, QuotaPolicy};

use super::backend::{Backend, Limits};
use super::config::{ConfigError, ConfigSet, Limit, LimitRule};
use super::metrics::RuleCounters;

/// A rule's limit: its number in the set, and the `RateLimit-Policy` it is described by.
#[derive(Clone, Debug)]
pub struct RuleLimit {
    /// The limit number in [`RuleSet::limits`].
    pub limit: usize,
    /// The policy the response headers name: the rule's `name`, else its configured path.
    pub policy: QuotaPolicy,
}

/// A configuration ready to serve: every rule with a rate has its limit in one set.
#[derive(Debug)]
pub struct RuleSet {
    config: ConfigSet,
    rule_limits: Vec<Option<RuleLimit>>,
    limits: Limits,
    /// The metric counters of each rule, by rule id.
    counters: Vec<RuleCounters>,
}

impl RuleSet {
    /// Gets a limit for every rate of `config` from `backend`. A rate the backend cannot
    /// enforce is an error at the rule's place in its file.
    pub fn compile(config: ConfigSet, backend: &Backend) -> Result<RuleSet, ConfigError> {
        let mut rule_limits = vec![None; config.rule_count()];
        for rule in config.rules() {
            if let Limit::Rate(rate) = &rule.limit {
                let at_rate = |problem| ConfigError {
                    location: {
                        let mut at = rule.location.clone();
                        at.path.push_str(".rate_limit");
                        at
                    },
                    problem,
                };
                let limit = backend.limit(rate).map_err(at_rate)?;
                let quota = crate::backend::quota(rate).map_err(at_rate)?;
                rule_limits[rule.id] = Some(RuleLimit {
                    limit,
                    policy: quota.rate_limit_policy(policy_name(rule)),
                });
            }
        }
        // Taken after every rate was added: the set has them all.
        let limits = backend.limits();
        let counters = (0..config.rule_count())
            .map(|_| RuleCounters::default())
            .collect();
        Ok(RuleSet {
            config,
            rule_limits,
            limits,
            counters,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ConfigSet {
        &self.config
    }

    /// The limit of a rule with a rate.
    pub fn limit(&self, rule: &LimitRule) -> Option<&RuleLimit> {
        self.rule_limits.get(rule.id).and_then(Option::as_ref)
    }

    /// The metric counters of a rule of this set; `None` for a rule made for a request (a limit
    /// override), which is no rule of the configuration.
    pub fn counters(&self, rule: &LimitRule) -> Option<&RuleCounters> {
        self.counters.get(rule.id)
    }

    /// The set every rule's limit is in.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// The rule's `name`, else its configured path, as a policy name: characters a header cannot
/// carry (outside printable ASCII) become `?`.
fn policy_name(rule: &LimitRule) -> PolicyName {
    let name: String = rule
        .name
        .as_deref()
        .unwrap_or(&rule.stat_path)
        .chars()
        .map(|c| if matches!(c, ' '..='~') { c } else { '?' })
        .collect();
    PolicyName::new(name).unwrap_or_default()
}

/// The rule set in force, swapped whole by reloads: a request holds the set it started with until
/// it is answered, so a reload never drops or mixes requests.
#[derive(Clone, Debug)]
pub struct Rules(Arc<RwLock<Arc<RuleSet>>>);

impl Rules {
    /// Starts with `rules`.
    pub fn new(rules: RuleSet) -> Rules {
        Rules(Arc::new(RwLock::new(Arc::new(rules))))
    }

    /// The set in force.
    pub fn current(&self) -> Arc<RuleSet> {
        self.0.read().clone()
    }

    /// Puts `rules` in force.
    pub fn replace(&self, rules: RuleSet) {
        *self.0.write() = Arc::new(rules);
    }
}
