//! [`QuotaLayerBuilder`]: policies and tiers, compiled into a [`QuotaLayer`] over one
//! [`LimitSet`]; [`LayerBuildError`]: what it refuses.

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::sync::Arc;

use super::config::{Config, PolicyRule, Tier};
use super::layer::QuotaLayer;
use super::policy::{MissingKey, Policy, Scope};
use super::refusal::JsonRefusal;
use crate::gcra::observe::{Counters, NO_POLICY};
use crate::gcra::{LimitSet, LimitSpec, MemoryLimitSet, Quota};
use crate::headers::{FieldError, HeaderStyle, PolicyList, PolicyName};

/// The tier [`QuotaLayerBuilder::policy`] adds to.
const DEFAULT_TIER: &str = "default";

impl<K> QuotaLayer<(), K> {
    /// Starts a layer keyed by `key` (e.g. [`HeaderKey`](super::HeaderKey),
    /// [`PeerIpKey`](super::PeerIpKey), a closure); add policies, then build.
    pub fn builder(key: K) -> QuotaLayerBuilder<K> {
        QuotaLayerBuilder::new(key)
    }
}

/// Configures a [`QuotaLayer`]: [`QuotaLayer::builder`].
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Clone, Debug)]
pub struct QuotaLayerBuilder<K> {
    key: K,
    tiers: Vec<(String, Vec<Policy>)>,
}

impl<K> QuotaLayerBuilder<K> {
    fn new(key: K) -> QuotaLayerBuilder<K> {
        QuotaLayerBuilder { key, tiers: vec![] }
    }

    /// Adds `policy` to the tier `"default"` (created on first use). Requests count against
    /// every policy of their tier: allowed only if all allow, and a denial spends nothing.
    pub fn policy(mut self, policy: Policy) -> Self {
        match self.tiers.iter_mut().find(|(name, _)| name == DEFAULT_TIER) {
            Some((_, policies)) => policies.push(policy),
            None => self.tiers.push((DEFAULT_TIER.to_owned(), vec![policy])),
        }
        self
    }

    /// Adds the tier `name` with its `policies` (e.g. a plan: `"free"`, `"pro"`). The key
    /// extractor's [`tier`](super::KeyExtractor::tier) picks a request's tier; the first tier
    /// declared is the default, for requests in no tier or in one the layer does not know.
    /// Tiers share the set: one store for every tier.
    pub fn tier(
        mut self,
        name: impl Into<String>,
        policies: impl IntoIterator<Item = Policy>,
    ) -> Self {
        self.tiers
            .push((name.into(), policies.into_iter().collect()));
        self
    }

    /// Keeps the quotas in memory ([`MemoryLimitSet`] with its defaults: atomic, up to 2^20
    /// keys per policy). See [`build_with`](Self::build_with) for other stores and settings.
    pub fn build(self) -> Result<QuotaLayer<MemoryLimitSet, K>, LayerBuildError> {
        self.build_with(|specs| {
            Ok::<_, std::convert::Infallible>(MemoryLimitSet::new(
                specs.iter().map(LimitSpec::quota),
            ))
        })
    }

    /// Keeps the quotas in the set `make` builds from the layer's limits, in order: one per
    /// per-key policy of each tier (named `"<tier>:<policy>"`) and one per global policy
    /// (`"global:<policy>"`). For example an in-memory set on a test clock:
    ///
    /// ```
    /// use flowguard::clock::ManualClock;
    /// use flowguard::gcra::layer::{HeaderKey, Policy, QuotaLayer};
    /// use flowguard::gcra::{LimitSpec, MemoryLimitSet, Quota};
    ///
    /// let layer = QuotaLayer::builder(HeaderKey::new("x-api-key")?)
    ///     .policy(Policy::per_key("per-second", Quota::per_second(10)?))
    ///     .build_with(|limits| {
    ///         MemoryLimitSet::builder(limits.iter().map(LimitSpec::quota))
    ///             .max_keys(100_000)
    ///             .clock(ManualClock::new())
    ///             .build()
    ///     })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The set must have exactly these limits with these quotas ([`LayerBuildError::SetMismatch`]
    /// otherwise).
    pub fn build_with<J, E>(
        self,
        make: impl FnOnce(&[LimitSpec]) -> Result<J, E>,
    ) -> Result<QuotaLayer<J, K>, LayerBuildError>
    where
        J: LimitSet,
        E: Into<Box<dyn Error + Send + Sync>>,
    {
        let (specs, tiers) = compile(&self.tiers)?;
        let set = make(&specs).map_err(|e| LayerBuildError::Store(e.into()))?;
        check_set(&set, &specs)?;
        Ok(QuotaLayer::from_parts(
            Arc::new(set),
            self.key,
            Config {
                tiers,
                missing: MissingKey::default(),
                shadow: false,
                style: HeaderStyle::default(),
            },
            JsonRefusal,
        ))
    }
}

