//! What a resume may change: the keys that do not change a run's meaning,
//! and the keys in which two configurations differ.

use super::TrainConfig;

/// Keys a resumed run may change with `--allow-change`: where the run
/// writes and computes, how long it goes on, what it measures and how
/// patiently it waits, and how many workers go on (`[elastic]`; refused
/// where N is the run's meaning, by the resume's own check). Every other key
/// (model, data, compressor, optimizer, learning rate, seed, strategy) is
/// the run's meaning.
pub const RESUME_SAFE_KEYS: &[&str] = &[
    "name",
    "workers",
    "elastic",
    "run_dir",
    "device",
    "data.dir",
    "train.epochs",
    "train.max_steps",
    "train.eval",
    "train.eval_every",
    "train.target_accuracy",
    "train.target_perplexity",
    "train.checkpoint_every_epochs",
    "train.checkpoint_every_steps",
    "train.stats_every",
    "train.checksum_every",
    "train.on_nonfinite",
    "train.keep_checkpoints",
    "comm.timeout_seconds",
    "comm.heartbeat_seconds",
    "compression.on_device",
    "compression.pipeline",
    "network.links_bps",
    "network.alpha",
    "network.allreduce",
    "network.allgatherv",
    "network.calibration",
];

impl TrainConfig {
    /// The dotted keys whose values differ between `self` and `other`.
    pub fn differing_keys(&self, other: &TrainConfig) -> Vec<String> {
        fn flatten(
            prefix: &str,
            v: &serde_json::Value,
            out: &mut std::collections::BTreeMap<String, String>,
        ) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                        flatten(&key, v, out);
                    }
                }
                other => {
                    out.insert(prefix.to_string(), other.to_string());
                }
            }
        }
        let (mut a, mut b) = (Default::default(), Default::default());
        flatten("", &serde_json::to_value(self).expect("configs serialize"), &mut a);
        flatten("", &serde_json::to_value(other).expect("configs serialize"), &mut b);
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        keys.into_iter().filter(|k| a.get(*k) != b.get(*k)).cloned().collect()
    }
}
