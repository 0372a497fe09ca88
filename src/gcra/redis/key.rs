//! Store keys: prefix + the limited identity, binary-safe, bounded in length, and routed evenly in
//! Redis Cluster.
//!
//! A user key `k` becomes `prefix ‖ "=" ‖ k` when it is at most [`MAX_KEY_LEN`] bytes and contains
//! no `{`, and `prefix ‖ "#" ‖ hex(SHA-1(k))` otherwise. The marker byte keeps the two forms apart,
//! so the mapping is injective up to SHA-1 collisions.
//!
//! * Length: a client cannot make Redis store megabyte keys; every key is at most
//!   `prefix + 1 + 128` bytes.
//! * Hash tags: Redis Cluster routes a key by the first `{...}` in it. A user key containing `{`
//!   (e.g. an attacker-chosen header `"{x}1"`, `"{x}2"`, ...) would pin many identities to one slot
//!   and one node, so such keys are digested: the digest has no braces and the whole key is hashed.
//!   To co-locate all of a limiter's keys on purpose, put a complete tag in the prefix
//!   (`"rl:{api}:"`); a prefix with a `{` that is not closed within the prefix is rejected, since the
//!   tag would then end inside user data.

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
}

impl KeySpace {
    pub(crate) fn new(prefix: Vec<u8>) -> Result<KeySpace, ConfigError> {
        if prefix.len() > MAX_PREFIX_LEN {
            return Err(ConfigError::InvalidPrefix {
                reason: format!(
                    "{} bytes is longer than the maximum of {MAX_PREFIX_LEN}",
                    prefix.len()
                ),
            });
        }
        if let Some(open) = prefix.iter().position(|&b| b == b'{') {
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
        Ok(KeySpace { prefix })
    }

    /// The store key for `key`.
    pub(crate) fn key(&self, key: &[u8]) -> Vec<u8> {
        if key.len() <= MAX_KEY_LEN && !key.contains(&b'{') {
            let mut out = Vec::with_capacity(self.prefix.len() + 1 + key.len());
            out.extend_from_slice(&self.prefix);
            out.push(b'=');
            out.extend_from_slice(key);
            out
        } else {
            let digest = sha1_smol::Sha1::from(key).digest().to_string();
            let mut out = Vec::with_capacity(self.prefix.len() + 1 + digest.len());
            out.extend_from_slice(&self.prefix);
            out.push(b'#');
            out.extend_from_slice(digest.as_bytes());
            out
        }
    }

    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space(prefix: &str) -> KeySpace {
        KeySpace::new(prefix.as_bytes().to_vec()).unwrap()
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
        assert!(KeySpace::new(b"rl:{api}:".to_vec()).is_ok());
        assert!(KeySpace::new(b"rl:{api:".to_vec()).is_err());
        assert!(KeySpace::new(b"rl:{}:".to_vec()).is_err());
        assert!(KeySpace::new(vec![b'p'; MAX_PREFIX_LEN + 1]).is_err());
        let msg = KeySpace::new(b"{".to_vec()).unwrap_err().to_string();
        assert!(msg.contains("close it"), "{msg}");
    }
}
