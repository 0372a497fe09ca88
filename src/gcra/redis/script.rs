//! The GCRA Lua script (`gcra.lua`): its text, digests, arguments and replies.
//!
//! One script decides one request or several, each in O(1) (one `GET`, at most one `SET ... PX`):
//!
//! * [`Mode::Single`]: one request, exactly as earlier versions decided it; a key of another type
//!   is the call's error.
//! * [`Mode::Tolerant`]: several independent requests (a coalesced call), each decided exactly as
//!   if alone, in order; a request whose `GET` or `SET` fails is left undecided ([`Outcome::Alone`])
//!   and the others go on, so the client decides it alone and reports its own error.
//! * [`Mode::All`]: several requests all or nothing: every key is written only if every request
//!   fits (the same key twice sums its costs), otherwise none is.
//!
//! The client sends `EVALSHA` and, only when a server answers `NOSCRIPT` (restart, failover,
//! `SCRIPT FLUSH`, or a cluster node that never saw it), `EVAL` with the source, which also caches
//! it on that node. A Redis Cluster node's batch names its keys as arguments, not as `KEYS` (Redis
//! refuses declared keys of several slots in one call, `CROSSSLOT`), and runs the same script under
//! the `allow-cross-slot-keys` flag (Redis 7.0+), which lets it touch keys of several slots of the
//! node it runs on.

use std::sync::LazyLock;
use std::time::Duration;

use crate::gcra::algorithm::unpack;
use crate::gcra::remote::{Rejection, StoreDecision, StoreError};
use crate::gcra::{CheckError, Decision, Gcra, GcraError, Ticks};

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("gcra.lua");

/// The script's SHA-1, as `EVALSHA` wants it.
pub(crate) static SHA: LazyLock<String> = LazyLock::new(|| sha1(SOURCE));

/// The same script declared with the `allow-cross-slot-keys` flag (Redis 7.0+), for the batches
/// of a Redis Cluster node.
pub(crate) static CROSS_SLOT_SOURCE: LazyLock<String> =
    LazyLock::new(|| format!("#!lua flags=allow-cross-slot-keys\n{SOURCE}"));

/// [`CROSS_SLOT_SOURCE`]'s SHA-1.
pub(crate) static CROSS_SLOT_SHA: LazyLock<String> = LazyLock::new(|| sha1(&CROSS_SLOT_SOURCE));

fn sha1(source: &str) -> String {
    sha1_smol::Sha1::from(source).digest().to_string()
}

/// How the script treats the requests of one call (its `ARGV[1]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One request; a failing `GET`/`SET` is the call's error.
    Single,
    /// Independent requests; one whose `GET`/`SET` fails is left undecided.
    Tolerant,
    /// All or nothing.
    All,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
            Mode::Single => "s",
            Mode::Tolerant => "t",
            Mode::All => "a",
        }
    }
}

/// Where a call names its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keys {
    /// As `KEYS` (one slot in a cluster: routed by the client, redirected by the server).
    Declared,
    /// As arguments, under the cross-slot script: a Redis Cluster node's batch, sent to that node.
    Undeclared,
}

/// One request of a call: the store key, its rule and cost, and the arguments the script takes.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) key: Vec<u8>,
    pub(crate) rule: Gcra,
    pub(crate) cost: u32,
    /// `cost * T` in µs, exact.
    step: Ticks,
    /// `None`: the server's `TIME`.
    now_us: Option<u64>,
    extra_ttl_ms: u64,
}

impl Request {
    /// The request deciding `cost` tokens for the store key `key` under `rule` (µs ticks);
    /// `cost > burst` is [`GcraError::InsufficientCapacity`].
    pub(crate) fn new(
        key: Vec<u8>,
        rule: &Gcra,
        cost: u32,
        now_us: Option<u64>,
        extra_ttl_ms: u64,
    ) -> Result<Request, GcraError> {
        Ok(Request {
            step: unpack(rule.exact_step(cost)?),
            key,
            rule: *rule,
            cost,
            now_us,
            extra_ttl_ms,
        })
    }

