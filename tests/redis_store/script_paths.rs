//! A decision has more than one way through Redis: a request decided alone by the lean script of
//! a lone call (`lone.lua`), a request alone in a call of the general script (`gcra.lua`), a
//! coalesced call of one kind whose keys one `MGET` read (its own, shorter loop), and a coalesced
//! call of several kinds (the general loop). For random rules, costs, stored states (none, whole and
//! fractional TATs before, inside and beyond the window, TATs over another denominator, values
//! the script never writes, keys of another type) and requests (the same key several times), the
//! replies, the values left in Redis and their TTLs are the same whichever way a call goes.
#![cfg(feature = "redis")]

use std::time::Instant;

use crate::support::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRng, TestRunner};

const SCRIPT: &str = include_str!("../../src/gcra/redis/gcra.lua");
const LONE: &str = include_str!("../../src/gcra/redis/lone.lua");

/// Microseconds since the script's epoch: about today.
const NOW: i64 = 1 << 48;
/// Keys a case draws its requests from.
const KEYS: usize = 4;

/// What a key holds before the requests.
#[derive(Clone, Debug)]
enum Stored {
    Nothing,
    /// A whole TAT, `now + offset`.
    Whole(i64),
    /// `now + offset` and a fraction `frac / over` (over: the rule's denominator or another).
    Fraction(i64, u64, u64),
    /// A value no version of the script writes.
    Foreign(&'static str),
    /// A list: a key of another type.
    List,
}

#[derive(Clone, Debug)]
struct Case {
    den: u64,
    window: i64,
    window_frac: u64,
    extra_ttl: u64,
    step: i64,
    step_frac: u64,
    stored: Vec<Stored>,
    /// The key (an index below KEYS) of each request, in order.
    requests: Vec<usize>,
}

fn stored(den: u64, window: i64) -> impl Strategy<Value = Stored> {
    let offset = -2 * window..3 * window;
    prop_oneof![
        2 => Just(Stored::Nothing),
        3 => offset.clone().prop_map(Stored::Whole),
        2 => (offset, 1..den.max(2), prop_oneof![Just(den), Just(den + 1)]).prop_map(
            move |(at, frac, over)| Stored::Fraction(at, frac % over.max(1), over),
        ),
        1 => prop_oneof![Just("1e5"), Just(" 12"), Just("hello"), Just("12+1/0")]
            .prop_map(Stored::Foreign),
        1 => Just(Stored::List),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let den = prop_oneof![Just(1u64), Just(3), Just(7), Just(1_000_000_007)];
    (den, 1i64..5_000_000).prop_flat_map(|(den, window)| {
        let step = prop_oneof![
            1 => Just(0i64),
            4 => 0..window,
            1 => window..2 * window,
        ];
        (
            0..den,
            // Long enough that no key the script writes expires while a case runs (a key gone
            // between two calls of the alone way would be decided afresh).
            prop_oneof![Just(60_000u64), Just(61_000)],
            step,
            0..den,
            prop::collection::vec(stored(den, window), KEYS),
            prop::collection::vec(0..KEYS, 2..12),
        )
            .prop_map(
                move |(window_frac, extra_ttl, step, step_frac, stored, requests)| Case {
                    den,
                    window,
                    window_frac,
                    extra_ttl,
                    step,
                    step_frac,
                    stored,
                    requests,
                },
            )
    })
}

/// What one way through gave: the per-request replies, and per key its type, value and TTL.
#[derive(Debug)]
struct Outcome {
    replies: Vec<i64>,
    keys: Vec<(String, Option<String>, i64)>,
    /// Milliseconds from before the keys were prepared to after the last TTL was read.
    elapsed_ms: i64,
}

fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}{{k}}{i}")
}

fn prepare(conn: &mut redis::Connection, prefix: &str, case: &Case) {
    for (i, stored) in case.stored.iter().enumerate() {
        let key = key(prefix, i);
        let value = match stored {
            Stored::Nothing => None,
            Stored::Whole(at) => Some((NOW + at).to_string()),
            Stored::Fraction(at, frac, over) => Some(format!("{}+{frac}/{over}", NOW + at)),
            Stored::Foreign(value) => Some((*value).to_string()),
            Stored::List => {
                let () = redis::cmd("RPUSH").arg(&key).arg("x").query(conn).unwrap();
                None
            }
        };
        if let Some(value) = value {
            let () = redis::cmd("SET")
                .arg(&key)
                .arg(value)
                .arg("PX")
                .arg(600_000)
                .query(conn)
                .unwrap();
        }
    }
}