/// The limits the tiers need, and the tiers as the layer applies them.
fn compile(
    tiers: &[(String, Vec<Policy>)],
) -> Result<(Vec<LimitSpec>, Box<[Tier]>), LayerBuildError> {
    if tiers.is_empty() {
        return Err(LayerBuildError::NoPolicy);
    }
    let mut specs = Vec::new();
    let mut globals: HashMap<&str, (usize, Quota)> = HashMap::new();
    let mut compiled = Vec::with_capacity(tiers.len());
    for (i, (tier, policies)) in tiers.iter().enumerate() {
        if tiers[..i].iter().any(|(other, _)| other == tier) {
            return Err(LayerBuildError::DuplicateTier { tier: tier.clone() });
        }
        if policies.is_empty() {
            return Err(LayerBuildError::EmptyTier { tier: tier.clone() });
        }
        let mut rules = Vec::with_capacity(policies.len());
        let mut advertised = Vec::with_capacity(policies.len());
        for (j, policy) in policies.iter().enumerate() {
            if policies[..j].iter().any(|p| p.name() == policy.name()) {
                return Err(LayerBuildError::DuplicatePolicy {
                    tier: tier.clone(),
                    policy: policy.name().to_owned(),
                });
            }
            let name =
                PolicyName::new(policy.name()).map_err(|source| LayerBuildError::PolicyName {
                    policy: policy.name().to_owned(),
                    source,
                })?;
            let limit = match policy.scope() {
                Scope::Global => match globals.get(policy.name()) {
                    Some(&(limit, quota)) if quota == policy.quota() => limit,
                    Some(_) => {
                        return Err(LayerBuildError::ConflictingGlobal {
                            policy: policy.name().to_owned(),
                        });
                    }
                    None => {
                        specs.push(LimitSpec::new(
                            format!("global:{}", policy.name()),
                            policy.quota(),
                        ));
                        globals.insert(policy.name(), (specs.len() - 1, policy.quota()));
                        specs.len() - 1
                    }
                },
                _ => {
                    specs.push(LimitSpec::new(
                        format!("{tier}:{}", policy.name()),
                        policy.quota(),
                    ));
                    specs.len() - 1
                }
            };
            advertised.push(policy.quota().rate_limit_policy(name.clone()));
            rules.push(PolicyRule {
                counters: Counters::new(tier, name.as_str()),
                name,
                limit,
                global: policy.scope() == Scope::Global,
            });
        }
        compiled.push(Tier {
            keyless: Counters::new(tier, NO_POLICY),
            name: tier.clone(),
            policies: rules.into(),
            // Not empty: checked above.
            list: PolicyList::new(advertised).map_err(|source| LayerBuildError::PolicyName {
                policy: tier.clone(),
                source,
            })?,
        });
    }
    Ok((specs, compiled.into()))
}

/// The set has the limits the layer asked for.
fn check_set<J: LimitSet>(set: &J, specs: &[LimitSpec]) -> Result<(), LayerBuildError> {
    if set.limits() != specs.len() {
        return Err(LayerBuildError::SetMismatch {
            limit: set.limits().min(specs.len()),
            expected: specs.len(),
            limits: set.limits(),
        });
    }
    for (i, spec) in specs.iter().enumerate() {
        if set.quota(i) != Some(spec.quota()) {
            return Err(LayerBuildError::SetMismatch {
                limit: i,
                expected: specs.len(),
                limits: set.limits(),
            });
        }
    }
    Ok(())
}

/// What [`QuotaLayerBuilder`] refuses; each says what to change.
#[derive(Debug)]
#[non_exhaustive]
pub enum LayerBuildError {
    /// No policy was given: add one with [`policy`](QuotaLayerBuilder::policy) or a
    /// [`tier`](QuotaLayerBuilder::tier).
    NoPolicy,
    /// A tier without policies: give it at least one.
    EmptyTier {
        /// The tier.
        tier: String,
    },
    /// Two tiers of the same name: rename one.
    DuplicateTier {
        /// The name.
        tier: String,
    },
    /// Two policies of the same name in one tier: clients could not tell their fields apart.
    DuplicatePolicy {
        /// The tier.
        tier: String,
        /// The name.
        policy: String,
    },
    /// A policy name that the rate-limit fields cannot carry: use printable ASCII.
    PolicyName {
        /// The name.
        policy: String,
        /// Why.
        source: FieldError,
    },
    /// A global policy given different quotas in different tiers: a global policy is one quota;
    /// give it the same one everywhere, or different names.
    ConflictingGlobal {
        /// The name.
        policy: String,
    },
    /// The set built by [`build_with`](QuotaLayerBuilder::build_with) does not have the limits
    /// asked for: limit `limit` is missing or has another quota. Build it from the limits given.
    SetMismatch {
        /// The first limit that differs.
        limit: usize,
        /// How many limits were asked for.
        expected: usize,
        /// How many the set has.
        limits: usize,
    },
    /// The set could not be built.
    Store(Box<dyn Error + Send + Sync>),
}

impl fmt::Display for LayerBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerBuildError::NoPolicy => {
                f.write_str("the quota layer has no policy: add one with `policy` or `tier`")
            }
            LayerBuildError::EmptyTier { tier } => {
                write!(f, "tier {tier:?} has no policy: give it at least one")
            }
            LayerBuildError::DuplicateTier { tier } => {
                write!(f, "two tiers are named {tier:?}: rename one")
            }
            LayerBuildError::DuplicatePolicy { tier, policy } => write!(
                f,
                "tier {tier:?} has two policies named {policy:?}: clients could not tell them apart; rename one"
            ),
            LayerBuildError::PolicyName { policy, source } => {
                write!(f, "policy name {policy:?} cannot be advertised: {source}")
            }
            LayerBuildError::ConflictingGlobal { policy } => write!(
                f,
                "global policy {policy:?} has different quotas in different tiers: a global policy is one quota; \
                 give it the same quota everywhere or use different names"
            ),
            LayerBuildError::SetMismatch {
                limit,
                expected,
                limits,
            } => write!(
                f,
                "the limit set has {limits} limits, the layer needs {expected}, and limit {limit} is missing or has \
                 another quota: build the set from the limits `build_with` passes, in order"
            ),
            LayerBuildError::Store(e) => write!(f, "the limit set could not be built: {e}"),
        }
    }
}

impl Error for LayerBuildError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            LayerBuildError::PolicyName { source, .. } => Some(source),
            LayerBuildError::Store(e) => Some(&**e),
            _ => None,
        }
    }
}