    /// The arguments of its rule: den, window (whole, fraction), now, extra TTL.
    fn rule_args(&self) -> RuleArgs {
        let window = self.rule.window_ticks();
        (
            self.rule.denominator(),
            window.whole,
            window.frac,
            self.now_us,
            self.extra_ttl_ms,
        )
    }
}

/// A rule as the script takes it: den, window (whole, fraction), now (`None`: the server's),
/// extra TTL.
type RuleArgs = (u64, u64, u64, Option<u64>, u64);

/// `EVALSHA sha ...` (or `EVAL source ...`) deciding `requests` in `mode`, their keys named as
/// `keys` says.
pub(crate) fn command<'a>(
    requests: impl ExactSizeIterator<Item = &'a Request> + Clone,
    mode: Mode,
    keys: Keys,
    by_source: bool,
) -> ::redis::Cmd {
    let (source, sha) = match keys {
        Keys::Declared => (SOURCE, SHA.as_str()),
        Keys::Undeclared => (CROSS_SLOT_SOURCE.as_str(), CROSS_SLOT_SHA.as_str()),
    };
    let mut cmd = if by_source {
        let mut c = ::redis::cmd("EVAL");
        c.arg(source);
        c
    } else {
        let mut c = ::redis::cmd("EVALSHA");
        c.arg(sha);
        c
    };
    // The distinct rules, in order of first use; each request names its rule's number.
    let mut rules: Vec<RuleArgs> = Vec::new();
    let numbers: Vec<usize> = requests
        .clone()
        .map(|r| {
            let args = r.rule_args();
            match rules.iter().position(|&known| known == args) {
                Some(i) => i + 1,
                None => {
                    rules.push(args);
                    rules.len()
                }
            }
        })
        .collect();
    let n = requests.len();
    match keys {
        Keys::Declared => {
            cmd.arg(n);
            for r in requests.clone() {
                cmd.arg(&r.key[..]);
            }
        }
        Keys::Undeclared => {
            cmd.arg(0);
        }
    }
    cmd.arg(mode.arg()).arg(n).arg(rules.len());
    for (den, window, window_frac, now, extra_ttl) in rules {
        cmd.arg(den).arg(window).arg(window_frac);
        match now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(extra_ttl);
    }
    if keys == Keys::Undeclared {
        for r in requests.clone() {
            cmd.arg(&r.key[..]);
        }
    }
    for (r, number) in requests.zip(numbers) {
        cmd.arg(number).arg(r.step.whole).arg(r.step.frac);
    }
    cmd
}

/// The script's status codes: the first number of each request's reply.
mod status {
    /// Decided.
    pub(super) const DECIDED: i64 = 0;
    /// The key holds a string that is not a GCRA state.
    pub(super) const CORRUPT_STATE: i64 = 1;
    /// The script rejected the request's arguments.
    pub(super) const INVALID_ARGUMENTS: i64 = 2;
    /// Not decided ([`Mode::Tolerant`](super::Mode::Tolerant)): its `GET` or `SET` failed.
    pub(super) const ALONE: i64 = 3;
}

/// Numbers per request in the reply of [`Mode::Single`] and [`Mode::Tolerant`].
const STRIDE: usize = 5;
/// Numbers per request in the reply of [`Mode::All`] (after the leading `committed`).
const STRIDE_ALL: usize = 7;

/// What became of one request of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Decided (or refused with a typed error).
    Done(Result<StoreDecision, CheckError>),
    /// Not decided ([`Mode::Tolerant`]): decide it alone, which reports its own error.
    Alone,
}

fn malformed(reply: &[i64]) -> CheckError {
    CheckError::Store(StoreError::Rejected(Rejection::UnexpectedReply {
        answer: format!("{reply:?}"),
    }))
}

fn unsigned(v: i64, reply: &[i64]) -> Result<u64, CheckError> {
    u64::try_from(v).map_err(|_| malformed(reply))
}

/// The reply of [`Mode::Single`] or [`Mode::Tolerant`] to `requests`: one outcome per request,
/// or the call's error when the reply is not this script's.
pub(crate) fn parse_replies(
    reply: &[i64],
    requests: &[&Request],
) -> Result<Vec<Outcome>, CheckError> {
    if reply.len() != requests.len() * STRIDE {
        return Err(malformed(reply));
    }
    reply
        .chunks_exact(STRIDE)
        .zip(requests)
        .map(|(one, request)| parse_one(one, request))
        .collect()
}

