//! The script of a lone decision (`lone.lua`): its text, digest, arguments and reply.
//!
//! A call that decides one request (coalescing off, a quiet service, a request a coalesced call
//! left undecided) runs this script instead of the general one (`gcra.lua`, see
//! [`script`](super::script)). It decides exactly as the general script decides one request and
//! writes the same value with the same TTL, but pays for nothing else: two arguments in the
//! common case (server time, an emission interval of whole microseconds) instead of fourteen, no
//! batch machinery, and a reply built from strings Redis already gave. A key of another type
//! fails the call, as it did alone before.
//!
//! The client sends `EVALSHA` and, only when a server answers `NOSCRIPT`, `EVAL` with the source,
//! as for the general script.

use std::sync::LazyLock;
use std::time::Duration;

use ::redis::Value;

use super::quota::FLOWGUARD_EPOCH_UNIX_SECS;
use super::script::Request;
use crate::gcra::remote::{Rejection, StoreDecision, StoreError};
use crate::gcra::{CheckError, Ticks};

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("lone.lua");

/// The script's SHA-1, as `EVALSHA` wants it.
pub(crate) static SHA: LazyLock<String> =
    LazyLock::new(|| sha1_smol::Sha1::from(SOURCE).digest().to_string());

/// The reply of a key holding something that is not a GCRA state.
const CORRUPT_STATE: i64 = -1;
/// The reply of invalid arguments.
const INVALID_ARGUMENTS: i64 = -2;

