//! Reloading: the files are read every interval; when their text changed, the new configuration
//! is compiled and swapped in whole, or, when it is invalid, logged and ignored (the old one
//! stays in force until the files are fixed).

use std::time::Duration;

use super::backend::Backend;
use super::config::ConfigError;
use super::metrics as names;
use super::rules::{RuleSet, Rules};
use super::source::{ConfigSource, Snapshot};

/// Reads, parses and compiles the configuration once.
pub fn load(source: &ConfigSource, backend: &Backend) -> Result<(Snapshot, RuleSet), ConfigError> {
    let snapshot = source.read()?;
    let rules = RuleSet::compile(snapshot.parse()?, backend)?;
    Ok((snapshot, rules))
}

/// What one poll did.
#[derive(Debug, PartialEq, Eq)]
pub enum Polled {
    /// The files are as last seen.
    Unchanged,
    /// A new configuration is in force.
    Reloaded,
    /// The files changed but are invalid: the old configuration stays.
    Rejected(ConfigError),
}

/// Watches the files of a running service.
#[derive(Debug)]
pub struct Reloader {
    source: ConfigSource,
    seen: Snapshot,
}

impl Reloader {
    /// A reloader that has seen `seen` (the snapshot in force).
    pub fn new(source: ConfigSource, seen: Snapshot) -> Reloader {
        Reloader { source, seen }
    }

    /// Reads the files once and swaps in a changed, valid configuration.
    pub fn poll(&mut self, backend: &Backend, rules: &Rules) -> Polled {
        let snapshot = match self.source.read() {
            Ok(s) => s,
            Err(e) => return self.reject(Snapshot::default(), e),
        };
        if snapshot == self.seen {
            return Polled::Unchanged;
        }
        match snapshot
            .parse()
            .and_then(|config| RuleSet::compile(config, backend))
        {
            Ok(set) => {
                rules.replace(set);
                self.seen = snapshot;
                ::metrics::counter!(names::RELOADS, "result" => "ok").increment(1);
                tracing::info!("configuration reloaded");
                Polled::Reloaded
            }
            Err(e) => self.reject(snapshot, e),
        }
    }

    fn reject(&mut self, snapshot: Snapshot, error: ConfigError) -> Polled {
        // Logged once per distinct bad content (or unreadable state), not every poll.
        if snapshot != self.seen {
            ::metrics::counter!(names::RELOADS, "result" => "rejected").increment(1);
            tracing::error!(%error, "configuration change rejected; the previous configuration stays in force");
        }
        self.seen = snapshot;
        Polled::Rejected(error)
    }

    /// Polls every `interval` until the task is dropped.
    pub async fn run(mut self, interval: Duration, backend: std::sync::Arc<Backend>, rules: Rules) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let _ = self.poll(&backend, &rules);
        }
    }
}
