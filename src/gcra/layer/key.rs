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
    Inline { bytes: [u8; INLINE], len: u8 },
    Owned(Vec<u8>),
}

/// Bytes a key keeps inline: an IPv6 address with the tag of [`Or`]'s second source (18), or
/// of two nested [`Or`]s (20), without making the key any larger than its owned form.
const INLINE: usize = 22;

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
            IpAddr::V4(v4) => RequestKey::joined(&[], &v4.octets()),
            IpAddr::V6(v6) => RequestKey::joined(&[], &v6.octets()),
        }
    }

    /// The key `tag` followed by `key`: inline when it fits, else owned.
    fn joined(tag: &[u8], key: &[u8]) -> RequestKey<'static> {
        let len = tag.len() + key.len();
        if len > INLINE {
            return RequestKey::owned([tag, key].concat());
        }
        let mut bytes = [0; INLINE];
        bytes[..tag.len()].copy_from_slice(tag);
        bytes[tag.len()..len].copy_from_slice(key);
        RequestKey(Repr::Inline {
            bytes,
            // At most INLINE (22).
            len: len as u8,
        })
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
/// [`with_tier`](Self::with_tier) add a cost and a tier to any of them; [`Or`] takes the key of
/// the first of two that has one (`HeaderKey::new("x-api-key")?.or(PeerIpKey::new())`: an API
/// key, else the peer address), each in a key space of its own.
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

/// Adds `or(second)` to a ready-made [`KeyExtractor`], making an [`Or`].
macro_rules! or_method {
    ($($ty:ident $(<$($param:ident),*>)?),* $(,)?) => {$(
        impl $(<$($param),*>)? $ty $(<$($param),*>)? {
            /// This extractor's key, or when the request has none (or an empty one) the key of
            /// `second`, each in a key space of its own: see [`Or`](crate::gcra::layer::Or).
            pub fn or<O>(self, second: O) -> $crate::gcra::layer::Or<Self, O> {
                $crate::gcra::layer::Or::new(self, second)
            }
        }
    )*};
}
pub(super) use or_method;

or_method!(HeaderKey, GlobalKey, WithCost<K, F>, WithTier<K, F>, Or<A, O2>);

/// Marks a key of [`Or`]: the first byte of a tagged key, which no header value has (a header
/// value has no byte below `0x20` but tab).
const TAG: u8 = 0;
/// Before a key of [`Or`]'s first source that starts with [`TAG`] itself.
const FIRST_ESCAPED: [u8; 2] = [TAG, 1];
/// Before every key of [`Or`]'s second source.
const SECOND: [u8; 2] = [TAG, 2];

/// Two [`KeyExtractor`]s in turn: the first one's key, or when the request has none (or an
/// empty one) the second one's; no key from either is no key (the layer's
/// [`MissingKey`](super::MissingKey) policy decides). From `first.or(second)` on the ready-made
/// extractors, or [`Or::new`] for any two (closures included); `a.or(b).or(c)` tries three.
///
/// The two sources never share a quota, whatever their keys' bytes: a header value that equals
/// an address's key bytes counts against a quota of its own. The first source's key is used as
/// it is (borrowed from the request, no copy), unless it starts with a zero byte, which no
/// header value does: then the bytes `00 01` go before it. The second source's key has `00 02`
/// before it (copied inline for keys up to 20 bytes, such as an address: no allocation).
///
/// Cost and tier are the first source's, asked for every request whichever source gave the
/// key (so the allowed path reads the first source's key once); the second source gives only a
/// key, and a cost or tier set on it is not asked. To cost or tier the requests of both, call
/// [`with_cost`](KeyExtractor::with_cost) or [`with_tier`](KeyExtractor::with_tier) on the
/// `Or` itself.
///
/// ```
/// use flowguard::gcra::layer::{HeaderKey, KeyExtractor, PeerIpKey};
/// use std::net::SocketAddr;
///
/// let key = HeaderKey::new("x-api-key")?.or(PeerIpKey::new());
/// let mut with_key = http::Request::builder().header("x-api-key", "ABCD").body(())?;
/// with_key.extensions_mut().insert("192.0.2.7:50123".parse::<SocketAddr>()?);
/// assert_eq!(key.key(&with_key).unwrap().as_bytes(), b"ABCD", "the API key, as it is");
///
/// // Without the header: the peer address (65.66.67.68 is b"ABCD"), in a space of its own.
/// let mut without = http::Request::new(());
/// without.extensions_mut().insert("65.66.67.68:443".parse::<SocketAddr>()?);
/// assert_eq!(key.key(&without).unwrap().as_bytes(), [0, 2, 65, 66, 67, 68]);
/// assert!(key.key(&http::Request::new(())).is_none(), "neither has a key");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Or<A, O> {
    first: A,
    second: O,
}

