//! [`LimitKey`]: how a keyed limiter keeps its keys in memory, so that `max_keys` bounds bytes too.
//!
//! * Byte strings (`[u8]`, `Vec<u8>`, `Box<[u8]>`, `str`, `String`, `Box<str>`) can be as long as
//!   a client makes them. A key of at most [`MAX_VERBATIM_KEY_LEN`] bytes is kept verbatim; a
//!   longer one as a 160-bit digest, keyed by a secret drawn for each limiter. Both forms carry a
//!   tag byte, so a verbatim key can never equal a digest, and one key never costs more than
//!   `1 + MAX_VERBATIM_KEY_LEN` bytes of key data, whatever its length. The same bytes are the same
//!   key whether given as `str` or `[u8]`.
//! * Keys of a fixed size (integers, addresses, arrays and tuples of them: [`FixedSizeKey`]) are
//!   kept as they are.
//!
//! Two long keys share a quota only if their digests collide: with a 160-bit digest under a
//! secret the client never sees, a client can neither find such a pair nor aim at another
//! client's key, and among a million live keys the chance of an accidental collision is about
//! 2^-120.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// Byte-string keys longer than this are kept as a digest (20 bytes) instead of verbatim.
pub const MAX_VERBATIM_KEY_LEN: usize = 64;

/// Tag of a key kept verbatim.
const VERBATIM: u8 = 0;
/// Tag of a key kept as a digest.
const DIGEST: u8 = 1;
/// Bytes of a digest (SHA-1).
const DIGEST_LEN: usize = 20;

/// A key type of [`KeyedRateLimiter`](super::KeyedRateLimiter): how its keys are kept in memory,
/// so that `max_keys` bounds bytes too.
///
/// * Byte strings can be as long as a client makes them. A key of at most
///   [`MAX_VERBATIM_KEY_LEN`] bytes is kept verbatim; a longer one as a 160-bit digest keyed by a
///   secret drawn for each limiter. Both forms carry a tag byte, so a verbatim key can never
///   equal a digest, and a key never costs more than `1 + MAX_VERBATIM_KEY_LEN` bytes of key
///   data, whatever its length. The same bytes are the same key as `str` or as `[u8]`.
/// * Keys of a [`FixedSizeKey`] type are kept as they are.
///
/// Two long keys share a quota only if their digests collide: under a secret the client never
/// sees, a client can neither find such a pair nor aim at another client's key, and among a
/// million live keys the chance of an accidental collision is about 2^-120.
///
/// Implemented for `[u8]`, `Vec<u8>`, `Box<[u8]>`, `str`, `String`, `Box<str>` and every
/// [`FixedSizeKey`]; it cannot be implemented directly. For a key type of your own, implement
/// [`FixedSizeKey`] if its size is fixed, or map it to bytes (e.g. `Vec<u8>`) otherwise.
pub trait LimitKey: stored::StoredAs {}

impl<T: stored::StoredAs + ?Sized> LimitKey for T {}

/// A key type whose values all take the same memory (no heap data), so a keyed limiter may keep
/// keys as they are: `max_keys` then bounds its memory.
///
/// Implemented for the integer types, `bool`, `char`, `()`, IP and socket addresses, and arrays
/// and tuples (up to 4) of such types. Implement it for your own fixed-size key types:
///
/// ```
/// use flowguard::gcra::{FixedSizeKey, KeyedRateLimiter, Quota};
///
/// #[derive(Clone, PartialEq, Eq, Hash)]
/// struct Tenant { id: u64, region: u8 }
/// impl FixedSizeKey for Tenant {}
///
/// let limiter = KeyedRateLimiter::<Tenant>::new(Quota::per_second(1)?);
/// assert!(limiter.check_key(&Tenant { id: 7, region: 1 })?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Implementing it for a type that owns heap data (a `String` field, a `Vec`) compiles, but then
/// `max_keys` bounds the number of keys and not their bytes: map such keys to bytes instead.
pub trait FixedSizeKey: Hash + Eq + Clone {}

macro_rules! fixed_size {
    ($($t:ty),*) => {$( impl FixedSizeKey for $t {} )*};
}

fixed_size!(
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    bool,
    char,
    (),
    IpAddr,
    Ipv4Addr,
    Ipv6Addr,
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6
);

