//! Test harness for flowguard-rls: the built binary started on a free loopback port with a
//! configuration directory of its own, driven by a tonic client; killed on drop (also on panic).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

/// How long the service may take to start serving.
const READY_WITHIN: Duration = Duration::from_secs(30);

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory for one service's configuration files, removed on drop.
pub struct ConfigDir(pub PathBuf);

impl ConfigDir {
    pub fn new(files: &[(&str, &str)]) -> ConfigDir {
        let dir = std::env::temp_dir().join(format!(
            "flowguard-rls-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = ConfigDir(dir);
        for (name, text) in files {
            out.write(name, text);
        }
        out
    }

    /// Replaces a file atomically (write beside it, then rename), as deployment tools do.
    pub fn write(&self, name: &str, text: &str) {
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.0.join(name)).unwrap();
    }
}

impl Drop for ConfigDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the binary with `args` until it exits by itself (bounded): its exit code and stderr.
pub fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("flowguard-rls starts");
    let deadline = Instant::now() + READY_WITHIN;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("flowguard-rls {args:?} did not exit within {READY_WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
    (status.code(), stderr)
}

/// One running `flowguard-rls`.
pub struct Rls {
    child: Option<Child>,
    /// The gRPC address.
    pub addr: String,
    /// The debug HTTP address (`/metrics`, `/healthcheck`, `/rlconfig`, `/json`).
    pub debug_addr: String,
    pub config: ConfigDir,
    log: PathBuf,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_flowguard-rls")
}

impl Rls {
    /// Starts the service with `files` in its configuration directory and extra arguments.
    pub fn start(files: &[(&str, &str)], args: &[&str]) -> Rls {
        Rls::start_in(ConfigDir::new(files), args)
    }

    /// The file a service started with `config` logs to.
    pub fn log_path(config: &ConfigDir) -> PathBuf {
        config.0.with_extension("log")
    }

    pub fn start_in(config: ConfigDir, args: &[&str]) -> Rls {
        Rls::start_in_env(config, args, &[])
    }

    /// Starts the service with environment variables too.
    pub fn start_in_env(config: ConfigDir, args: &[&str], envs: &[(&str, &str)]) -> Rls {
        let log = Rls::log_path(&config);
        let stderr = std::fs::File::create(&log).unwrap();
        let mut child = Command::new(binary())
            .arg("--config")
            .arg(&config.0)
            .args(["--listen", "127.0.0.1:0", "--debug-listen", "127.0.0.1:0"])
            .args(["--reload-interval-ms", "50"])
            .args(args)
            .env("RUST_LOG", "info")
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("flowguard-rls starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                for (prefix, which) in [("debug listening on ", 0), ("listening on ", 1)] {
                    if let Some(addr) = line.strip_prefix(prefix) {
                        let _ = tx.send((which, addr.to_string()));
                        break;
                    }
                }
            }
        });
        let mut rls = Rls {
            child: Some(child),
            addr: String::new(),
            debug_addr: String::new(),
            config,
            log,
        };
        // The debug address is printed first, then the gRPC one once everything is bound.
        while rls.addr.is_empty() {
            match rx.recv_timeout(READY_WITHIN) {
                Ok((0, addr)) => rls.debug_addr = addr,
                Ok((_, addr)) => rls.addr = addr,
                Err(_) => panic!("flowguard-rls did not start; log:\n{}", rls.log_text()),
            }
        }
        rls
    }

    /// `GET` (or with a body, `POST`) of `path` on the debug listener: the status and the body.
    pub async fn http(&self, path: &str, body: Option<&str>) -> (u16, String) {
        let url = format!("http://{}{path}", self.debug_addr);
        let client = reqwest::Client::new();
        let request = match body {
            Some(body) => client.post(url).body(body.to_string()),
            None => client.get(url),
        };
        let response = request.send().await.expect("the debug listener answers");
        let status = response.status().as_u16();
        (status, response.text().await.expect("a text body"))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log contains `needle`.
    pub fn wait_for_log(&self, needle: &str) {
        let deadline = Instant::now() + READY_WITHIN;
        while !self.log_text().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in the log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel().await)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("connects to flowguard-rls")
    }

    /// Sends SIGTERM and waits (bounded) for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("flowguard-rls did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Rls {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A request with one descriptor per slice of entries.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors
            .iter()
            .map(|entries| descriptor(entries))
            .collect(),
        hits_addend: 0,
    }
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("the service answers")
        .into_inner()
}

pub fn code(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap()
}

pub fn status_code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap()
}
