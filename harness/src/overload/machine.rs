//! What the figures were measured on: the CPU model, the cores, and the load average (the
//! development machine is shared, so every report says how busy it was).

/// The CPU model (`model name` of `/proc/cpuinfo`), if known.
pub fn cpu_model() -> Option<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo
        .lines()
        .find(|line| line.starts_with("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, model)| model.trim().to_owned())
}

/// Cores this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The 1, 5 and 15-minute load averages (`/proc/loadavg`), if known.
pub fn load_average() -> Option<[f64; 3]> {
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = loadavg.split_whitespace().map(str::parse::<f64>);
    Some([
        fields.next()?.ok()?,
        fields.next()?.ok()?,
        fields.next()?.ok()?,
    ])
}

/// The machine a run was measured on, and how busy it was before and after.
#[derive(Debug, Clone)]
pub struct Machine {
    /// The CPU model, if known.
    pub cpu: Option<String>,
    /// Cores this process may run on.
    pub cores: usize,
    /// Load averages when the run started.
    pub load_before: Option<[f64; 3]>,
    /// Load averages when it ended.
    pub load_after: Option<[f64; 3]>,
}

impl Machine {
    /// This machine, now that a run which started with `load_before` ended.
    pub fn after(load_before: Option<[f64; 3]>) -> Self {
        Self {
            cpu: cpu_model(),
            cores: cores(),
            load_before,
            load_after: load_average(),
        }
    }

    /// As JSON: `cpu`, `cores`, `load_average_before`, `load_average_after`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "cpu": self.cpu,
            "cores": self.cores,
            "load_average_before": self.load_before,
            "load_average_after": self.load_after,
        })
    }

    /// Prints one line: the CPU, the cores and the load averages.
    pub fn print(&self) {
        let load = |l: Option<[f64; 3]>| {
            l.map_or("unknown".into(), |[a, b, c]| {
                format!("{a:.2} {b:.2} {c:.2}")
            })
        };
        println!(
            "machine: {} ({} cores); load average before {}, after {}",
            self.cpu.as_deref().unwrap_or("unknown CPU"),
            self.cores,
            load(self.load_before),
            load(self.load_after)
        );
    }
}
