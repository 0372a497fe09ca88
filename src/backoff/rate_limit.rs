//! The `t` (reset) parameter of the IETF `RateLimit` header
//! (draft-ietf-httpapi-ratelimit-headers), e.g. `RateLimit: "default";r=0;t=30`.
//!
//! The field is a Structured Field List (RFC 8941) of quota policies; each item carries `r`
//! (remaining quota units) and optionally `t` (seconds until the quota resets). Only an
//! exhausted policy (`r=0`) asks the client to wait.

use std::time::Duration;

use super::error::HeaderError;
use super::retry_after::parse_seconds;

/// The wait a `RateLimit` field value asks for: the largest `t` among policies with `r=0`.
///
/// Returns `Ok(None)` when no policy is exhausted (or an exhausted one gives no `t`).
///
/// ```
/// use std::time::Duration;
/// use flowguard::backoff::parse_rate_limit_reset;
///
/// assert_eq!(parse_rate_limit_reset(br#""default";r=0;t=30"#), Ok(Some(Duration::from_secs(30))));
/// assert_eq!(parse_rate_limit_reset(br#""burst";r=5;t=1, "day";r=0;t=600"#), Ok(Some(Duration::from_secs(600))));
/// assert_eq!(parse_rate_limit_reset(br#""default";r=10;t=30"#), Ok(None));
/// assert!(parse_rate_limit_reset(b"r=0;t=oops").is_err());
/// ```
///
/// # Errors
/// [`HeaderError::Malformed`] when the value is not a list of items with parameters,
/// [`HeaderError::Negative`] for a negative `r` or `t`, [`HeaderError::TooLarge`] for a `t`
/// that does not fit in a `u64`. The caller applies the [`MAX_RETRY_AFTER`](super::MAX_RETRY_AFTER)
/// bound.
pub fn parse_rate_limit_reset(value: &[u8]) -> Result<Option<Duration>, HeaderError> {
    let mut p = Parser { s: value, i: 0 };
    let mut wait: Option<u64> = None;
    p.skip(|c| c == b' ');
    if p.at_end() {
        return Err(HeaderError::Malformed);
    }
    loop {
        p.bare_item()?;
        let (mut remaining, mut reset) = (None, None);
        while p.eat(b';') {
            p.skip(|c| c == b' ');
            let key = p.key()?;
            let value = if p.eat(b'=') {
                p.bare_item()?
            } else {
                Item::Other
            };
            match (key, value) {
                (b"r", Item::Integer { negative: true, .. })
                | (b"t", Item::Integer { negative: true, .. }) => {
                    return Err(HeaderError::Negative);
                }
                (b"r", Item::Integer { digits, .. }) => remaining = Some(parse_seconds(digits)?),
                (b"t", Item::Integer { digits, .. }) => reset = Some(parse_seconds(digits)?),
                (b"r", Item::Other) | (b"t", Item::Other) => return Err(HeaderError::Malformed),
                _ => {}
            }
        }
        if let (Some(0), Some(t)) = (remaining, reset) {
            wait = wait.max(Some(t));
        }
        p.skip(|c| c == b' ' || c == b'\t');
        if p.at_end() {
            return Ok(wait.map(Duration::from_secs));
        }
        if !p.eat(b',') {
            return Err(HeaderError::Malformed);
        }
        p.skip(|c| c == b' ' || c == b'\t');
        if p.at_end() {
            return Err(HeaderError::Malformed);
        }
    }
}

enum Item<'a> {
    Integer { negative: bool, digits: &'a [u8] },
    Other,
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn skip(&mut self, pred: impl Fn(u8) -> bool) -> &'a [u8] {
        let start = self.i;
        while self.peek().is_some_and(&pred) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
    fn key(&mut self) -> Result<&'a [u8], HeaderError> {
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_lowercase() || c == b'*')
        {
            return Err(HeaderError::Malformed);
        }
        Ok(self.skip(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'.' | b'*')
        }))
    }

    /// Integer, decimal, string, token, byte sequence or boolean (RFC 8941 §3.3).
    fn bare_item(&mut self) -> Result<Item<'a>, HeaderError> {
        match self.peek() {
            Some(b'-') | Some(b'0'..=b'9') => {
                let negative = self.eat(b'-');
                let digits = self.skip(|c| c.is_ascii_digit());
                if digits.is_empty() || digits.len() > 15 {
                    return Err(HeaderError::Malformed);
                }
                if self.eat(b'.') {
                    let frac = self.skip(|c| c.is_ascii_digit());
                    if frac.is_empty() || frac.len() > 3 || digits.len() > 12 {
                        return Err(HeaderError::Malformed);
                    }
                    return Ok(Item::Other);
                }
                Ok(Item::Integer { negative, digits })
            }
            Some(b'"') => {
                self.i += 1;
                loop {
                    match self.peek() {
                        Some(b'\\') => {
                            self.i += 1;
                            if !self.eat(b'"') && !self.eat(b'\\') {
                                return Err(HeaderError::Malformed);
                            }
                        }
                        Some(b'"') => {
                            self.i += 1;
                            return Ok(Item::Other);
                        }
                        Some(0x20..=0x7e) => self.i += 1,
                        _ => return Err(HeaderError::Malformed),
                    }
                }
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => {
                self.skip(|c| c.is_ascii_graphic() && !b"\"(),;<=>?@[\\]{}".contains(&c));
                Ok(Item::Other)
            }
            Some(b':') => {
                self.i += 1;
                self.skip(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='));
                if self.eat(b':') {
                    Ok(Item::Other)
                } else {
                    Err(HeaderError::Malformed)
                }
            }
            Some(b'?') => {
                self.i += 1;
                if self.eat(b'0') || self.eat(b'1') {
                    Ok(Item::Other)
                } else {
                    Err(HeaderError::Malformed)
                }
            }
            _ => Err(HeaderError::Malformed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Result<Option<Duration>, HeaderError> {
        Ok(Some(Duration::from_secs(n)))
    }

    #[test]
    fn draft_examples() {
        assert_eq!(parse_rate_limit_reset(br#""default";r=0;t=30"#), secs(30));
        assert_eq!(parse_rate_limit_reset(br#"default;r=0;t=5"#), secs(5));
        assert_eq!(
            parse_rate_limit_reset(br#""a,b";r=0;t=7;pk=:cHsdsRA=:"#),
            secs(7)
        );
        assert_eq!(
            parse_rate_limit_reset(br#""hour";r=0;t=60 , "day";r=0;t=3600"#),
            secs(3600)
        );
        assert_eq!(parse_rate_limit_reset(br#""default";r=0"#), Ok(None));
        assert_eq!(parse_rate_limit_reset(br#""default";r=1;t=9"#), Ok(None));
    }

    #[test]
    fn rejects_bad_values() {
        for bad in [
            &b""[..],
            b"   ",
            b"\"default\";r=0;t=",
            b"\"default\";r=0;t=\"30\"",
            b"\"default\";r=0;t=30,",
            b"\"default\" r=0",
            b"\"unterminated;r=0;t=1",
            b"\"default\";R=0;t=1",
            b"\"default\";r=0;t=1.5",
        ] {
            assert_eq!(
                parse_rate_limit_reset(bad),
                Err(HeaderError::Malformed),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_rate_limit_reset(b"\"default\";r=0;t=-1"),
            Err(HeaderError::Negative)
        );
    }
}
