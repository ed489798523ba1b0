//! How the workers talk (`[comm]`: the library's topology and server
//! placement, the launcher's timeouts) and the links a run is predicted for
//! (`[network]`).

use std::path::PathBuf;

use gradcomp_comm::{AllgathervAlgorithm, AllreduceAlgorithm, Calibration, NetworkModel};
use gradcomp_dp::config::{ConfigError, ServerPlacement, Topology};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommConfig {
    /// The collective pattern; unset: the one the compressor's messages need.
    pub topology: Option<Topology>,
    pub server: ServerPlacement,
    /// Seconds a collective waits for a peer before failing.
    pub timeout_seconds: f64,
    /// MPI: seconds a peer's heartbeat may be silent, while a rank waits in a
    /// collective, before the job ends naming that peer (a stopped, dead or
    /// cut-off rank); 0 turns heartbeats off.
    pub heartbeat_seconds: f64,
}

impl Default for CommConfig {
    fn default() -> Self {
        Self {
            topology: None,
            server: ServerPlacement::CoLocated,
            timeout_seconds: 300.0,
            heartbeat_seconds: 10.0,
        }
    }
}

/// The links a run's wall-clock is predicted for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Link bandwidths in bit/s.
    pub links_bps: Vec<f64>,
    /// Per-message latency α in seconds.
    pub alpha: f64,
    /// The allreduce algorithm priced: ring, recursive-doubling,
    /// rabenseifner, nonoverlapping, or open-mpi (Open MPI 4.1's choice
    /// for the size and worker count).
    pub allreduce: AllreduceAlgorithm,
    /// The allgatherv algorithm priced: ring, neighbor, bruck,
    /// gather-broadcast, or open-mpi.
    pub allgatherv: AllgathervAlgorithm,
    /// Link calibrations from `gradcomp bench comm --calibrate-out`: each
    /// replaces the nominal model (`alpha`, line rate, algorithms) of the
    /// link speed it was measured at, and adds that speed if missing.
    pub calibration: Vec<PathBuf>,
}

impl NetworkConfig {
    /// The model of every link speed predicted for, in bit/s: the nominal
    /// line rate with `alpha` and the configured algorithms, replaced by its
    /// calibration where `calibration` has one (which also adds its speed).
    pub fn models(&self) -> Result<Vec<(f64, NetworkModel)>, ConfigError> {
        let mut links: Vec<(f64, NetworkModel)> = self
            .links_bps
            .iter()
            .map(|&b| {
                let m = NetworkModel::from_bits_per_second(b, self.alpha)
                    .with_allreduce(self.allreduce)
                    .with_allgatherv(self.allgatherv);
                (b, m)
            })
            .collect();
        for path in &self.calibration {
            let c = Calibration::load(path)
                .map_err(|e| ConfigError::new("network.calibration", e.to_string()))?;
            match links.iter_mut().find(|(b, _)| *b == c.link_bps) {
                Some(link) => link.1 = c.model,
                None => links.push((c.link_bps, c.model)),
            }
        }
        Ok(links)
    }
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            links_bps: vec![1e8, 1e9, 1e10],
            alpha: 1e-4,
            allreduce: AllreduceAlgorithm::Ring,
            allgatherv: AllgathervAlgorithm::Ring,
            calibration: Vec::new(),
        }
    }
}
