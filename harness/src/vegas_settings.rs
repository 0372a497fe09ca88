//! Vegas settings a harness run takes from its command line (`--vegas-*`), for the arm that runs
//! flowguard's Vegas: so that a run of a setting other than the default is one command, not an
//! experiment build.

use flowguard::vegas::{ConfigError, Vegas, VegasBuilder};

/// The settings of flowguard's Vegas that differ from its defaults; each one left unset keeps
/// the default.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct VegasSettings {
    /// flowguard's Vegas: the least rounds of calls a window holds, `window_rounds` (default 0.5)
    #[arg(long = "vegas-window-rounds", value_name = "R")]
    pub window_rounds: Option<f64>,
    /// flowguard's Vegas: `max_queue_share`, the band's cap as a share of the limit (default 0.1)
    #[arg(long = "vegas-max-queue-share", value_name = "SHARE")]
    pub max_queue_share: Option<f64>,
    /// flowguard's Vegas: `alpha`, the calls queued under which it grows (default 3)
    #[arg(long = "vegas-alpha", value_name = "CALLS")]
    pub alpha: Option<f64>,
    /// flowguard's Vegas: `beta`, the calls queued over which it cuts (default 6)
    #[arg(long = "vegas-beta", value_name = "CALLS")]
    pub beta: Option<f64>,
    /// flowguard's Vegas: `band_growth`, the growth inside the band as a share of the growth
    /// below it (default 0.5; 0 holds inside the band)
    #[arg(long = "vegas-band-growth", value_name = "SHARE")]
    pub band_growth: Option<f64>,
}

impl VegasSettings {
    /// Each setting that is set, with its flag and builder name, in flag order.
    fn set(&self) -> impl Iterator<Item = (&'static str, &'static str, f64)> {
        [
            ("--vegas-window-rounds", "window_rounds", self.window_rounds),
            (
                "--vegas-max-queue-share",
                "max_queue_share",
                self.max_queue_share,
            ),
            ("--vegas-alpha", "alpha", self.alpha),
            ("--vegas-beta", "beta", self.beta),
            ("--vegas-band-growth", "band_growth", self.band_growth),
        ]
        .into_iter()
        .filter_map(|(flag, name, value)| value.map(|value| (flag, name, value)))
    }

    /// A Vegas builder with these settings over the defaults.
    pub fn builder(&self) -> VegasBuilder {
        let mut builder = Vegas::builder();
        if let Some(rounds) = self.window_rounds {
            builder = builder.window_rounds(rounds);
        }
        if let Some(share) = self.max_queue_share {
            builder = builder.max_queue_share(share);
        }
        if let Some(alpha) = self.alpha {
            builder = builder.alpha(alpha);
        }
        if let Some(beta) = self.beta {
            builder = builder.beta(beta);
        }
        if let Some(share) = self.band_growth {
            builder = builder.band_growth(share);
        }
        builder
    }

    /// The Vegas algorithm of these settings, or the first one that cannot work.
    pub fn build(&self) -> Result<Vegas, ConfigError> {
        self.builder().build()
    }

    /// `"window_rounds 3, max_queue_share 0.3"`, or `"defaults"` when none is set.
    pub fn describe(&self) -> String {
        let set: Vec<String> = self
            .set()
            .map(|(_, name, value)| format!("{name} {value}"))
            .collect();
        if set.is_empty() {
            "defaults".into()
        } else {
            set.join(", ")
        }
    }

    /// The flags that reproduce these settings.
    pub fn to_flags(&self) -> Vec<String> {
        self.set()
            .flat_map(|(flag, _, value)| [flag.to_string(), value.to_string()])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use flowguard::vegas::LimitAlgorithm;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        vegas: VegasSettings,
    }

    fn parse(flags: &[&str]) -> VegasSettings {
        Cli::try_parse_from(std::iter::once("run").chain(flags.iter().copied()))
            .unwrap()
            .vegas
    }

    #[test]
    fn unset_settings_keep_the_defaults() {
        let settings = parse(&[]);
        assert_eq!(settings, VegasSettings::default());
        assert_eq!(settings.describe(), "defaults");
        assert!(settings.to_flags().is_empty());
        assert_eq!(
            settings.build().unwrap().limit(),
            Vegas::new().limit(),
            "the default Vegas"
        );
    }

    #[test]
    fn set_settings_round_trip_through_their_flags_and_reach_the_builder() {
        let settings = parse(&[
            "--vegas-window-rounds",
            "3",
            "--vegas-max-queue-share",
            "0.3",
            "--vegas-alpha",
            "10",
            "--vegas-beta",
            "20",
            "--vegas-band-growth",
            "0",
        ]);
        assert_eq!(
            settings.describe(),
            "window_rounds 3, max_queue_share 0.3, alpha 10, beta 20, band_growth 0"
        );
        let flags = settings.to_flags();
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        assert_eq!(parse(&flags), settings);
        assert!(settings.build().is_ok());
        // A setting the builder refuses is its typed error, naming the setting.
        let bad = parse(&["--vegas-window-rounds", "0.1"])
            .build()
            .unwrap_err();
        assert!(bad.to_string().contains("window_rounds"), "{bad}");
        let bad = parse(&["--vegas-band-growth", "1.5"]).build().unwrap_err();
        assert!(bad.to_string().contains("band_growth"), "{bad}");
        let bad = parse(&["--vegas-alpha", "8", "--vegas-beta", "4"]);
        assert!(matches!(
            bad.build(),
            Err(ConfigError::AlphaNotBelowBeta { .. })
        ));
    }
}
