//! `flowguard-rls`: a global rate limit service for Envoy on flowguard's GCRA.
//!
//! ```text
//! flowguard-rls --config FILE_OR_DIR [--config ...] [--listen 127.0.0.1:8081]
//!     [--debug-listen 127.0.0.1:6070] [--redis URL] [--log-format text|json]
//! ```
//!
//! Prints `debug listening on ADDR` and then `listening on ADDR` on stdout once it serves (port 0
//! picks a free port). Exit codes: 0 after a clean shutdown (SIGTERM or Ctrl-C: in-flight calls
//! finish), 1 on a runtime failure (a port in use, Redis unreachable at start), 2 on an invalid
//! configuration or arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use flowguard::headers::HeaderStyle;
use flowguard_rls::backend::{Backend, OnFailure, OpenError, RedisConfig, StoreConfig};
use flowguard_rls::debug::{self, Debug, Health};
use flowguard_rls::logging::{self, LogFormat};
use flowguard_rls::redis_health::RedisHealth;
use flowguard_rls::reload::{Reloader, load};
use flowguard_rls::rules::Rules;
use flowguard_rls::service::RateLimiter;
use flowguard_rls::source::ConfigSource;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

/// A global rate limit service for Envoy (envoy.service.ratelimit.v3) on flowguard's GCRA.
///
/// Every option can also be set by the environment variable shown with it (a flag wins); lists
/// (--config, --redis) are separated by commas there.
#[derive(Parser, Debug)]
#[command(name = "flowguard-rls", version)]
struct Args {
    /// A configuration file, or a directory of .yaml/.yml files (one domain each). Repeatable.
    #[arg(
        long = "config",
        required = true,
        value_name = "PATH",
        env = "FLOWGUARD_RLS_CONFIG",
        value_delimiter = ','
    )]
    configs: Vec<PathBuf>,
    /// The gRPC address to serve on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8081", env = "FLOWGUARD_RLS_LISTEN")]
    listen: SocketAddr,
    /// Serve gRPC over TLS with this PEM certificate chain (with --grpc-tls-key).
    #[arg(
        long,
        requires = "grpc_tls_key",
        value_name = "PEM",
        env = "FLOWGUARD_RLS_GRPC_TLS_CERT"
    )]
    grpc_tls_cert: Option<PathBuf>,
    /// The PEM private key of --grpc-tls-cert.
    #[arg(
        long,
        requires = "grpc_tls_cert",
        value_name = "PEM",
        env = "FLOWGUARD_RLS_GRPC_TLS_KEY"
    )]
    grpc_tls_key: Option<PathBuf>,
    /// Mutual TLS: accept only clients whose certificate this PEM CA signed.
    #[arg(
        long,
        requires = "grpc_tls_cert",
        value_name = "PEM",
        env = "FLOWGUARD_RLS_GRPC_TLS_CLIENT_CA"
    )]
    grpc_tls_client_ca: Option<PathBuf>,
    /// The debug HTTP address: /metrics (Prometheus), /healthcheck, /rlconfig and POST /json.
    #[arg(
        long,
        default_value = "127.0.0.1:6070",
        value_name = "ADDR",
        env = "FLOWGUARD_RLS_DEBUG_LISTEN"
    )]
    debug_listen: SocketAddr,
    /// Log lines as text (coloured only on a terminal) or as JSON objects.
    #[arg(
        long,
        value_enum,
        default_value = "text",
        env = "FLOWGUARD_RLS_LOG_FORMAT"
    )]
    log_format: LogFormat,
    /// The least level logged (or a tracing filter such as `warn,flowguard_rls=debug`); RUST_LOG
    /// takes its place when set.
    #[arg(
        long,
        default_value = "info",
        value_name = "FILTER",
        env = "FLOWGUARD_RLS_LOG_LEVEL"
    )]
    log_level: String,
    /// Answer every request OK while deciding and counting it as usual (as if every rule had
    /// shadow_mode: true), to try a configuration on live traffic.
    #[arg(long, env = "FLOWGUARD_RLS_SHADOW_MODE")]
    shadow_mode: bool,
    /// Keep quotas in Redis (shared by every instance with the same prefix); repeat with
    /// --redis-cluster for several cluster nodes. Without it, quotas live in this process.
    #[arg(
        long = "redis",
        value_name = "URL",
        env = "FLOWGUARD_RLS_REDIS",
        value_delimiter = ','
    )]
    redis: Vec<String>,
    /// The --redis URLs are Redis Cluster nodes.
    #[arg(long, requires = "redis", env = "FLOWGUARD_RLS_REDIS_CLUSTER")]
    redis_cluster: bool,
    /// Key prefix in Redis.
    #[arg(
        long,
        default_value = "flowguard-rls:",
        env = "FLOWGUARD_RLS_REDIS_PREFIX"
    )]
    redis_prefix: String,
    /// Per-call Redis timeout in milliseconds (default: the store's, 50 ms).
    #[arg(long, value_name = "MS", env = "FLOWGUARD_RLS_REDIS_TIMEOUT_MS")]
    redis_timeout_ms: Option<u64>,
    /// What to answer when Redis does not: `unavailable` (gRPC UNAVAILABLE, Envoy's
    /// failure_mode_deny decides), `fail-open`, `fail-closed`, `local-share=F` (decide locally
    /// with a fraction F of each quota) or `local-instances=N` (one of N equal shares).
    #[arg(long, default_value = "unavailable", value_parser = parse_on_failure, env = "FLOWGUARD_RLS_ON_REDIS_FAILURE")]
    on_redis_failure: OnFailure,
    /// Two-tier mode: reserve this many tokens from Redis at a time and spend them locally.
    #[arg(
        long,
        requires = "redis",
        value_name = "TOKENS",
        env = "FLOWGUARD_RLS_TWO_TIER_BATCH"
    )]
    two_tier_batch: Option<u32>,
    /// Wait up to this many seconds at start for a Redis that does not answer (without it, an
    /// unreachable Redis stops the start at once).
    #[arg(
        long,
        requires = "redis",
        value_name = "SECONDS",
        env = "FLOWGUARD_RLS_WAIT_FOR_REDIS"
    )]
    wait_for_redis: Option<u64>,
    /// The most keys tracked per distinct rate by the in-memory store.
    #[arg(long, default_value_t = flowguard::gcra::DEFAULT_MAX_KEYS, env = "FLOWGUARD_RLS_MAX_KEYS")]
    max_keys: usize,
    /// Rate-limit headers to add to responses.
    #[arg(
        long,
        value_enum,
        default_value = "off",
        env = "FLOWGUARD_RLS_RESPONSE_HEADERS"
    )]
    response_headers: Headers,
    /// How often the configuration files are read for changes, in milliseconds.
    #[arg(
        long,
        default_value_t = 1000,
        value_name = "MS",
        env = "FLOWGUARD_RLS_RELOAD_INTERVAL_MS"
    )]
    reload_interval_ms: u64,
    /// Threads answering requests: by default one per core; 1 runs everything on one thread
    /// (tokio's current-thread scheduler), which on a machine of few cores shared with other
    /// work answers more requests per CPU second: one connection's answers leave in one write.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u16).range(1..),
        env = "FLOWGUARD_RLS_WORKER_THREADS"
    )]
    worker_threads: Option<u16>,
    /// Validate the configuration, print a summary and exit (0 valid, 2 invalid).
    #[arg(long)]
    check_config: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Headers {
    /// None, as envoyproxy/ratelimit by default.
    Off,
    /// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers), Retry-After.
    Ietf,
    /// X-RateLimit-Limit, -Remaining, -Reset, Retry-After.
    Legacy,
    /// Both sets.
    Both,
}

