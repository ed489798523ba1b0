//! A case of the catalog: how it runs and what it must end in.

pub fn error(needles: &[&str]) -> Expect {
    Expect::Error(needles.iter().map(|s| s.to_string()).collect())
}

/// What a case must end in.
pub enum Expect {
    /// Exit 1 or 2, one `error:` line on stderr containing every needle
    /// (case-insensitive).
    Error(Vec<String>),
    /// Killed by this signal once training runs: exits with 128 + signal
    /// number after writing a checkpoint.
    Signal(i32),
}

/// How a case is run.
pub enum Action {
    /// Run to the end.
    Run,
    /// Send `signal` (a `kill` name) once training has written a step
    /// record, or at once when `at_start`; `twice` sends it again at once.
    Signal { signal: &'static str, at_start: bool, twice: bool, run_dir: std::path::PathBuf },
}

pub struct Case {
    pub class: &'static str,
    pub name: String,
    pub args: Vec<String>,
    pub action: Action,
    pub expect: Expect,
}
