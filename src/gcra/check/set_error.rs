//! [`SetError`]: why a [`LimitSet`](super::LimitSet) returned no decisions.

use std::fmt;

use super::error::CheckError;

/// Why [`LimitSet::check_all`](super::LimitSet::check_all) returned no decisions; nothing was spent unless the set says
/// otherwise ([`SeparateLimits`](super::SeparateLimits) when another request raced it).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetError {
    /// Demand number `demand` got `error` (a cost above the burst, a full in-memory store, a
    /// store that failed).
    Check {
        /// Which demand (an index into the demands).
        demand: usize,
        /// What its limit reported.
        error: CheckError,
    },
    /// Demand number `demand` names limit `limit`, but the set has `limits` limits: a bug of the
    /// caller, which builds demands for another set.
    UnknownLimit {
        /// Which demand.
        demand: usize,
        /// The limit it names.
        limit: usize,
        /// How many limits the set has.
        limits: usize,
    },
}

impl SetError {
    /// The demand the error is about.
    pub fn demand(&self) -> usize {
        match self {
            SetError::Check { demand, .. } | SetError::UnknownLimit { demand, .. } => *demand,
        }
    }
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::Check { demand, error } => write!(f, "demand {demand}: {error}"),
            SetError::UnknownLimit {
                demand,
                limit,
                limits,
            } => write!(
                f,
                "demand {demand} names limit {limit}, but the set has {limits} limits (0..{limits}): \
                 build the demands for this set"
            ),
        }
    }
}

impl std::error::Error for SetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SetError::Check { error, .. } => Some(error),
            SetError::UnknownLimit { .. } => None,
        }
    }
}
