//! One fleet instance in a client process of its own: `overload fleet-instance ...` (a hidden
//! subcommand), the flags the fleet run starts it with ([`InstanceArgs`]), its run ([`run`]) and
//! the one JSON line it prints ([`read_line`] reads it back).
//!
//! The parent ([`fleet::run`] with [`FleetMode::Processes`](fleet::FleetMode::Processes)) starts
//! the backend's run, then one process per instance. An instance builds one [`Gate`] (its
//! limiter, its `reqwest::Client`) and prints [`READY`]; once every instance is ready, the
//! parent writes them all the same start on their standard input: a UNIX time in milliseconds a
//! little ahead, which each converts to a `tokio::time::Instant` of its own, so that the records
//! and limit samples of every instance are timed from one origin (as precisely as the
//! processes' shared wall clock). However long the instances took to start (a loaded machine),
//! the start comes after they are all ready. An instance then offers its arrivals from
//! `--from-s` to `--until-s` after the start, samples its limit every
//! [`SAMPLE_EVERY`](super::client::SAMPLE_EVERY) until `--seconds`, and prints
//!
//! ```text
//! {"index":I,"arrivals":N,"unfinished":N,"records":[[ARRIVAL_S,DONE_S,OUTCOME],...],"limits":[[AT_S,LIMIT|null],...]}
//! ```
//!
//! where `OUTCOME` is `"ok"`, `"shed"`, `"timeout"`, `"transport"` or the status of a non-2xx
//! answer. It refuses to run (exit status 2, the reason on standard error) if it reaches the start
//! more than [`LATE`] after it, and exits when its standard input closes (its parent gone).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::time::Instant;

use super::client::{self, ClientConfig, Offered, Record, http_client};
use super::fleet;
use super::gate::{Gate, HttpCall, LimiterKind, Outcome};
use crate::cli;
use crate::vegas_settings::VegasSettings;

/// The name of the subcommand that runs one instance.
pub const SUBCOMMAND: &str = "fleet-instance";

/// The latest an instance may reach the common start: later, its first arrivals would come in a
/// burst, so it refuses to run.
pub const LATE: Duration = Duration::from_millis(100);

/// The flags of one instance process (`overload fleet-instance`), as [`to_flags`](Self::to_flags)
/// writes them.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct InstanceArgs {
    /// The backend (a folder URL, with a trailing `/`)
    #[arg(long, value_name = "URL", value_parser = reqwest::Url::parse)]
    pub backend: reqwest::Url,
    /// The instance's index in the fleet (for its messages)
    #[arg(long, value_name = "I")]
    pub index: usize,
    /// The limiter: none, fixedN, flowguard, flowguard-queue or tower-acc
    #[arg(long, value_name = "KIND", value_parser = LimiterKind::parse)]
    pub limiter: LimiterKind,
    /// Seconds after the start at which the instance starts offering load
    #[arg(long = "from-s", value_name = "S", value_parser = at_least_zero)]
    pub from_s: f64,
    /// Seconds after the start at which it stops
    #[arg(long = "until-s", value_name = "S", value_parser = at_least_zero)]
    pub until_s: f64,
    /// Length of the fleet's run in seconds (the limit is sampled until then)
    #[arg(long, value_name = "S", value_parser = cli::above_zero)]
    pub seconds: f64,
    /// Arrivals per second
    #[arg(long, value_name = "R", value_parser = cli::above_zero)]
    pub rate: f64,
    /// Seed of the arrival times
    #[arg(long, value_name = "N")]
    pub seed: u64,
    /// Time a request waits for a permit before it is shed, in milliseconds
    #[arg(long = "wait-ms", value_name = "MS", value_parser = cli::above_zero)]
    pub wait_ms: f64,
    /// Time from arrival to the answer after which a request is given up, in milliseconds
    #[arg(long = "deadline-ms", value_name = "MS", value_parser = cli::above_zero)]
    pub deadline_ms: f64,
    #[command(flatten)]
    pub vegas: VegasSettings,
}

/// A number of seconds >= 0.
fn at_least_zero(text: &str) -> Result<f64, String> {
    let v: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err("must be a finite number >= 0".into());
    }
    Ok(v)
}

