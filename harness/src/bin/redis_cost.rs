//! redis_cost: what one rate-limit decision costs Redis, server CPU per call and memory per key
//! (the method and the output are described on [`Options`], which `--help` prints).
//!
//! ```text
//! cargo run --release -p flowguard-harness --bin redis_cost -- [--json] [--redis URL [--allow-flush]]
//!     [--calls 100000] [--rounds 5] [--concurrency 16] [--hot-keys 100]
//!     [--mem-keys 1000] [--log-entries 1000] [--script NAME=PATH]... [--redis-server BIN]
//!     [--throughput] [--multi-thread]
//! ```

use std::collections::BTreeMap;
use std::error::Error;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use flowguard_harness::cli::positive;
use flowguard_harness::naive;
use redis::aio::MultiplexedConnection;
use redis::{Cmd, Value};
use serde_json::{Map, Value as Json, json};

type AnyError = Box<dyn Error + Send + Sync>;
type Result<T> = std::result::Result<T, AnyError>;

/// flowguard's script of a decision alone (a call of one request), exactly as the store ships it.
const FLOWGUARD_LUA: &str = include_str!("../../../src/gcra/redis/lone.lua");
/// Floor 1: what EVALSHA costs with one key and flowguard's arguments before the script does anything.
const EMPTY_LUA: &str = "return 1";
/// Floor 2: the two data commands any GET/SET GCRA script needs, and nothing else.
const GET_SET_LUA: &str = "redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '106495532123456', 'PX', '60000') return 1";
/// Probe: a script around one slow inner command, to see where Redis books the inner time.
const PROBE_LUA: &str = "return redis.call('LPOS', KEYS[1], 'absent')";
/// Elements in the probe list: LPOS scans all of them, tens of microseconds.
const PROBE_LIST_LEN: usize = 10_000;
const PROBE_CALLS: usize = 2_000;

/// flowguard's time origin (unix seconds), see the script header.
const FLOWGUARD_EPOCH_UNIX_S: u64 = 1_700_000_000;
/// Allowed workloads: 10 per second, burst one million, so every call is allowed.
const GENEROUS: Quota = Quota {
    interval_us: 100_000,
    burst: 1_000_000,
};
/// Denied workload: one per hour, burst one.
const STINGY: Quota = Quota {
    interval_us: 3_600_000_000,
    burst: 1,
};
/// Throughput reference: the quota `harness/scripts/redis_benchmark.sh` uses by default (1000/s, burst 1000).
const BENCHMARK: Quota = Quota {
    interval_us: 1_000,
    burst: 1_000,
};
/// Throughput reference: keys drawn from this many, like `redis-benchmark -r 100000`.
const THROUGHPUT_KEYSPACE: u64 = 100_000;
/// Memory layouts: one per minute, burst 10, so the GCRA key lives a minute.
const MEMORY_QUOTA: Quota = Quota {
    interval_us: 60_000_000,
    burst: 10,
};
/// TTL given to the other layouts (ms).
const MEMORY_TTL_MS: u64 = 60_000;
/// Calls before `CONFIG RESETSTAT` (script cache, allocator, connection warm).
const WARM_UP_CALLS: usize = 2_000;
/// Keys per pipeline when filling memory layouts.
const FILL_BATCH: usize = 50;

#[derive(Clone, Copy)]
struct Quota {
    interval_us: u64,
    burst: u64,
}

impl Quota {
    /// flowguard's ARGV for one cost-1 request at `now` ("" for server time), as `lone.lua` takes
    /// them: `n*T` and `B*T` in whole µs (these intervals are whole µs, so no fractions follow),
    /// then, for an explicit time only, now and the extra TTL (0).
    fn flowguard_args(&self, cmd: &mut Cmd, now: &str) {
        cmd.arg(self.interval_us).arg(self.window_us());
        if !now.is_empty() {
            cmd.arg(now).arg(0);
        }
    }

    /// `B*T` in µs.
    fn window_us(&self) -> u64 {
        self.interval_us * self.burst
    }
}

