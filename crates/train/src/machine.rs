//! Facts about the machine a run is on: its CPU and cores, and what Linux's
//! `/proc` says of memory (available memory for size checks, the peak
//! resident size for reports).

use serde::{Deserialize, Serialize};

/// The machine a run ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    pub cpu: Option<String>,
    pub cores: usize,
}

impl Hardware {
    pub fn this_machine() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        });
        Self { cpu, cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) }
    }
}

/// A `Key:   N kB` figure of a Linux `/proc` file (`/proc/meminfo`,
/// `/proc/self/status`), in kB; None where the file or the key is missing.
pub fn proc_kb(file: &str, key: &str) -> Option<f64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The memory the machine has available (Linux `MemAvailable`), if known.
pub fn available_memory_bytes() -> Option<f64> {
    proc_kb("/proc/meminfo", "MemAvailable").map(|kb| kb * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_are_read_in_kilobytes() {
        let mem = proc_kb("/proc/meminfo", "MemAvailable").unwrap();
        assert!(mem > 0.0 && mem <= proc_kb("/proc/meminfo", "MemTotal").unwrap());
        assert!(proc_kb("/proc/self/status", "VmHWM").unwrap() > 0.0);
        // A key that is only a prefix of another is not that key.
        assert_eq!(proc_kb("/proc/meminfo", "Mem"), None);
        assert_eq!(proc_kb("/proc/no-such-file", "MemTotal"), None);
    }
}
