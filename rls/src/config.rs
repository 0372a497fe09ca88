//! The configuration of `flowguard-rls`: envoyproxy/ratelimit's YAML format, parsed and checked.
//!
//! One file holds one domain:
//!
//! ```yaml
//! domain: shop
//! descriptors:
//!   - key: remote_address          # key only: one quota per distinct value
//!     rate_limit:
//!       unit: minute
//!       requests_per_unit: 60
//!       burst: 10                  # flowguard addition (GCRA); default: requests_per_unit
//!   - key: path
//!     value: /checkout             # a value entry beats a key-only entry at the same level
//!     rate_limit: { unit: second, requests_per_unit: 5 }
//!     shadow_mode: true            # answer OK, count what would have been denied
//!   - key: tenant
//!     descriptors:                 # nested: matched entry by entry
//!       - key: plan
//!         value: internal
//!         rate_limit: { unlimited: true }
//! ```
//!
//! Parsing is pure ([`parse_domain`]); reading files lives in [`super::source`]. Every error
//! names the file, the path inside it (`descriptors[1].rate_limit.unit`) and what to change.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The unit of `requests_per_unit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// One minute.
    Minute,
    /// One hour.
    Hour,
    /// One day (86,400 s).
    Day,
    /// One week (7 days).
    Week,
    /// One month: 30 days, as envoyproxy/ratelimit counts it.
    Month,
    /// One year: 365 days, as envoyproxy/ratelimit counts it.
    Year,
}

impl Unit {
    /// The length of the unit.
    pub fn period(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        })
    }

    /// The unit's name as the protobuf enum spells it (`SECOND`, `MINUTE`, …).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    fn parse(text: &str) -> Option<Unit> {
        match text.to_ascii_lowercase().as_str() {
            "second" => Some(Unit::Second),
            "minute" => Some(Unit::Minute),
            "hour" => Some(Unit::Hour),
            "day" => Some(Unit::Day),
            "week" => Some(Unit::Week),
            "month" => Some(Unit::Month),
            "year" => Some(Unit::Year),
            _ => None,
        }
    }
}

/// A configured rate: `requests_per_unit` per `unit`, spent at most `burst` at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Requests (tokens) per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
    /// The GCRA burst; `None` means `requests_per_unit`.
    pub burst: Option<u32>,
}

/// What a matched descriptor is limited by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `rate_limit: { unlimited: true }`: always OK, nothing counted against a quota.
    Unlimited,
    /// A rate, enforced per distinct descriptor.
    Rate(Rate),
}

/// The limit attached to one configured descriptor, with its options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitRule {
    /// The limit.
    pub limit: Limit,
    /// `rate_limit.name`, reported in `current_limit.name`.
    pub name: Option<String>,
    /// `rate_limit.replaces[].name`: when this rule applies, rules with these names in the same
    /// request are not applied (as envoyproxy/ratelimit does).
    pub replaces: Vec<String>,
    /// The entries whose wildcard values share one threshold (`share_threshold: true` on that
    /// descriptor or one above): (entry index, configured value such as `files/*`). The quota
    /// key holds the configured value there instead of the request's, so every matching value
    /// spends one quota.
    pub shared_values: Vec<(usize, String)>,
    /// `shadow_mode`: decide and count, but always answer OK.
    pub shadow_mode: bool,
    /// `detailed_metric`: label metrics with the request's values rather than the config path.
    pub detailed_metric: bool,
    /// The configured path, `key1_value1.key2`, as the reference service names its statistics.
    pub stat_path: String,
    /// Where the rule is written: file and path inside it.
    pub location: Location,
    /// The rule's index in its [`ConfigSet`] (see [`ConfigSet::rules`]).
    pub id: usize,
}

/// A place in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub file: PathBuf,
    /// The path inside it, e.g. `descriptors[0].descriptors[2]`.
    pub path: String,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.file.display())
        } else {
            write!(f, "{}: at {}", self.file.display(), self.path)
        }
    }
}

/// A configuration that cannot be loaded: where, and what to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong and what to change.
    pub problem: String,
}

impl ConfigError {
    pub(crate) fn new(file: &Path, path: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError {
            location: Location {
                file: file.to_path_buf(),
                path: path.into(),
            },
            problem: problem.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.problem)
    }
}

impl std::error::Error for ConfigError {}

/// How a configured descriptor matches a request entry's value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ValueMatch {
    Any,
    Exact(String),
    Prefix(String),
}

/// One configured descriptor: its rule (if any) and its children.
#[derive(Clone, Debug, Default)]
struct Level {
    /// key → value → node index.
    exact: HashMap<String, HashMap<String, usize>>,
    /// key → (prefix, node index), longest prefix first.
    prefix: HashMap<String, Vec<(String, usize)>>,
    /// key → node index.
    any: HashMap<String, usize>,
    nodes: Vec<Node>,
}

