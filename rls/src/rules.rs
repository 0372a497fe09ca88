//! [`RuleSet`]: a loaded configuration with a limiter for every rate, and the handle through which
//! requests see the current one while reloads swap it.

use std::sync::Arc;

use parking_lot::RwLock;

use super::backend::{Backend, Limiter};
use super::config::{ConfigError, ConfigSet, Limit, LimitRule};

/// A configuration ready to serve: every rule with a rate has its limiter.
#[derive(Debug)]
pub struct RuleSet {
    config: ConfigSet,
    limiters: Vec<Option<Limiter>>,
}

impl RuleSet {
    /// Gets a limiter for every rate of `config` from `backend`. A rate the backend cannot
    /// enforce is an error at the rule's place in its file.
    pub fn compile(config: ConfigSet, backend: &Backend) -> Result<RuleSet, ConfigError> {
        let mut limiters = vec![None; config.rule_count()];
        for rule in config.rules() {
            if let Limit::Rate(rate) = &rule.limit {
                let limiter = backend.limiter(rate).map_err(|problem| ConfigError {
                    location: {
                        let mut at = rule.location.clone();
                        at.path.push_str(".rate_limit");
                        at
                    },
                    problem,
                })?;
                limiters[rule.id] = Some(limiter);
            }
        }
        Ok(RuleSet { config, limiters })
    }

    /// The configuration.
    pub fn config(&self) -> &ConfigSet {
        &self.config
    }

    /// The limiter of a rule with a rate.
    pub fn limiter(&self, rule: &LimitRule) -> Option<&Limiter> {
        self.limiters.get(rule.id).and_then(Option::as_ref)
    }
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
