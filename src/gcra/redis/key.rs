//! Store keys: prefix + the limited identity (the layout is described in the module's "Keys"
//! section, `gcra/redis/mod.rs`).

use crate::gcra::ConfigError;

/// User keys longer than this many bytes are replaced by their SHA-1 digest (40 hex characters).
pub const MAX_KEY_LEN: usize = 128;

/// The longest key prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "flowguard:";

/// Maps user keys to store keys under one prefix.
#[derive(Clone, Debug)]
pub(crate) struct KeySpace {
    prefix: Vec<u8>,
    /// `prefix={key}`: a Redis Cluster hash tag around the user key.
    hash_tags: bool,
}

impl KeySpace {
    pub(crate) fn new(prefix: Vec<u8>, hash_tags: bool) -> Result<KeySpace, ConfigError> {
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(ConfigError::InvalidPrefix {
                reason: format!(
                    "{} bytes is longer than the maximum of {MAX_PREFIX_LEN}",
                    prefix.len()
                ),
            });
        }
        if let Some(open) = prefix.iter().position(|&b| b == b'{') {
            if hash_tags {
                return Err(ConfigError::InvalidPrefix {
                    reason:
                        "it holds a hash tag `{...}`, which would win over the tag around each key \
                             (hash_tag_keys): remove the braces from the prefix"
                            .into(),
                });
            }
            match prefix[open + 1..].iter().position(|&b| b == b'}') {
                Some(0) => {
                    return Err(ConfigError::InvalidPrefix {
                        reason:
                            "it contains an empty hash tag `{}`: remove it or put a name inside"
                                .into(),
                    });
                }
                Some(_) => {}
                None => {
                    return Err(ConfigError::InvalidPrefix {
                        reason: "it opens a Redis Cluster hash tag `{` without closing it: the tag would end \
                                 inside user keys; close it (`{name}`) or remove the brace"
                            .into(),
                    });
                }
            }
        }
        Ok(KeySpace { prefix, hash_tags })
    }

    /// The store key for `key`.
    pub(crate) fn key(&self, key: &[u8]) -> Vec<u8> {
        let verbatim = key.len() <= MAX_KEY_LEN
            && !key.contains(&b'{')
            && !(self.hash_tags && key.contains(&b'}'));
        let digest;
        let (marker, body) = if verbatim {
            (VERBATIM, key)
        } else {
            digest = sha1_smol::Sha1::from(key).digest().to_string();
            (DIGEST, digest.as_bytes())
        };
        let mut out = Vec::with_capacity(self.prefix.len() + 3 + body.len());
        out.extend_from_slice(&self.prefix);
        out.push(marker);
        if self.hash_tags {
            out.push(b'{');
            out.extend_from_slice(body);
            out.push(b'}');
        } else {
            out.extend_from_slice(body);
        }
        out
    }

    /// Whether keys carry a hash tag around the user key.
    pub(crate) fn hash_tags(&self) -> bool {
        self.hash_tags
    }

    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The prefix of a key space of its own for the limit `name` under this one:
    /// `prefix ‖ name ‖ ":"`, with `%`, `{`, `}`, the markers (`=`, `#`) and control bytes of
    /// the name written `%XX`. Injective, and it never names keys of this key space itself
    /// (`prefix ‖ "="` or `prefix ‖ "#"`): the escaped name holds neither marker and ends before
    /// the first of them.
    #[cfg(feature = "tower")]
    pub(crate) fn limit_prefix(&self, name: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + name.len() + 1);
        out.extend_from_slice(&self.prefix);
        for &b in name.as_bytes() {
            if matches!(b, b'%' | b'{' | b'}' | VERBATIM | DIGEST) || b.is_ascii_control() {
                out.extend_from_slice(format!("%{b:02X}").as_bytes());
            } else {
                out.push(b);
            }
        }
        out.push(b':');
        out
    }
}

/// The byte after the prefix of a key kept as the user gave it.
const VERBATIM: u8 = b'=';

/// The byte after the prefix of a key replaced by its digest.
const DIGEST: u8 = b'#';

