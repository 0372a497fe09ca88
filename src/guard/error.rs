//! The [`Guard`](super::Guard)'s errors: a configuration that cannot work ([`BuildError`]), and a
//! guard asked for a quota it was not given ([`NoRateLimit`], [`AdmitError`]).

use std::fmt;

use crate::gcra::CheckError;

/// Why [`GuardBuilder::build`](super::GuardBuilder::build) returned no guard. Each variant says
/// what to change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BuildError {
    /// Both [`quota`](super::GuardBuilder::quota) and
    /// [`rate_limit`](super::GuardBuilder::rate_limit) were given: a limiter brings its own quota.
    QuotaAndRateLimit,
    /// [`two_tier`](super::GuardBuilder::two_tier) was given without a
    /// [`quota`](super::GuardBuilder::quota) for it to batch.
    NeedsQuota {
        /// The builder method given.
        setting: &'static str,
    },
    /// A setting of a Redis store (e.g. `two_tier`, `failure_policy`, `redis_prefix`) was given
    /// without [`redis`](super::GuardBuilder::redis): the guard keeps its quotas in memory.
    NeedsRedis {
        /// The builder method given.
        setting: &'static str,
    },
    /// A setting of the guard's retries (`legacy_reset`) was given without
    /// [`retry`](super::GuardBuilder::retry): without a retry policy each call is made once,
    /// and the setting would do nothing.
    NeedsRetry {
        /// The builder method given.
        setting: &'static str,
    },
    /// A setting of the store flowguard builds was given along with a limiter of your own
    /// ([`rate_limit`](super::GuardBuilder::rate_limit)), which it would not apply to.
    SettingWithRateLimit {
        /// The builder method given.
        setting: &'static str,
    },
    /// The store URL cannot be read.
    #[cfg(feature = "redis")]
    RedisUrl(super::redis_url::RedisUrlError),
    /// The Redis store could not be set up: a URL it cannot use, refused credentials, or a server
    /// it could not reach.
    #[cfg(feature = "redis")]
    Redis(crate::gcra::redis::ConnectError),
    /// The quota's store refused its settings (e.g. a two-tier batch above the burst, a
    /// local-fallback share that rounds the burst to zero).
    Store(crate::gcra::ConfigError),
    /// The outbound layers refused the concurrency limiter's settings.
    Concurrency(crate::vegas::ConfigError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::QuotaAndRateLimit => f.write_str(
                "both GuardBuilder::quota and GuardBuilder::rate_limit are set, but a limiter brings its own \
                 quota: keep one of them",
            ),
            BuildError::NeedsQuota { setting } => write!(
                f,
                "GuardBuilder::{setting} batches the guard's own quota, but no quota is set: \
                 add GuardBuilder::quota, or remove {setting} (quota layers are decided exactly)"
            ),
            BuildError::NeedsRedis { setting } => write!(
                f,
                "GuardBuilder::{setting} applies to quotas kept in Redis, but this guard keeps its quotas \
                 in memory: add GuardBuilder::redis(url) or remove {setting}"
            ),
            BuildError::NeedsRetry { setting } => write!(
                f,
                "GuardBuilder::{setting} applies to the guard's retries, but no retry policy is set, so each \
                 call is made once: add GuardBuilder::retry(policy) or remove {setting}"
            ),
            BuildError::SettingWithRateLimit { setting } => write!(
                f,
                "GuardBuilder::{setting} configures the store the guard builds, but GuardBuilder::rate_limit \
                 gives a limiter of its own: configure that limiter instead, or replace rate_limit with quota"
            ),
            #[cfg(feature = "redis")]
            BuildError::RedisUrl(e) => e.fmt(f),
            #[cfg(feature = "redis")]
            BuildError::Redis(e) => e.fmt(f),
            BuildError::Store(e) => e.fmt(f),
            BuildError::Concurrency(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            #[cfg(feature = "redis")]
            BuildError::RedisUrl(e) => Some(e),
            #[cfg(feature = "redis")]
            BuildError::Redis(e) => Some(e),
            BuildError::Store(e) => Some(e),
            BuildError::Concurrency(e) => Some(e),
            _ => None,
        }
    }
}

/// The guard has no inbound quota: configure one with
/// [`GuardBuilder::quota`](super::GuardBuilder::quota) or
/// [`GuardBuilder::rate_limit`](super::GuardBuilder::rate_limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRateLimit;

