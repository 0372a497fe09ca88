//! The part of Structured Field Values (RFC 9651, which obsoletes RFC 8941) that the rate-limit
//! fields use: a List of Items with Parameters. Parsing validates every bare item type so that
//! a field which is not a valid structured list is rejected as a whole (the draft: malformed
//! fields MUST be ignored); serialization writes Strings, Integers and Byte Sequences.

use super::error::FieldError;

/// The largest magnitude of a structured-field Integer (15 digits).
pub(super) const MAX_INTEGER: u64 = 999_999_999_999_999;

/// A bare item (RFC 9651 §3.3). Only the types the rate-limit fields use keep their value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bare {
    Integer(i64),
    String(String),
    Token(String),
    Bytes(Vec<u8>),
    /// Decimal, Boolean, Date or Display String: valid, never needed by the rate-limit fields.
    Other(&'static str),
}

/// A list member that is an Item: a bare item and its parameters (in order, keys unique).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Item {
    pub(super) value: Bare,
    params: Vec<(String, Bare)>,
}

impl Item {
    /// The value of parameter `key`, if present.
    pub(super) fn param(&self, key: &str) -> Option<&Bare> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

impl Item {
    /// Parameter `key` as a non-negative Integer, if present.
    pub(super) fn non_negative(
        &self,
        field: &'static str,
        key: &'static str,
    ) -> Result<Option<u64>, FieldError> {
        match self.param(key) {
            None => Ok(None),
            Some(Bare::Integer(n)) => u64::try_from(*n)
                .map(Some)
                .map_err(|_| FieldError::Negative { field }),
            Some(_) => Err(FieldError::WrongType {
                field,
                parameter: key,
                expected: "a non-negative Integer",
            }),
        }
    }