fn parse_one(one: &[i64], request: &Request) -> Result<Outcome, CheckError> {
    let key = || String::from_utf8_lossy(&request.key).into_owned();
    match *one {
        [status::DECIDED, allowed @ (0 | 1), whole, frac, now] => {
            let tat = Ticks {
                whole: unsigned(whole, one)?,
                frac: unsigned(frac, one)?,
            };
            let now = unsigned(now, one)?;
            let step = request.rule.decide(tat, now, request.cost)?;
            if step.decision.allowed != (allowed == 1) {
                return Err(malformed(one));
            }
            Ok(Outcome::Done(Ok(StoreDecision::new(
                step.decision,
                Duration::from_micros(now),
            ))))
        }
        [status::CORRUPT_STATE, 0, 0, 0, 0] => Ok(Outcome::Done(Err(CheckError::Store(
            StoreError::CorruptState { key: key() },
        )))),
        [status::INVALID_ARGUMENTS, 0, 0, 0, 0] => Ok(Outcome::Done(Err(CheckError::Store(
            StoreError::Rejected(Rejection::InvalidArguments),
        )))),
        [status::ALONE, 0, 0, 0, 0] => Ok(Outcome::Alone),
        _ => Err(malformed(one)),
    }
}

/// The reply of [`Mode::Single`] to one request: its decision.
pub(crate) fn parse_single(reply: &[i64], request: &Request) -> Result<StoreDecision, CheckError> {
    match parse_replies(reply, &[request])?.pop() {
        Some(Outcome::Done(answer)) => answer,
        _ => Err(malformed(reply)),
    }
}

