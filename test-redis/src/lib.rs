//! Test-only helper for the flowguard workspace; not published, and no part of the `flowguard`
//! crate's API.
//!
//! [`RedisServer`] starts a private `redis-server` process on a free loopback port, without
//! persistence, in a temporary directory of its own, and waits until it answers. A test can then
//! inject faults into it (kill, restart, pause and resume it). On drop the process is killed and
//! its directory removed, also when the test panics. [`RedisCluster`] starts a Redis Cluster of
//! such servers.
//!
//! A port found free can be taken by another process before the server binds it (every outgoing
//! connection takes an ephemeral port); the server then exits at start, and it is started again
//! on another port.
//!
//! Needs `redis-server` and `redis-cli` on the `PATH`.
#![warn(missing_docs)]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Ports handed out in this process, so parallel tests never share one.
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// How long a server may take to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// How many ports a server is tried on before giving up, when it exits at start.
const START_TRIES: usize = 10;

/// A free loopback port whose cluster bus port (`port + 10000`) is free too, never handed out
/// before in this process.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port > 55_000 || TcpListener::bind(("127.0.0.1", port + 10_000)).is_err() {
            continue;
        }
        let mut taken = TAKEN.lock().unwrap();
        if taken.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
    panic!("no free port pair found");
}

/// One `redis-server` process on `127.0.0.1`, killed and its directory removed on drop.
pub struct RedisServer {
    child: Option<Child>,
    /// Stopped by SIGSTOP and not resumed yet.
    paused: bool,
    /// The port the server listens on (its TLS port for a server from
    /// [`start_tls`](Self::start_tls)).
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    tls: bool,
}