    /// Parameter `key` as a Byte Sequence, if present.
    pub(super) fn bytes(
        &self,
        field: &'static str,
        key: &'static str,
    ) -> Result<Option<Vec<u8>>, FieldError> {
        match self.param(key) {
            None => Ok(None),
            Some(Bare::Bytes(b)) => Ok(Some(b.clone())),
            Some(_) => Err(FieldError::WrongType {
                field,
                parameter: key,
                expected: "a Byte Sequence",
            }),
        }
    }
}

/// Parses every field line of `name` in `headers` as one list (RFC 9651 §4.2: the lines of a
/// field are one list, split), each member converted by `member`.
pub(super) fn parse_field<T>(
    headers: &http::HeaderMap,
    name: &http::HeaderName,
    field: &'static str,
    member: impl Fn(&Item) -> Result<T, FieldError>,
) -> Result<Vec<T>, FieldError> {
    let mut out = Vec::new();
    for line in headers.get_all(name) {
        for item in parse_list(field, line.as_bytes())? {
            out.push(member(&item)?);
        }
    }
    Ok(out)
}

/// Appends parameter `;key=n` (an Integer).
pub(super) fn write_integer_param(out: &mut String, key: &str, n: u64) {
    use std::fmt::Write;
    let _ = write!(out, ";{key}={n}");
}

/// A header value of text made of visible ASCII and spaces, as everything this module
/// serializes is (validated names, digits, base64, punctuation).
pub(super) fn header_value(text: String) -> http::HeaderValue {
    http::HeaderValue::try_from(text).unwrap_or_else(|_| http::HeaderValue::from_static(""))
}

/// Parses one field line of `field` as a non-empty List of Items.
pub(super) fn parse_list(field: &'static str, value: &[u8]) -> Result<Vec<Item>, FieldError> {
    let mut p = Parser {
        field,
        s: value,
        i: 0,
    };
    p.skip_sp();
    if p.at_end() {
        return Err(FieldError::Empty { field });
    }
    let mut items = Vec::new();
    loop {
        items.push(p.item()?);
        p.skip_ows();
        if p.at_end() {
            return Ok(items);
        }
        if !p.eat(b',') {
            return Err(p.syntax());
        }
        p.skip_ows();
        if p.at_end() {
            // A trailing comma.
            return Err(p.syntax());
        }
    }
}

/// Appends `s` as a String (`"` and `\` escaped). The caller guarantees printable ASCII.
pub(super) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

/// Appends `bytes` as a Byte Sequence: `:` base64 (with padding) `:`.
pub(super) fn write_bytes(out: &mut String, bytes: &[u8]) {
    out.push(':');
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(BASE64[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out.push(':');
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_value(c: u8) -> Option<u32> {
    BASE64.iter().position(|&b| b == c).map(|v| v as u32)
}

/// Decodes base64, with or without `=` padding and ignoring non-zero pad bits, as RFC 9651
/// §4.2.7 asks of parsers; `None` for anything else.
fn decode_base64(text: &[u8]) -> Option<Vec<u8>> {
    let data = text.strip_suffix(b"==").or_else(|| text.strip_suffix(b"="));
    let data = data.unwrap_or(text);
    if data.len() % 4 == 1 || (data.len() != text.len() && !text.len().is_multiple_of(4)) {
        return None;
    }
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    for chunk in data.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= base64_value(*c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

struct Parser<'a> {
    field: &'static str,
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn syntax(&self) -> FieldError {
        FieldError::Syntax {
            field: self.field,
            at: self.i,
        }
    }

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

    fn take_while(&mut self, pred: impl Fn(u8) -> bool) -> &'a [u8] {
        let start = self.i;
        while self.peek().is_some_and(&pred) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn skip_sp(&mut self) {
        self.take_while(|c| c == b' ');
    }

    fn skip_ows(&mut self) {
        self.take_while(|c| c == b' ' || c == b'\t');
    }

    /// `sf-item = bare-item parameters` (an Inner List is not an Item: a syntax error here).
    fn item(&mut self) -> Result<Item, FieldError> {
        let value = self.bare_item()?;
        let mut params: Vec<(String, Bare)> = Vec::new();
        while self.eat(b';') {
            self.skip_sp();
            let key = self.key()?;
            let value = if self.eat(b'=') {
                self.bare_item()?
            } else {
                Bare::Other("a Boolean")
            };
            // A repeated key keeps its position and takes the last value (RFC 9651 §4.2.3.2).
            match params.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => params.push((key, value)),
            }
        }
        Ok(Item { value, params })
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`
    fn key(&mut self) -> Result<String, FieldError> {
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_lowercase() || c == b'*')
        {
            return Err(self.syntax());
        }
        let key = self.take_while(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'-' | b'.' | b'*')
        });
        Ok(String::from_utf8_lossy(key).into_owned())
    }

    fn bare_item(&mut self) -> Result<Bare, FieldError> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'"') => self.string(),
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => {
                let token = self
                    .take_while(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c));
                Ok(Bare::Token(String::from_utf8_lossy(token).into_owned()))
            }
            Some(b':') => self.bytes(),
            Some(b'?') => {
                self.i += 1;
                if self.eat(b'0') || self.eat(b'1') {
                    Ok(Bare::Other("a Boolean"))
                } else {
                    Err(self.syntax())
                }
            }
            Some(b'@') => {
                self.i += 1;
                match self.number()? {
                    Bare::Integer(_) => Ok(Bare::Other("a Date")),
                    _ => Err(self.syntax()),
                }
            }
            Some(b'%') => self.display_string(),
            _ => Err(self.syntax()),
        }
    }

    /// Integer (at most 15 digits) or Decimal (at most 12 integer and 3 fraction digits).
    fn number(&mut self) -> Result<Bare, FieldError> {
        let negative = self.eat(b'-');
        let digits = self.take_while(|c| c.is_ascii_digit());
        if digits.is_empty() || digits.len() > 15 {
            return Err(self.syntax());
        }
        let magnitude = digits
            .iter()
            .fold(0i64, |n, d| n * 10 + i64::from(d - b'0'));
        if self.eat(b'.') {
            let int_len = digits.len();
            let fraction = self.take_while(|c| c.is_ascii_digit());
            if int_len > 12 || fraction.is_empty() || fraction.len() > 3 {
                return Err(self.syntax());
            }
            return Ok(Bare::Other("a Decimal"));
        }
        Ok(Bare::Integer(if negative { -magnitude } else { magnitude }))
    }

    fn string(&mut self) -> Result<Bare, FieldError> {
        self.i += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(c @ (b'"' | b'\\')) => {
                            out.push(char::from(c));
                            self.i += 1;
                        }
                        _ => return Err(self.syntax()),
                    }
                }
                Some(b'"') => {
                    self.i += 1;
                    return Ok(Bare::String(out));
                }
                Some(c @ 0x20..=0x7e) => {
                    out.push(char::from(c));
                    self.i += 1;
                }
                _ => return Err(self.syntax()),
            }
        }
    }

    fn bytes(&mut self) -> Result<Bare, FieldError> {
        self.i += 1;
        let start = self.i;
        let text =
            self.take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'='));
        let decoded = decode_base64(text);
        if !self.eat(b':') {
            return Err(self.syntax());
        }
        decoded.map(Bare::Bytes).ok_or(FieldError::Syntax {
            field: self.field,
            at: start,
        })
    }

    /// `%"…"`: printable ASCII except `%` and `"`, which come percent-encoded (lower-case hex),
    /// decoding to UTF-8.
    fn display_string(&mut self) -> Result<Bare, FieldError> {
        self.i += 1;
        if !self.eat(b'"') {
            return Err(self.syntax());
        }
        let mut bytes = Vec::new();
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.i += 1;
                    return match String::from_utf8(bytes) {
                        Ok(_) => Ok(Bare::Other("a Display String")),
                        Err(_) => Err(self.syntax()),
                    };
                }
                Some(b'%') => {
                    let hex = |c: Option<&u8>| match c {
                        Some(c @ b'0'..=b'9') => Some(c - b'0'),
                        Some(c @ b'a'..=b'f') => Some(c - b'a' + 10),
                        _ => None,
                    };
                    match (hex(self.s.get(self.i + 1)), hex(self.s.get(self.i + 2))) {
                        (Some(h), Some(l)) => bytes.push(h << 4 | l),
                        _ => return Err(self.syntax()),
                    }
                    self.i += 3;
                }
                Some(c @ 0x20..=0x7e) => {
                    bytes.push(c);
                    self.i += 1;
                }
                _ => return Err(self.syntax()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_tolerates_padding() {
        for bytes in [
            &b""[..],
            b"f",
            b"fo",
            b"foo",
            b"foob",
            b"fooba",
            b"foobar",
            &[0xff, 0, 7],
        ] {
            let mut text = String::new();
            write_bytes(&mut text, bytes);
            let inner = &text.as_bytes()[1..text.len() - 1];
            assert_eq!(decode_base64(inner).as_deref(), Some(bytes), "{text}");
            let unpadded = inner
                .strip_suffix(b"==")
                .or(inner.strip_suffix(b"="))
                .unwrap_or(inner);
            assert_eq!(decode_base64(unpadded).as_deref(), Some(bytes), "{text}");
        }
        assert_eq!(write_string_of(b"foobar"), ":Zm9vYmFy:");
        assert_eq!(
            decode_base64(b"Zg=").as_deref(),
            None,
            "padding of a wrong length"
        );
        assert_eq!(decode_base64(b"Z"), None);
        assert_eq!(decode_base64(b"Zm=9"), None);
        // Non-zero pad bits (the draft's own example) are accepted.
        assert!(decode_base64(b"cHsdsRa894==").is_some());
    }

    fn write_string_of(bytes: &[u8]) -> String {
        let mut s = String::new();
        write_bytes(&mut s, bytes);
        s
    }

    #[test]
    fn parses_every_bare_item_type() {
        let items = parse_list(
            "x",
            br#""a\"b";i=-12;d=1.5;s="x";t=tok/en:1;b=:AQI=:;f=?0;e;at=@1659578233;ds=%"f%c3%bc""#,
        )
        .unwrap();
        let item = &items[0];
        assert_eq!(item.value, Bare::String("a\"b".into()));
        assert_eq!(item.param("i"), Some(&Bare::Integer(-12)));
        assert_eq!(item.param("d"), Some(&Bare::Other("a Decimal")));
        assert_eq!(item.param("t"), Some(&Bare::Token("tok/en:1".into())));
        assert_eq!(item.param("b"), Some(&Bare::Bytes(vec![1, 2])));
        assert_eq!(item.param("e"), Some(&Bare::Other("a Boolean")));
        assert_eq!(item.param("ds"), Some(&Bare::Other("a Display String")));
        assert_eq!(item.param("zz"), None);
    }

    #[test]
    fn a_repeated_parameter_takes_the_last_value() {
        let items = parse_list("x", b"a;r=1;r=2").unwrap();
        assert_eq!(items[0].param("r"), Some(&Bare::Integer(2)));
    }

    #[test]
    fn rejects_what_is_not_a_list_of_items() {
        for (bad, at) in [
            (&b"a,"[..], 2),
            (b"a b", 2),
            (b"(a b)", 0),
            (b"a;R=1", 2),
            (b"a;r=1234567890123456", 20),
            (b"a;r=1234567890123.5", 19),
            (b"a;r=1.2345", 10),
            (b"a;r=1.", 6),
            (b"\"open", 5),
            (b"\"bad\\n\"", 5),
            (b"a;pk=:AQI=", 10),
            (b"a;pk=:A:", 6),
            (b"a;x=%\"%C3\"", 6),
            (b"a;x=?2", 5),
            (b"\ta", 0),
        ] {
            assert_eq!(
                parse_list("x", bad),
                Err(FieldError::Syntax { field: "x", at }),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_list("x", b"  "),
            Err(FieldError::Empty { field: "x" })
        );
    }
}