impl InstanceArgs {
    /// The flags that reproduce these arguments, after the subcommand's name.
    pub fn to_flags(&self) -> Vec<String> {
        [
            ("--backend", self.backend.to_string()),
            ("--index", self.index.to_string()),
            ("--limiter", self.limiter.name()),
            ("--from-s", self.from_s.to_string()),
            ("--until-s", self.until_s.to_string()),
            ("--seconds", self.seconds.to_string()),
            ("--rate", self.rate.to_string()),
            ("--seed", self.seed.to_string()),
            ("--wait-ms", self.wait_ms.to_string()),
            ("--deadline-ms", self.deadline_ms.to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .chain(self.vegas.to_flags())
        .collect()
    }
}

/// Milliseconds since the UNIX epoch now.
pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// The `Instant` of `unix_ms` (milliseconds since the UNIX epoch) on this process's clock.
fn instant_of_unix_ms(unix_ms: u64) -> Instant {
    let at = UNIX_EPOCH + Duration::from_millis(unix_ms);
    let (wall, now) = (SystemTime::now(), Instant::now());
    match at.duration_since(wall) {
        Ok(ahead) => now + ahead,
        Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
    }
}

/// Runs one instance with `args`; answers its JSON line.
pub async fn run(args: InstanceArgs) -> Result<Value, String> {
    let index = args.index;
    let work = args
        .backend
        .join("work")
        .map_err(|e| format!("backend URL {} + work: {e}", args.backend))?;
    let config = ClientConfig {
        seconds: args.seconds,
        rate: Some(args.rate),
        deadline: Duration::from_secs_f64(args.deadline_ms / 1e3),
        wait: Duration::from_secs_f64(args.wait_ms / 1e3),
        seed: args.seed,
        vegas: args.vegas.clone(),
        ..ClientConfig::default()
    };
    let call = HttpCall::new(http_client()?, work);
    let gate = Arc::new(Gate::new(args.limiter, call, config.wait, &config.vegas).await?);
    let start_unix_ms = take_start(index).await?;
    super::backend::exit_when_stdin_closes();
    let start = instant_of_unix_ms(start_unix_ms);
    let late = Instant::now().saturating_duration_since(start);
    if late > LATE {
        return Err(format!(
            "instance {index} reached the common start {late:?} after it (at most {LATE:?})"
        ));
    }
    let sampler = tokio::spawn({
        let (gate, seconds) = (gate.clone(), args.seconds);
        async move {
            tokio::time::sleep_until(start).await;
            fleet::sample_limits(vec![gate], start, seconds).await
        }
    });
    let (from, until) = (
        start + Duration::from_secs_f64(args.from_s),
        start + Duration::from_secs_f64(args.until_s),
    );
    let offered = client::offer(gate, start, from, until, args.rate, args.seed, &config).await;
    let limits = sampler
        .await
        .map_err(|e| format!("instance {index}: the limit sampler failed: {e}"))?;
    Ok(line(index, &offered, &limits))
}

/// The line an instance prints once its limiter and client are built.
pub const READY: &str = "ready";

/// Tells the parent this instance is ready ([`READY`] on standard output), and answers the common
/// start the parent then writes on its standard input (milliseconds since the UNIX epoch, one
/// line).
async fn take_start(index: usize) -> Result<u64, String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("{READY}\n").as_bytes())
        .await
        .map_err(|e| format!("instance {index}: cannot say it is ready: {e}"))?;
    stdout
        .flush()
        .await
        .map_err(|e| format!("instance {index}: cannot say it is ready: {e}"))?;
    // Byte by byte up to the newline (`read_line` on an unbuffered handle), so that nothing of
    // standard input after the line is consumed: its end tells the parent is gone.
    let mut line = Vec::new();
    let mut stdin = BufReader::with_capacity(1, tokio::io::stdin());
    stdin
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| format!("instance {index}: cannot read the start: {e}"))?;
    let line = String::from_utf8_lossy(&line);
    line.trim().parse().map_err(|e| {
        format!(
            "instance {index}: the start {:?} is no UNIX time in ms: {e}",
            line.trim()
        )
    })
}

/// An instance's JSON line: what it offered, and its limit samples `(at, limit)`.
fn line(index: usize, offered: &Offered, limits: &[(f64, Vec<Option<usize>>)]) -> Value {
    let outcome = |outcome: &Outcome| match outcome {
        Outcome::Ok => json!("ok"),
        Outcome::Shed => json!("shed"),
        Outcome::Timeout => json!("timeout"),
        Outcome::Transport => json!("transport"),
        Outcome::Rejected(status) => json!(status),
    };
    json!({
        "index": index,
        "arrivals": offered.arrivals,
        "unfinished": offered.unfinished,
        "records": offered
            .records
            .iter()
            .map(|r| json!([r.arrival.as_secs_f64(), r.done.as_secs_f64(), outcome(&r.outcome)]))
            .collect::<Vec<_>>(),
        "limits": limits
            .iter()
            .map(|(at, each)| json!([at, each.first().copied().flatten()]))
            .collect::<Vec<_>>(),
    })
}