impl<T: FixedSizeKey, const N: usize> FixedSizeKey for [T; N] {}
impl<A: FixedSizeKey> FixedSizeKey for (A,) {}
impl<A: FixedSizeKey, B: FixedSizeKey> FixedSizeKey for (A, B) {}
impl<A: FixedSizeKey, B: FixedSizeKey, C: FixedSizeKey> FixedSizeKey for (A, B, C) {}
impl<A: FixedSizeKey, B: FixedSizeKey, C: FixedSizeKey, D: FixedSizeKey> FixedSizeKey
    for (A, B, C, D)
{
}

/// A [`FixedSizeKey`] type that keys given as bytes can be read as, so that a
/// [`KeyedRateLimiter`](super::KeyedRateLimiter) keyed by it answers them: it is then a
/// [`KeyedLimit`](super::KeyedLimit), and can stand behind the quota layer (whose key extractors
/// give bytes, e.g. `PeerIpKey` an address's octets) and the [`Guard`](crate::Guard).
///
/// | type | the bytes of a key |
/// |---|---|
/// | `IpAddr` | the octets: 4 bytes for IPv4, 16 for IPv6 (what the layer's address keys give) |
/// | `Ipv4Addr` | 4 bytes, or 16 of an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) |
/// | `Ipv6Addr` | 16 bytes, or 4 of an IPv4 address, read as IPv4-mapped (a dual-stack socket's view) |
/// | `u8` ... `u128`, `i8` ... `i128` | exactly their size, big-endian (`to_be_bytes`) |
/// | `[u8; N]` | exactly `N` bytes |
///
/// Bytes that are no key of the type are [`GcraError::UnreadableKey`](super::GcraError::UnreadableKey)
/// (never a panic, never another key): the quota layer answers such a request `500` and logs
/// what to change. The empty key (what the layer checks for requests without a key under
/// `MissingKey::Anonymous`) is one key of its own, apart from every key of the type, so
/// keyless requests share one quota as they do with byte keys.
///
/// ```
/// use flowguard::gcra::{KeyedLimit, KeyedRateLimiter, Quota};
/// use std::net::IpAddr;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = KeyedRateLimiter::<IpAddr>::new(Quota::per_minute(1)?);
/// let client: IpAddr = "192.0.2.7".parse()?;
/// assert!(limiter.check(&[192, 0, 2, 7], 1).await?.allowed); // the address's octets...
/// assert!(!limiter.check_key(&client)?.allowed); // ...are the same key as the address
/// assert!(limiter.check(b"not an address", 1).await.is_err());
/// # Ok(())
/// # }
/// ```
///
/// For a key type of your own, read the bytes your key extractor writes:
///
/// ```
/// use flowguard::gcra::{FixedSizeKey, FromKeyBytes};
///
/// #[derive(Clone, PartialEq, Eq, Hash)]
/// struct Tenant { id: u64, region: u8 }
/// impl FixedSizeKey for Tenant {}
/// impl FromKeyBytes for Tenant {
///     const KEY_BYTES: &'static str = "9 bytes: the id big-endian, then the region";
///     fn from_key_bytes(bytes: &[u8]) -> Option<Tenant> {
///         let (id, region) = bytes.split_first_chunk::<8>()?;
///         match region {
///             [region] => Some(Tenant { id: u64::from_be_bytes(*id), region: *region }),
///             _ => None,
///         }
///     }
/// }
/// ```
pub trait FromKeyBytes: FixedSizeKey {
    /// What the bytes of a key of this type are, for the error other bytes get (e.g. `"4 bytes
    /// (IPv4) or 16 (IPv6)"`).
    const KEY_BYTES: &'static str;

    /// The key `bytes` stand for; `None` when they stand for none.
    fn from_key_bytes(bytes: &[u8]) -> Option<Self>;
}

impl FromKeyBytes for IpAddr {
    const KEY_BYTES: &'static str = "4 bytes (IPv4) or 16 (IPv6), the address's octets";

    #[inline]
    fn from_key_bytes(bytes: &[u8]) -> Option<IpAddr> {
        match bytes.len() {
            4 => Ipv4Addr::from_key_bytes(bytes).map(IpAddr::V4),
            16 => Ipv6Addr::from_key_bytes(bytes).map(IpAddr::V6),
            _ => None,
        }
    }
}

impl FromKeyBytes for Ipv4Addr {
    const KEY_BYTES: &'static str = "4 bytes, or 16 of an IPv4-mapped IPv6 address";

    #[inline]
    fn from_key_bytes(bytes: &[u8]) -> Option<Ipv4Addr> {
        match <[u8; 4]>::try_from(bytes) {
            Ok(octets) => Some(Ipv4Addr::from(octets)),
            Err(_) => Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?).to_ipv4_mapped(),
        }
    }
}

