//! Joining the group: `DataParallelConfig::init`, a burn front's method on
//! the core's configuration ([`InitDataParallel`]).

use burn::module::Module;
use gradcomp_comm::{Collective, Gathered, Metered, StepBytes};

use super::{CompressionLocation, DataParallel, StepStats};
use crate::config::DataParallelConfig;
use crate::params;
use crate::DataParallelError;

/// `DataParallelConfig::init`: the configuration lives in the
/// framework-agnostic core, joining a group with a burn model is this
/// front's (in the prelude, so `DataParallelConfig::new(..).init(..)` reads
/// as before).
pub trait InitDataParallel {
    /// Joins this worker to the group: checks that every worker has the same
    /// model layout and configuration, and replaces `model`'s trainable
    /// parameters by rank 0's so the replicas start identical. Every worker
    /// calls it with its own collective handle.
    fn init<M: Module>(
        self,
        collective: impl Collective + 'static,
        model: M,
    ) -> Result<(DataParallel, M), DataParallelError>;
}

impl InitDataParallel for DataParallelConfig {
    fn init<M: Module>(
        self,
        collective: impl Collective + 'static,
        model: M,
    ) -> Result<(DataParallel, M), DataParallelError> {
        self.validate()?;
        if self.strategy.inner_state_every > 0 {
            // The handle never holds the burn optimizer, whose state is its record.
            return Err(gradcomp_exchange::config::ConfigError::new(
                "strategy.inner_state_every",
                "the burn front does not average its optimizer's state yet; the PyTorch front does \
                 (LocalUpdates(inner_state_every=k))",
            )
            .into());
        }
        let mut c: Box<dyn Collective> = Box::new(collective);
        let rank = c.rank();
        let comm = |source| DataParallelError::Comm { rank, source };
        let layout = params::layout(&model);
        // Same model and configuration everywhere, or a clear error on every worker.
        let mut mine = layout.fingerprint().to_le_bytes().to_vec();
        mine.extend_from_slice(&self.fingerprint().to_le_bytes());
        let mut all = Gathered::default();
        c.allgatherv(&mine, &mut all).map_err(comm)?;
        if let Some(r) = all.iter().position(|m| m[..8] != mine[..8]) {
            return Err(DataParallelError::Mismatch(format!(
                "worker {r}'s model has other parameters (names or shapes) than worker {rank}'s"
            )));
        }
        if let Some(r) = all.iter().position(|m| m[8..] != mine[8..]) {
            return Err(DataParallelError::Mismatch(format!(
                "worker {r}'s DataParallelConfig differs from worker {rank}'s"
            )));
        }
        let mut values = Vec::new();
        params::read_params(&model, &mut values);
        let mut bytes: Vec<u8> = values.iter().flat_map(|p| p.to_le_bytes()).collect();
        c.broadcast(&mut bytes, 0).map_err(comm)?;
        if bytes.len() != values.len() * 4 {
            return Err(DataParallelError::Mismatch("rank 0 broadcast parameters of another size".into()));
        }
        let values: Vec<f32> =
            bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let model = params::write_params(model, &values);
        let strategy = crate::strategy::build(&self, &layout, c.world_size())?;
        let density = self.compressor.density();
        let n = layout.total();
        let dp = DataParallel {
            cfg: self,
            c: Metered::new(c),
            strategy,
            layout,
            step: 0,
            epoch: None,
            averaged_at: None,
            stop: false,
            stop_agreed: false,
            density,
            grad: Vec::with_capacity(n),
            out: vec![0.0; n],
            params: values,
            gathered: Gathered::default(),
            pending: StepBytes::default(),
            pending_seconds: 0.0,
            totals: StepBytes::default(),
            earlier: (0, 0),
            group_sent: 0,
            last: StepStats::default(),
            location: CompressionLocation::Undecided,
            replanning: None,
        };
        Ok((dp, model))
    }
}