/// `EVALSHA sha 1 key step window [now extra_ttl [den step_frac window_frac]]` (or `EVAL source
/// ...`) deciding `request` alone. The optional arguments are sent only when they are not the
/// common call's: an explicit time, or an interval that is not a whole number of microseconds.
pub(crate) fn command(request: &Request, by_source: bool) -> ::redis::Cmd {
    let mut cmd = if by_source {
        let mut c = ::redis::cmd("EVAL");
        c.arg(SOURCE);
        c
    } else {
        let mut c = ::redis::cmd("EVALSHA");
        c.arg(SHA.as_str());
        c
    };
    let window = request.rule.window_ticks();
    let step = request.step;
    cmd.arg(1)
        .arg(&request.key[..])
        .arg(step.whole)
        .arg(window.whole);
    let den = request.rule.denominator();
    if request.now_us.is_some() || den != 1 {
        match request.now_us {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(request.extra_ttl_ms);
        if den != 1 {
            cmd.arg(den).arg(step.frac).arg(window.frac);
        }
    }
    cmd
}

fn malformed(reply: &Value) -> CheckError {
    CheckError::Store(StoreError::Rejected(Rejection::UnexpectedReply {
        answer: format!("{reply:?}"),
    }))
}

/// The reply to `request`: its decision, or the typed error its status means.
///
/// The reply is a string: the time the script decided at (the server's `TIME` as two numbers,
/// unix seconds and microseconds, or the explicit time the request gave), then the TAT the
/// request was decided against, `whole` or `whole+frac` microseconds, when it is not that time.
pub(crate) fn parse(reply: &Value, request: &Request) -> Result<StoreDecision, CheckError> {
    let text = match reply {
        Value::BulkString(bytes) => bytes.as_slice(),
        Value::Int(CORRUPT_STATE) => {
            let key = String::from_utf8_lossy(&request.key).into_owned();
            return Err(StoreError::CorruptState { key }.into());
        }
        Value::Int(INVALID_ARGUMENTS) => {
            return Err(StoreError::Rejected(Rejection::InvalidArguments).into());
        }
        _ => return Err(malformed(reply)),
    };
    let text = std::str::from_utf8(text).map_err(|_| malformed(reply))?;
    let mut fields = text.split(' ');
    let number = |field: Option<&str>| -> Result<u64, CheckError> {
        field
            .filter(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| malformed(reply))
    };
    let now = match request.now_us {
        Some(_) => number(fields.next())?,
        None => {
            let secs = number(fields.next())?;
            let micros = number(fields.next())?;
            secs.checked_sub(FLOWGUARD_EPOCH_UNIX_SECS)
                .and_then(|s| s.checked_mul(1_000_000))
                .and_then(|us| us.checked_add(micros))
                .filter(|_| micros < 1_000_000)
                .ok_or_else(|| malformed(reply))?
        }
    };
    let tat = match fields.next() {
        None => Ticks::from(now),
        Some(field) => match field.split_once('+') {
            None => Ticks::from(number(Some(field))?),
            Some((whole, frac)) => {
                let tat = Ticks {
                    whole: number(Some(whole))?,
                    frac: number(Some(frac))?,
                };
                if tat.frac == 0 {
                    return Err(malformed(reply));
                }
                tat
            }
        },
    };
    if fields.next().is_some() {
        return Err(malformed(reply));
    }
    let step = request.rule.decide(tat, now, request.cost)?;
    Ok(StoreDecision::new(
        step.decision,
        Duration::from_micros(now),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::redis::RESOLUTION;
    use crate::gcra::{Decision, Gcra, Quota};

    fn micros(quota: Quota) -> Gcra {
        Gcra::with_resolution(&quota, RESOLUTION).unwrap()
    }

    fn text(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn decide(reply: Value, request: &Request) -> Result<(Decision, u64), CheckError> {
        parse(&reply, request).map(|d| (d.decision, d.at.as_micros() as u64))
    }

    #[test]
    fn replies_become_decisions() {
        let g = micros(Quota::per_second(10).unwrap());
        let server = Request::new(b"k".to_vec(), &g, 1, None, 0).unwrap();
        // An idle key at 42 µs past the epoch: decided against tat = now.
        let (d, now) = decide(text("1700000000 42"), &server).unwrap();
        assert_eq!(now, 42);
        assert!(d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after, d.reset_after),
            (9, None, Duration::from_millis(100))
        );
        // A full key: denied, told to come back in one interval.
        let (d, _) = decide(text("1700000000 42 1000042"), &server).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
        // A second past the epoch and 7 µs.
        assert_eq!(decide(text("1700000001 7"), &server).unwrap().1, 1_000_007);
        // Explicit time: the time is the one the request gave, and a fraction is carried.
        let third = micros(Quota::per_second(3).unwrap());
        let explicit = Request::new(b"k".to_vec(), &third, 1, Some(0), 9).unwrap();
        let (d, now) = decide(text("0 666666+2"), &explicit).unwrap();
        assert_eq!(now, 0);
        assert_eq!((d.remaining, d.reset_after), (0, Duration::from_secs(1)));
    }

    #[test]
    fn statuses_become_typed_errors_and_other_replies_are_refused() {
        let g = micros(Quota::per_second(10).unwrap());
        let server = Request::new(b"p:=k".to_vec(), &g, 1, None, 0).unwrap();
        assert_eq!(
            parse(&Value::Int(-1), &server),
            Err(CheckError::Store(StoreError::CorruptState {
                key: "p:=k".into()
            }))
        );
        assert_eq!(
            parse(&Value::Int(-2), &server),
            Err(CheckError::Store(StoreError::Rejected(
                Rejection::InvalidArguments
            )))
        );
        let explicit = Request::new(b"k".to_vec(), &g, 1, Some(5), 0).unwrap();
        for (bad, request) in [
            (Value::Int(-3), &server),
            (Value::Int(42), &server),
            (Value::Nil, &server),
            (text(""), &server),
            (text("1700000000"), &server),
            (text("1699999999 5"), &server),
            (text("1700000000 1000000"), &server),
            (text("1700000000 -5"), &server),
            (text("1700000000 5 7 8"), &server),
            (text("1700000000 5 7+0"), &server),
            (text("1700000000 5 7+"), &server),
            (text("1700000000  5"), &server),
            (text("5 +7"), &explicit),
            (text("5 7 8"), &explicit),
            (text("x"), &explicit),
        ] {
            assert!(
                matches!(
                    parse(&bad, request),
                    Err(CheckError::Store(StoreError::Rejected(
                        Rejection::UnexpectedReply { .. }
                    )))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_common_call_sends_two_arguments() {
        let packed = |request: &Request| {
            let cmd = command(request, false);
            String::from_utf8_lossy(&cmd.get_packed_command()).into_owned()
        };
        assert_eq!(SHA.len(), 40);
        let g = micros(Quota::per_second(100).unwrap());
        let server = Request::new(b"k".to_vec(), &g, 2, None, 0).unwrap();
        let sent = packed(&server);
        assert!(sent.contains(SHA.as_str()));
        // One key, then T*2 = 20 ms and B*T = 1 s.
        assert!(sent.ends_with("$1\r\n1\r\n$1\r\nk\r\n$5\r\n20000\r\n$7\r\n1000000\r\n"));
        // Explicit time: now and the extra TTL follow.
        let explicit = Request::new(b"k".to_vec(), &g, 2, Some(7), 9).unwrap();
        assert!(packed(&explicit).ends_with("$7\r\n1000000\r\n$1\r\n7\r\n$1\r\n9\r\n"));
        // 3 per second: T = 333,333 1/3 µs; server time is "" and no extra TTL.
        let third = micros(Quota::per_second(3).unwrap());
        let fractions = Request::new(b"k".to_vec(), &third, 2, None, 0).unwrap();
        assert!(packed(&fractions).ends_with(
            "$6\r\n666666\r\n$7\r\n1000000\r\n$0\r\n\r\n$1\r\n0\r\n$1\r\n3\r\n$1\r\n2\r\n$1\r\n0\r\n"
        ));
        let by_source = command(&server, true).get_packed_command();
        assert!(String::from_utf8_lossy(&by_source).contains("EVAL\r\n"));
    }
}
