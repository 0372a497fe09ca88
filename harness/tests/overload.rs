//! The overload run end to end on loopback, very short and at a small rate: the output parses and
//! every request is accounted for. Structure only, never timing: how many requests succeed
//! depends on the machine.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// Longest a short run may take before the test gives up on it (it runs for a few seconds).
const GIVE_UP: Duration = Duration::from_secs(180);

/// Runs `overload` with `args`, bounded by [`GIVE_UP`], and answers its JSON report.
fn overload(args: &[&str]) -> Value {
    let child = Command::new(env!("CARGO_BIN_EXE_overload"))
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start overload");
    let pid = child.id();
    let (done, output) = mpsc::channel::<std::io::Result<Output>>();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let output = match output.recv_timeout(GIVE_UP) {
        Ok(output) => output.expect("wait for overload"),
        Err(_) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            panic!("overload {args:?} did not finish within {GIVE_UP:?}");
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "overload {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().expect("overload printed nothing");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {last}"))
}

fn count(limiter: &Value, field: &str) -> u64 {
    limiter[field]
        .as_u64()
        .unwrap_or_else(|| panic!("`{field}` is not a count in {limiter}"))
}

/// Every request that arrived ended exactly once: answered, shed, timed out or failed.
fn assert_accounted(limiter: &Value, seconds: usize) {
    let name = limiter["limiter"].as_str().expect("limiter name");
    let arrivals = count(limiter, "arrivals");
    let ended = ["ok", "shed", "timeouts", "errors", "unfinished"]
        .iter()
        .map(|field| count(limiter, field))
        .sum::<u64>();
    assert!(arrivals > 0, "{name}: no request arrived");
    assert_eq!(
        ended, arrivals,
        "{name}: requests unaccounted for: {limiter}"
    );
    assert_eq!(count(limiter, "unfinished"), 0, "{name}: {limiter}");
    let per_second = limiter["goodput_per_s"].as_array().expect("goodput_per_s");
    assert_eq!(per_second.len(), seconds, "{name}");
    let goodput: u64 = per_second.iter().map(|n| n.as_u64().expect("count")).sum();
    assert_eq!(goodput, count(limiter, "goodput"), "{name}");
    assert!(goodput <= count(limiter, "ok"), "{name}: {limiter}");
    let backend = &limiter["backend_stats"];
    // The backend answered at least every request the client saw answered.
    assert!(
        count(backend, "served") >= count(limiter, "ok"),
        "{name}: {limiter}"
    );
}

#[test]
fn a_short_run_of_every_limiter_accounts_for_every_request() {
    let report = overload(&[
        "--seconds",
        "2",
        "--limiter",
        "all",
        "--rate",
        "150",
        "--workers",
        "2",
        "--service-ms",
        "5",
        "--step-at",
        "1",
        "--step-to",
        "10",
    ]);
    let limiters = report["limiters"].as_array().expect("limiters");
    let names: Vec<&str> = limiters
        .iter()
        .map(|l| l["limiter"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        ["none", "fixed4", "fixed16", "flowguard", "tower-acc"]
    );
    for limiter in limiters {
        assert_accounted(limiter, 2);
        let trace = limiter["limit_per_100ms"].as_array().expect("limit trace");
        assert_eq!(trace.len(), 20, "one slot per 100 ms of the run");
        let limited = trace.iter().any(Value::is_number);
        assert_eq!(limited, limiter["limiter"] != "none", "{limiter}");
        assert_eq!(limiter["backend"]["workers"], 2);
        assert_eq!(limiter["backend"]["service_after_ms"], 10.0);
    }
    let targets = report["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 5);
    assert!(
        targets
            .iter()
            .all(|t| t["target"].is_string() && t["measured"].is_string())
    );
    assert!(report["machine"]["cores"].as_u64().is_some_and(|n| n >= 1));
}

/// A backend process started by the test; killed (by its handle) when dropped.
struct Backend(Child);

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_running_backend_serves_one_run_per_limiter() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_overload_backend"))
        .args([
            "--port",
            "0",
            "--workers",
            "3",
            "--service-ms",
            "4",
            "--step-at",
            "none",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start overload_backend");
    let stdout = child.stdout.take().expect("backend stdout");
    let backend = Backend(child);
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the backend's address");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"));

    let report = overload(&[
        "--backend",
        url,
        "--seconds",
        "1",
        "--rate",
        "150",
        "--limiter",
        "fixed2,flowguard",
    ]);
    let limiters = report["limiters"].as_array().expect("limiters");
    assert_eq!(limiters.len(), 2);
    for limiter in limiters {
        assert_accounted(limiter, 1);
        // The backend's own configuration, not the client's defaults.
        assert_eq!(limiter["backend"]["workers"], 3);
        assert!(limiter["backend"]["step_at_s"].is_null());
        assert!(limiter["goodput_around_step"].is_null());
    }
    drop(backend);
}

/// A short fleet run of 3 instances with `mode_flags`, reported as `mode`: every instance and the
/// fleet are reported, every request accounted for.
fn short_fleet_run(mode_flags: &[&str], mode: &str) {
    let flags = [
        "--fleet",
        "3",
        "--seconds",
        "6",
        "--rate",
        "150",
        "--limiter",
        "fixed1,flowguard",
        "--workers",
        "2",
        "--service-ms",
        "5",
        "--step-at",
        "none",
    ];
    let report = overload(&[&flags[..], mode_flags].concat());
    assert_eq!(report["fleet"]["instances"], 3);
    assert_eq!(report["fleet"]["mode"], mode);
    let limiters = report["limiters"].as_array().expect("limiters");
    let names: Vec<&str> = limiters
        .iter()
        .map(|l| l["limiter"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["fixed1", "flowguard"]);
    for limiter in limiters {
        let instances = limiter["instances"].as_array().expect("instances");
        assert_eq!(instances.len(), 3, "{limiter}");
        for instance in instances {
            let ended = ["ok", "shed", "timeouts", "errors"]
                .iter()
                .map(|field| count(instance, field))
                .sum::<u64>();
            assert_eq!(ended, count(instance, "arrivals"), "{instance}");
        }
        // The late joiner (the last) arrives later than the others.
        assert!(count(&instances[2], "arrivals") < count(&instances[1], "arrivals"));
        assert_eq!(limiter["limit_sum_per_s"].as_array().unwrap().len(), 6);
    }
    // Fixed limits of 1: while all 3 are up (from 3 s to 4 s), the limits add up to 3.
    let sum = limiters[0]["limit_sum_all_up"].as_f64();
    assert_eq!(sum, Some(3.0));
    assert!(report["machine"]["cores"].as_u64().is_some_and(|n| n >= 1));
}

#[test]
fn a_short_fleet_run_in_client_processes_reports_every_instance_and_the_fleet() {
    short_fleet_run(&[], "processes");
}

#[test]
fn a_short_fleet_run_in_one_process_reports_every_instance_and_the_fleet() {
    short_fleet_run(&["--in-process"], "in-process");
}