/// One tolerant call of the given requests. `kinds`: 1 sends one kind for all of them (the
/// coalesced loop of its own when there are several), 2 sends the same kind twice and a kind per
/// request (the general loop). `mode`: "t", or "u" for keys named once each.
fn call(
    conn: &mut redis::Connection,
    script: &redis::Script,
    prefix: &str,
    case: &Case,
    requests: &[usize],
    kinds: usize,
    mode: &str,
) -> Vec<i64> {
    let mut invocation = script.prepare_invoke();
    for &i in requests {
        invocation.key(key(prefix, i));
    }
    invocation
        .arg(mode)
        .arg(requests.len())
        .arg(1)
        .arg(case.den)
        .arg(case.window)
        .arg(case.window_frac)
        .arg(NOW)
        .arg(case.extra_ttl)
        .arg(kinds);
    for _ in 0..kinds {
        invocation.arg(1).arg(case.step).arg(case.step_frac);
    }
    if kinds > 1 {
        for (n, _) in requests.iter().enumerate() {
            invocation.arg(1 + n % kinds);
        }
    }
    let reply: Vec<i64> = invocation.invoke(conn).unwrap();
    assert_eq!(reply[0], NOW, "the rule's now comes first");
    reply[1..].to_vec()
}

/// One call of the lone script, its reply written as the general script's for one request: the
/// TAT (now when the reply gives none), `-4, whole, frac`, or the negated status; its error on a
/// key of another type as `-3`, which a tolerant call answers and which sends the request alone.
fn call_lone(
    conn: &mut redis::Connection,
    lone: &redis::Script,
    prefix: &str,
    case: &Case,
    request: usize,
) -> Vec<i64> {
    let mut invocation = lone.prepare_invoke();
    invocation
        .key(key(prefix, request))
        .arg(case.step)
        .arg(case.window)
        .arg(NOW)
        .arg(case.extra_ttl);
    // A whole number of microseconds sends no fractions, as the client does.
    if case.den != 1 {
        invocation
            .arg(case.den)
            .arg(case.step_frac)
            .arg(case.window_frac);
    }
    match invocation.invoke::<redis::Value>(conn) {
        Ok(redis::Value::Int(status)) => vec![status],
        Ok(redis::Value::BulkString(text)) => {
            let text = String::from_utf8(text).unwrap();
            let mut fields = text.split(' ');
            assert_eq!(
                fields.next(),
                Some(NOW.to_string().as_str()),
                "the time given"
            );
            let reply = match fields.next() {
                None => vec![NOW],
                Some(tat) => match tat.split_once('+') {
                    None => vec![tat.parse().unwrap()],
                    Some((whole, frac)) => {
                        vec![-4, whole.parse().unwrap(), frac.parse().unwrap()]
                    }
                },
            };
            assert_eq!(fields.next(), None, "{text}");
            reply
        }
        Err(e) if e.code() == Some("WRONGTYPE") => vec![-3],
        other => panic!("the lone script answered {other:?}"),
    }
}

/// A way through a call.
#[derive(Clone, Copy)]
enum Way {
    /// Each request in a call of the lone script.
    Lone,
    /// Each request alone in a tolerant call of the general script.
    Alone,
    /// All requests in one tolerant call of `kinds` kinds.
    Together(usize),
    /// All requests in one tolerant call of one kind that says its keys are distinct (mode "u",
    /// as the client sends when they are).
    Distinct,
}

/// The case through one way.
fn run(
    conn: &mut redis::Connection,
    scripts: &(redis::Script, redis::Script),
    prefix: &str,
    case: &Case,
    way: Way,
) -> Outcome {
    let (script, lone) = scripts;
    let start = Instant::now();
    prepare(conn, prefix, case);
    let replies = match way {
        Way::Together(kinds) => call(conn, script, prefix, case, &case.requests, kinds, "t"),
        Way::Distinct => call(conn, script, prefix, case, &case.requests, 1, "u"),
        Way::Alone => case
            .requests
            .iter()
            .flat_map(|&i| call(conn, script, prefix, case, &[i], 1, "t"))
            .collect(),
        Way::Lone => case
            .requests
            .iter()
            .flat_map(|&i| call_lone(conn, lone, prefix, case, i))
            .collect(),
    };
    let keys = (0..KEYS)
        .map(|i| {
            let key = key(prefix, i);
            let kind: String = redis::cmd("TYPE").arg(&key).query(conn).unwrap();
            let value =
                (kind == "string").then(|| redis::cmd("GET").arg(&key).query(conn).unwrap());
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query(conn).unwrap();
            (kind, value, ttl)
        })
        .collect();
    let elapsed_ms = i64::try_from(start.elapsed().as_millis()).unwrap();
    Outcome {
        replies,
        keys,
        elapsed_ms,
    }
}

