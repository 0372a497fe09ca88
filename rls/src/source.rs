//! Reading the configuration files: each `--config` path is a file, or a directory whose `.yaml`
//! and `.yml` files (sorted by name) are read.

use std::path::{Path, PathBuf};

use super::config::{ConfigError, ConfigSet, parse_domain};

/// The paths given on the command line.
#[derive(Clone, Debug)]
pub struct ConfigSource {
    paths: Vec<PathBuf>,
}

/// The text of every configuration file at one moment; compared to notice changes.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Snapshot {
    files: Vec<(PathBuf, String)>,
}

impl ConfigSource {
    /// A source reading `paths`.
    pub fn new(paths: Vec<PathBuf>) -> ConfigSource {
        ConfigSource { paths }
    }

    /// Reads every file now.
    pub fn read(&self) -> Result<Snapshot, ConfigError> {
        let mut files = Vec::new();
        for path in &self.paths {
            if path.is_dir() {
                let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                    .map_err(|e| unreadable(path, &e))?
                    .filter_map(|entry| entry.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.is_file()
                            && matches!(
                                p.extension().and_then(|e| e.to_str()),
                                Some("yaml" | "yml")
                            )
                    })
                    .collect();
                found.sort();
                if found.is_empty() {
                    return Err(ConfigError::new(
                        path,
                        "",
                        "the directory holds no .yaml or .yml file",
                    ));
                }
                for file in found {
                    files.push(read_file(&file)?);
                }
            } else {
                files.push(read_file(path)?);
            }
        }
        Ok(Snapshot { files })
    }
}

impl Snapshot {
    /// Parses every file into one configuration.
    pub fn parse(&self) -> Result<ConfigSet, ConfigError> {
        let domains = self
            .files
            .iter()
            .map(|(path, text)| parse_domain(path, text))
            .collect::<Result<Vec<_>, _>>()?;
        ConfigSet::new(domains)
    }

    /// The files read.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(p, _)| p.as_path())
    }
}

fn read_file(path: &Path) -> Result<(PathBuf, String), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(path, &e))?;
    Ok((path.to_path_buf(), text))
}

fn unreadable(path: &Path, e: &std::io::Error) -> ConfigError {
    ConfigError::new(path, "", format!("cannot read it: {e}"))
}
