//! The GCRA Lua script (`gcra.lua`): its text, digest, arguments and reply.
//!
//! The script is the whole decision: one `GET`, at most one `SET ... PX`, O(1). The client sends
//! `EVALSHA` and, only when a server answers `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`, or a
//! cluster node that never saw it), `EVAL` with the source, which also caches it on that node.
//! Both go to the node owning the key, so no `SCRIPT LOAD` to "all nodes" is needed.

use std::sync::LazyLock;
use std::time::Duration;

use crate::gcra::{Decision, GcraError};

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("gcra.lua");

/// The script's SHA-1, as `EVALSHA` wants it.
pub(crate) static SHA: LazyLock<String> =
    LazyLock::new(|| sha1_smol::Sha1::from(SOURCE).digest().to_string());

/// The arguments of one call, in the script's order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) interval_us: u64,
    pub(crate) burst: u32,
    pub(crate) cost: u32,
    /// `None`: the server's `TIME`.
    pub(crate) now_us: Option<u64>,
    pub(crate) extra_ttl_ms: u64,
}

impl Call<'_> {
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
            .arg(self.interval_us)
            .arg(self.burst)
            .arg(self.cost);
        match self.now_us {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(self.extra_ttl_ms);
        cmd
    }
}

/// The script's reply: `{allowed, remaining, retry_after_us (-1 when allowed), reset_after_us, now_us}`
/// turned into a decision and the time (µs) the script decided at.
pub(crate) fn parse_reply(reply: &[i64], burst: u32) -> Result<(Decision, u64), GcraError> {
    let malformed = || GcraError::StoreRejected {
        reason: format!(
            "the GCRA script returned {reply:?}, not {{allowed, remaining, retry_after_us, reset_after_us, now_us}}: \
             another script with the same SHA-1 is implausible; is the server a Redis-compatible store with Lua?"
        ),
    };
    let &[allowed, remaining, retry_after, reset_after, now] = reply else {
        return Err(malformed());
    };
    let micros = |v: i64| {
        u64::try_from(v)
            .map(Duration::from_micros)
            .map_err(|_| malformed())
    };
    let decision = Decision::new(
        allowed == 1,
        burst,
        u32::try_from(remaining).map_err(|_| malformed())?,
        if allowed == 1 {
            None
        } else {
            Some(micros(retry_after)?)
        },
        micros(reset_after)?,
    );
    Ok((decision, u64::try_from(now).map_err(|_| malformed())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_become_decisions() {
        let (d, now) = parse_reply(&[1, 9, -1, 100_000, 42], 10).unwrap();
        assert!(d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after, d.reset_after),
            (9, None, Duration::from_millis(100))
        );
        assert_eq!(now, 42);
        let (d, _) = parse_reply(&[0, 0, 200_000, 1_000_000, 42], 5).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_millis(200)));
        assert!(parse_reply(&[1, 2, 3], 5).is_err());
        assert!(parse_reply(&[0, -1, 5, 5, 5], 5).is_err());
    }

    #[test]
    fn the_digest_is_the_scripts() {
        assert_eq!(SHA.len(), 40);
        let explicit = Call {
            key: b"k",
            interval_us: 1,
            burst: 1,
            cost: 1,
            now_us: Some(7),
            extra_ttl_ms: 9,
        };
        let packed =
            String::from_utf8_lossy(&explicit.command(false).get_packed_command()).into_owned();
        assert!(packed.contains("EVALSHA") && packed.contains(SHA.as_str()));
    }
}
