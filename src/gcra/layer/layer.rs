//! [`QuotaLayer`]: holds the limit set, the key extractor and the compiled policies; wraps
//! services in [`QuotaService`].

use std::sync::Arc;

use http::StatusCode;
use tower::Layer;

use super::config::{Config, PolicyRule, Tier};
use super::policy::MissingKey;
use super::refusal::JsonRefusal;
use super::service::QuotaService;
use crate::gcra::observe::{Counters, NO_POLICY, SINGLE};
use crate::gcra::{KeyedLimit, SeparateLimits};
use crate::headers::{HeaderStyle, PolicyList, PolicyName};

/// Applies quotas to inbound `http` requests: a tower [`Layer`] for axum (`Router::layer`,
/// `route_layer`), hyper, tonic and any `http` service. See the [module docs](super).
///
/// Built from a key extractor and [`Policy`](super::Policy)s with [`QuotaLayer::builder`] (in
/// memory, or over any [`LimitSet`](crate::gcra::LimitSet)), or from one existing keyed limiter
/// with [`QuotaLayer::new`]; tuned with [`missing_key`](Self::missing_key),
/// [`shadow`](Self::shadow), [`header_style`](Self::header_style) and
/// [`refusal`](Self::refusal). Cheap to clone.
pub struct QuotaLayer<J: ?Sized, K, H = JsonRefusal> {
    set: Arc<J>,
    key: K,
    config: Arc<Config>,
    refusal: H,
}

impl<K> QuotaLayer<SeparateLimits, K> {
    /// Limits requests by `key` (see [`KeyExtractor`](super::KeyExtractor)) against one
    /// existing keyed limiter (in memory, remote, two-tier, `Arc<dyn KeyedLimit>`), advertised
    /// as the per-key policy `"default"`. Requests without a key share one quota
    /// ([`MissingKey::Anonymous`]).
    ///
    /// An in-memory limiter may be keyed by a fixed-size type that reads the key's bytes
    /// ([`FromKeyBytes`](crate::gcra::FromKeyBytes)): a `KeyedRateLimiter<IpAddr>` behind
    /// [`PeerIpKey`](super::PeerIpKey) is checked with the peer's address, the same key that
    /// code outside the layer checks with `check_key(&ip)` (IPv6 peers by their /64 unless
    /// [`ipv6_prefix(128)`](super::PeerIpKey::ipv6_prefix)).
    ///
    /// ```
    /// use flowguard::gcra::layer::{PeerIpKey, QuotaLayer};
    /// use flowguard::gcra::{KeyedRateLimiter, Quota};
    /// use std::net::IpAddr;
    /// use std::sync::Arc;
    ///
    /// let per_client = Arc::new(KeyedRateLimiter::<IpAddr>::new(Quota::per_second(10)?));
    /// let layer = QuotaLayer::new(per_client.clone(), PeerIpKey::new());
    /// // Elsewhere (a TCP accept loop, say), the same quotas by address:
    /// assert!(per_client.check_key(&"192.0.2.7".parse()?)?.allowed);
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new<St: KeyedLimit + ?Sized + 'static>(store: Arc<St>, key: K) -> Self {
        let quota = store.quota();
        let name = PolicyName::default();
        let list = PolicyList::new(vec![quota.rate_limit_policy(name.clone())])
            .unwrap_or_else(|_| unreachable!("one policy is not an empty list"));
        let tier = Tier {
            name: SINGLE.to_owned(),
            policies: Box::new([PolicyRule {
                counters: Counters::new(SINGLE, name.as_str()),
                name,
                limit: 0,
                global: false,
            }]),
            list,
            keyless: Counters::new(SINGLE, NO_POLICY),
        };
        QuotaLayer::from_parts(
            Arc::new(SeparateLimits::new([store])),
            key,
            Config {
                tiers: Box::new([tier]),
                missing: MissingKey::default(),
                shadow: false,
                style: HeaderStyle::default(),
            },
            JsonRefusal,
        )
    }
}

