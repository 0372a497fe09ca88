//! Keys by client address: the peer of the connection ([`PeerIpKey`]), or the address a chain of
//! trusted proxies reports ([`XForwardedForKey`], [`ForwardedKey`]).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::header::{FORWARDED, HeaderName};
use http::{HeaderMap, Request};

use super::key::{KeyExtractor, RequestKey, or_method};

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// IPv6 clients commonly hold a whole /64: keyed by their full address, one client would get
/// 2^64 quotas.
const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The key of `ip`: IPv4 addresses whole, IPv6 ones cut to their first `v6_prefix` bits.
fn ip_key(ip: IpAddr, v6_prefix: u8) -> RequestKey<'static> {
    match ip.to_canonical() {
        IpAddr::V6(v6) if v6_prefix < 128 => {
            let bits = u128::from(v6);
            let mask = u128::MAX
                .checked_shl(128 - u32::from(v6_prefix))
                .unwrap_or(0);
            RequestKey::ip(IpAddr::V6(Ipv6Addr::from(bits & mask)))
        }
        ip => RequestKey::ip(ip),
    }
}

/// The peer address of the connection, from the request's extensions: axum's
/// `ConnectInfo<SocketAddr>` (feature `axum`; serve with
/// `into_make_service_with_connect_info::<SocketAddr>()`), or a plain [`SocketAddr`] that a hyper
/// server inserts itself (`req.extensions_mut().insert(peer)`). IPv6 addresses are keyed by
/// their /64 (a client usually holds a whole /64); [`ipv6_prefix`](Self::ipv6_prefix) changes it.
///
/// Behind a reverse proxy the peer is the proxy: use [`XForwardedForKey`] or [`ForwardedKey`].
///
/// A request that carries no peer address has no key: under the default
/// [`MissingKey::Anonymous`](super::MissingKey::Anonymous) every such request shares one quota.
/// That is almost always a server that was not served with its connection info (axum:
/// `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`), so the
/// first such request logs an error ([`NO_PEER_ADDRESS`], once per `PeerIpKey` and its clones),
/// and the layer counts every one as keyless.
///
/// ```
/// use flowguard::gcra::layer::{KeyExtractor, PeerIpKey};
/// use std::net::SocketAddr;
///
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert("192.0.2.7:50123".parse::<SocketAddr>()?);
/// assert_eq!(PeerIpKey::new().key(&req).unwrap().as_bytes(), [192, 0, 2, 7]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct PeerIpKey {
    v6_prefix: u8,
    /// Whether [`NO_PEER_ADDRESS`] was logged, shared by clones.
    warned: Arc<AtomicBool>,
}

impl PeerIpKey {
    /// Keys by the peer's address (IPv6 by its /64).
    pub fn new() -> PeerIpKey {
        PeerIpKey {
            v6_prefix: DEFAULT_IPV6_PREFIX,
            warned: Arc::default(),
        }
    }

    /// Keys IPv6 peers by their first `bits` bits (default 64; 128 for the whole address;
    /// more than 128 is 128).
    pub fn ipv6_prefix(self, bits: u8) -> PeerIpKey {
        PeerIpKey {
            v6_prefix: bits.min(128),
            ..self
        }
    }
}

impl Default for PeerIpKey {
    fn default() -> Self {
        PeerIpKey::new()
    }
}

or_method!(PeerIpKey, XForwardedForKey, ForwardedKey);

/// The peer address of a request, from its extensions.
fn peer(extensions: &http::Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

/// The message a [`PeerIpKey`] logs (at error level, once) for the first request that carries no
/// peer address.
pub const NO_PEER_ADDRESS: &str = "PeerIpKey found no peer address in a request, so every such \
     request shares one quota: serve the app with its connection info \
     (axum: app.into_make_service_with_connect_info::<SocketAddr>(); hyper: insert the peer's \
     SocketAddr into the request's extensions), or key requests another way";

impl<B> KeyExtractor<B> for PeerIpKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        let key = peer(req.extensions()).map(|ip| ip_key(ip, self.v6_prefix));
        if key.is_none() && !self.warned.swap(true, Ordering::Relaxed) {
            tracing::error!("{NO_PEER_ADDRESS}");
        }
        key
    }
}