impl fmt::Display for NoRateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "this Guard has no inbound quota: configure one with GuardBuilder::quota or GuardBuilder::rate_limit",
        )
    }
}

impl std::error::Error for NoRateLimit {}

/// Why [`Guard::admit`](super::Guard::admit) returned no decision.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdmitError {
    /// The guard has no inbound quota (see [`NoRateLimit`]).
    NoRateLimit,
    /// The rate limit returned no decision: see [`CheckError`].
    Check(CheckError),
}

impl fmt::Display for AdmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmitError::NoRateLimit => NoRateLimit.fmt(f),
            AdmitError::Check(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for AdmitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdmitError::NoRateLimit => None,
            AdmitError::Check(e) => Some(e),
        }
    }
}

/// Why [`Guard::quota_layer`](super::Guard::quota_layer) built no layer. Each variant says what
/// to change. Feature `tower`.
#[cfg(feature = "tower")]
#[derive(Debug)]
#[non_exhaustive]
pub enum QuotaLayerError {
    /// The layer's policies were refused (none, an empty or duplicate tier, a duplicate or
    /// unprintable policy name, ...): see [`crate::gcra::layer::LayerBuildError`].
    Layer(crate::gcra::layer::LayerBuildError),
    /// The guard's quota is a limiter of your own
    /// ([`rate_limit`](super::GuardBuilder::rate_limit)), whose store the guard does not know.
    OwnRateLimit,
    /// The guard's quota is two-tier ([`two_tier`](super::GuardBuilder::two_tier)): a local
    /// batch of one quota cannot decide several quotas all or nothing.
    #[cfg(feature = "redis")]
    TwoTier,
    /// Two of the layer's limits have the same name (a global policy `x` and a per-key policy
    /// `x` of a tier named `"global"`), so they would share Redis keys.
    #[cfg(feature = "redis")]
    SharedKeys {
        /// The name both limits have (`"<tier>:<policy>"` or `"global:<policy>"`).
        limit: String,
    },
    /// A limit's Redis store or limiter was refused: its key prefix (the guard's prefix and the
    /// limit's name, too long), or the failure policy for its quota.
    #[cfg(feature = "redis")]
    Store {
        /// The limit's name.
        limit: String,
        /// Why.
        source: crate::gcra::ConfigError,
    },
}

#[cfg(feature = "tower")]
impl fmt::Display for QuotaLayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaLayerError::Layer(e) => e.fmt(f),
            QuotaLayerError::OwnRateLimit => f.write_str(
                "this Guard's quota is a limiter of your own (GuardBuilder::rate_limit), whose store it does not \
                 know: build the layer with QuotaLayerBuilder::build_with over that store, or give the guard a \
                 quota (GuardBuilder::quota, with redis for a shared store)",
            ),
            #[cfg(feature = "redis")]
            QuotaLayerError::TwoTier => f.write_str(
                "this Guard keeps its quota two-tier (GuardBuilder::two_tier), but a layer's several quotas are \
                 decided all or nothing in Redis, which local batches cannot do: remove two_tier, or build the \
                 layer with QuotaLayerBuilder::build_with",
            ),
            #[cfg(feature = "redis")]
            QuotaLayerError::SharedKeys { limit } => write!(
                f,
                "two of the layer's limits are named {limit:?} (a global policy and a per-key policy of a tier \
                 named \"global\"), so they would share Redis keys: rename the policy or the tier"
            ),
            #[cfg(feature = "redis")]
            QuotaLayerError::Store { limit, source } => {
                write!(f, "the Redis limiter of limit {limit:?} was refused: {source}")
            }
        }
    }
}

#[cfg(feature = "tower")]
impl std::error::Error for QuotaLayerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QuotaLayerError::Layer(e) => Some(e),
            #[cfg(feature = "redis")]
            QuotaLayerError::Store { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(feature = "tower")]
impl From<crate::gcra::layer::LayerBuildError> for QuotaLayerError {
    /// The builder's error; one of this type that the store raised is unwrapped.
    fn from(error: crate::gcra::layer::LayerBuildError) -> Self {
        use crate::gcra::layer::LayerBuildError;
        match error {
            LayerBuildError::Store(inner) => match inner.downcast::<QuotaLayerError>() {
                Ok(ours) => *ours,
                Err(other) => QuotaLayerError::Layer(LayerBuildError::Store(other)),
            },
            other => QuotaLayerError::Layer(other),
        }
    }
}