/// The reply of [`Mode::All`] to `requests`: one decision each.
///
/// Committed (every request fit and was spent): each decision is the spend's, in order (a key
/// named twice is decided the second time against the first spend). Not committed: nothing was
/// spent, and each decision describes the key as it is: a request that fits is allowed with its
/// key's unspent `remaining` and `reset_after`; one that does not is denied with the time until
/// it fits (with the costs of the earlier requests on the same key added).
pub(crate) fn parse_all(
    reply: &[i64],
    requests: &[&Request],
) -> Result<Vec<StoreDecision>, CheckError> {
    let Some((&committed, rest)) = reply.split_first() else {
        return Err(malformed(reply));
    };
    if rest.len() != requests.len() * STRIDE_ALL || !(committed == 0 || committed == 1) {
        return Err(malformed(reply));
    }
    let mut out = Vec::with_capacity(requests.len());
    let mut all_fit = true;
    for (i, (one, request)) in rest.chunks_exact(STRIDE_ALL).zip(requests).enumerate() {
        let &[status, fits, whole, frac, now, base, base_frac] = one else {
            return Err(malformed(reply));
        };
        if status != status::DECIDED {
            return match parse_one(&[status, 0, 0, 0, 0], request)? {
                Outcome::Done(Err(e)) => Err(e),
                _ => Err(malformed(reply)),
            };
        }
        let tat = Ticks {
            whole: unsigned(whole, reply)?,
            frac: unsigned(frac, reply)?,
        };
        let base = Ticks {
            whole: unsigned(base, reply)?,
            frac: unsigned(base_frac, reply)?,
        };
        let now = unsigned(now, reply)?;
        let step = request.rule.decide(tat, now, request.cost)?;
        if step.decision.allowed != (fits == 1) || !(fits == 0 || fits == 1) {
            return Err(malformed(reply));
        }
        all_fit &= step.decision.allowed;
        let decision = if committed == 1 {
            step.decision
        } else {
            let unspent = request.rule.decide(base, now, 0)?.decision;
            // The costs on this key so far: more than the burst never fits.
            let total = requests[..=i]
                .iter()
                .filter(|r| r.key == request.key)
                .fold(0u64, |sum, r| sum + u64::from(r.cost));
            let retry_after = step
                .decision
                .retry_after
                .filter(|_| total <= u64::from(request.rule.burst()));
            if step.decision.allowed {
                unspent
            } else {
                Decision::new(
                    false,
                    unspent.limit,
                    unspent.remaining,
                    retry_after,
                    unspent.reset_after,
                )
            }
        };
        out.push(StoreDecision::new(decision, Duration::from_micros(now)));
    }
    if all_fit != (committed == 1) {
        return Err(malformed(reply));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::Quota;
    use crate::gcra::redis::RESOLUTION;

    fn micros(quota: Quota) -> Gcra {
        Gcra::with_resolution(&quota, RESOLUTION).unwrap()
    }

    fn request(rule: &Gcra, cost: u32) -> Request {
        Request::new(b"k".to_vec(), rule, cost, None, 0).unwrap()
    }

    fn single(reply: &[i64], rule: &Gcra, cost: u32) -> Result<(Decision, u64), CheckError> {
        parse_single(reply, &request(rule, cost)).map(|d| (d.decision, d.at.as_micros() as u64))
    }

    #[test]
    fn replies_become_decisions() {
        let g = micros(Quota::per_second(10).unwrap());
        // Idle key at 42 µs: decided against tat = now.
        let (d, now) = single(&[0, 1, 42, 0, 42], &g, 1).unwrap();
        assert!(d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after, d.reset_after),
            (9, None, Duration::from_millis(100))
        );
        assert_eq!(now, 42);
        // Full key: denied, told to come back in one interval.
        let (d, _) = single(&[0, 0, 1_000_042, 0, 42], &g, 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
        // A fraction of a µs is carried: 3 per second, two tokens spent at 0.
        let g = micros(Quota::per_second(3).unwrap());
        let (d, _) = single(&[0, 1, 666_666, 2, 0], &g, 1).unwrap();
        assert_eq!((d.remaining, d.reset_after), (0, Duration::from_secs(1)));
    }

    #[test]
    fn status_codes_become_typed_errors() {
        let g = micros(Quota::per_second(10).unwrap());
        let corrupt = Request::new(b"p:=k".to_vec(), &g, 1, None, 0).unwrap();
        assert_eq!(
            parse_single(&[1, 0, 0, 0, 0], &corrupt),
            Err(CheckError::Store(StoreError::CorruptState {
                key: "p:=k".into()
            }))
        );
        assert_eq!(
            single(&[2, 0, 0, 0, 0], &g, 1),
            Err(CheckError::Store(StoreError::Rejected(
                Rejection::InvalidArguments
            )))
        );
        for bad in [
            &[1, 2, 3][..],
            &[1],
            &[0, 1, -1, 0, 5],
            &[0, 2, 0, 0, 0],
            &[4, 0, 0, 0, 0],
            &[1, 1, 0, 0, 0],
            &[],
            // Undecided is no answer to a single request.
            &[3, 0, 0, 0, 0],
            // The script says allowed, the rule says denied: not this script's reply.
            &[0, 1, 1_000_042, 0, 42],
        ] {
            assert!(
                matches!(
                    single(bad, &g, 1),
                    Err(CheckError::Store(StoreError::Rejected(
                        Rejection::UnexpectedReply { .. }
                    )))
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_tolerant_reply_has_one_outcome_per_request() {
        let g = micros(Quota::per_second(10).unwrap());
        let (a, b, c) = (request(&g, 1), request(&g, 1), request(&g, 1));
        let outcomes = parse_replies(
            &[0, 1, 42, 0, 42, 3, 0, 0, 0, 0, 1, 0, 0, 0, 0],
            &[&a, &b, &c],
        )
        .unwrap();
        assert!(matches!(&outcomes[0], Outcome::Done(Ok(d)) if d.decision.remaining == 9));
        assert_eq!(outcomes[1], Outcome::Alone);
        assert!(matches!(
            &outcomes[2],
            Outcome::Done(Err(CheckError::Store(StoreError::CorruptState { .. })))
        ));
        // One number short: not this script's reply.
        assert!(parse_replies(&[0, 1, 42, 0, 42, 3, 0, 0, 0], &[&a, &b]).is_err());
    }

    #[test]
    fn an_all_or_nothing_reply_reports_the_unspent_state_when_denied() {
        // 10 per second, burst 10: T = 100 ms.
        let g = micros(Quota::per_second(10).unwrap());
        let (a, b) = (request(&g, 2), request(&g, 3));
        // Committed: both spent, the second against the first (same key, idle at 0).
        let spent = parse_all(
            &[1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 200_000, 0, 0, 0, 0],
            &[&a, &b],
        )
        .unwrap();
        assert_eq!(spent[0].decision.remaining, 8);
        assert_eq!(spent[1].decision.remaining, 5);
        // Not committed: the key is 9 tokens spent (tat = 900 ms at 0); `a` (2) does not fit.
        let denied = parse_all(
            &[
                0, 0, 0, 900_000, 0, 0, 900_000, 0, 0, 0, 1_100_000, 0, 0, 900_000, 0,
            ],
            &[&a, &b],
        )
        .unwrap();
        for d in &denied {
            assert!(!d.decision.allowed);
            assert_eq!(d.decision.remaining, 1, "the unspent state");
        }
        // `a` fits in 100 ms; `b` needs 2 + 3 tokens: 400 ms.
        assert_eq!(
            denied[0].decision.retry_after,
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            denied[1].decision.retry_after,
            Some(Duration::from_millis(400))
        );
        // A request that fits in a denied call is allowed, with the unspent numbers.
        let c = request(&g, 1);
        let mixed = parse_all(
            &[0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 900_000, 0, 0, 900_000, 0],
            &[&c, &b],
        )
        .unwrap();
        assert!(mixed[0].decision.allowed && !mixed[1].decision.allowed);
        assert_eq!(mixed[0].decision.remaining, 10);
        // Committed although one does not fit, or the reverse: not this script's reply.
        assert!(parse_all(&[1, 0, 0, 900_000, 0, 0, 900_000, 0], &[&a]).is_err());
        assert!(parse_all(&[0, 0, 1, 0, 0, 0, 0, 0], &[&a]).is_err());
        // A corrupt key fails the call.
        assert!(matches!(
            parse_all(&[0, 1, 0, 0, 0, 0, 0, 0], &[&a]),
            Err(CheckError::Store(StoreError::CorruptState { .. }))
        ));
    }

    #[test]
    fn commands_name_their_keys_where_the_script_reads_them() {
        assert_eq!(SHA.len(), 40);
        assert_ne!(*SHA, *CROSS_SLOT_SHA);
        let g = micros(Quota::per_second(3).unwrap());
        let explicit = Request::new(b"k".to_vec(), &g, 2, Some(7), 9).unwrap();
        assert_eq!(
            explicit.step,
            Ticks {
                whole: 666_666,
                frac: 2
            }
        );
        let packed = |keys| {
            let reqs = [&explicit, &explicit];
            let cmd = command(reqs.iter().copied(), Mode::Tolerant, keys, false);
            String::from_utf8_lossy(&cmd.get_packed_command()).into_owned()
        };
        let declared = packed(Keys::Declared);
        assert!(declared.contains("EVALSHA") && declared.contains(SHA.as_str()));
        // Two keys, mode, two requests, one rule (den 3, window 1 s, now 7, slack 9), then each
        // request: rule 1, step 666,666 2/3 µs.
        let rule = "$1\r\n1\r\n$1\r\n3\r\n$7\r\n1000000\r\n$1\r\n0\r\n$1\r\n7\r\n$1\r\n9\r\n";
        let request = "$1\r\n1\r\n$6\r\n666666\r\n$1\r\n2\r\n";
        assert!(declared.ends_with(&format!(
            "$1\r\n2\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nt\r\n$1\r\n2\r\n{rule}{request}{request}"
        )));
        let undeclared = packed(Keys::Undeclared);
        assert!(undeclared.contains(CROSS_SLOT_SHA.as_str()));
        assert!(undeclared.ends_with(&format!(
            "$1\r\n0\r\n$1\r\nt\r\n$1\r\n2\r\n{rule}$1\r\nk\r\n$1\r\nk\r\n{request}{request}"
        )));
        assert!(CROSS_SLOT_SOURCE.starts_with("#!lua flags=allow-cross-slot-keys\n"));
    }
}