fn parse_on_failure(text: &str) -> Result<OnFailure, String> {
    let bad_number = |what: &str| format!("{what}: expected a number in {text:?}");
    match text.split_once('=') {
        None => match text {
            "unavailable" => Ok(OnFailure::Unavailable),
            "fail-open" => Ok(OnFailure::FailOpen),
            "fail-closed" => Ok(OnFailure::FailClosed),
            _ => Err(format!(
                "unknown policy {text:?}: use unavailable, fail-open, fail-closed, \
                 local-share=F or local-instances=N"
            )),
        },
        Some(("local-share", f)) => match f.parse::<f64>() {
            Ok(share) if share > 0.0 && share <= 1.0 => Ok(OnFailure::LocalShare(share)),
            Ok(_) => Err("local-share must lie in (0, 1]".into()),
            Err(_) => Err(bad_number("local-share")),
        },
        Some(("local-instances", n)) => match n.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(OnFailure::LocalInstances(n)),
            Ok(_) => Err("local-instances must be at least 1".into()),
            Err(_) => Err(bad_number("local-instances")),
        },
        Some((other, _)) => Err(format!(
            "unknown policy {other:?}: use local-share=F or local-instances=N"
        )),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = logging::init(args.log_format, &args.log_level) {
        eprintln!("flowguard-rls: {e}");
        return ExitCode::from(2);
    }
    let built = match args.worker_threads {
        Some(1) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Some(n) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(n))
            .enable_all()
            .build(),
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
    };
    let runtime = match built {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flowguard-rls: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(args))
}

/// Logs a failure to start and returns its exit code.
fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    tracing::error!("{message}");
    eprintln!("flowguard-rls: {message}");
    ExitCode::from(code)
}