/// The client address from `X-Forwarded-For`, behind `trusted_proxies` reverse proxies that
/// each append the address they were connected from.
///
/// The entry `trusted_proxies` places from the right is the client's: each proxy appends the
/// address of its peer, so the nearest proxy wrote the rightmost entry (the address of the proxy
/// before it) and the outermost one wrote the client's; everything left of it came from the
/// client and is never read. A request with fewer entries (it bypassed a proxy) or whose entry is not an
/// address (`1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]:80`) has no key. Several
/// `X-Forwarded-For` lines are read as one list, in order. `trusted_proxies == 0` trusts no
/// header: the key is the peer address, as [`PeerIpKey`].
///
/// ```
/// use flowguard::gcra::layer::{KeyExtractor, XForwardedForKey};
///
/// // Two proxies of ours: the outer one (10.0.0.1) appended the client's address, the inner
/// // one (our peer) appended the outer one's. The client forged the leftmost entry.
/// let req = http::Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.9, 10.0.0.1")
///     .body(())?;
/// let key = XForwardedForKey::new(2).key(&req).unwrap();
/// assert_eq!(key.as_bytes(), [203, 0, 113, 9]);
/// assert!(XForwardedForKey::new(4).key(&req).is_none(), "fewer entries than proxies");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct XForwardedForKey {
    trusted: usize,
    v6_prefix: u8,
}

impl XForwardedForKey {
    /// Keys by the address `trusted_proxies` entries from the right.
    pub fn new(trusted_proxies: usize) -> XForwardedForKey {
        XForwardedForKey {
            trusted: trusted_proxies,
            v6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// Keys IPv6 clients by their first `bits` bits (default 64).
    pub fn ipv6_prefix(self, bits: u8) -> XForwardedForKey {
        XForwardedForKey {
            v6_prefix: bits.min(128),
            ..self
        }
    }
}

impl<B> KeyExtractor<B> for XForwardedForKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        let ip = if self.trusted == 0 {
            peer(req.extensions())?
        } else {
            x_forwarded_for(req.headers(), self.trusted)?
        };
        Some(ip_key(ip, self.v6_prefix))
    }
}

/// The address `trusted` entries from the right of the `X-Forwarded-For` lines.
fn x_forwarded_for(headers: &HeaderMap, trusted: usize) -> Option<IpAddr> {
    let mut lines = headers.get_all(X_FORWARDED_FOR).iter().rev();
    let mut skip = trusted - 1;
    // From the last line backwards, entries right to left.
    for line in &mut lines {
        for entry in line.as_bytes().rsplit(|&b| b == b',') {
            if skip == 0 {
                return node_address(std::str::from_utf8(entry).ok()?.trim());
            }
            skip -= 1;
        }
    }
    None
}

/// The client address from the standard `Forwarded` field (RFC 7239), behind `trusted_proxies`
/// reverse proxies that each append an element: the `for=` of the element `trusted_proxies`
/// places from the right.
///
/// Elements are read across `Forwarded` lines, in order; quoted values (`for="[2001:db8::1]:80"`)
/// and parameter names in any case are understood. A request with fewer elements, whose element
/// has no `for`, or whose `for` is not an address (`unknown`, an obfuscated `_name`) has no key.
/// `trusted_proxies == 0` trusts no header: the key is the peer address.
///
/// ```
/// use flowguard::gcra::layer::{ForwardedKey, KeyExtractor};
///
/// let req = http::Request::builder()
///     .header("forwarded", r#"for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711""#)
///     .body(())?;
/// let key = ForwardedKey::new(2).ipv6_prefix(128).key(&req).unwrap();
/// assert_eq!(key.as_bytes(), [192, 0, 2, 60]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct ForwardedKey {
    trusted: usize,
    v6_prefix: u8,
}

impl ForwardedKey {
    /// Keys by the `for=` address of the element `trusted_proxies` places from the right.
    pub fn new(trusted_proxies: usize) -> ForwardedKey {
        ForwardedKey {
            trusted: trusted_proxies,
            v6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// Keys IPv6 clients by their first `bits` bits (default 64).
    pub fn ipv6_prefix(self, bits: u8) -> ForwardedKey {
        ForwardedKey {
            v6_prefix: bits.min(128),
            ..self
        }
    }
}

impl<B> KeyExtractor<B> for ForwardedKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Option<RequestKey<'r>> {
        let ip = if self.trusted == 0 {
            peer(req.extensions())?
        } else {
            forwarded(req.headers(), self.trusted)?
        };
        Some(ip_key(ip, self.v6_prefix))
    }
}

/// The `for=` address of the element `trusted` places from the right of the `Forwarded` lines.
fn forwarded(headers: &HeaderMap, trusted: usize) -> Option<IpAddr> {
    let mut elements: Vec<&[u8]> = Vec::new();
    for line in headers.get_all(FORWARDED) {
        elements.extend(split_outside_quotes(line.as_bytes(), b','));
    }
    let element = elements.len().checked_sub(trusted).map(|i| elements[i])?;
    for pair in split_outside_quotes(element, b';') {
        let text = std::str::from_utf8(pair).ok()?.trim();
        let Some((name, value)) = text.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("for") {
            let value = value.trim();
            let value = match value.strip_prefix('"') {
                Some(quoted) => quoted.strip_suffix('"')?.replace("\\\"", "\""),
                None => value.to_owned(),
            };
            return node_address(&value);
        }
    }
    None
}