/// An instance's limit samples: `(at, limit)`, seconds from the common start.
pub type InstanceLimits = Vec<(f64, Option<usize>)>;

/// Reads an instance's standard output (its one JSON line) back.
pub fn read_line(stdout: &[u8]) -> Result<(Offered, InstanceLimits), String> {
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim_start().strip_prefix(READY).unwrap_or(&text);
    let json: Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("not one JSON line ({e}): {:.200}", text.trim()))?;
    let count = |field: &str| {
        json[field]
            .as_u64()
            .ok_or_else(|| format!("`{field}` is not a count"))
    };
    let array = |value: &Value, what: &str| {
        value
            .as_array()
            .cloned()
            .ok_or_else(|| format!("`{what}` is not an array: {value:.100}"))
    };
    let seconds = |value: &Value| {
        value
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("not a time in seconds: {value}"))
    };
    let outcome = |value: &Value| match (value.as_str(), value.as_u64()) {
        (Some("ok"), _) => Ok(Outcome::Ok),
        (Some("shed"), _) => Ok(Outcome::Shed),
        (Some("timeout"), _) => Ok(Outcome::Timeout),
        (Some("transport"), _) => Ok(Outcome::Transport),
        (_, Some(status)) if status <= u64::from(u16::MAX) => Ok(Outcome::Rejected(status as u16)),
        _ => Err(format!("not an outcome: {value}")),
    };
    let records = array(&json["records"], "records")?
        .iter()
        .map(|record| {
            Ok(Record {
                arrival: seconds(&record[0])?,
                done: seconds(&record[1])?,
                outcome: outcome(&record[2])?,
            })
        })
        .collect::<Result<_, String>>()?;
    let limits = array(&json["limits"], "limits")?
        .iter()
        .map(|sample| {
            let at = sample[0]
                .as_f64()
                .ok_or_else(|| format!("not a sample time: {sample}"))?;
            Ok((at, sample[1].as_u64().map(|limit| limit as usize)))
        })
        .collect::<Result<_, String>>()?;
    Ok((
        Offered {
            arrivals: count("arrivals")?,
            records,
            unfinished: count("unfinished")?,
        },
        limits,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_what_was_offered() {
        let at = |ms| Duration::from_millis(ms);
        let offered = Offered {
            arrivals: 5,
            records: vec![
                Record {
                    arrival: at(10),
                    done: at(25),
                    outcome: Outcome::Ok,
                },
                Record {
                    arrival: at(1_500),
                    done: at(1_550),
                    outcome: Outcome::Shed,
                },
                Record {
                    arrival: at(2_000),
                    done: at(3_000),
                    outcome: Outcome::Timeout,
                },
                Record {
                    arrival: at(2_001),
                    done: at(2_002),
                    outcome: Outcome::Rejected(503),
                },
            ],
            unfinished: 1,
        };
        let limits = vec![(0.0, vec![Some(4)]), (0.01, vec![None])];
        let text = line(3, &offered, &limits).to_string();
        assert!(!text.contains('\n'));
        let (back, samples) = read_line(text.as_bytes()).unwrap();
        assert_eq!((back.arrivals, back.unfinished), (5, 1));
        assert_eq!(back.records, offered.records);
        assert_eq!(samples, [(0.0, Some(4)), (0.01, None)]);
        // As a process prints it: the ready line first.
        let printed = format!("{READY}\n{text}\n");
        let (again, _) = read_line(printed.as_bytes()).unwrap();
        assert_eq!(again.records, offered.records);
        assert!(read_line(b"no json").unwrap_err().contains("JSON"));
        assert!(read_line(br#"{"arrivals":1}"#).is_err());
    }

    #[test]
    fn the_start_converts_to_an_instant_on_this_clock() {
        let now = Instant::now();
        let ahead = instant_of_unix_ms(unix_ms_now() + 500);
        let ms = ahead.duration_since(now).as_secs_f64() * 1e3;
        assert!((400.0..=600.0).contains(&ms), "{ms} ms");
        assert!(instant_of_unix_ms(unix_ms_now() - 500) <= Instant::now());
    }
}
