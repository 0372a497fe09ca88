//! The service's logs: text or JSON lines on stderr, filtered by level, with ANSI colour only
//! when stderr is a terminal (never in a file or a pipe).

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event (`timestamp`, `level`, `fields`, `target`), for log pipelines.
    Json,
}

/// Installs the global subscriber: events at `level` and above (a `tracing` filter such as
/// `info` or `warn,flowguard_rls=debug`), written to stderr in `format`. `RUST_LOG`, when set,
/// takes the place of `level`. An invalid filter is an error naming `--log-level`; a second
/// call fails, as only one subscriber can be global.
pub fn init(format: LogFormat, level: &str) -> Result<(), String> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => {
            tracing_subscriber::EnvFilter::try_new(&from_env)
                .map_err(|e| format!("RUST_LOG={from_env:?} is not a log filter: {e}"))?
        }
        _ => tracing_subscriber::EnvFilter::try_new(level).map_err(|e| {
            format!("--log-level {level:?} is not a log filter (e.g. info, warn, debug): {e}")
        })?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    installed.map_err(|e| format!("cannot install the logger: {e}"))
}
