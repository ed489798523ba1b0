//! Which collectives carry the messages (`comm.topology`, `comm.server`).

use gradcomp_comm::ServerPlacement;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topology {
    /// Summable messages through allreduce.
    Allreduce,
    /// Every worker's messages to every worker (allgatherv), summed locally.
    Allgather,
    /// Upload to a server that aggregates and broadcasts (TernGrad's protocol).
    ParameterServer,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerPlace {
    /// Rank 0 is both a worker and the server.
    #[default]
    CoLocated,
}

impl ServerPlace {
    pub fn placement(self) -> ServerPlacement {
        match self {
            ServerPlace::CoLocated => ServerPlacement::CoLocated,
        }
    }
}