#[derive(Clone, Debug)]
struct Node {
    rule: Option<LimitRule>,
    children: Level,
}

impl Level {
    /// The node for one request entry: an exact value, else the longest wildcard prefix, else the
    /// key alone.
    fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let exact = self.exact.get(key).and_then(|values| values.get(value));
        let index = exact
            .or_else(|| {
                self.prefix.get(key).and_then(|prefixes| {
                    prefixes
                        .iter()
                        .find(|(prefix, _)| value.starts_with(prefix.as_str()))
                        .map(|(_, i)| i)
                })
            })
            .or_else(|| self.any.get(key))?;
        self.nodes.get(*index)
    }
}

/// One domain's descriptor tree.
#[derive(Clone, Debug)]
pub struct DomainConfig {
    domain: String,
    file: PathBuf,
    root: Level,
}

impl DomainConfig {
    /// The domain name.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The file it was read from.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

/// What a request descriptor matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The domain is not configured.
    UnknownDomain,
    /// No configured descriptor with a limit matches every entry of the request descriptor.
    NoRule,
    /// The rule of the configured descriptor that matched all entries.
    Rule(&'a LimitRule),
}

/// Every loaded domain.
#[derive(Clone, Debug, Default)]
pub struct ConfigSet {
    domains: HashMap<String, DomainConfig>,
    rule_count: usize,
}

impl ConfigSet {
    /// Gathers domains; two files for one domain is an error naming both.
    pub fn new(domains: Vec<DomainConfig>) -> Result<ConfigSet, ConfigError> {
        let mut set = ConfigSet::default();
        for mut domain in domains {
            if let Some(first) = set.domains.get(&domain.domain) {
                return Err(ConfigError::new(
                    &domain.file,
                    "domain",
                    format!(
                        "domain {:?} is already configured in {}: give each domain one file",
                        domain.domain,
                        first.file.display()
                    ),
                ));
            }
            number_rules(&mut domain.root, &mut set.rule_count);
            set.domains.insert(domain.domain.clone(), domain);
        }
        Ok(set)
    }

    /// Matches a request descriptor (its entries in order) in `domain`, as envoyproxy/ratelimit
    /// does: entry by entry down the tree, an exact value beating a wildcard (`value: foo*`)
    /// beating a key-only entry; the limit applies only when the last entry matched a configured
    /// descriptor that has one.
    pub fn lookup<'a, 'e>(
        &'a self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
    ) -> Lookup<'a> {
        let Some(config) = self.domains.get(domain) else {
            return Lookup::UnknownDomain;
        };
        let mut level = &config.root;
        let mut found: Option<&Node> = None;
        for (key, value) in entries {
            if let Some(node) = found {
                level = &node.children;
            }
            match level.find(key, value) {
                Some(node) => found = Some(node),
                None => return Lookup::NoRule,
            }
        }
        match found.and_then(|node| node.rule.as_ref()) {
            Some(rule) => Lookup::Rule(rule),
            None => Lookup::NoRule,
        }
    }

    /// Every rule of every domain, in no particular order; ids run from 0 to `rule_count() - 1`.
    pub fn rules(&self) -> Vec<&LimitRule> {
        let mut out = Vec::with_capacity(self.rule_count);
        for domain in self.domains.values() {
            collect_rules(&domain.root, &mut out);
        }
        out
    }

    /// How many rules there are.
    pub fn rule_count(&self) -> usize {
        self.rule_count
    }

    /// Whether `domain` is configured.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The configured domains.
    pub fn domains(&self) -> impl Iterator<Item = &DomainConfig> {
        self.domains.values()
    }

    /// Every rule as one line, sorted: `domain.path: unit=MINUTE requests_per_unit=60
    /// burst=60, shadow_mode: false` (as envoyproxy/ratelimit's `/rlconfig` prints them, plus the
    /// burst and the name), or `domain.path: unlimited, shadow_mode: false`.
    ///
    /// ```
    /// use flowguard_rls::config::{ConfigSet, parse_domain};
    ///
    /// let text = "domain: shop\ndescriptors:\n  - key: ip\n    rate_limit: { unit: minute, requests_per_unit: 60 }\n";
    /// let set = ConfigSet::new(vec![parse_domain("shop.yaml".as_ref(), text)?])?;
    /// assert_eq!(set.dump(), "shop.ip: unit=MINUTE requests_per_unit=60 burst=60, shadow_mode: false\n");
    /// # Ok::<(), flowguard_rls::config::ConfigError>(())
    /// ```
    pub fn dump(&self) -> String {
        let mut lines = Vec::with_capacity(self.rule_count);
        for domain in self.domains.values() {
            let mut rules = Vec::new();
            collect_rules(&domain.root, &mut rules);
            for rule in rules {
                let limit = match rule.limit {
                    Limit::Unlimited => "unlimited".to_string(),
                    Limit::Rate(rate) => format!(
                        "unit={} requests_per_unit={} burst={}",
                        rate.unit.name(),
                        rate.requests_per_unit,
                        rate.burst.unwrap_or(rate.requests_per_unit)
                    ),
                };
                let name = match &rule.name {
                    Some(name) => format!(", name: {name}"),
                    None => String::new(),
                };
                lines.push(format!(
                    "{}.{}: {limit}, shadow_mode: {}{name}\n",
                    domain.domain, rule.stat_path, rule.shadow_mode
                ));
            }
        }
        lines.sort();
        lines.concat()
    }
}