impl<J: ?Sized, K, H> QuotaLayer<J, K, H> {
    pub(super) fn from_parts(set: Arc<J>, key: K, config: Config, refusal: H) -> Self {
        QuotaLayer {
            set,
            key,
            config: Arc::new(config),
            refusal,
        }
    }

    fn configure(mut self, change: impl FnOnce(&mut Config)) -> Self {
        change(Arc::make_mut(&mut self.config));
        self
    }

    /// What requests without a key get (default [`MissingKey::Anonymous`]: they share one
    /// quota). A [`Reject`](MissingKey::Reject) status that is not a client error (4xx) is
    /// answered as `400 Bad Request`.
    pub fn missing_key(self, missing: MissingKey) -> Self {
        let missing = match missing {
            MissingKey::Reject(status) if !status.is_client_error() => {
                tracing::warn!(%status, "a request without a key is a client error; rejecting with 400");
                MissingKey::Reject(StatusCode::BAD_REQUEST)
            }
            other => other,
        };
        self.configure(|c| c.missing = missing)
    }

    /// Shadow mode (dry run): every request is decided, spent, counted and given the
    /// rate-limit fields, but none is refused; `flowguard_quota_decisions_total` counts the
    /// ones that would have been as `outcome="shadow_denied"`. For trying quotas on live
    /// traffic before enforcing them.
    ///
    /// What would have been refused passes with the fields its refusal would carry: over
    /// quota, the deciding policy's decision (in the request's extensions too) and fields,
    /// counted under that policy; a cost above a policy's burst, `RateLimit-Policy` alone
    /// (its `q` is the burst), counted under that policy; a request without a key under
    /// [`MissingKey::Reject`], no fields, counted under `policy=""` (no policy decided).
    /// These last two reach the service without a [`Decision`](crate::gcra::Decision) in their
    /// extensions, since none was made: a handler that extracts one in shadow mode should take
    /// it as optional (axum: `Option<Extension<Decision>>`). A store failure (which would be a
    /// `503` or `500`) passes without fields, counted in `flowguard_rate_limit_errors_total`
    /// only.
    pub fn shadow(self, shadow: bool) -> Self {
        self.configure(|c| c.shadow = shadow)
    }

    /// Which rate-limit fields responses carry (default [`HeaderStyle::Ietf`]:
    /// `RateLimit-Policy` listing every policy of the request's tier and `RateLimit` for the
    /// one that decided; [`HeaderStyle::Legacy`] for `X-RateLimit-*` of that policy).
    pub fn header_style(self, style: HeaderStyle) -> Self {
        self.configure(|c| c.style = style)
    }

    /// Answers refusals with `refusal` instead of [`JsonRefusal`] (any
    /// `Fn(&Refusal<'_>) -> Response<R>`); the layer still adds `Retry-After` and the
    /// rate-limit fields.
    pub fn refusal<H2>(self, refusal: H2) -> QuotaLayer<J, K, H2> {
        QuotaLayer {
            set: self.set,
            key: self.key,
            config: self.config,
            refusal,
        }
    }

    /// The limit set the layer decides with.
    pub fn set(&self) -> &Arc<J> {
        &self.set
    }
}

impl<S, J: ?Sized, K: Clone, H: Clone> Layer<S> for QuotaLayer<J, K, H> {
    type Service = QuotaService<S, J, K, H>;

    fn layer(&self, inner: S) -> Self::Service {
        QuotaService::new(
            inner,
            self.set.clone(),
            self.key.clone(),
            self.config.clone(),
            self.refusal.clone(),
        )
    }
}

impl<J: ?Sized, K: Clone, H: Clone> Clone for QuotaLayer<J, K, H> {
    fn clone(&self) -> Self {
        QuotaLayer {
            set: self.set.clone(),
            key: self.key.clone(),
            config: self.config.clone(),
            refusal: self.refusal.clone(),
        }
    }
}

impl<J: ?Sized, K, H> std::fmt::Debug for QuotaLayer<J, K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaLayer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