/// What one rate-limit decision costs Redis: server CPU per call and memory per key.
///
/// Without `--redis` the program starts its own `redis-server` on a free loopback port (no
/// persistence) and stops it on exit, Ctrl-C or error, so nobody else disturbs the statistics.
/// With `--redis URL` it runs `FLUSHALL` and `CONFIG RESETSTAT` on that server, so it refuses a
/// server holding keys unless `--allow-flush` is given.
///
/// **CPU.** For each workload: `FLUSHALL`, a warm-up, `CONFIG RESETSTAT`, `--calls` calls with
/// `--concurrency` in flight over one multiplexed connection, then `INFO commandstats`. The figure
/// is `usec / calls` of the outer command (`cmdstat_evalsha`, or `cmdstat_set` for the plain SET)
/// of the least disturbed of `--rounds` rounds (commandstats time is wall-clock time inside the
/// command, so other processes on the machine can only add to it); the median round is printed
/// too. The rounds interleave the workloads, so background noise spreads over all of them. A
/// second figure, immune to preemption but covering the whole server process (network I/O and
/// parsing included), is the growth of `used_cpu_user + used_cpu_sys` (`INFO cpu`) per call. Redis 7 also counts the commands a script runs (`GET`, `SET`,
/// `TIME`) under their own names; the program prints them per call and checks, with a probe
/// script around a deliberately slow `LPOS`, that the outer `evalsha` time includes them.
///
/// Workloads: *new keys* (every call on a fresh key: GET misses, SET creates), *hot keys*
/// (`--hot-keys` keys, generous quota: GET hits, SET overwrites) and *hot keys, denied* (quota of
/// one per hour: after the first call per key everything is denied and nothing is written). The
/// headline figure of each script is the mean of its two allowed workloads.
///
/// Scripts: flowguard's for a decision alone (`src/gcra/redis/lone.lua`, server `TIME`, cost 1),
/// the same with an explicit client time (to price `TIME`), the naive reference
/// (`harness/scripts/naive_gcra.lua`), two floors (an empty script with the same arguments; a script doing only `GET` + `SET .. PX`), and
/// any `--script NAME=PATH` taking flowguard's `KEYS`/`ARGV`.
///
/// **Memory.** `--mem-keys` keys per layout, all with a TTL: a GCRA key written by flowguard's
/// script, a sliding-window log of `--log-entries` sorted-set members (timestamps), a token-bucket
/// hash (`tokens`, `ts`) and a fixed-window counter (`INCR` + `PEXPIRE`). Reported: the mean of
/// `MEMORY USAGE key SAMPLES 0`, and the `used_memory` delta divided by the number of keys (which
/// also counts the expire-table entry that `MEMORY USAGE` leaves out).
///
/// With `--json` the last stdout line is one JSON object: `cpu_us_per_call`,
/// `ratio_flowguard_vs_naive`, `memory_bytes_per_key` and the details.
#[derive(Parser)]
#[command(verbatim_doc_comment, args_override_self = true)]
struct Options {
    /// Measure this server (it gets FLUSHALL + CONFIG RESETSTAT!); default: start one.
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// With --redis: run even if the server holds keys (they are all deleted).
    #[arg(long)]
    allow_flush: bool,
    /// The redis-server binary to start.
    #[arg(
        long = "redis-server",
        default_value = "redis-server",
        value_name = "BIN"
    )]
    server_bin: String,
    /// Calls per workload and round.
    #[arg(long, default_value_t = 100_000, value_name = "N", value_parser = positive::<usize>)]
    calls: usize,
    /// Rounds; the least disturbed is reported, and the median.
    #[arg(long, default_value_t = 5, value_name = "R", value_parser = positive::<usize>)]
    rounds: usize,
    /// Calls in flight.
    #[arg(long, default_value_t = 16, value_name = "C", value_parser = positive::<usize>)]
    concurrency: usize,
    /// Keys of the hot workloads.
    #[arg(long, default_value_t = 100, value_name = "H", value_parser = positive::<usize>)]
    hot_keys: usize,
    /// Keys per memory layout.
    #[arg(long, default_value_t = 1_000, value_name = "K", value_parser = positive::<usize>)]
    mem_keys: usize,
    /// Members per sliding-window log.
    #[arg(long, default_value_t = 1_000, value_name = "E", value_parser = positive::<usize>)]
    log_entries: usize,
    /// Also measure a script taking flowguard's KEYS/ARGV (repeatable).
    #[arg(long = "script", value_name = "NAME=PATH", value_parser = script)]
    extra_scripts: Vec<(String, String)>,
    /// Only the client-side reference: EVALSHA of flowguard's script per second through one
    /// multiplexed connection, --concurrency tasks, --calls per round.
    #[arg(long)]
    throughput: bool,
    /// Client on tokio's multi-thread runtime (default: one client thread).
    #[arg(long)]
    multi_thread: bool,
    /// Print a JSON object as the last line.
    #[arg(long)]
    json: bool,
}

/// `--script NAME=PATH`: the name to report it under, and the script read from PATH.
fn script(spec: &str) -> std::result::Result<(String, String), String> {
    let (name, path) = spec
        .split_once('=')
        .ok_or_else(|| format!("wants NAME=PATH, got {spec:?}"))?;
    let source =
        std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read {path}: {e}"))?;
    Ok((name.to_owned(), source))
}

/// A `redis-server` this process started; killed when dropped (normal exit, error, panic).
struct OwnedServer {
    child: Child,
    url: String,
}

