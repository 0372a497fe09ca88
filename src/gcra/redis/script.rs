//! The GCRA Lua script (`gcra.lua`): its text, digest, arguments and reply.
//!
//! The script is the whole decision: one `GET`, at most one `SET ... PX`, O(1). The client sends
//! `EVALSHA` and, only when a server answers `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`, or a
//! cluster node that never saw it), `EVAL` with the source, which also caches it on that node.
//! Both go to the node owning the key, so no `SCRIPT LOAD` to "all nodes" is needed.

use std::sync::LazyLock;

use crate::gcra::algorithm::unpack;
use crate::gcra::remote::{Rejection, StoreError};
use crate::gcra::{CheckError, Decision, Gcra, GcraError, Ticks};

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("gcra.lua");

/// The script's SHA-1, as `EVALSHA` wants it.
pub(crate) static SHA: LazyLock<String> =
    LazyLock::new(|| sha1_smol::Sha1::from(SOURCE).digest().to_string());

/// The arguments of one call, in the script's order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call<'a> {
    pub(crate) key: &'a [u8],
    /// `cost * T` in µs, exact.
    pub(crate) step: Ticks,
    /// The denominator of every fraction of a µs.
    pub(crate) den: u64,
    /// `B * T` in µs, exact.
    pub(crate) window: Ticks,
    /// `None`: the server's `TIME`.
    pub(crate) now_us: Option<u64>,
    pub(crate) extra_ttl_ms: u64,
}

impl<'a> Call<'a> {
    /// The call deciding `cost` tokens for the store key `key` under `gcra` (µs ticks).
    pub(crate) fn new(
        key: &'a [u8],
        gcra: &Gcra,
        cost: u32,
        now_us: Option<u64>,
        extra_ttl_ms: u64,
    ) -> Result<Call<'a>, GcraError> {
        Ok(Call {
            key,
            step: unpack(gcra.exact_step(cost)?),
            den: gcra.denominator(),
            window: gcra.window_ticks(),
            now_us,
            extra_ttl_ms,
        })
    }

    /// `EVALSHA sha 1 key ...` or `EVAL source 1 key ...`.
    pub(crate) fn command(&self, by_source: bool) -> ::redis::Cmd {
        let mut cmd = if by_source {
            let mut c = ::redis::cmd("EVAL");
            c.arg(SOURCE);
            c
        } else {
            let mut c = ::redis::cmd("EVALSHA");
            c.arg(SHA.as_str());
            c
        };
        cmd.arg(1)
            .arg(self.key)
            .arg(self.step.whole)
            .arg(self.step.frac)
            .arg(self.den)
            .arg(self.window.whole)
            .arg(self.window.frac);
        match self.now_us {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(self.extra_ttl_ms);
        cmd
    }
}

/// The script's status codes: the first element of every reply.
mod status {
    /// Decided: `{0, allowed, tat, tat_frac, now}`.
    pub(super) const DECIDED: i64 = 0;
    /// The key holds a string that is not a GCRA state: `{1}`.
    pub(super) const CORRUPT_STATE: i64 = 1;
    /// The script rejected its arguments: `{2}`.
    pub(super) const INVALID_ARGUMENTS: i64 = 2;
}

/// The script's reply to a request of `cost` under `gcra` for the store key `key`, turned into
/// a decision and the time (µs) the script decided at.
///
/// A decided reply carries the TAT the request was decided against; the decision (remaining,
/// retry and reset times) is computed here from it, exactly, by the same rule as in memory.
pub(crate) fn parse_reply(
    reply: &[i64],
    gcra: &Gcra,
    cost: u32,
    key: &[u8],
) -> Result<(Decision, u64), CheckError> {
    let malformed = || {
        CheckError::Store(StoreError::Rejected(Rejection::UnexpectedReply {
            answer: format!("{reply:?}"),
        }))
    };
    match *reply {
        [status::DECIDED, allowed @ (0 | 1), whole, frac, now] => {
            let unsigned = |v: i64| u64::try_from(v).map_err(|_| malformed());
            let tat = Ticks {
                whole: unsigned(whole)?,
                frac: unsigned(frac)?,
            };
            let now = unsigned(now)?;
            let step = gcra.decide(tat, now, cost)?;
            if step.decision.allowed != (allowed == 1) {
                return Err(malformed());
            }
            Ok((step.decision, now))
        }
        [status::CORRUPT_STATE] => Err(CheckError::Store(StoreError::CorruptState {
            key: String::from_utf8_lossy(key).into_owned(),
        })),
        [status::INVALID_ARGUMENTS] => Err(CheckError::Store(StoreError::Rejected(
            Rejection::InvalidArguments,
        ))),
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::Quota;
    use crate::gcra::redis::RESOLUTION;
    use std::time::Duration;

    fn micros(quota: Quota) -> Gcra {
        Gcra::with_resolution(&quota, RESOLUTION).unwrap()
    }

    #[test]
    fn replies_become_decisions() {
        let g = micros(Quota::per_second(10).unwrap());
        // Idle key at 42 µs: decided against tat = now.
        let (d, now) = parse_reply(&[0, 1, 42, 0, 42], &g, 1, b"k").unwrap();
        assert!(d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after, d.reset_after),
            (9, None, Duration::from_millis(100))
        );
        assert_eq!(now, 42);
        // Full key: denied, told to come back in one interval.
        let (d, _) = parse_reply(&[0, 0, 1_000_042, 0, 42], &g, 1, b"k").unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
        // A fraction of a µs is carried: 3 per second, two tokens spent at 0.
        let g = micros(Quota::per_second(3).unwrap());
        let (d, _) = parse_reply(&[0, 1, 666_666, 2, 0], &g, 1, b"k").unwrap();
        assert_eq!((d.remaining, d.reset_after), (0, Duration::from_secs(1)));
    }

    #[test]
    fn status_codes_become_typed_errors() {
        let g = micros(Quota::per_second(10).unwrap());
        assert_eq!(
            parse_reply(&[1], &g, 1, b"p:=k"),
            Err(CheckError::Store(StoreError::CorruptState {
                key: "p:=k".into()
            }))
        );
        assert_eq!(
            parse_reply(&[2], &g, 1, b"k"),
            Err(CheckError::Store(StoreError::Rejected(
                Rejection::InvalidArguments
            )))
        );
        for bad in [
            &[1, 2, 3][..],
            &[0, 1, -1, 0, 5],
            &[0, 2, 0, 0, 0],
            &[3],
            &[],
            // The script says allowed, the rule says denied: not this script's reply.
            &[0, 1, 1_000_042, 0, 42],
        ] {
            assert!(
                matches!(
                    parse_reply(bad, &g, 1, b"k"),
                    Err(CheckError::Store(StoreError::Rejected(
                        Rejection::UnexpectedReply { .. }
                    )))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_digest_is_the_scripts() {
        assert_eq!(SHA.len(), 40);
        let g = micros(Quota::per_second(3).unwrap());
        let explicit = Call::new(b"k", &g, 2, Some(7), 9).unwrap();
        assert_eq!(
            (explicit.step, explicit.den, explicit.window),
            (
                Ticks {
                    whole: 666_666,
                    frac: 2
                },
                3,
                Ticks::from(1_000_000)
            )
        );
        let packed =
            String::from_utf8_lossy(&explicit.command(false).get_packed_command()).into_owned();
        assert!(packed.contains("EVALSHA") && packed.contains(SHA.as_str()));
    }
}