impl RedisServer {
    /// Starts a server with the defaults: no persistence, protected mode off.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `--option value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, false, |_| {})
    }

    /// Starts a server on `port`, which must be free (e.g. one from [`free_port`] that a test
    /// kept for later, or that of a server killed before); panics if the server exits.
    pub fn start_on(port: u16, extra: &[&str]) -> RedisServer {
        let mut server = RedisServer::new(port, extra, false);
        server.spawn();
        server
    }

    /// Starts a server that only speaks TLS. `certificates` is a directory holding `cert.pem`
    /// (the server's certificate, also its CA certificate) and `key.pem`; clients are not asked
    /// for certificates.
    pub fn start_tls(certificates: &Path) -> RedisServer {
        let extra = [
            "--tls-cert-file",
            "cert.pem",
            "--tls-key-file",
            "key.pem",
            "--tls-ca-cert-file",
            "cert.pem",
            "--tls-auth-clients",
            "no",
        ];
        RedisServer::launch(&extra, true, |dir| {
            for file in ["cert.pem", "key.pem"] {
                std::fs::copy(certificates.join(file), dir.join(file)).unwrap();
            }
        })
    }

    /// A server on `port` that does not run yet, with its directory created.
    fn new(port: u16, extra: &[&str], tls: bool) -> RedisServer {
        let dir =
            std::env::temp_dir().join(format!("flowguard-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        RedisServer {
            child: None,
            paused: false,
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            tls,
        }
    }

    /// Creates the server's directory, prepares it, and starts the server. A port found free can
    /// be taken before the server binds it (every outgoing connection takes an ephemeral port):
    /// the server then exits at once, and another port is tried.
    fn launch(extra: &[&str], tls: bool, prepare: impl Fn(&Path)) -> RedisServer {
        let mut exits = Vec::new();
        for _ in 0..START_TRIES {
            let port = free_port();
            let mut server = RedisServer::new(port, extra, tls);
            prepare(&server.dir);
            match server.try_spawn() {
                Ok(()) => return server,
                Err(status) => exits.push(format!("port {port}: {status}")),
            }
        }
        panic!("redis-server exited at start on {START_TRIES} ports in a row: {exits:?}");
    }

    /// Starts the server on its port, which must be free.
    fn spawn(&mut self) {
        if let Err(status) = self.try_spawn() {
            panic!(
                "redis-server on port {} exited: {status}; see {}",
                self.port,
                self.dir.join("redis.log").display()
            );
        }
    }

    /// Starts the server and waits until it serves; `Err` if it exited first.
    fn try_spawn(&mut self) -> Result<(), ExitStatus> {
        let port = self.port.to_string();
        let ports: &[&str] = if self.tls {
            &["--port", "0", "--tls-port", &port]
        } else {
            &["--port", &port]
        };
        let child = Command::new("redis-server")
            .args(ports)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .current_dir(&self.dir)
            .args([
                "--dir",
                self.dir.to_str().unwrap(),
                "--logfile",
                "redis.log",
                "--protected-mode",
                "no",
            ])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        self.child = Some(child);
        self.wait_ready()
    }

    /// Polls until the server answers a PING (any reply, e.g. NOAUTH, means it is serving); a TLS
    /// server until it accepts connections.
    fn wait_ready(&mut self) -> Result<(), ExitStatus> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                if self.tls {
                    return Ok(());
                }
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 64];
                if s.write_all(b"PING\r\n").is_ok()
                    && matches!(s.read(&mut buf), Ok(n) if n > 0 && !buf[..n].starts_with(b"-LOADING"))
                {
                    return Ok(());
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(status);
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} not ready within {READY_WITHIN:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's address, `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli -p PORT args...` and returns its output (trimmed).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Script runs (`EVALSHA` + `EVAL` calls, less the failed ones such as a first `NOSCRIPT`)
    /// the server has executed since it started or its stats were reset (`CONFIG RESETSTAT`),
    /// as Redis counts them (`INFO commandstats`).
    pub fn script_calls(&self) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        ["evalsha", "eval"]
            .into_iter()
            .map(|command| {
                let (calls, failed) = command_stats(&stats, command);
                calls - failed
            })
            .sum()
    }

    /// How many times the server ran `command` (as `INFO commandstats` names it: `eval`,
    /// `evalsha`, `script|load`), and how many of those failed.
    pub fn command_calls(&self, command: &str) -> (u64, u64) {
        command_stats(&self.cli(&["INFO", "commandstats"]), command)
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Stops the process (SIGSTOP): it keeps its connections and accepts new ones, and answers
    /// nothing until [`resume`](Self::resume)d. Resumed before it is killed or dropped.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&mut self) {
        if self.paused {
            self.signal("-CONT");
            self.paused = false;
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self
            .child
            .as_ref()
            .expect("the server runs")
            .id()
            .to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        self.resume();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `command`'s calls and failed calls in the text of `INFO commandstats` (0 for a command the
/// server never ran).
fn command_stats(stats: &str, command: &str) -> (u64, u64) {
    let field = |line: &str, name: &str| -> u64 {
        line.split(',')
            .find_map(|f| f.rsplit_once(name)?.1.parse().ok())
            .unwrap_or(0)
    };
    let prefix = format!("cmdstat_{command}:");
    stats
        .lines()
        .find(|l| l.starts_with(&prefix))
        .map_or((0, 0), |l| (field(l, "calls="), field(l, "failed_calls=")))
}

/// A local Redis Cluster of [`RedisServer`]s: 3 masters, with a replica each
/// ([`start`](Self::start)) or without replicas
/// ([`start_without_replicas`](Self::start_without_replicas)).
pub struct RedisCluster {
    /// The nodes, in the order they were started (not their roles: see
    /// [`replicas`](Self::replicas) and [`view_from`](Self::view_from)).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts a cluster of 3 masters and 3 replicas, with a node timeout of 2 s.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[])
    }

    /// Starts a cluster whose nodes get extra `--option value` arguments (they override the
    /// defaults, e.g. `--cluster-node-timeout 1000`).
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        ];
        args.extend_from_slice(extra);
        RedisCluster::create(6, 1, &args)
    }

    /// Starts a cluster of 3 masters without replicas, its nodes with Redis' defaults but for
    /// `--cluster-enabled yes`.
    pub fn start_without_replicas() -> RedisCluster {
        RedisCluster::create(3, 0, &["--cluster-enabled", "yes"])
    }

    /// Starts `nodes` servers with `args` and makes them a cluster with `replicas` replicas a
    /// master.
    fn create(nodes: usize, replicas: usize, args: &[&str]) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..nodes).map(|_| RedisServer::start_with(args)).collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(RedisServer::addr));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let out = Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli must be installed");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    /// Polls until every node reports `cluster_state:ok` and knows all the nodes, and every
    /// replica's link to its master is up (a manual failover needs a synced replica).
    pub fn wait_ok(&self) {
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.nodes.iter().all(|n| {
            let info = n.cli(&["cluster", "info"]);
            let replication = n.cli(&["info", "replication"]);
            info.contains("cluster_state:ok")
                && info.contains(&known)
                && (replication.contains("role:master")
                    || replication.contains("master_link_status:up"))
        }) {
            assert!(Instant::now() < deadline, "cluster not ok within 30 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The nodes' URLs, in the order of [`nodes`](Self::nodes).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes whose `ROLE` is `slave`.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| n.cli(&["role"]).starts_with("slave"))
            .collect()
    }

    /// The cluster as the node at `observer` (an index into `nodes`) sees it.
    pub fn view_from(&self, observer: usize) -> Vec<NodeView> {
        self.nodes[observer]
            .cli(&["cluster", "nodes"])
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 {
                    return None;
                }
                let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
                let flags = f[2];
                let slots = f[8..]
                    .iter()
                    .filter(|s| !s.starts_with('['))
                    .filter_map(|s| {
                        let (a, b) = s.split_once('-').unwrap_or((s, s));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some(NodeView {
                    id: f[0].to_string(),
                    port,
                    master: flags.contains("master"),
                    failing: flags.contains("fail"),
                    master_id: (f[3] != "-").then(|| f[3].to_string()),
                    slots,
                })
            })
            .collect()
    }

    /// The index in `nodes` of the server on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }

    /// The slot of `key`, as Redis computes it.
    pub fn keyslot(&self, key: &[u8]) -> u16 {
        let key = std::str::from_utf8(key).expect("a printable key");
        self.nodes[0]
            .cli(&["cluster", "keyslot", key])
            .parse()
            .unwrap()
    }
}

/// One line of `CLUSTER NODES`, as one node sees the cluster.
#[derive(Clone, Debug)]
pub struct NodeView {
    /// The node's id.
    pub id: String,
    /// The node's client port.
    pub port: u16,
    /// Flagged `master`.
    pub master: bool,
    /// Flagged `fail` (or `fail?`) by the observer.
    pub failing: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    /// Slot ranges served (masters).
    pub slots: Vec<(u16, u16)>,
}
