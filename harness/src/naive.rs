//! The naive reference GCRA script (`harness/scripts/naive_gcra.lua`) and how it is called, for
//! every harness binary that measures against it (`redis_cost`, `redis_load --script naive`).

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Cmd;

/// The script's source.
pub const LUA: &str = include_str!("../scripts/naive_gcra.lua");

/// `EVALSHA sha 1 key now T burst cost`: the client's clock now, in unix seconds with
/// microseconds, and `interval_s`, the emission interval T, in seconds (the script ignores
/// `cost`, see its header).
pub fn command(sha: &str, key: &str, interval_s: f64, burst: u64, cost: u32) -> Cmd {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(1)
        .arg(key)
        .arg(format!("{:.6}", now.as_secs_f64()))
        .arg(interval_s)
        .arg(burst)
        .arg(cost);
    cmd
}