impl FromKeyBytes for Ipv6Addr {
    const KEY_BYTES: &'static str = "16 bytes, or 4 of an IPv4 address (read as IPv4-mapped)";

    #[inline]
    fn from_key_bytes(bytes: &[u8]) -> Option<Ipv6Addr> {
        match <[u8; 16]>::try_from(bytes) {
            Ok(octets) => Some(Ipv6Addr::from(octets)),
            Err(_) => Some(Ipv4Addr::from(<[u8; 4]>::try_from(bytes).ok()?).to_ipv6_mapped()),
        }
    }
}

impl<const N: usize> FromKeyBytes for [u8; N] {
    const KEY_BYTES: &'static str = "exactly the array's length";

    #[inline]
    fn from_key_bytes(bytes: &[u8]) -> Option<[u8; N]> {
        bytes.try_into().ok()
    }
}

macro_rules! from_big_endian {
    ($($t:ty: $what:literal),*) => {$(
        impl FromKeyBytes for $t {
            const KEY_BYTES: &'static str = $what;

            #[inline]
            fn from_key_bytes(bytes: &[u8]) -> Option<$t> {
                bytes.try_into().ok().map(<$t>::from_be_bytes)
            }
        }
    )*};
}

from_big_endian!(
    u8: "1 byte",
    u16: "2 bytes, big-endian",
    u32: "4 bytes, big-endian",
    u64: "8 bytes, big-endian",
    u128: "16 bytes, big-endian",
    i8: "1 byte",
    i16: "2 bytes, big-endian",
    i32: "4 bytes, big-endian",
    i64: "8 bytes, big-endian",
    i128: "16 bytes, big-endian"
);

/// The machinery behind [`LimitKey`], out of users' reach so that only the forms above exist.
pub(crate) mod stored {
    use super::*;

    /// What a keyed table stores for a key, and the borrowed form it is looked up by.
    pub trait StoredAs {
        /// What the table holds for the key.
        type Stored: Hash + Eq + Borrow<Self::Probe>;
        /// The form a lookup compares with stored keys (hashing equal to `Stored`).
        type Probe: ?Sized + Hash + Eq + ToOwned<Owned = Self::Stored>;

        /// Runs `f` on the lookup form of this key.
        fn with_probe<R>(&self, digester: &KeyDigester, f: impl FnOnce(&Self::Probe) -> R) -> R;
    }

    impl<T: FixedSizeKey> StoredAs for T {
        type Stored = T;
        type Probe = T;

        #[inline]
        fn with_probe<R>(&self, _: &KeyDigester, f: impl FnOnce(&T) -> R) -> R {
            f(self)
        }
    }

    macro_rules! stored_as_bytes {
        ($($t:ty: $key:ident => $bytes:expr),*) => {$(
            impl StoredAs for $t {
                type Stored = Vec<u8>;
                type Probe = [u8];

                #[inline]
                fn with_probe<R>(&self, digester: &KeyDigester, f: impl FnOnce(&[u8]) -> R) -> R {
                    let $key = self;
                    digester.with_probe($bytes, f)
                }
            }
        )*};
    }

    stored_as_bytes!(
        [u8]: k => k,
        Vec<u8>: k => k,
        Box<[u8]>: k => k,
        str: k => k.as_bytes(),
        String: k => k.as_bytes(),
        Box<str>: k => k.as_bytes()
    );

    /// Turns byte keys into their stored form: tag + verbatim bytes, or tag + keyed digest.
    #[derive(Clone)]
    pub struct KeyDigester {
        /// SHA-1 state that has absorbed this limiter's secret.
        keyed: sha1_smol::Sha1,
    }

    impl KeyDigester {
        /// A digester with a fresh 128-bit secret.
        ///
        /// The secret is two outputs of SipHash under `RandomState`'s per-process random keys
        /// (drawn from the operating system): unpredictable, and it cannot fail at run time.
        pub(crate) fn new() -> KeyDigester {
            let random = std::hash::RandomState::new();
            let mut keyed = sha1_smol::Sha1::new();
            keyed.update(&random.hash_one(0u8).to_le_bytes());
            keyed.update(&random.hash_one(1u8).to_le_bytes());
            KeyDigester { keyed }
        }

