//! Test harness: the store builders the tests use, and a TCP proxy that black-holes connections.
//! The real `redis-server` processes ([`RedisServer`], [`RedisCluster`]) come from the
//! `flowguard-test-redis` workspace member, re-exported here.
#![allow(dead_code)]

pub mod recorder;
pub mod retries;
#[cfg(feature = "axum")]
pub mod serve;
pub mod window;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

use flowguard_test_redis::free_port;
// Not every test binary that includes this module starts a server (as with `dead_code` above).
#[allow(unused_imports)]
pub use flowguard_test_redis::{RedisCluster, RedisServer};

/// The store timeouts of tests that are not about timeouts: far above what a healthy server takes
/// even on a loaded machine (the library's defaults, 50 ms a call and 250 ms a node connection,
/// are for production, and a test machine running other work can stall longer than that).
pub const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// A standalone store's builder with [`STORE_TIMEOUT`] for calls and connections.
#[cfg(feature = "redis")]
pub fn redis_builder(url: impl Into<String>) -> flowguard::gcra::redis::RedisStoreBuilder {
    patient(flowguard::gcra::redis::RedisStore::builder(url))
}

/// A cluster store's builder with [`STORE_TIMEOUT`] for calls and connections.
#[cfg(feature = "redis")]
pub fn cluster_builder<I, S>(urls: I) -> flowguard::gcra::redis::RedisStoreBuilder
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    patient(flowguard::gcra::redis::RedisStore::cluster_builder(urls))
}

#[cfg(feature = "redis")]
fn patient(
    builder: flowguard::gcra::redis::RedisStoreBuilder,
) -> flowguard::gcra::redis::RedisStoreBuilder {
    builder
        .timeout(STORE_TIMEOUT)
        .connect_timeout(STORE_TIMEOUT)
        .node_connect_timeout(STORE_TIMEOUT)
}

/// A TCP proxy on a free loopback port in front of `target`, whose existing connections can be
/// black-holed ([`freeze`](Self::freeze)) while new ones still pass: a connection that fails
/// while the server answers. Its threads end with the process.
pub struct FreezingProxy {
    pub port: u16,
    connections: std::sync::Arc<Mutex<Vec<std::sync::Arc<std::sync::atomic::AtomicBool>>>>,
}

impl FreezingProxy {
    pub fn start(target: u16) -> FreezingProxy {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let connections: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let registry = connections.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                let frozen = Arc::new(AtomicBool::new(false));
                registry.lock().unwrap().push(frozen.clone());
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(client, server, frozen.clone());
                pump(s2, c2, frozen);
            }
        });
        FreezingProxy { port, connections }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// From now on, every connection made so far swallows what it receives; new ones pass.
    pub fn freeze(&self) {
        for c in self.connections.lock().unwrap().iter() {
            c.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Copies `from` to `to` until either closes; while `frozen`, drops what it reads.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !frozen.load(std::sync::atomic::Ordering::Relaxed)
                        && to.write_all(&buf[..n]).is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
}
