//! [`KeyExtractor`]: which quota a request counts against, what it costs and which tier it is
//! in; [`RequestKey`], the key, borrowed from the request where it can be.

use std::net::IpAddr;

use http::Request;

/// The rate-limit key of one request: bytes borrowed from the request (a header value), a short
/// key kept inline (an IP address), or owned bytes. An empty key counts as no key (see
/// [`MissingKey`](super::MissingKey)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestKey<'r>(Repr<'r>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr<'r> {
    Borrowed(&'r [u8]),
    Inline { bytes: [u8; 16], len: u8 },
    Owned(Vec<u8>),
}

impl<'r> RequestKey<'r> {
    /// A key borrowed from the request (no copy).
    pub fn borrowed(bytes: &'r [u8]) -> RequestKey<'r> {
        RequestKey(Repr::Borrowed(bytes))
    }

    /// A key of owned bytes.
    pub fn owned(bytes: Vec<u8>) -> RequestKey<'static> {
        RequestKey(Repr::Owned(bytes))
    }

    /// The key of an IP address: its 4 or 16 bytes (an IPv4-mapped IPv6 address is its IPv4
    /// address), kept inline.
    pub fn ip(ip: IpAddr) -> RequestKey<'static> {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let mut bytes = [0; 16];
                bytes[..4].copy_from_slice(&v4.octets());
                RequestKey(Repr::Inline { bytes, len: 4 })
            }
            IpAddr::V6(v6) => RequestKey(Repr::Inline {
                bytes: v6.octets(),
                len: 16,
            }),
        }
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Borrowed(bytes) => bytes,
            Repr::Inline { bytes, len } => &bytes[..usize::from(*len)],
            Repr::Owned(bytes) => bytes,
        }
    }
}

impl From<Vec<u8>> for RequestKey<'static> {
    fn from(bytes: Vec<u8>) -> Self {
        RequestKey::owned(bytes)
    }
}

impl From<String> for RequestKey<'static> {
    fn from(s: String) -> Self {
        RequestKey::owned(s.into_bytes())
    }
}

impl From<IpAddr> for RequestKey<'static> {
    fn from(ip: IpAddr) -> Self {
        RequestKey::ip(ip)
    }
}

impl<'r> From<&'r [u8]> for RequestKey<'r> {
    fn from(bytes: &'r [u8]) -> Self {
        RequestKey::borrowed(bytes)
    }
}

impl<'r> From<&'r str> for RequestKey<'r> {
    fn from(s: &'r str) -> Self {
        RequestKey::borrowed(s.as_bytes())
    }
}

/// Reads what the quota layer needs from a request: its key (an API key, a client address, a
/// tenant id), its cost in tokens, and its tier.
///
/// Ready-made: [`HeaderKey`](super::HeaderKey), [`PeerIpKey`](super::PeerIpKey),
/// [`XForwardedForKey`](super::XForwardedForKey), [`ForwardedKey`](super::ForwardedKey),
/// [`GlobalKey`](super::GlobalKey); any closure `Fn(&Request<B>) -> Option<K>` with `K` a
/// `Vec<u8>`, a `String` or an `IpAddr`. [`with_cost`](Self::with_cost) and
/// [`with_tier`](Self::with_tier) add a cost and a tier to any of them.
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key of `req`, or `None` when it has none (an empty key is none too): the layer's
    /// [`MissingKey`](super::MissingKey) policy decides.
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>>;

    /// Tokens the request costs (default 1). A cost above a policy's burst is refused for good
    /// (`413`); a cost of 0 only reads the quota.
    fn cost(&self, _req: &Request<B>) -> u32 {
        1
    }

    /// The name of the request's tier (e.g. its client's plan), `None` for the default tier
    /// (the first one declared); a name the layer does not know is the default tier too.
    fn tier(&self, _req: &Request<B>) -> Option<&'static str> {
        None
    }

    /// The same keys, with the cost `cost(req)`.
    fn with_cost<F>(self, cost: F) -> WithCost<Self, F>
    where
        Self: Sized,
        F: Fn(&Request<B>) -> u32 + Clone + Send + Sync + 'static,
    {
        WithCost { inner: self, cost }
    }

    /// The same keys, in the tier `tier(req)`.
    fn with_tier<F>(self, tier: F) -> WithTier<Self, F>
    where
        Self: Sized,
        F: Fn(&Request<B>) -> Option<&'static str> + Clone + Send + Sync + 'static,
    {
        WithTier { inner: self, tier }
    }
}

impl<B, F, K> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<K> + Clone + Send + Sync + 'static,
    K: Into<RequestKey<'static>>,
{
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        self(req).map(Into::into)
    }
}

/// A [`KeyExtractor`] with a cost per request: [`KeyExtractor::with_cost`].
#[derive(Clone, Debug)]
pub struct WithCost<K, F> {
    inner: K,
    cost: F,
}

impl<B, K, F> KeyExtractor<B> for WithCost<K, F>
where
    K: KeyExtractor<B>,
    F: Fn(&Request<B>) -> u32 + Clone + Send + Sync + 'static,
{
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        self.inner.key(req)
    }

    fn cost(&self, req: &Request<B>) -> u32 {
        (self.cost)(req)
    }

    fn tier(&self, req: &Request<B>) -> Option<&'static str> {
        self.inner.tier(req)
    }
}

/// A [`KeyExtractor`] with a tier per request: [`KeyExtractor::with_tier`].
#[derive(Clone, Debug)]
pub struct WithTier<K, F> {
    inner: K,
    tier: F,
}

impl<B, K, F> KeyExtractor<B> for WithTier<K, F>
where
    K: KeyExtractor<B>,
    F: Fn(&Request<B>) -> Option<&'static str> + Clone + Send + Sync + 'static,
{
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        self.inner.key(req)
    }

    fn cost(&self, req: &Request<B>) -> u32 {
        self.inner.cost(req)
    }

    fn tier(&self, req: &Request<B>) -> Option<&'static str> {
        (self.tier)(req)
    }
}

/// The value of a request header, such as an API key (the first value when there are several).
///
/// ```
/// use flowguard::gcra::layer::{HeaderKey, KeyExtractor};
///
/// let key = HeaderKey::new("x-api-key")?;
/// let req = http::Request::builder().header("x-api-key", "k-1").body(())?;
/// assert_eq!(key.key(&req).unwrap().as_bytes(), b"k-1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct HeaderKey {
    name: http::HeaderName,
}

impl HeaderKey {
    /// Keys by header `name`; an error for a name that is not a valid header name.
    pub fn new(name: &str) -> Result<HeaderKey, http::header::InvalidHeaderName> {
        Ok(HeaderKey {
            name: http::HeaderName::from_bytes(name.as_bytes())?,
        })
    }

    /// Keys by the header `name`.
    pub fn from_name(name: http::HeaderName) -> HeaderKey {
        HeaderKey { name }
    }
}

impl<B> KeyExtractor<B> for HeaderKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        req.headers()
            .get(&self.name)
            .map(|v| RequestKey::borrowed(v.as_bytes()))
    }
}

/// One key for every request: the policies are global (e.g. protect a backend at 5,000
/// requests per second whoever sends them).
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalKey;

impl<B> KeyExtractor<B> for GlobalKey {
    fn key<'r>(&self, _req: &'r Request<B>) -> Option<RequestKey<'r>> {
        Some(RequestKey::borrowed(b"*"))
    }
}
