//! The main job: per-client quotas in one process, no Redis needed.
//!
//! Three clients share an API with a quota of 5 requests/second and a burst of 10 per client:
//! a steady one (4 req/s), a bursty one (20 at once every 3 s) and an abusive one (50 req/s).
//! Time is virtual (a `ManualClock`), so this runs instantly and prints the same every time;
//! in a service you would use `KeyedRateLimiter::new(quota)` on the real clock.
//!
//! Run: `cargo run --example quickstart`

use std::time::Duration;

use flowguard::clock::ManualClock;
use flowguard::gcra::{KeyedRateLimiter, Quota};
use flowguard::headers::{HeaderStyle, PolicyName};
use http::HeaderMap;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quota = Quota::per_second(5)?.with_burst(10)?;
    let clock = ManualClock::new();
    let limiter = KeyedRateLimiter::<String>::builder(quota)
        .max_keys(100_000)
        .clock(clock.clone())
        .build()?;

    println!("quota: {quota:?}");
    println!(
        "{:>6}  {:>8} {:>8} {:>8}",
        "t (s)", "steady", "bursty", "abusive"
    );
    let clients = [("steady", 250u64), ("bursty", 3000), ("abusive", 20)]; // ms between sends
    let mut totals = [(0u32, 0u32); 3];
    let mut last_denial = None;
    let tick = Duration::from_millis(10);
    for step in 0..=1000u64 {
        let now_ms = step * 10;
        for (i, (name, every_ms)) in clients.iter().enumerate() {
            if now_ms % every_ms != 0 {
                continue;
            }
            let batch = if *name == "bursty" { 20 } else { 1 };
            for _ in 0..batch {
                let decision = limiter.check_key(*name)?;
                if decision.allowed {
                    totals[i].0 += 1;
                } else {
                    totals[i].1 += 1;
                    last_denial = Some((name.to_string(), decision));
                }
            }
        }
        if now_ms % 2000 == 0 {
            let show = |(a, d): (u32, u32)| format!("{a}/{}", a + d);
            println!(
                "{:>6.1}  {:>8} {:>8} {:>8}",
                now_ms as f64 / 1000.0,
                show(totals[0]),
                show(totals[1]),
                show(totals[2])
            );
        }
        clock.advance(tick);
    }
    println!("(allowed/sent; over 10 s each client may get at most 10 + 5 * 10 = 60)");

    if let Some((name, decision)) = last_denial {
        let policy = quota.rate_limit_policy(PolicyName::default());
        let mut headers = HeaderMap::new();
        decision.write_headers(&policy, HeaderStyle::Ietf, &mut headers);
        println!("\nthe last denied request ({name}) would get HTTP 429 with:");
        for (k, v) in &headers {
            println!("  {k}: {}", v.to_str()?);
        }
    }
    println!(
        "\nkeys tracked: {} (bounded by max_keys = {})",
        limiter.len(),
        limiter.max_keys()
    );
    Ok(())
}
