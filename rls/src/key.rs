//! Limiter keys: the domain and the full descriptor path, escaped so that no two requests with
//! different domains or entries share a key.

use std::io::Write;

/// The key of a request descriptor in `domain`: every part (the domain, then each entry's key and
/// value) written as its length in bytes, `:`, and the bytes. Length prefixes make the encoding
/// injective whatever bytes the parts hold (`a:b` + `c` and `a` + `b:c` differ).
///
/// ```
/// use flowguard_rls::limiter_key;
///
/// assert_eq!(limiter_key("shop", [("path", "/a")]), b"4:shop4:path2:/a".to_vec());
/// assert_ne!(limiter_key("a", [("b", "c")]), limiter_key("a1:b", [("", "c")]));
/// ```
pub fn limiter_key<'e>(
    domain: &str,
    entries: impl IntoIterator<Item = (&'e str, &'e str)>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    push(&mut out, domain);
    for (key, value) in entries {
        push(&mut out, key);
        push(&mut out, value);
    }
    out
}

/// Appends `part` as its length in decimal, `:` and its bytes (the length formatted in place:
/// no allocation per part).
fn push(out: &mut Vec<u8>, part: &str) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{}:", part.len());
    out.extend_from_slice(part.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_written_in_decimal() {
        for len in [0, 1, 9, 10, 99, 100, 12_345] {
            let part = "a".repeat(len);
            let key = limiter_key(&part, []);
            assert_eq!(key, format!("{len}:{part}").into_bytes());
        }
    }

    #[test]
    fn parts_cannot_run_into_each_other() {
        let keys = [
            limiter_key("d", [("ab", "c")]),
            limiter_key("d", [("a", "bc")]),
            limiter_key("d", [("a", "b"), ("", "c")]),
            limiter_key("d2", [("a", "b")]),
            limiter_key("d", [("2:a", "b")]),
            limiter_key("d", []),
            limiter_key(&"x".repeat(10), [("", "")]),
            limiter_key("x", [("", ""), ("", "")]),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
