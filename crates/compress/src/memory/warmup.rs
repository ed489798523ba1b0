//! Density warm-up (ALGORITHMS.md §3.1): start dense-ish, reach ρ after a few
//! epochs.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DensitySchedule {
    /// ρ from the start.
    #[default]
    None,
    /// ρ_e = `densities[e]` for the listed epochs, then ρ (Shi et al.'s code:
    /// `[1/64, 1/250]` then 1/1000).
    List { densities: Vec<f64> },
    /// DGC: ρ_e = max(ρ^((e+1)/(W+1)), ρ) for `epochs` = W warm-up epochs.
    Exp { epochs: u32 },
}

impl DensitySchedule {
    /// The density for epoch `epoch` (0-based) given the target `rho`.
    pub fn density(&self, epoch: u32, rho: f64) -> f64 {
        match self {
            DensitySchedule::None => rho,
            DensitySchedule::List { densities } => densities.get(epoch as usize).copied().unwrap_or(rho),
            DensitySchedule::Exp { epochs } => {
                let e = f64::from(epoch) + 1.0;
                rho.powf(e / (f64::from(*epochs) + 1.0)).max(rho)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules() {
        let l = DensitySchedule::List { densities: vec![1.0 / 64.0, 1.0 / 250.0] };
        assert_eq!(l.density(0, 0.001), 1.0 / 64.0);
        assert_eq!(l.density(1, 0.001), 1.0 / 250.0);
        assert_eq!(l.density(2, 0.001), 0.001);
        let e = DensitySchedule::Exp { epochs: 4 };
        assert!((e.density(0, 0.001) - 0.001f64.powf(0.2)).abs() < 1e-12);
        assert!((e.density(3, 0.001) - 0.001f64.powf(0.8)).abs() < 1e-12);
        assert_eq!(e.density(4, 0.001), 0.001);
        assert_eq!(e.density(10, 0.001), 0.001);
        assert_eq!(DensitySchedule::None.density(0, 0.01), 0.01);
    }
}