async fn run(args: Args) -> ExitCode {
    let source = ConfigSource::new(args.configs.clone());
    let store = if args.check_config || args.redis.is_empty() {
        StoreConfig::Memory {
            max_keys: args.max_keys,
        }
    } else {
        StoreConfig::Redis(RedisConfig {
            urls: args.redis.clone(),
            cluster: args.redis_cluster,
            prefix: args.redis_prefix.clone(),
            timeout: args.redis_timeout_ms.map(Duration::from_millis),
            on_failure: args.on_redis_failure,
            two_tier_batch: args.two_tier_batch,
            wait_at_start: args.wait_for_redis.map(Duration::from_secs),
        })
    };
    let backend = match Backend::open(&store).await {
        Ok(b) => Arc::new(b),
        Err(e @ OpenError::Invalid(_)) => return fail(2, format!("cannot open the store: {e}")),
        Err(e @ OpenError::Unreachable(_)) => return fail(1, e),
    };
    let (snapshot, rules) = match load(&source, &backend) {
        Ok(loaded) => loaded,
        Err(e) => return fail(2, format!("invalid configuration: {e}")),
    };
    if args.check_config {
        let files: Vec<_> = snapshot.files().map(|p| p.display().to_string()).collect();
        println!(
            "configuration ok: {} domain(s), {} rule(s) in {}",
            rules.config().domains().count(),
            rules.config().rule_count(),
            files.join(", ")
        );
        return ExitCode::SUCCESS;
    }
    let tls = match tls_config(&args) {
        Ok(tls) => tls,
        Err(e) => return fail(2, e),
    };
    let metrics = match flowguard_rls::metrics::install_exporter() {
        Ok(handle) => handle,
        Err(e) => return fail(1, e),
    };
    let rules = Rules::new(rules);
    let reloader = Reloader::new(source, snapshot);
    let interval = Duration::from_millis(args.reload_interval_ms.max(1));
    tokio::spawn(reloader.run(interval, backend.clone(), rules.clone()));

    let headers = match args.response_headers {
        Headers::Off => None,
        Headers::Ietf => Some(HeaderStyle::Ietf),
        Headers::Legacy => Some(HeaderStyle::Legacy),
        Headers::Both => Some(HeaderStyle::Both),
    };
    let service =
        RateLimiter::new(rules.clone(), backend.clone(), headers).shadow_mode(args.shadow_mode);
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<RateLimiter>>()
        .await;

    let signal = match shutdown_signal() {
        Ok(signal) => signal,
        Err(e) => return fail(1, format!("cannot install the signal handlers: {e}")),
    };
    let debug_listener = match tokio::net::TcpListener::bind(args.debug_listen).await {
        Ok(l) => l,
        Err(e) => {
            return fail(
                1,
                format!(
                    "cannot listen on {} for the debug endpoints: {e}; choose another \
                     --debug-listen address",
                    args.debug_listen
                ),
            );
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            return fail(
                1,
                format!(
                    "cannot listen on {} for gRPC: {e}; choose another --listen address",
                    args.listen
                ),
            );
        }
    };
    let debug_addr = debug_listener.local_addr().unwrap_or(args.debug_listen);
    let addr = listener.local_addr().unwrap_or(args.listen);

    // One signal stops both listeners: the debug one reports the shutdown until gRPC is done.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    let serving = Health::serving();
    let redis_health = match &store {
        StoreConfig::Redis(redis) => Some(RedisHealth::spawn(redis)),
        StoreConfig::Memory { .. } => None,
    };
    let debug_state = Debug {
        metrics: Some(metrics),
        health: serving.clone(),
        redis: redis_health,
        rules,
        service: service.clone(),
    };
    let mut debug_stop = stop.clone();
    let debug_server = tokio::spawn(debug::serve(debug_listener, debug_state, async move {
        let _ = debug_stop.wait_for(|stopped| *stopped).await;
    }));
    println!("debug listening on {debug_addr}");
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    println!("listening on {addr}");
    tracing::info!(%addr, %debug_addr, backend = backend.describe(), shadow_mode = args.shadow_mode,
        "flowguard-rls serving");

    let shutdown = async move {
        signal.await;
        tracing::info!("shutting down: finishing in-flight calls");
        serving.stop();
        health
            .set_not_serving::<RateLimitServiceServer<RateLimiter>>()
            .await;
    };
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        server = match server.tls_config(tls) {
            Ok(server) => server,
            Err(e) => return fail(2, format!("--grpc-tls-cert / --grpc-tls-key: {e}")),
        };
    }
    let served = server
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    let _ = stopping.send(true);
    if let Ok(Err(e)) = debug_server.await {
        tracing::warn!(error = %e, "the debug listener failed");
    }
    match served {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, format!("server failed: {e}")),
    }
}

/// The TLS configuration of the gRPC listener, `None` without `--grpc-tls-cert`; the error
/// names the flag whose file cannot be read.
fn tls_config(args: &Args) -> Result<Option<ServerTlsConfig>, String> {
    let (Some(cert), Some(key)) = (&args.grpc_tls_cert, &args.grpc_tls_key) else {
        return Ok(None);
    };
    let read = |flag: &str, path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))
    };
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(
        read("--grpc-tls-cert", cert)?,
        read("--grpc-tls-key", key)?,
    ));
    if let Some(ca) = &args.grpc_tls_client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(read("--grpc-tls-client-ca", ca)?));
    }
    Ok(Some(tls))
}

/// SIGTERM (what orchestrators send) or Ctrl-C, with the handlers installed at once: a signal
/// that arrives before the server polls for it still stops it cleanly.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