        /// Runs `f` on the stored form of `key`, built on the stack.
        #[inline]
        pub(crate) fn with_probe<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
            let mut probe = [0u8; 1 + MAX_VERBATIM_KEY_LEN];
            if key.len() <= MAX_VERBATIM_KEY_LEN {
                probe[0] = VERBATIM;
                probe[1..=key.len()].copy_from_slice(key);
                f(&probe[..=key.len()])
            } else {
                let mut digest = self.keyed.clone();
                digest.update(key);
                probe[0] = DIGEST;
                probe[1..=DIGEST_LEN].copy_from_slice(&digest.digest().bytes());
                f(&probe[..=DIGEST_LEN])
            }
        }
    }

    impl std::fmt::Debug for KeyDigester {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("KeyDigester { .. }")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::stored::{KeyDigester, StoredAs};
    use super::*;

    fn stored<K: StoredAs<Probe = [u8]> + ?Sized>(d: &KeyDigester, key: &K) -> Vec<u8> {
        key.with_probe(d, |p| p.to_vec())
    }

    #[test]
    fn short_keys_are_verbatim_long_ones_digested_and_the_forms_never_meet() {
        let d = KeyDigester::new();
        assert_eq!(stored(&d, b"alice".as_slice()), b"\0alice");
        assert_eq!(stored(&d, "alice"), b"\0alice", "str and bytes agree");
        assert_eq!(stored(&d, b"".as_slice()), b"\0");
        let longest = vec![0xff; MAX_VERBATIM_KEY_LEN];
        assert_eq!(stored(&d, &longest).len(), 1 + MAX_VERBATIM_KEY_LEN);
        let long = vec![0xff; MAX_VERBATIM_KEY_LEN + 1];
        let digest = stored(&d, &long);
        assert_eq!((digest.len(), digest[0]), (1 + DIGEST_LEN, DIGEST));
        // A verbatim key equal to the digest's bytes is still another key.
        assert_ne!(stored(&d, &digest[1..]), digest);
        assert_ne!(stored(&d, &digest[..]), digest);
        // Keys differing anywhere, even past the verbatim length, differ.
        let mut other = long.clone();
        *other.last_mut().unwrap() = 0;
        assert_ne!(stored(&d, &other), digest);
        assert_eq!(stored(&d, &long), digest, "deterministic per limiter");
    }

    #[test]
    fn key_bytes_read_as_the_keys_whose_bytes_they_are_and_nothing_else() {
        let v4 = Ipv4Addr::new(192, 0, 2, 7);
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let mapped = v4.to_ipv6_mapped();
        assert_eq!(IpAddr::from_key_bytes(&v4.octets()), Some(IpAddr::V4(v4)));
        assert_eq!(IpAddr::from_key_bytes(&v6.octets()), Some(IpAddr::V6(v6)));
        assert_eq!(Ipv4Addr::from_key_bytes(&v4.octets()), Some(v4));
        assert_eq!(Ipv4Addr::from_key_bytes(&mapped.octets()), Some(v4));
        assert_eq!(Ipv4Addr::from_key_bytes(&v6.octets()), None, "not mapped");
        assert_eq!(Ipv6Addr::from_key_bytes(&v6.octets()), Some(v6));
        assert_eq!(Ipv6Addr::from_key_bytes(&v4.octets()), Some(mapped));
        for len in [0, 1, 3, 5, 15, 17] {
            let bytes = vec![1; len];
            assert_eq!(IpAddr::from_key_bytes(&bytes), None, "{len} bytes");
            assert_eq!(Ipv4Addr::from_key_bytes(&bytes), None, "{len} bytes");
            assert_eq!(Ipv6Addr::from_key_bytes(&bytes), None, "{len} bytes");
        }
        assert_eq!(u64::from_key_bytes(&42u64.to_be_bytes()), Some(42));
        assert_eq!(i16::from_key_bytes(&(-2i16).to_be_bytes()), Some(-2));
        assert_eq!(
            u128::from_key_bytes(&u128::MAX.to_be_bytes()),
            Some(u128::MAX)
        );
        assert_eq!(u8::from_key_bytes(b"*"), Some(b'*'));
        assert_eq!(
            u64::from_key_bytes(b"42"),
            None,
            "text is not a u64's bytes"
        );
        assert_eq!(u32::from_key_bytes(&[0; 8]), None);
        assert_eq!(<[u8; 3]>::from_key_bytes(b"abc"), Some(*b"abc"));
        assert_eq!(<[u8; 3]>::from_key_bytes(b"abcd"), None);
    }

    #[test]
    fn each_limiter_has_its_own_secret() {
        let long = vec![7u8; 1000];
        let (a, b) = (KeyDigester::new(), KeyDigester::new());
        assert_ne!(stored(&a, &long), stored(&b, &long));
    }
}