fn number_rules(level: &mut Level, next: &mut usize) {
    for node in &mut level.nodes {
        if let Some(rule) = &mut node.rule {
            rule.id = *next;
            *next += 1;
        }
        number_rules(&mut node.children, next);
    }
}

fn collect_rules<'a>(level: &'a Level, out: &mut Vec<&'a LimitRule>) {
    for node in &level.nodes {
        if let Some(rule) = &node.rule {
            out.push(rule);
        }
        collect_rules(&node.children, out);
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    domain: Option<String>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: Option<String>,
    value: Option<String>,
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    share_threshold: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    unit: Option<String>,
    requests_per_unit: Option<u32>,
    #[serde(default)]
    unlimited: bool,
    name: Option<String>,
    burst: Option<u32>,
    #[serde(default)]
    replaces: Vec<RawReplace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplace {
    name: Option<String>,
}

/// Parses one file's text into a domain. `file` is only used in errors.
pub fn parse_domain(file: &Path, text: &str) -> Result<DomainConfig, ConfigError> {
    let raw: RawFile = serde_norway::from_str(text).map_err(|e| {
        // serde_norway prefixes the path inside the document ("descriptors[0].rate_limit: ...").
        let mut problem = e.to_string();
        if let Some(at) = e.location()
            && !problem.contains(" at line ")
        {
            problem = format!("{problem} (line {}, column {})", at.line(), at.column());
        }
        ConfigError::new(
            file,
            "",
            format!("not a valid rate limit configuration: {problem}"),
        )
    })?;
    let domain = match raw.domain {
        Some(d) if !d.is_empty() => d,
        Some(_) => {
            return Err(ConfigError::new(
                file,
                "domain",
                "the domain is empty: name it",
            ));
        }
        None => {
            return Err(ConfigError::new(
                file,
                "domain",
                "no `domain`: every file must name its domain",
            ));
        }
    };
    let root = parse_level(file, "", "", 0, &[], &raw.descriptors)?;
    Ok(DomainConfig {
        domain,
        file: file.to_path_buf(),
        root,
    })
}

/// Parses the descriptors at `depth` (0 for the top level); `shared` are the entries above
/// whose wildcard values share one threshold (`share_threshold: true`): (depth, configured value).
fn parse_level(
    file: &Path,
    path: &str,
    stat_prefix: &str,
    depth: usize,
    shared: &[(usize, String)],
    raws: &[RawDescriptor],
) -> Result<Level, ConfigError> {
    let mut level = Level::default();
    for (i, raw) in raws.iter().enumerate() {
        let here = if path.is_empty() {
            format!("descriptors[{i}]")
        } else {
            format!("{path}.descriptors[{i}]")
        };
        let key = match &raw.key {
            Some(k) if !k.is_empty() => k.clone(),
            _ => {
                return Err(ConfigError::new(
                    file,
                    format!("{here}.key"),
                    "a descriptor needs a non-empty `key`",
                ));
            }
        };
        let value = match &raw.value {
            None => ValueMatch::Any,
            Some(v) => match v.strip_suffix('*') {
                Some(prefix) => ValueMatch::Prefix(prefix.to_string()),
                None => ValueMatch::Exact(v.clone()),
            },
        };
        let stat_part = match &raw.value {
            Some(v) => format!("{key}_{v}"),
            None => key.clone(),
        };
        let stat_path = if stat_prefix.is_empty() {
            stat_part
        } else {
            format!("{stat_prefix}.{stat_part}")
        };
        let mut shared = shared.to_vec();
        if raw.share_threshold {
            match (&value, &raw.value) {
                (ValueMatch::Prefix(_), Some(pattern)) => shared.push((depth, pattern.clone())),
                _ => {
                    return Err(ConfigError::new(
                        file,
                        format!("{here}.share_threshold"),
                        "share_threshold applies to a wildcard value (ending in `*`): make the \
                         value a wildcard or remove share_threshold",
                    ));
                }
            }
        }
        // `shadow_mode` / `detailed_metric` without a `rate_limit` have nothing to apply to;
        // accepted, as the reference service does.
        let rule = match &raw.rate_limit {
            None => None,
            Some(rl) => {
                let mut rule = parse_rule(file, &here, rl, raw, stat_path.clone())?;
                rule.shared_values = shared.clone();
                Some(rule)
            }
        };
        let children = parse_level(
            file,
            &here,
            &stat_path,
            depth + 1,
            &shared,
            &raw.descriptors,
        )?;
        let index = level.nodes.len();
        let duplicate = match &value {
            ValueMatch::Any => level.any.insert(key.clone(), index).is_some(),
            ValueMatch::Exact(v) => level
                .exact
                .entry(key.clone())
                .or_default()
                .insert(v.clone(), index)
                .is_some(),
            ValueMatch::Prefix(p) => {
                let list = level.prefix.entry(key.clone()).or_default();
                let dup = list.iter().any(|(q, _)| q == p);
                list.push((p.clone(), index));
                list.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
                dup
            }
        };
        if duplicate {
            let what = match &raw.value {
                Some(v) => format!("key {key:?} with value {v:?}"),
                None => format!("key {key:?} without a value"),
            };
            return Err(ConfigError::new(
                file,
                here,
                format!("{what} appears twice at this level: merge the two descriptors"),
            ));
        }
        level.nodes.push(Node { rule, children });
    }
    Ok(level)
}

fn parse_rule(
    file: &Path,
    here: &str,
    rl: &RawRateLimit,
    raw: &RawDescriptor,
    stat_path: String,
) -> Result<LimitRule, ConfigError> {
    let at = |field: &str| format!("{here}.rate_limit.{field}");
    let mut replaces = Vec::with_capacity(rl.replaces.len());
    for (i, replace) in rl.replaces.iter().enumerate() {
        let name = match replace.name.as_deref() {
            Some(name) if !name.is_empty() => name,
            _ => {
                return Err(ConfigError::new(
                    file,
                    format!("{here}.rate_limit.replaces[{i}].name"),
                    "a `replaces` entry names the rate limit it replaces: give it a non-empty `name`",
                ));
            }
        };
        if rl.name.as_deref() == Some(name) {
            return Err(ConfigError::new(
                file,
                format!("{here}.rate_limit.replaces[{i}].name"),
                format!("the rate limit {name:?} replaces itself: name another rate limit"),
            ));
        }
        replaces.push(name.to_string());
    }
    let limit = if rl.unlimited {
        if rl.unit.is_some() || rl.requests_per_unit.is_some() || rl.burst.is_some() {
            return Err(ConfigError::new(
                file,
                format!("{here}.rate_limit"),
                "an unlimited rate limit takes no `unit`, `requests_per_unit` or `burst`: remove them \
                 or remove `unlimited: true`",
            ));
        }
        Limit::Unlimited
    } else {
        let unit_text = rl.unit.as_deref().ok_or_else(|| {
            ConfigError::new(
                file,
                at("unit"),
                "missing `unit`: use second, minute, hour, day, week, month or year",
            )
        })?;
        let unit = Unit::parse(unit_text).ok_or_else(|| {
            ConfigError::new(
                file,
                at("unit"),
                format!(
                    "unknown unit {unit_text:?}: use second, minute, hour, day, week, month or year"
                ),
            )
        })?;
        let requests_per_unit = match rl.requests_per_unit {
            Some(0) => {
                return Err(ConfigError::new(
                    file,
                    at("requests_per_unit"),
                    "requests_per_unit is 0: a GCRA quota admits at least 1 request per unit; \
                     use at least 1",
                ));
            }
            Some(n) => n,
            None => {
                return Err(ConfigError::new(
                    file,
                    at("requests_per_unit"),
                    "missing `requests_per_unit`: say how many requests each unit admits",
                ));
            }
        };
        if rl.burst == Some(0) {
            return Err(ConfigError::new(
                file,
                at("burst"),
                "burst is 0: use at least 1 (1 spaces requests evenly), or leave it out for a \
                 burst of requests_per_unit",
            ));
        }
        Limit::Rate(Rate {
            requests_per_unit,
            unit,
            burst: rl.burst,
        })
    };
    Ok(LimitRule {
        limit,
        name: rl.name.clone(),
        replaces,
        shared_values: Vec::new(),
        shadow_mode: raw.shadow_mode,
        detailed_metric: raw.detailed_metric,
        stat_path,
        location: Location {
            file: file.to_path_buf(),
            path: here.to_string(),
        },
        id: 0,
    })
}