impl OwnedServer {
    fn start(bin: &str) -> Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!("cannot start {bin:?} ({e}): install redis-server or pass --redis URL")
            })?;
        Ok(Self {
            child,
            url: format!("redis://127.0.0.1:{port}/"),
        })
    }

    /// Waits until the server answers PING (or has exited).
    async fn ready(&mut self) -> Result<MultiplexedConnection> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("redis-server exited at start ({status}); port taken?").into());
            }
            if let Ok(mut con) = connect(&self.url).await
                && redis::cmd("PING")
                    .query_async::<String>(&mut con)
                    .await
                    .is_ok()
            {
                return Ok(con);
            }
            if Instant::now() > deadline {
                return Err(
                    format!("redis-server at {} did not answer PING in 10 s", self.url).into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OwnedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    Ok(client.get_multiplexed_async_connection().await?)
}

fn main() {
    let options = Options::parse();
    // One client thread by default: on a small machine the server needs the other cores.
    let runtime = if options.multi_thread {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("redis_cost: cannot start the tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    // The server guard lives in this frame: dropped (killed) on every way out but `exit`.
    let mut server = None;
    let outcome = runtime.block_on(async {
        tokio::select! {
            outcome = run(&options, &mut server) => outcome,
            _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        }
    });
    drop(server);
    if let Err(e) = outcome {
        eprintln!("redis_cost: {e}");
        std::process::exit(1);
    }
}

async fn run(options: &Options, server: &mut Option<OwnedServer>) -> Result<()> {
    let mut con = match &options.redis {
        Some(url) => {
            let mut con = connect(url).await?;
            let keys: u64 = redis::cmd("DBSIZE").query_async(&mut con).await?;
            if keys > 0 && !options.allow_flush {
                return Err(format!(
                    "{url} holds {keys} keys and redis_cost runs FLUSHALL and CONFIG RESETSTAT: \
                     point it at an empty throwaway server, or pass --allow-flush"
                )
                .into());
            }
            con
        }
        None => {
            let owned = server.insert(OwnedServer::start(&options.server_bin)?);
            eprintln!("started redis-server at {}", owned.url);
            owned.ready().await?
        }
    };
    let version = redis_version(&mut con).await?;
    let scripts = Scripts::load(&mut con, options).await?;
    if options.throughput {
        return report_throughput(&mut con, options, &scripts).await;
    }
    let cpu = measure_cpu(&mut con, options, &scripts).await?;
    let probe = probe_inner_accounting(&mut con, &scripts).await?;
    let memory = measure_memory(&mut con, options, &scripts).await?;
    con.send_packed_command(&redis::cmd("FLUSHALL")).await?;
    let report = Report {
        version,
        cpu,
        probe,
        memory,
    };
    report.print_table(options);
    if options.json {
        println!("{}", report.json(options));
    }
    Ok(())
}

async fn redis_version(con: &mut MultiplexedConnection) -> Result<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(con).await?;
    Ok(info_field(&info, "redis_version")
        .unwrap_or("unknown")
        .to_owned())
}

fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Loaded scripts, by SHA1.
struct Scripts {
    flowguard: String,
    naive: String,
    empty: String,
    get_set: String,
    probe: String,
    extra: Vec<(String, String)>,
}

impl Scripts {
    async fn load(con: &mut MultiplexedConnection, options: &Options) -> Result<Self> {
        let mut extra = Vec::new();
        for (name, source) in &options.extra_scripts {
            extra.push((name.clone(), script_load(con, source).await?));
        }
        Ok(Self {
            flowguard: script_load(con, FLOWGUARD_LUA).await?,
            naive: script_load(con, naive::LUA).await?,
            empty: script_load(con, EMPTY_LUA).await?,
            get_set: script_load(con, GET_SET_LUA).await?,
            probe: script_load(con, PROBE_LUA).await?,
            extra,
        })
    }
}

async fn script_load(con: &mut MultiplexedConnection, source: &str) -> Result<String> {
    Ok(redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(con)
        .await?)
}

/// Which keys a workload touches.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Keys {
    /// Every call on a fresh key.
    New,
    /// `--hot-keys` keys, generous quota: all allowed.
    Hot,
    /// `--hot-keys` keys, one per hour: denied after the first call per key.
    HotDenied,
    /// Spread over `THROUGHPUT_KEYSPACE` keys, the quota of `harness/scripts/redis_benchmark.sh`.
    Spread,
}

impl Keys {
    const ALL: [Keys; 3] = [Keys::New, Keys::Hot, Keys::HotDenied];

    fn label(self) -> &'static str {
        match self {
            Keys::New => "new_keys",
            Keys::Hot => "hot_keys",
            Keys::HotDenied => "hot_keys_denied",
            Keys::Spread => "spread_keys",
        }
    }

    fn quota(self) -> Quota {
        match self {
            Keys::HotDenied => STINGY,
            Keys::New | Keys::Hot => GENEROUS,
            Keys::Spread => BENCHMARK,
        }
    }

    fn key(self, round_tag: &str, i: usize, hot_keys: usize) -> String {
        match self {
            Keys::New => format!("cost:{round_tag}:{i}"),
            Keys::Hot | Keys::HotDenied => format!("cost:hot:{}", i % hot_keys),
            // Like redis-benchmark's `key:__rand_int__` with -r: 12 digits, scattered.
            Keys::Spread => format!(
                "key:{:012}",
                (i as u64).wrapping_mul(2_654_435_761) % THROUGHPUT_KEYSPACE
            ),
        }
    }
}

/// What one call sends.
#[derive(Clone)]
enum Call {
    /// flowguard's KEYS/ARGV convention (`lone.lua`); `server_time` sends no time (`ARGV[3]`).
    Flowguard { sha: String, server_time: bool },
    /// The naive script: client seconds as a float, T in seconds, burst, cost.
    Naive { sha: String },
    /// `SET key value`.
    Set,
}

impl Call {
    fn command(&self, key: &str, quota: Quota) -> Cmd {
        match self {
            Call::Flowguard { sha, server_time } => {
                let now = if *server_time {
                    String::new()
                } else {
                    flowguard_now_us().to_string()
                };
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(sha).arg(1).arg(key);
                quota.flowguard_args(&mut cmd, &now);
                cmd
            }
            Call::Naive { sha } => {
                naive::command(sha, key, quota.interval_us as f64 / 1e6, quota.burst, 1)
            }
            Call::Set => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg("106495532123456");
                cmd
            }
        }
    }

    fn outer_stat(&self) -> &'static str {
        match self {
            Call::Set => "set",
            Call::Flowguard { .. } | Call::Naive { .. } => "evalsha",
        }
    }
}

fn flowguard_now_us() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.as_micros() as u64 - FLOWGUARD_EPOCH_UNIX_S * 1_000_000
}

/// One row of the CPU table: a named call and the key patterns it runs under.
struct Subject {
    name: String,
    call: Call,
    keys: Vec<Keys>,
}

fn subjects(scripts: &Scripts) -> Vec<Subject> {
    let flowguard = |sha: &str, server_time| Call::Flowguard {
        sha: sha.to_owned(),
        server_time,
    };
    let mut list = vec![
        Subject {
            name: "flowguard".into(),
            call: flowguard(&scripts.flowguard, true),
            keys: Keys::ALL.into(),
        },
        Subject {
            name: "flowguard_explicit_time".into(),
            call: flowguard(&scripts.flowguard, false),
            keys: Keys::ALL.into(),
        },
        Subject {
            name: "naive".into(),
            call: Call::Naive {
                sha: scripts.naive.clone(),
            },
            keys: Keys::ALL.into(),
        },
        Subject {
            name: "set".into(),
            call: Call::Set,
            keys: vec![Keys::New, Keys::Hot],
        },
        Subject {
            name: "lua_empty".into(),
            call: flowguard(&scripts.empty, true),
            keys: vec![Keys::New, Keys::Hot],
        },
        Subject {
            name: "lua_get_set".into(),
            call: flowguard(&scripts.get_set, true),
            keys: vec![Keys::New, Keys::Hot],
        },
    ];
    for (name, sha) in &scripts.extra {
        list.push(Subject {
            name: name.clone(),
            call: flowguard(sha, true),
            keys: Keys::ALL.into(),
        });
    }
    list
}

