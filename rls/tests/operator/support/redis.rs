//! Real `redis-server` processes for the service's tests: on free loopback ports, without
//! persistence, in a temporary directory, killed and removed on drop (also when a test panics).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server (or a cluster) may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A loopback port nobody listens on now, whose cluster bus port (`port + 10000`) is free too.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a loopback port");
        if port <= 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port pair in 1000 tries");
}

/// One `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// A server with extra `--option value` arguments. A port found free can be taken before
    /// the server binds it (every outgoing connection takes an ephemeral port): the server then
    /// exits at once, and another port is tried.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let mut exits = Vec::new();
        for _ in 0..10 {
            let port = free_port();
            match RedisServer::try_start_on(port, extra) {
                Ok(server) => return server,
                Err(status) => exits.push(format!("port {port}: {status}")),
            }
        }
        panic!("redis-server exited at start on 10 ports in a row: {exits:?}");
    }

    /// A server on `port`, which must be free.
    pub fn start_on(port: u16, extra: &[&str]) -> RedisServer {
        RedisServer::try_start_on(port, extra)
            .unwrap_or_else(|status| panic!("redis-server on port {port} exited: {status}"))
    }

    /// A server on `port` once it answers PING; `Err` if it exited first.
    fn try_start_on(port: u16, extra: &[&str]) -> Result<RedisServer, std::process::ExitStatus> {
        let dir =
            std::env::temp_dir().join(format!("flowguard-rls-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--dir", dir.to_str().unwrap(), "--logfile", "redis.log"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let mut server = RedisServer {
            child: Some(child),
            port,
            dir,
        };
        let deadline = Instant::now() + READY_WITHIN;
        while server.cli(&["ping"]) != "PONG" {
            if let Some(status) = server
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                server.child = None;
                return Err(status);
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {port} never answers PING"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    /// Polls `ready` (bounded).
    fn wait_until(&self, ready: impl Fn(&RedisServer) -> bool, what: &str) {
        let deadline = Instant::now() + READY_WITHIN;
        while !ready(self) {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} never {what}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `redis-cli -p PORT args...`, its output trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli must be installed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters without replicas.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_with(&["--cluster-enabled", "yes"]))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        for node in &nodes {
            node.wait_until(
                |n| {
                    let info = n.cli(&["cluster", "info"]);
                    info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
                },
                "reports a healthy cluster",
            );
        }
        RedisCluster { nodes }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}
