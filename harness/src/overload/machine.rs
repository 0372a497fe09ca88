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