/// `INFO commandstats` of one run: command -> (calls, usec).
type CommandStats = BTreeMap<String, (u64, u64)>;

fn parse_commandstats(info: &str) -> CommandStats {
    let mut stats = CommandStats::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |wanted: &str| {
            fields.split(',').find_map(|kv| {
                kv.strip_prefix(wanted)?
                    .strip_prefix('=')?
                    .parse::<u64>()
                    .ok()
            })
        };
        if let (Some(calls), Some(usec)) = (field("calls"), field("usec")) {
            stats.insert(name.to_owned(), (calls, usec));
        }
    }
    stats
}

/// The runs of one subject: its name and, per key pattern, one run per round.
type Measured = (String, Vec<(Keys, Vec<Run>)>);

/// One workload run: outer command usec per call, inner commands, allowed share.
struct Run {
    /// `usec / calls` of the outer command (commandstats; wall-clock time inside the command).
    us_per_call: f64,
    /// Growth of the server's `used_cpu_user + used_cpu_sys` (INFO cpu) per call: the whole
    /// process (network I/O, parsing, the command), and only time actually on a CPU.
    process_us_per_call: f64,
    inner: Vec<(String, f64, f64)>,
    allowed: usize,
}

async fn measure_cpu(
    con: &mut MultiplexedConnection,
    options: &Options,
    scripts: &Scripts,
) -> Result<Vec<Measured>> {
    let subjects = subjects(scripts);
    let mut results: Vec<Measured> = subjects
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.keys.iter().map(|k| (*k, Vec::new())).collect(),
            )
        })
        .collect();
    for round in 0..options.rounds {
        for (subject, (_, by_keys)) in subjects.iter().zip(results.iter_mut()) {
            for (keys, runs) in by_keys.iter_mut() {
                eprintln!(
                    "round {}/{}: {} on {}",
                    round + 1,
                    options.rounds,
                    subject.name,
                    keys.label()
                );
                runs.push(measure_run(con, options, &subject.call, *keys).await?);
            }
        }
    }
    Ok(results)
}

async fn measure_run(
    con: &mut MultiplexedConnection,
    options: &Options,
    call: &Call,
    keys: Keys,
) -> Result<Run> {
    redis::cmd("FLUSHALL").query_async::<()>(con).await?;
    drive(
        con,
        options,
        call,
        keys,
        "warm",
        WARM_UP_CALLS.min(options.calls),
    )
    .await?;
    redis::cmd("FLUSHALL").query_async::<()>(con).await?;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(con)
        .await?;
    let cpu_before = process_cpu_seconds(con).await?;
    let allowed = drive(con, options, call, keys, "run", options.calls).await?;
    let cpu_after = process_cpu_seconds(con).await?;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await?;
    let stats = parse_commandstats(&info);
    let outer = call.outer_stat();
    let &(calls, usec) = stats
        .get(outer)
        .ok_or_else(|| format!("no cmdstat_{outer} after the run"))?;
    if calls != options.calls as u64 {
        return Err(format!(
            "cmdstat_{outer} counted {calls} calls, sent {}: another client uses this server",
            options.calls
        )
        .into());
    }
    let inner = ["time", "get", "set"]
        .iter()
        .filter(|name| **name != outer)
        .filter_map(|name| {
            let &(c, u) = stats.get(*name)?;
            Some((
                name.to_string(),
                c as f64 / calls as f64,
                u as f64 / c as f64,
            ))
        })
        .collect();
    Ok(Run {
        us_per_call: usec as f64 / calls as f64,
        process_us_per_call: (cpu_after - cpu_before) * 1e6 / calls as f64,
        inner,
        allowed,
    })
}

/// `used_cpu_user + used_cpu_sys` of the server process, in seconds.
async fn process_cpu_seconds(con: &mut MultiplexedConnection) -> Result<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(con).await?;
    let field = |name| -> Result<f64> {
        info_field(&info, name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("INFO cpu has no {name}").into())
    };
    Ok(field("used_cpu_user")? + field("used_cpu_sys")?)
}

/// Sends `calls` commands, `--concurrency` in flight; returns how many were allowed.
async fn drive(
    con: &MultiplexedConnection,
    options: &Options,
    call: &Call,
    keys: Keys,
    tag: &str,
    calls: usize,
) -> Result<usize> {
    let mut tasks = tokio::task::JoinSet::new();
    let workers = options.concurrency.min(calls);
    for worker in 0..workers {
        let mut con = con.clone();
        let call = call.clone();
        let (tag, hot_keys, quota) = (tag.to_owned(), options.hot_keys, keys.quota());
        tasks.spawn(async move {
            let mut allowed = 0;
            for i in (worker..calls).step_by(workers) {
                let reply: Value = call
                    .command(&keys.key(&tag, i, hot_keys), quota)
                    .query_async(&mut con)
                    .await?;
                allowed += usize::from(is_allowed(&call, &reply, quota));
            }
            Ok::<usize, AnyError>(allowed)
        });
    }
    let mut allowed = 0;
    while let Some(joined) = tasks.join_next().await {
        allowed += joined??;
    }
    Ok(allowed)
}