impl<A, O> Or<A, O> {
    /// The key of `first`, else the key of `second`.
    pub fn new(first: A, second: O) -> Or<A, O> {
        Or { first, second }
    }
}

impl<B, A, O> KeyExtractor<B> for Or<A, O>
where
    A: KeyExtractor<B>,
    O: KeyExtractor<B>,
{
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        if let Some(key) = self.first.key(req) {
            match key.as_bytes().first() {
                Some(&TAG) => return Some(RequestKey::joined(&FIRST_ESCAPED, key.as_bytes())),
                Some(_) => return Some(key),
                None => {}
            }
        }
        let key = self.second.key(req)?;
        let bytes = key.as_bytes();
        (!bytes.is_empty()).then(|| RequestKey::joined(&SECOND, bytes))
    }

    fn cost(&self, req: &Request<B>) -> u32 {
        self.first.cost(req)
    }

    fn tier(&self, req: &Request<B>) -> Option<&'static str> {
        self.first.tier(req)
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

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn request(header: Option<&[u8]>) -> Request<()> {
        let mut req = Request::new(());
        if let Some(value) = header {
            let value = http::HeaderValue::from_bytes(value).unwrap();
            req.headers_mut().insert("x-api-key", value);
        }
        req
    }

    #[test]
    fn the_first_sources_key_is_borrowed_and_the_seconds_tagged_inline() {
        let ip = |req: &Request<()>| {
            Some("2001:db8::1".parse::<IpAddr>().unwrap()).filter(|_| req.headers().is_empty())
        };
        let key = HeaderKey::new("x-api-key").unwrap().or(ip);
        let req = request(Some(b"k-1"));
        let first = key.key(&req).unwrap();
        assert!(matches!(first.0, Repr::Borrowed(b"k-1")), "{first:?}");
        let keyless = request(None);
        let second = key.key(&keyless).unwrap();
        assert!(
            matches!(second.0, Repr::Inline { len: 18, .. }),
            "{second:?}"
        );
        assert_eq!(&second.as_bytes()[..2], [0, 2]);
        assert_eq!(
            second.as_bytes()[2..],
            RequestKey::ip("2001:db8::1".parse().unwrap()).as_bytes()[..]
        );
        // No larger than its owned form.
        assert_eq!(size_of::<RequestKey<'_>>(), size_of::<Repr<'_>>());
        assert!(size_of::<RequestKey<'_>>() <= 32);
    }

    /// The key of `Or::new(Or::new(x, y), z)` where only `source` (0, 1, 2) has the key `key`.
    fn nested(source: usize, key: &'static [u8]) -> Option<Vec<u8>> {
        let only = move |i: usize| move |_: &Request<()>| (i == source).then(|| key.to_vec());
        let key = Or::new(Or::new(only(0), only(1)), only(2));
        key.key(&request(None)).map(|k| k.as_bytes().to_vec())
    }

    #[test]
    fn keys_of_different_sources_never_meet() {
        // Keys that start with the tag, the tagged forms of each other, plain ones.
        let keys: [&[u8]; 8] = [
            b"a",
            b"\0a",
            b"\0\x01a",
            b"\0\x02a",
            b"\0\x01\0\x02a",
            b"\0\x02\0\x02a",
            b"\0\x01\0\x01a",
            b"\x01",
        ];
        let mut seen = std::collections::HashMap::new();
        for source in 0..3 {
            for key in keys {
                let bytes = nested(source, key).unwrap();
                if let Some(earlier) = seen.insert(bytes.clone(), (source, key)) {
                    panic!("{:?} and {:?} share {bytes:?}", earlier, (source, key));
                }
            }
        }
        assert_eq!(
            nested(0, b"a").unwrap(),
            b"a",
            "the first source's key as it is"
        );
        assert_eq!(nested(2, b"a").unwrap(), b"\0\x02a");
        assert_eq!(
            nested(1, b"a").unwrap(),
            b"\0\x01\0\x02a",
            "escaped by the outer Or"
        );
        assert_eq!(nested(0, b""), None, "an empty key is none");
        assert_eq!(nested(2, b""), None);
        // A long key of the second source is owned.
        let none = |_: &Request<()>| None::<Vec<u8>>;
        let long = |_: &Request<()>| Some(b"0123456789012345678901234".to_vec());
        let keyless = request(None);
        let long = Or::new(none, long).key(&keyless).unwrap();
        assert!(matches!(long.0, Repr::Owned(_)));
        assert_eq!(long.as_bytes(), b"\0\x020123456789012345678901234");
    }
}
