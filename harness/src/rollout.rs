//! A fleet in the middle of a rollout: the instances that run other settings than the rest
//! (`--vegas-instances LIST` and `--reported-instances LIST` of `vegas_sim --fleet` and
//! `overload --fleet`), named by index in start order (0 starts first and leaves, the last one
//! joins late).

use crate::vegas_settings::VegasSettings;

/// Which instances run the `--vegas-*` settings and which read the dependency's queue reports;
/// a list left out names every instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rollout {
    /// The instances that run the `--vegas-*` settings; the others run Vegas's defaults.
    pub vegas_on: Option<Vec<usize>>,
    /// Where the run reads the reports, the instances that read them; the others do not.
    pub reports_read_by: Option<Vec<usize>>,
}

impl Rollout {
    /// Why a fleet of `instances` cannot run this rollout with `settings`, if it cannot: an
    /// index outside the fleet, or `vegas_on` without a setting to apply.
    pub fn check(&self, instances: usize, settings: &VegasSettings) -> Result<(), String> {
        for (flag, list) in [
            ("--vegas-instances", &self.vegas_on),
            ("--reported-instances", &self.reports_read_by),
        ] {
            if let Some(index) = list.iter().flatten().find(|&&index| index >= instances) {
                return Err(format!(
                    "{flag}: no instance {index} in a fleet of {instances} (indices 0 to {})",
                    instances - 1
                ));
            }
        }
        if self.vegas_on.is_some() && *settings == VegasSettings::default() {
            return Err(
                "--vegas-instances: no --vegas-* setting to apply to those instances".into(),
            );
        }
        Ok(())
    }

    /// The Vegas settings of instance `index`: `settings`, or the defaults if `vegas_on` leaves
    /// it out.
    pub fn vegas_of(&self, index: usize, settings: &VegasSettings) -> VegasSettings {
        if names(self.vegas_on.as_deref(), index) {
            settings.clone()
        } else {
            VegasSettings::default()
        }
    }

    /// `settings` as the runs print them, and on which instances where `vegas_on` lists them.
    pub fn describe_vegas(&self, settings: &VegasSettings) -> String {
        match &self.vegas_on {
            None => settings.describe(),
            Some(on) => format!(
                "{} on instances {} only, the defaults on the others",
                settings.describe(),
                list(on)
            ),
        }
    }

    /// Whether instance `index` reads the reports, where the run reads them.
    pub fn reads_reports(&self, index: usize) -> bool {
        names(self.reports_read_by.as_deref(), index)
    }
}

/// Whether `list` names instance `index` (`None` names them all).
fn names(list: Option<&[usize]>, index: usize) -> bool {
    list.is_none_or(|list| list.contains(&index))
}

/// Instance indices as the flags take them: `0,2`.
pub fn list(indices: &[usize]) -> String {
    let indices: Vec<String> = indices.iter().map(usize::to_string).collect();
    indices.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_name_their_instances_and_a_list_left_out_names_all() {
        let wider = VegasSettings {
            max_queue_share: Some(0.2),
            ..VegasSettings::default()
        };
        let all = Rollout::default();
        assert_eq!(all.check(3, &VegasSettings::default()), Ok(()));
        assert!((0..3).all(|index| all.vegas_of(index, &wider) == wider));
        assert!((0..3).all(|index| all.reads_reports(index)));
        let mixed = Rollout {
            vegas_on: Some(vec![0, 2]),
            reports_read_by: Some(vec![1]),
        };
        assert_eq!(mixed.check(3, &wider), Ok(()));
        let settings: Vec<_> = (0..3).map(|index| mixed.vegas_of(index, &wider)).collect();
        assert_eq!(
            settings,
            [wider.clone(), VegasSettings::default(), wider.clone()]
        );
        let reads: Vec<_> = (0..3).map(|index| mixed.reads_reports(index)).collect();
        assert_eq!(reads, [false, true, false]);
        assert_eq!(list(&[0, 2]), "0,2");
        assert_eq!(all.describe_vegas(&wider), wider.describe());
        assert_eq!(
            mixed.describe_vegas(&wider),
            format!(
                "{} on instances 0,2 only, the defaults on the others",
                wider.describe()
            )
        );
    }

    #[test]
    fn a_list_outside_the_fleet_or_without_a_setting_is_refused_naming_its_flag() {
        let wider = VegasSettings {
            max_queue_share: Some(0.2),
            ..VegasSettings::default()
        };
        let outside = Rollout {
            vegas_on: Some(vec![3]),
            ..Rollout::default()
        };
        assert_eq!(
            outside.check(3, &wider),
            Err("--vegas-instances: no instance 3 in a fleet of 3 (indices 0 to 2)".into())
        );
        let read_outside = Rollout {
            reports_read_by: Some(vec![0, 5]),
            ..Rollout::default()
        };
        assert_eq!(
            read_outside.check(3, &wider),
            Err("--reported-instances: no instance 5 in a fleet of 3 (indices 0 to 2)".into())
        );
        let nothing_to_apply = Rollout {
            vegas_on: Some(vec![1]),
            ..Rollout::default()
        };
        assert_eq!(
            nothing_to_apply.check(3, &VegasSettings::default()),
            Err("--vegas-instances: no --vegas-* setting to apply to those instances".into())
        );
    }
}