#[cfg(test)]
mod tests {
    use super::*;

    fn space(prefix: &str) -> KeySpace {
        KeySpace::new(prefix.as_bytes().to_vec(), false).unwrap()
    }

    #[cfg(feature = "tower")]
    #[test]
    fn limit_prefixes_escape_what_would_route_or_collide() {
        assert_eq!(
            space("flowguard:").limit_prefix("default:per-second"),
            b"flowguard:default:per-second:"
        );
        assert_eq!(
            space("p:").limit_prefix("{t}:a=b#%\n"),
            b"p:%7Bt%7D:a%3Db%23%25%0A:"
        );
        assert_ne!(
            space("p:").limit_prefix("%7B"),
            space("p:").limit_prefix("{")
        );
    }

    #[test]
    fn short_keys_are_kept_verbatim_and_binary_safe() {
        let s = space("rl:");
        assert_eq!(s.key(b"alice"), b"rl:=alice");
        assert_eq!(s.key(b"\x00\xff\r\n"), b"rl:=\x00\xff\r\n");
        assert_eq!(s.key(b""), b"rl:=");
    }

    #[test]
    fn long_keys_and_hash_tags_are_digested() {
        let s = space("rl:");
        let long = vec![b'a'; MAX_KEY_LEN + 1];
        let k = s.key(&long);
        assert_eq!(k.len(), 3 + 1 + 40);
        assert!(k.starts_with(b"rl:#"));
        assert_eq!(s.key(&[b'a'; MAX_KEY_LEN]).len(), 3 + 1 + MAX_KEY_LEN);
        let tagged = s.key(b"{x}1");
        assert!(tagged.starts_with(b"rl:#") && !tagged.contains(&b'{'));
        assert_ne!(tagged, s.key(b"{x}2"));
        // A verbatim key equal to a digest's text cannot collide with the digested form.
        let digest_text = &k[4..];
        assert_ne!(s.key(digest_text), k);
    }

    #[test]
    fn prefix_hash_tags_must_be_complete() {
        assert!(KeySpace::new(b"rl:{api}:".to_vec(), false).is_ok());
        assert!(KeySpace::new(b"rl:{api:".to_vec(), false).is_err());
        assert!(KeySpace::new(b"rl:{}:".to_vec(), false).is_err());
        assert!(KeySpace::new(vec![b'p'; MAX_PREFIX_LEN + 1], false).is_err());
        let msg = KeySpace::new(b"{".to_vec(), false).unwrap_err().to_string();
        assert!(msg.contains("close it"), "{msg}");
        let msg = KeySpace::new(b"rl:{api}:".to_vec(), true)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("hash_tag_keys"), "{msg}");
    }

    #[test]
    fn hash_tagged_keys_share_a_slot_across_prefixes_and_cannot_be_pinned() {
        use crate::gcra::redis::slot::slot;
        let (second, day) = (
            KeySpace::new(b"rl:s:".to_vec(), true).unwrap(),
            KeySpace::new(b"rl:d:".to_vec(), true).unwrap(),
        );
        assert_eq!(second.key(b"alice"), b"rl:s:={alice}");
        assert_eq!(slot(&second.key(b"alice")), slot(&day.key(b"alice")));
        assert_eq!(slot(&second.key(b"alice")), slot(b"alice"));
        // Braces in the user key are digested, also a closing one: "x}1" and "x}2" would
        // otherwise both be tagged "x".
        for pinning in [&b"x}1"[..], b"x}2", b"{x}3"] {
            let k = second.key(pinning);
            assert!(k.starts_with(b"rl:s:#{") && k.ends_with(b"}"), "{k:?}");
            assert_eq!(k.len(), 5 + 2 + 40 + 1);
        }
        assert_ne!(slot(&second.key(b"x}1")), slot(&second.key(b"x}2")));
        // Without tags, a closing brace is kept as it is (the earlier format).
        assert_eq!(space("rl:").key(b"x}1"), b"rl:=x}1");
    }
}