/// `bytes` split at every `separator` outside a quoted string.
fn split_outside_quotes(bytes: &[u8], separator: u8) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == separator && !quoted => {
                parts.push(&bytes[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&bytes[start..]);
    parts
}

/// An address as proxies write it: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:80`; anything else (`unknown`, `_hidden`, garbage) is `None`.
fn node_address(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = node.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    let inner = node.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(lines: &[&str], trusted: usize) -> Option<IpAddr> {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(X_FORWARDED_FOR, line.parse().unwrap());
        }
        x_forwarded_for(&headers, trusted)
    }

    fn fwd(lines: &[&str], trusted: usize) -> Option<IpAddr> {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(FORWARDED, line.parse().unwrap());
        }
        forwarded(&headers, trusted)
    }

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn x_forwarded_for_takes_the_entry_of_the_outermost_trusted_proxy() {
        let chain = "203.0.113.9, 198.51.100.1,10.0.0.2";
        assert_eq!(xff(&[chain], 1), ip("10.0.0.2"));
        assert_eq!(xff(&[chain], 2), ip("198.51.100.1"));
        assert_eq!(xff(&[chain], 3), ip("203.0.113.9"));
        assert_eq!(xff(&[chain], 4), None, "fewer entries than proxies");
        // A client that forges entries only adds to the left.
        assert_eq!(
            xff(&["6.6.6.6, 203.0.113.9, 10.0.0.2"], 2),
            ip("203.0.113.9")
        );
        // Several lines are one list, in order.
        assert_eq!(
            xff(&["203.0.113.9", "198.51.100.1, 10.0.0.2"], 3),
            ip("203.0.113.9")
        );
        assert_eq!(xff(&["203.0.113.9", "10.0.0.2"], 2), ip("203.0.113.9"));
        // Ports and brackets.
        assert_eq!(xff(&["203.0.113.9:5050, 10.0.0.2"], 2), ip("203.0.113.9"));
        assert_eq!(xff(&["[2001:db8::1]:443"], 1), ip("2001:db8::1"));
        assert_eq!(xff(&["2001:db8::1"], 1), ip("2001:db8::1"));
        assert_eq!(xff(&["[2001:db8::1]"], 1), ip("2001:db8::1"));
        // Malformed: no key, never another entry.
        assert_eq!(xff(&["203.0.113.9, not-an-ip"], 1), None);
        assert_eq!(xff(&["203.0.113.9, "], 1), None);
        assert_eq!(xff(&["203.0.113.9,,10.0.0.2"], 2), None);
        assert_eq!(xff(&[], 1), None);
    }

    #[test]
    fn forwarded_reads_for_of_the_chosen_element() {
        let chain = r#"for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8:cafe::17]:4711""#;
        assert_eq!(fwd(&[chain], 1), ip("2001:db8:cafe::17"));
        assert_eq!(fwd(&[chain], 2), ip("192.0.2.60"));
        assert_eq!(fwd(&[chain], 3), None);
        assert_eq!(
            fwd(&["for=192.0.2.43", "for=198.51.100.17"], 2),
            ip("192.0.2.43")
        );
        assert_eq!(fwd(&[r#"for="192.0.2.43:80""#], 1), ip("192.0.2.43"));
        // A comma or semicolon inside quotes does not split.
        assert_eq!(fwd(&[r#"for=192.0.2.1;ext="a,b;c""#], 1), ip("192.0.2.1"));
        // Not an address: no key.
        assert_eq!(fwd(&["for=unknown"], 1), None);
        assert_eq!(fwd(&["for=_hidden"], 1), None);
        assert_eq!(fwd(&["proto=https;by=10.0.0.1"], 1), None, "no for=");
        assert_eq!(
            fwd(&[r#"for="[2001:db8::1"#], 1),
            None,
            "unterminated quote"
        );
        assert_eq!(
            fwd(&["for=2001:db8::1"], 1),
            ip("2001:db8::1"),
            "lenient: bare IPv6"
        );
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_prefix_and_mapped_v4_as_v4() {
        let a = ip_key("2001:db8:1:2:aaaa::1".parse().unwrap(), 64);
        let b = ip_key("2001:db8:1:2:bbbb::9".parse().unwrap(), 64);
        let c = ip_key("2001:db8:1:3::1".parse().unwrap(), 64);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(
            ip_key("2001:db8:1:2:aaaa::1".parse().unwrap(), 128),
            ip_key("2001:db8:1:2:bbbb::9".parse().unwrap(), 128)
        );
        assert_eq!(
            ip_key("::ffff:192.0.2.1".parse().unwrap(), 64).as_bytes(),
            [192, 0, 2, 1]
        );
        assert_eq!(
            ip_key("2001:db8::1".parse().unwrap(), 0).as_bytes(),
            [0; 16]
        );
    }
}