/// Client-side reference for the throughput target: raw `EVALSHA` of flowguard's script (server
/// time, cost 1) through one multiplexed connection, `--concurrency` tasks, the workload of
/// `harness/scripts/redis_benchmark.sh`. The store's own example (`redis_load`) adds the store on top.
async fn report_throughput(
    con: &mut MultiplexedConnection,
    options: &Options,
    scripts: &Scripts,
) -> Result<()> {
    let call = Call::Flowguard {
        sha: scripts.flowguard.clone(),
        server_time: true,
    };
    let mut rates = Vec::new();
    for round in 0..options.rounds {
        redis::cmd("FLUSHALL").query_async::<()>(con).await?;
        let start = Instant::now();
        let allowed = drive(con, options, &call, Keys::Spread, "tp", options.calls).await?;
        let rate = options.calls as f64 / start.elapsed().as_secs_f64();
        eprintln!(
            "round {}/{}: {rate:.0} EVALSHA/s, {allowed} allowed",
            round + 1,
            options.rounds
        );
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    let best = rates[rates.len() - 1];
    let median = rates[rates.len() / 2];
    println!(
        "redis crate, one multiplexed connection, {} tasks, {} runtime: {best:.0} EVALSHA/s best of {} (median {median:.0}), {} calls per round",
        options.concurrency,
        if options.multi_thread {
            "multi-thread"
        } else {
            "current-thread"
        },
        options.rounds,
        options.calls
    );
    if options.json {
        let rounded = |v: f64| v.round();
        println!(
            "{}",
            json!({
                "client_evalsha_per_sec": rounded(best),
                "client_evalsha_per_sec_median": rounded(median),
                "concurrency": options.concurrency,
                "multi_thread": options.multi_thread,
                "calls": options.calls,
                "rounds": options.rounds,
            })
        );
    }
    Ok(())
}

/// flowguard's `"<time> [<tat>]"`, the naive script's `{1 (allowed), ..}`, integer 1 (the floors,
/// which take flowguard's arguments) or OK (SET).
fn is_allowed(call: &Call, reply: &Value, quota: Quota) -> bool {
    match (call, reply) {
        // flowguard's script answers the time it decided at (the server's TIME as seconds and
        // microseconds, or the explicit now) and the TAT the request met when it is not that
        // time (a negative number: not decided); a cost-1 request is allowed when the TAT plus T
        // is within the window.
        (Call::Flowguard { server_time, .. }, Value::BulkString(text)) => {
            let text = String::from_utf8_lossy(text);
            let numbers: Option<Vec<u64>> = text.split(' ').map(|n| n.parse().ok()).collect();
            let Some(numbers) = numbers else {
                return false;
            };
            let (now, tat) = match (server_time, &numbers[..]) {
                (true, &[secs, micros, ref tat @ ..]) => (
                    secs.saturating_sub(FLOWGUARD_EPOCH_UNIX_S) * 1_000_000 + micros,
                    tat,
                ),
                (false, &[now, ref tat @ ..]) => (now, tat),
                _ => return false,
            };
            match *tat {
                [] => true,
                [tat] => tat + quota.interval_us <= now + quota.window_us(),
                _ => false,
            }
        }
        (Call::Naive { .. }, Value::Array(items)) => matches!(items.first(), Some(Value::Int(1))),
        (Call::Flowguard { .. }, Value::Int(n)) => *n == 1,
        (Call::Set, Value::Okay) => true,
        _ => false,
    }
}

/// Result of the accounting probe.
struct Probe {
    evalsha_us: f64,
    lpos_us: f64,
}

impl Probe {
    /// The outer time contains the inner command's time (allowing 10% noise).
    fn includes_inner(&self) -> bool {
        self.evalsha_us >= 0.9 * self.lpos_us
    }
}

/// Runs a script whose only work is one slow `LPOS` and compares where the time is booked.
async fn probe_inner_accounting(
    con: &mut MultiplexedConnection,
    scripts: &Scripts,
) -> Result<Probe> {
    redis::cmd("FLUSHALL").query_async::<()>(con).await?;
    let elements: Vec<usize> = (0..PROBE_LIST_LEN).collect();
    for chunk in elements.chunks(1_000) {
        redis::cmd("RPUSH")
            .arg("probe:list")
            .arg(chunk)
            .query_async::<()>(con)
            .await?;
    }
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(con)
        .await?;
    for _ in 0..PROBE_CALLS {
        redis::cmd("EVALSHA")
            .arg(&scripts.probe)
            .arg(1)
            .arg("probe:list")
            .query_async::<()>(con)
            .await?;
    }
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await?;
    let stats = parse_commandstats(&info);
    let per_call = |name: &str| -> Result<f64> {
        let &(calls, usec) = stats
            .get(name)
            .ok_or_else(|| format!("probe: no cmdstat_{name}"))?;
        Ok(usec as f64 / calls as f64)
    };
    Ok(Probe {
        evalsha_us: per_call("evalsha")?,
        lpos_us: per_call("lpos")?,
    })
}

/// A key layout whose memory is measured.
#[derive(Clone, Copy)]
enum Layout {
    Gcra,
    SlidingLog,
    TokenBucket,
    FixedWindow,
}

impl Layout {
    const ALL: [Layout; 4] = [
        Layout::Gcra,
        Layout::SlidingLog,
        Layout::TokenBucket,
        Layout::FixedWindow,
    ];

    /// Short label (JSON key) and what is stored.
    fn names(self, options: &Options) -> (String, String) {
        let entries = options.log_entries;
        match self {
            Layout::Gcra => (
                "gcra".into(),
                "GCRA TAT string, SET .. PX by flowguard's script".into(),
            ),
            Layout::SlidingLog => (
                format!("sliding_log_{entries}"),
                format!("sorted set, {entries} timestamp members + PEXPIRE"),
            ),
            Layout::TokenBucket => ("token_bucket".into(), "hash {tokens, ts} + PEXPIRE".into()),
            Layout::FixedWindow => ("fixed_window".into(), "INCR counter + PEXPIRE".into()),
        }
    }

    /// Adds the commands that create one key of this layout to `pipe`.
    fn fill(self, pipe: &mut redis::Pipeline, key: &str, scripts: &Scripts, options: &Options) {
        let now_us = flowguard_now_us();
        match self {
            Layout::Gcra => {
                let q = MEMORY_QUOTA;
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&scripts.flowguard).arg(1).arg(key);
                q.flowguard_args(&mut cmd, "");
                pipe.add_command(cmd).ignore();
            }
            Layout::SlidingLog => {
                let unix_us = now_us + FLOWGUARD_EPOCH_UNIX_S * 1_000_000;
                let zadd = pipe.cmd("ZADD").arg(key);
                for j in 0..options.log_entries as u64 {
                    let stamp = unix_us + j * 997;
                    zadd.arg(stamp).arg(stamp);
                }
                zadd.ignore();
                pipe.cmd("PEXPIRE").arg(key).arg(MEMORY_TTL_MS).ignore();
            }
            Layout::TokenBucket => {
                pipe.cmd("HSET")
                    .arg(key)
                    .arg("tokens")
                    .arg("9.873")
                    .arg("ts")
                    .arg(now_us)
                    .ignore();
                pipe.cmd("PEXPIRE").arg(key).arg(MEMORY_TTL_MS).ignore();
            }
            Layout::FixedWindow => {
                pipe.cmd("INCR").arg(key).ignore();
                pipe.cmd("PEXPIRE").arg(key).arg(MEMORY_TTL_MS).ignore();
            }
        }
    }
}

