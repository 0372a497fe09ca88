//! What a layer decides with, compiled once from its policies and tiers and shared by every
//! service it makes.

use super::policy::MissingKey;
use crate::gcra::observe::Counters;
use crate::headers::{HeaderStyle, PolicyList, PolicyName};

/// Everything a request is decided with.
#[derive(Clone, Debug)]
pub(super) struct Config {
    /// The tiers; the first is the default.
    pub(super) tiers: Box<[Tier]>,
    pub(super) missing: MissingKey,
    pub(super) shadow: bool,
    pub(super) style: HeaderStyle,
}

/// One tier: the policies its requests count against.
#[derive(Clone, Debug)]
pub(super) struct Tier {
    pub(super) name: String,
    pub(super) policies: Box<[PolicyRule]>,
    /// Every policy, as the rate-limit fields advertise them.
    pub(super) list: PolicyList,
    /// Requests without a key that [`MissingKey::Reject`] refuses (or would, in shadow mode).
    pub(super) keyless: Counters,
}

/// One policy of a tier, as the layer applies it.
#[derive(Clone, Debug)]
pub(super) struct PolicyRule {
    pub(super) name: PolicyName,
    /// The limit of the set that keeps it.
    pub(super) limit: usize,
    /// Global: every request counts under the same key.
    pub(super) global: bool,
    pub(super) counters: Counters,
}

/// The key global policies count every request under (limits keep separate state, so it meets
/// no per-key key).
pub(super) const GLOBAL_KEY: &[u8] = b"*";

/// The key requests without one share under [`MissingKey::Anonymous`]: the empty key, which no
/// request has (an empty key is no key).
pub(super) const ANONYMOUS_KEY: &[u8] = b"";

impl Config {
    /// The tier named `name`; the default tier for `None` or a name no tier has.
    pub(super) fn tier(&self, name: Option<&str>) -> usize {
        let Some(name) = name else { return 0 };
        self.tiers
            .iter()
            .position(|t| t.name == name)
            .unwrap_or_else(|| {
                tracing::debug!(
                    tier = name,
                    "no tier of that name; the default tier decides"
                );
                0
            })
    }
}
