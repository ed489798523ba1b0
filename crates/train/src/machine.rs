//! Facts about the machine a run is on: its CPU and cores, and what Linux's
//! `/proc` says of memory (available memory for size checks, the peak
//! resident size for reports).

use serde::{Deserialize, Serialize};

/// The machine a run ran on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    pub cpu: Option<String>,
    pub cores: usize,
    /// What burn's CPU kernels choose their order of additions by, so the
    /// same seeds give the same bits only where this is the same
    /// (docs/RESULTS.md, "The main job's checksum and reproducibility"):
    /// the widest SIMD level, and the L1 data cache as the `gemm` crate
    /// reads it (size, ways, CPUs sharing it).
    #[serde(default)]
    pub numerics: Option<String>,
}

impl Hardware {
    pub fn this_machine() -> Self {
        let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        });
        Self {
            cpu,
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            numerics: Some(numerics()),
        }
    }
}

/// `avx512f+fma, L1d 48K 12-way x1`: the SIMD level and the L1 data cache
/// geometry of CPU 0 (`?` for what cannot be read).
pub fn numerics() -> String {
    let simd = simd_level();
    let cache = "/sys/devices/system/cpu/cpu0/cache/index0";
    let read = |f: &str| std::fs::read_to_string(format!("{cache}/{f}")).map(|s| s.trim().to_string());
    let sharing = read("shared_cpu_list").map(|l| cpu_count(&l).to_string());
    let (size, ways) = (read("size"), read("ways_of_associativity"));
    let or = |r: std::io::Result<String>| r.unwrap_or_else(|_| "?".into());
    format!("{simd}, L1d {} {}-way x{}", or(size), or(ways), or(sharing))
}

fn simd_level() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let fma = std::arch::is_x86_feature_detected!("fma");
        if std::arch::is_x86_feature_detected!("avx512f") {
            return if fma { "avx512f+fma" } else { "avx512f" };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return if fma { "avx2+fma" } else { "avx2" };
        }
        "sse"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH
    }
}

/// How many CPUs a list such as `0-1,4` names.
fn cpu_count(list: &str) -> usize {
    list.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0).saturating_sub(a.parse().unwrap_or(0)) + 1,
            None => 1,
        })
        .sum()
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
    fn cpu_lists_count_their_cpus() {
        assert_eq!(cpu_count("0"), 1);
        assert_eq!(cpu_count("0-1"), 2);
        assert_eq!(cpu_count("0-3,8,10-11"), 7);
        assert!(numerics().contains("L1d"));
    }

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
