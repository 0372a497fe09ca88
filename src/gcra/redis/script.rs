//! The general GCRA Lua script (`gcra.lua`): its text, digests, arguments and replies.
//!
//! One script decides several requests, each in O(1) (its key read once, by `GET` or, for the keys
//! of a coalesced call on Redis 7.0+, one `MGET`; at most one `SET ... PX`). A call of one request
//! runs the [lone](super::lone) script instead, which decides it exactly as this one would.
//!
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
    /// Independent requests; one whose `GET`/`SET` fails is left undecided.
    Tolerant,
    /// All or nothing.
    All,
}

impl Mode {
    fn arg(self) -> &'static str {
        match self {
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
    pub(super) step: Ticks,
    /// `None`: the server's `TIME`.
    pub(super) now_us: Option<u64>,
    pub(super) extra_ttl_ms: u64,
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

/// A kind of request as the script takes it: its rule's number (from 1), then `cost * T` (whole,
/// fraction).
type KindArgs = (usize, u64, u64);

/// The distinct rules and kinds of `requests` in order of first use, and each request's kind
/// (from 1): the script parses each rule and kind once per call.
struct Layout {
    rules: Vec<RuleArgs>,
    kinds: Vec<KindArgs>,
    of_request: Vec<usize>,
}

impl Layout {
    fn new<'a>(requests: impl Iterator<Item = &'a Request>) -> Layout {
        let mut layout = Layout {
            rules: Vec::new(),
            kinds: Vec::new(),
            of_request: Vec::new(),
        };
        for r in requests {
            let rule = number(&mut layout.rules, r.rule_args());
            let kind = number(&mut layout.kinds, (rule, r.step.whole, r.step.frac));
            layout.of_request.push(kind);
        }
        layout
    }
}

/// `item`'s number (from 1) in `known`, added at the end if new. Calls carry a few distinct
/// rules and kinds (usually one), so a linear search is the fastest.
fn number<T: PartialEq>(known: &mut Vec<T>, item: T) -> usize {
    match known.iter().position(|k| *k == item) {
        Some(i) => i + 1,
        None => {
            known.push(item);
            known.len()
        }
    }
}

/// Whether no two of `requests` name the same key.
fn distinct<'a>(requests: impl ExactSizeIterator<Item = &'a Request>) -> bool {
    let mut seen = hashbrown::HashSet::with_capacity(requests.len());
    requests.into_iter().all(|r| seen.insert(&r.key[..]))
}

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
    let layout = Layout::new(requests.clone());
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
    // A tolerant call naming each of its declared keys once says so ("u"): the script's common
    // path then keeps no record of its writes, which only a key named again would read.
    let mode_arg = if mode == Mode::Tolerant && keys == Keys::Declared && distinct(requests.clone())
    {
        "u"
    } else {
        mode.arg()
    };
    cmd.arg(mode_arg).arg(n).arg(layout.rules.len());
    for (den, window, window_frac, now, extra_ttl) in layout.rules {
        cmd.arg(den).arg(window).arg(window_frac);
        match now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(extra_ttl);
    }
    cmd.arg(layout.kinds.len());
    for &(rule, step, step_frac) in &layout.kinds {
        cmd.arg(rule).arg(step).arg(step_frac);
    }
    if keys == Keys::Undeclared {
        for r in requests {
            cmd.arg(&r.key[..]);
        }
    }
    if layout.kinds.len() > 1 {
        for kind in layout.of_request {
            cmd.arg(kind);
        }
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

/// In the reply of [`Mode::Tolerant`], marks a TAT with a fraction of a
/// microsecond: its whole microseconds and the fraction follow.
const FRACTION: i64 = -4;
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

/// The reply of [`Mode::Tolerant`] to `requests`: one outcome per request,
/// or the call's error when the reply is not this script's.
///
/// The reply is each rule's `now` (in the order [`command`] numbered them), then per request: its
/// TAT when it has no fraction (`tat >= 0`), [`FRACTION`] then the TAT's whole microseconds and
/// fraction, or a negated status code.
pub(crate) fn parse_replies(
    reply: &[i64],
    requests: &[&Request],
) -> Result<Vec<Outcome>, CheckError> {
    let layout = Layout::new(requests.iter().copied());
    if reply.len() < layout.rules.len() {
        return Err(malformed(reply));
    }
    let (nows, mut rest) = reply.split_at(layout.rules.len());
    let mut out = Vec::with_capacity(requests.len());
    for (request, &kind) in requests.iter().zip(&layout.of_request) {
        let Some((&first, tail)) = rest.split_first() else {
            return Err(malformed(reply));
        };
        rest = tail;
        let tat = match first {
            whole if whole >= 0 => Ticks {
                whole: whole.unsigned_abs(),
                frac: 0,
            },
            FRACTION => {
                let &[whole, frac, ..] = rest else {
                    return Err(malformed(reply));
                };
                rest = &rest[2..];
                if frac <= 0 {
                    return Err(malformed(reply));
                }
                Ticks {
                    whole: unsigned(whole, reply)?,
                    frac: unsigned(frac, reply)?,
                }
            }
            negated => {
                out.push(failed(negated.wrapping_neg(), request).ok_or_else(|| malformed(reply))?);
                continue;
            }
        };
        let rule = layout.kinds[kind - 1].0;
        let now = unsigned(nows[rule - 1], reply)?;
        let step = request.rule.decide(tat, now, request.cost)?;
        out.push(Outcome::Done(Ok(StoreDecision::new(
            step.decision,
            Duration::from_micros(now),
        ))));
    }
    if !rest.is_empty() {
        return Err(malformed(reply));
    }
    Ok(out)
}

/// What the status code `status` (not [`status::DECIDED`]) of a request means, if it is one.
fn failed(status: i64, request: &Request) -> Option<Outcome> {
    let key = || String::from_utf8_lossy(&request.key).into_owned();
    match status {
        status::CORRUPT_STATE => Some(Outcome::Done(Err(CheckError::Store(
            StoreError::CorruptState { key: key() },
        )))),
        status::INVALID_ARGUMENTS => Some(Outcome::Done(Err(CheckError::Store(
            StoreError::Rejected(Rejection::InvalidArguments),
        )))),
        status::ALONE => Some(Outcome::Alone),
        _ => None,
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
            return match failed(status, request) {
                Some(Outcome::Done(Err(e))) => Err(e),
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

    /// The reply to one request of a tolerant call, decided (undecided is an error here).
    fn one(reply: &[i64], request: &Request) -> Result<StoreDecision, CheckError> {
        match parse_replies(reply, &[request])?.pop() {
            Some(Outcome::Done(answer)) => answer,
            _ => Err(malformed(reply)),
        }
    }

    fn single(reply: &[i64], rule: &Gcra, cost: u32) -> Result<(Decision, u64), CheckError> {
        one(reply, &request(rule, cost)).map(|d| (d.decision, d.at.as_micros() as u64))
    }

    #[test]
    fn replies_become_decisions() {
        let g = micros(Quota::per_second(10).unwrap());
        // Idle key at 42 µs: decided against tat = now (the rule's now, then the TAT).
        let (d, now) = single(&[42, 42], &g, 1).unwrap();
        assert!(d.allowed);
        assert_eq!(
            (d.remaining, d.retry_after, d.reset_after),
            (9, None, Duration::from_millis(100))
        );
        assert_eq!(now, 42);
        // Full key: denied, told to come back in one interval.
        let (d, _) = single(&[42, 1_000_042], &g, 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(100)));
        // A fraction of a µs is carried: 3 per second, two tokens spent at 0.
        let g = micros(Quota::per_second(3).unwrap());
        let (d, _) = single(&[0, -4, 666_666, 2], &g, 1).unwrap();
        assert_eq!((d.remaining, d.reset_after), (0, Duration::from_secs(1)));
    }

    #[test]
    fn status_codes_become_typed_errors() {
        let g = micros(Quota::per_second(10).unwrap());
        let corrupt = Request::new(b"p:=k".to_vec(), &g, 1, None, 0).unwrap();
        assert_eq!(
            one(&[0, -1], &corrupt),
            Err(CheckError::Store(StoreError::CorruptState {
                key: "p:=k".into()
            }))
        );
        assert_eq!(
            single(&[0, -2], &g, 1),
            Err(CheckError::Store(StoreError::Rejected(
                Rejection::InvalidArguments
            )))
        );
        for bad in [
            &[1, 2, 3][..],
            &[1],
            &[],
            // A negative now, an unknown status, a fraction marker without a fraction.
            &[-5, 42],
            &[0, -5],
            &[0, -4, 42],
            &[0, -4, 42, 0],
            &[0, -4, -1, 2],
            &[0, i64::MIN],
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
        let outcomes = parse_replies(&[42, 42, -3, -1], &[&a, &b, &c]).unwrap();
        assert!(matches!(&outcomes[0], Outcome::Done(Ok(d)) if d.decision.remaining == 9));
        assert_eq!(outcomes[1], Outcome::Alone);
        assert!(matches!(
            &outcomes[2],
            Outcome::Done(Err(CheckError::Store(StoreError::CorruptState { .. })))
        ));
        // One number short or one too many: not this script's reply.
        assert!(parse_replies(&[42, 42], &[&a, &b]).is_err());
        assert!(parse_replies(&[42, 42, 42, 42], &[&a, &b]).is_err());
        // Two rules (one of them in explicit-time mode, now 7) and a fraction: each request is
        // decided at its rule's now.
        let third = micros(Quota::per_second(3).unwrap());
        let explicit = Request::new(b"k".to_vec(), &third, 1, Some(7), 0).unwrap();
        let outcomes = parse_replies(&[42, 7, 42, -4, 333_340, 1], &[&a, &explicit]).unwrap();
        let at = |o: &Outcome| match o {
            Outcome::Done(Ok(d)) => (d.at.as_micros(), d.decision.remaining),
            other => panic!("{other:?}"),
        };
        assert_eq!(at(&outcomes[0]), (42, 9));
        assert_eq!(at(&outcomes[1]), (7, 1));
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
        let packed = |reqs: &[&Request], keys| {
            let cmd = command(reqs.iter().copied(), Mode::Tolerant, keys, false);
            String::from_utf8_lossy(&cmd.get_packed_command()).into_owned()
        };
        let declared = packed(&[&explicit, &explicit], Keys::Declared);
        assert!(declared.contains("EVALSHA") && declared.contains(SHA.as_str()));
        // Two keys, mode, two requests, one rule (den 3, window 1 s, now 7, slack 9), one kind
        // (rule 1, step 666,666 2/3 µs), which the requests share: no argument of their own.
        let rule = "$1\r\n1\r\n$1\r\n3\r\n$7\r\n1000000\r\n$1\r\n0\r\n$1\r\n7\r\n$1\r\n9\r\n";
        let kind = "$1\r\n1\r\n$1\r\n1\r\n$6\r\n666666\r\n$1\r\n2\r\n";
        assert!(declared.ends_with(&format!(
            "$1\r\n2\r\n$1\r\nk\r\n$1\r\nk\r\n$1\r\nt\r\n$1\r\n2\r\n{rule}{kind}"
        )));
        // The same call naming two distinct keys says so ("u"); under the cross-slot script
        // (undeclared keys, which the script's common path does not take) it does not.
        let other = Request::new(b"j".to_vec(), &g, 2, Some(7), 9).unwrap();
        assert!(
            packed(&[&explicit, &other], Keys::Declared).ends_with(&format!(
                "$1\r\n2\r\n$1\r\nk\r\n$1\r\nj\r\n$1\r\nu\r\n$1\r\n2\r\n{rule}{kind}"
            ))
        );
        assert!(
            packed(&[&explicit, &other], Keys::Undeclared)
                .contains(&format!("$1\r\nt\r\n$1\r\n2\r\n{rule}{kind}"))
        );
        let undeclared = packed(&[&explicit, &explicit], Keys::Undeclared);
        assert!(undeclared.contains(CROSS_SLOT_SHA.as_str()));
        assert!(undeclared.ends_with(&format!(
            "$1\r\n0\r\n$1\r\nt\r\n$1\r\n2\r\n{rule}{kind}$1\r\nk\r\n$1\r\nk\r\n"
        )));
        // Two kinds (cost 2, cost 1) of one rule: each request names its kind, after the keys.
        let single = Request::new(b"k".to_vec(), &g, 1, Some(7), 9).unwrap();
        let mixed = packed(&[&explicit, &single, &explicit], Keys::Undeclared);
        let kinds = "$1\r\n2\r\n$1\r\n1\r\n$6\r\n666666\r\n$1\r\n2\r\n$1\r\n1\r\n$6\r\n333333\r\n$1\r\n1\r\n";
        let keys = "$1\r\nk\r\n".repeat(3);
        assert!(mixed.ends_with(&format!(
            "$1\r\nt\r\n$1\r\n3\r\n{rule}{kinds}{keys}$1\r\n1\r\n$1\r\n2\r\n$1\r\n1\r\n"
        )));
        assert!(CROSS_SLOT_SOURCE.starts_with("#!lua flags=allow-cross-slot-keys\n"));
    }
}