/// Memory of one layout.
struct MemoryRow {
    label: String,
    describe: String,
    encoding: String,
    memory_usage: f64,
    used_memory_delta: f64,
}

async fn measure_memory(
    con: &mut MultiplexedConnection,
    options: &Options,
    scripts: &Scripts,
) -> Result<Vec<MemoryRow>> {
    let keys: Vec<String> = (0..options.mem_keys)
        .map(|i| format!("user:{i:06}"))
        .collect();
    let mut rows = Vec::new();
    for layout in Layout::ALL {
        let (label, describe) = layout.names(options);
        eprintln!("memory: {label}");
        // A dry fill first, so client buffers and allocator caches are the same size in the
        // `before` and `after` readings and only the keys make the difference.
        redis::cmd("FLUSHALL").query_async::<()>(con).await?;
        fill(con, layout, &keys, scripts, options).await?;
        redis::cmd("FLUSHALL").query_async::<()>(con).await?;
        let before = used_memory(con).await?;
        fill(con, layout, &keys, scripts, options).await?;
        let after = used_memory(con).await?;
        let mut total = 0u64;
        for batch in keys.chunks(FILL_BATCH) {
            let mut pipe = redis::pipe();
            for key in batch {
                pipe.cmd("MEMORY")
                    .arg("USAGE")
                    .arg(key)
                    .arg("SAMPLES")
                    .arg(0);
            }
            let sizes: Vec<Option<u64>> = pipe.query_async(con).await?;
            for (key, size) in batch.iter().zip(sizes) {
                total += size.ok_or_else(|| format!("key {key} vanished before MEMORY USAGE"))?;
            }
        }
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&keys[0])
            .query_async(con)
            .await?;
        rows.push(MemoryRow {
            label,
            describe,
            encoding,
            memory_usage: total as f64 / keys.len() as f64,
            used_memory_delta: (after as f64 - before as f64) / keys.len() as f64,
        });
    }
    Ok(rows)
}

async fn fill(
    con: &mut MultiplexedConnection,
    layout: Layout,
    keys: &[String],
    scripts: &Scripts,
    options: &Options,
) -> Result<()> {
    for batch in keys.chunks(FILL_BATCH) {
        let mut pipe = redis::pipe();
        for key in batch {
            layout.fill(&mut pipe, key, scripts, options);
        }
        pipe.query_async::<()>(con).await?;
    }
    Ok(())
}

async fn used_memory(con: &mut MultiplexedConnection) -> Result<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query_async(con).await?;
    info_field(&info, "used_memory")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".into())
}

/// Everything measured.
struct Report {
    version: String,
    cpu: Vec<Measured>,
    probe: Probe,
    memory: Vec<MemoryRow>,
}

/// Which figure of a run, and how the rounds are summarised.
#[derive(Clone, Copy)]
enum Figure {
    /// commandstats usec per call, least disturbed round (the headline: on a shared machine
    /// every other process can only add time, never remove it).
    Min,
    /// commandstats usec per call, median round.
    Median,
    /// INFO cpu process time per call, least disturbed round.
    Process,
}

impl Figure {
    fn of(self, runs: &[Run]) -> f64 {
        let mut values: Vec<f64> = runs
            .iter()
            .map(|r| match self {
                Figure::Min | Figure::Median => r.us_per_call,
                Figure::Process => r.process_us_per_call,
            })
            .collect();
        values.sort_by(f64::total_cmp);
        match self {
            Figure::Min | Figure::Process => values[0],
            Figure::Median if values.len() % 2 == 1 => values[values.len() / 2],
            Figure::Median => (values[values.len() / 2 - 1] + values[values.len() / 2]) / 2.0,
        }
    }
}

impl Report {
    /// `figure` of `subject` on `keys`.
    fn cell(&self, subject: &str, keys: Keys, figure: Figure) -> Option<f64> {
        let (_, by_keys) = self.cpu.iter().find(|(name, _)| name == subject)?;
        let (_, runs) = by_keys.iter().find(|(k, _)| *k == keys)?;
        (!runs.is_empty()).then(|| figure.of(runs))
    }