fn same(alone: &Outcome, together: &Outcome, case: &Case) -> Result<(), TestCaseError> {
    prop_assert_eq!(&alone.replies, &together.replies, "replies of {:?}", case);
    for (a, t) in alone.keys.iter().zip(&together.keys) {
        prop_assert_eq!(&a.0, &t.0, "types of {:?}", case);
        prop_assert_eq!(&a.1, &t.1, "values of {:?}", case);
        // A TTL counts down from its write: the two readings of one TTL differ by at most the
        // time each way took from its first write to its last reading (plus rounding to ms).
        if a.2 < 0 || t.2 < 0 {
            prop_assert_eq!(a.2, t.2, "TTLs of {:?}", case);
        } else {
            let slack = alone.elapsed_ms.max(together.elapsed_ms) + 2;
            prop_assert!(
                (a.2 - t.2).abs() <= slack,
                "TTLs {} and {} of {:?}",
                a.2,
                t.2,
                case
            );
        }
    }
    Ok(())
}

#[test]
fn every_way_through_a_call_decides_alike() {
    let server = RedisServer::start();
    let conn = std::cell::RefCell::new(
        redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap(),
    );
    let scripts = (redis::Script::new(SCRIPT), redis::Script::new(LONE));
    // proptest's deterministic seed: the same cases on every run.
    let config = Config {
        cases: 300,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new_with_rng(
        config.clone(),
        TestRng::deterministic_rng(config.rng_algorithm),
    );
    let cases = std::cell::Cell::new(0);
    runner
        .run(&case(), |case| {
            let case_no = cases.get() + 1;
            cases.set(case_no);
            let conn = &mut *conn.borrow_mut();
            let mut way = |prefix: &str, case: &Case, way: Way| {
                run(conn, &scripts, &format!("{prefix}{case_no}:"), case, way)
            };
            let alone = way("a", &case, Way::Alone);
            let lone = way("l", &case, Way::Lone);
            let fast = way("f", &case, Way::Together(1));
            let general = way("g", &case, Way::Together(2));
            same(&alone, &lone, &case)?;
            same(&alone, &fast, &case)?;
            same(&alone, &general, &case)?;
            // The same keys, each named once (in order of first use), in a call that says so.
            let mut once = case.clone();
            once.requests.clear();
            for &i in &case.requests {
                if !once.requests.contains(&i) {
                    once.requests.push(i);
                }
            }
            if once.requests.len() > 1 {
                let alone = way("o", &once, Way::Alone);
                let distinct = way("d", &once, Way::Distinct);
                same(&alone, &distinct, &once)?;
            }
            Ok(())
        })
        .unwrap();
}

/// A denominator of 2^53 or more is past the exact range: the script reads no stored value under
/// it (status 1), in the common coalesced loop as in the general one, whichever the mode.
#[test]
fn no_stored_value_is_read_under_a_denominator_past_two_to_the_53() {
    let server = RedisServer::start();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let script = redis::Script::new(SCRIPT);
    let case = Case {
        den: 1 << 53,
        window: 1_000_000,
        window_frac: 0,
        extra_ttl: 0,
        step: 10_000,
        step_frac: 0,
        stored: vec![Stored::Whole(5_000), Stored::Nothing],
        requests: vec![0, 1],
    };
    for (mode, kinds) in [("t", 1), ("u", 1), ("t", 2)] {
        let prefix = format!("{mode}{kinds}:");
        prepare(&mut conn, &prefix, &case);
        let reply = call(
            &mut conn,
            &script,
            &prefix,
            &case,
            &case.requests,
            kinds,
            mode,
        );
        assert_eq!(reply, vec![-1, NOW], "mode {mode}, {kinds} kinds");
    }
}
