//! What both compressor benches (`bench compress` on the CPU and with
//! `--device`) share: the cases measured and the row each measurement prints.

use gradcomp_compress::sparsify::gaussiank::normal_quantile;
use gradcomp_compress::CompressorConfig;
use serde::{Deserialize, Serialize};

/// One measurement, as `--json` prints it and `gradcomp report --selection-time` reads it.
#[derive(Serialize, Deserialize)]
pub struct Row {
    pub compressor: String,
    /// `compress` (including any scaler pass and packing), `encode`, or `decode_aggregate`.
    pub op: String,
    pub elements: usize,
    pub density: Option<f64>,
    pub seconds: f64,
    pub gbytes_per_s: f64,
    pub ratio_to_read_pass: f64,
    pub selected: usize,
    pub wire_bytes: usize,
}

/// The densities `name` is measured at: each of `densities` for a sparsifier
/// (the threshold compressor's τ is derived from one), none for the rest.
pub(super) fn density_cases(name: &str, densities: &[f64]) -> Vec<Option<f64>> {
    let sparse = CompressorConfig::named(name).and_then(|c| c.density()).is_some() || name == "threshold";
    if sparse {
        densities.iter().map(|&d| Some(d)).collect()
    } else {
        vec![None]
    }
}

/// The configuration measured for `name` at `density`: defaults, except the
/// threshold compressor's τ, set to the N(0,1) quantile that keeps `density`,
/// and PowerSGD at rank 2 (the paper's choice) compressing from step 2, the
/// earliest it may with error feedback and warm start (as PyTorch's hook).
/// The benches measure from `first_compressed_step()` on.
pub(super) fn config_for(name: &str, density: Option<f64>) -> CompressorConfig {
    let mut cfg = CompressorConfig::named(name).expect("names come from CompressorConfig::NAMES");
    if let CompressorConfig::Powersgd(p) = &mut cfg {
        p.rank = 2;
        p.start_iter = 2;
    }
    if let (Some(rho), CompressorConfig::Threshold(t)) = (density, &mut cfg) {
        t.threshold = normal_quantile(1.0 - rho / 2.0) as f32;
    }
    if let Some(rho) = density {
        cfg.set_density(rho);
    }
    cfg
}

pub(super) fn emit(json: bool, r: &Row) {
    if json {
        println!("{}", serde_json::to_string(r).expect("rows serialize"));
    } else {
        let density = r.density.map_or("-".to_string(), |d| d.to_string());
        println!(
            "{:<10} {:<17} {:>10} {:>8} {:>9.3} {:>8.3} {:>10} {:>11}",
            r.compressor,
            r.op,
            r.elements,
            density,
            r.gbytes_per_s,
            r.ratio_to_read_pass,
            r.selected,
            r.wire_bytes
        );
    }
}