    /// Headline: mean of the two allowed workloads.
    fn headline(&self, subject: &str, figure: Figure) -> Option<f64> {
        Some(
            (self.cell(subject, Keys::New, figure)? + self.cell(subject, Keys::Hot, figure)?) / 2.0,
        )
    }

    fn ratio(&self, figure: Figure) -> Option<f64> {
        Some(self.headline("flowguard", figure)? / self.headline("naive", figure)?)
    }

    fn print_table(&self, options: &Options) {
        println!(
            "Redis {}: server CPU per call, usec of the outer command / calls (INFO commandstats), least disturbed of {} rounds x {} calls, {} in flight",
            self.version, options.rounds, options.calls, options.concurrency
        );
        println!(
            "{:<26} {:>9} {:>9} {:>12} {:>9} {:>8} {:>8}   inner commands per call, hot keys, least disturbed round (count x usec)",
            "script", "new keys", "hot keys", "hot, denied", "headline", "median", "process"
        );
        let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        for (name, by_keys) in &self.cpu {
            let inner = by_keys
                .iter()
                .find(|(k, _)| *k == Keys::Hot)
                .and_then(|(_, runs)| {
                    runs.iter()
                        .min_by(|a, b| a.us_per_call.total_cmp(&b.us_per_call))
                })
                .map(|run| {
                    run.inner
                        .iter()
                        .map(|(n, c, u)| format!("{} {c:.2}x{u:.2}", n.to_uppercase()))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .join(", ");
            println!(
                "{:<26} {:>9} {:>9} {:>12} {:>9} {:>8} {:>8}   {}",
                name,
                fmt(self.cell(name, Keys::New, Figure::Min)),
                fmt(self.cell(name, Keys::Hot, Figure::Min)),
                fmt(self.cell(name, Keys::HotDenied, Figure::Min)),
                fmt(self.headline(name, Figure::Min)),
                fmt(self.headline(name, Figure::Median)),
                fmt(self.headline(name, Figure::Process)),
                inner
            );
        }
        for (name, by_keys) in &self.cpu {
            for (keys, runs) in by_keys {
                let allowed: Vec<String> = runs.iter().map(|r| r.allowed.to_string()).collect();
                if *keys == Keys::HotDenied || name == "naive" || name == "flowguard" {
                    println!(
                        "  allowed {name} on {}: {} of {} per round",
                        keys.label(),
                        allowed.join("/"),
                        options.calls
                    );
                }
            }
        }
        println!(
            "headline = mean of new and hot keys; median = same from the median round; process = INFO cpu (user+sys) growth per call, whole server process"
        );
        println!(
            "flowguard / naive = {} (median rounds {}, process CPU {})   (targets: <= 0.6, flowguard <= 8 us)",
            fmt(self.ratio(Figure::Min)),
            fmt(self.ratio(Figure::Median)),
            fmt(self.ratio(Figure::Process))
        );
        println!(
            "accounting probe: evalsha {:.2} us/call around an inner LPOS of {:.2} us/call -> evalsha time {} the inner commands",
            self.probe.evalsha_us,
            self.probe.lpos_us,
            if self.probe.includes_inner() {
                "INCLUDES"
            } else {
                "EXCLUDES"
            }
        );
        println!();
        println!("Redis memory per key, {} keys each", options.mem_keys);
        println!(
            "{:<18} {:<50} {:<10} {:>14} {:>20}",
            "layout", "stored as", "encoding", "MEMORY USAGE", "used_memory delta"
        );
        for row in &self.memory {
            println!(
                "{:<18} {:<50} {:<10} {:>14.1} {:>20.1}",
                row.label, row.describe, row.encoding, row.memory_usage, row.used_memory_delta
            );
        }
    }

    fn json(&self, options: &Options) -> Json {
        let headline = |figure| -> Map<String, Json> {
            self.cpu
                .iter()
                .map(|(name, _)| (name.clone(), json!(self.headline(name, figure).map(round2))))
                .collect()
        };
        let mut by_keys_json = Map::new();
        for (name, by_keys) in &self.cpu {
            let cells: Map<String, Json> = by_keys
                .iter()
                .map(|(keys, _)| {
                    (
                        keys.label().to_owned(),
                        json!(self.cell(name, *keys, Figure::Min).map(round2)),
                    )
                })
                .collect();
            by_keys_json.insert(name.clone(), Json::Object(cells));
        }
        let ratio = |figure| self.ratio(figure).map(|r| (r * 1000.0).round() / 1000.0);
        let memory: Map<String, Json> = self
            .memory
            .iter()
            .map(|r| (r.label.clone(), json!(r.memory_usage.round())))
            .collect();
        let delta: Map<String, Json> = self
            .memory
            .iter()
            .map(|r| (r.label.clone(), json!(r.used_memory_delta.round())))
            .collect();
        json!({
            "redis_version": self.version,
            "calls": options.calls,
            "rounds": options.rounds,
            "concurrency": options.concurrency,
            "cpu_us_per_call": headline(Figure::Min),
            "cpu_us_per_call_by_keys": by_keys_json,
            "cpu_us_per_call_median_round": headline(Figure::Median),
            "process_cpu_us_per_call": headline(Figure::Process),
            "ratio_flowguard_vs_naive": ratio(Figure::Min),
            "ratio_flowguard_vs_naive_median_round": ratio(Figure::Median),
            "ratio_flowguard_vs_naive_process_cpu": ratio(Figure::Process),
            "evalsha_usec_includes_inner_commands": self.probe.includes_inner(),
            "memory_bytes_per_key": memory,
            "used_memory_delta_per_key": delta,
        })
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMANDSTATS: &str = "# Commandstats\r\n\
        cmdstat_get:calls=100000,usec=25272,usec_per_call=0.25,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_config|resetstat:calls=1,usec=111,usec_per_call=111.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_evalsha:calls=100000,usec=607983,usec_per_call=6.08,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn scripts_are_named_read_and_repeatable() {
        let naive = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/naive_gcra.lua");
        let (a, b) = (format!("a={naive}"), format!("b={naive}"));
        let options =
            Options::try_parse_from(["redis_cost", "--script", &a, "--script", &b]).unwrap();
        let names: Vec<_> = options
            .extra_scripts
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(
            options
                .extra_scripts
                .iter()
                .all(|(_, lua)| lua == naive::LUA)
        );
        assert!(script("no-path").unwrap_err().contains("NAME=PATH"));
        assert!(
            script("x=/nonexistent/x.lua")
                .unwrap_err()
                .contains("cannot read")
        );
    }

    #[test]
    fn commandstats_lines_become_calls_and_usec() {
        let stats = parse_commandstats(COMMANDSTATS);
        assert_eq!(stats.get("evalsha"), Some(&(100_000, 607_983)));
        assert_eq!(stats.get("get"), Some(&(100_000, 25_272)));
        assert_eq!(stats.get("config|resetstat"), Some(&(1, 111)));
        assert_eq!(stats.get("set"), None);
    }

    #[test]
    fn info_fields_are_found_by_exact_name() {
        let info =
            "# Memory\r\nused_memory_human:1.04M\r\nused_memory:1093960\r\nused_memory_rss:9\r\n";
        assert_eq!(info_field(info, "used_memory"), Some("1093960"));
        assert_eq!(info_field(info, "used_memory_rss"), Some("9"));
        assert_eq!(info_field(info, "used_cpu_sys"), None);
    }

    fn run(us: f64, process: f64) -> Run {
        Run {
            us_per_call: us,
            process_us_per_call: process,
            inner: Vec::new(),
            allowed: 0,
        }
    }

    #[test]
    fn figures_pick_the_least_disturbed_or_the_median_round() {
        let runs = [run(7.0, 9.0), run(5.0, 8.5), run(6.0, 8.0), run(9.0, 11.0)];
        assert_eq!(Figure::Min.of(&runs), 5.0);
        assert_eq!(Figure::Median.of(&runs), 6.5);
        assert_eq!(Figure::Median.of(&runs[..3]), 6.0);
        assert_eq!(Figure::Process.of(&runs), 8.0);
    }

    #[test]
    fn replies_count_as_allowed_only_when_they_say_so() {
        let flowguard = Call::Flowguard {
            sha: "abc".into(),
            server_time: true,
        };
        let naive = Call::Naive { sha: "abc".into() };
        let explicit = Call::Flowguard {
            sha: "abc".into(),
            server_time: false,
        };
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&i| Value::Int(i)).collect());
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let q = STINGY;
        // An idle key (no TAT in the reply), one whose TAT is now, one a full window ahead.
        assert!(is_allowed(&flowguard, &text("1700000000 5"), q));
        assert!(is_allowed(&flowguard, &text("1700000000 5 5"), q));
        assert!(!is_allowed(&flowguard, &text("1700000000 5 3600000005"), q));
        assert!(is_allowed(&explicit, &text("5"), q));
        assert!(!is_allowed(&explicit, &text("5 3600000005"), q));
        // Statuses and other shapes are not allowed.
        assert!(!is_allowed(&flowguard, &Value::Int(-1), q));
        assert!(!is_allowed(&flowguard, &text("1700000000"), q));
        assert!(!is_allowed(&flowguard, &text("1700000000 5 x"), q));
        assert!(!is_allowed(&flowguard, &ints(&[5, 5]), q));
        assert!(is_allowed(&naive, &ints(&[1, 9]), q));
        assert!(!is_allowed(&naive, &ints(&[0, 9]), q));
        assert!(is_allowed(&flowguard, &Value::Int(1), q));
        assert!(!is_allowed(&flowguard, &Value::Int(0), q));
        assert!(is_allowed(&Call::Set, &Value::Okay, q));
        assert!(!is_allowed(&Call::Set, &Value::Nil, q));
    }

    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not a plain argument>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn flowguard_calls_follow_the_script_header() {
        let server = Call::Flowguard {
            sha: "abc".into(),
            server_time: true,
        };
        assert_eq!(
            args(&server.command("k", STINGY)),
            ["EVALSHA", "abc", "1", "k", "3600000000", "3600000000"]
        );
        let explicit = Call::Flowguard {
            sha: "abc".into(),
            server_time: false,
        };
        let sent = args(&explicit.command("k", GENEROUS));
        assert_eq!(sent.len(), 8, "n*T, B*T, now, extra TTL: {sent:?}");
        assert_eq!(sent[4..6], ["100000", "100000000000"]);
        assert_eq!(sent[7], "0");
        let now: u64 = sent[6].parse().unwrap();
        assert!(
            now > 90_000_000_000_000,
            "flowguard-epoch microseconds, got {now}"
        );
    }

    #[test]
    fn naive_calls_send_client_seconds_and_seconds_per_token() {
        let naive = Call::Naive { sha: "abc".into() };
        let sent = args(&naive.command("k", GENEROUS));
        assert_eq!(sent[..4], ["EVALSHA", "abc", "1", "k"]);
        let now: f64 = sent[4].parse().unwrap();
        assert!(now > 1.7e9, "unix seconds, got {now}");
        assert_eq!(sent[5..], ["0.1", "1000000", "1"]);
    }

    #[test]
    fn keys_of_new_workloads_are_distinct_and_hot_ones_repeat() {
        assert_ne!(Keys::New.key("run", 1, 100), Keys::New.key("run", 101, 100));
        assert_eq!(Keys::Hot.key("run", 1, 100), Keys::Hot.key("run", 101, 100));
        assert_eq!(
            Keys::HotDenied.key("run", 7, 100),
            Keys::Hot.key("warm", 7, 100)
        );
    }
}
