//! [`TrainConfig::validate`]: every check that can be made before any work
//! starts, one function per section; the library's sections are
//! [`DataParallelConfig::validate`](gradcomp_dp::DataParallelConfig::validate)'s.

use super::{ConfigError, Dataset, ModelName, TrainConfig};

fn err(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::new(key, problem)
}

/// `x > 0`, false for NaN.
fn positive(x: f64) -> bool {
    x > 0.0
}

/// `x ≥ 0`, false for NaN.
fn non_negative(x: f64) -> bool {
    x >= 0.0
}

impl TrainConfig {
    /// Every check that can be made before any work starts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_run()?;
        self.validate_data()?;
        self.validate_model()?;
        self.validate_optimizer()?;
        self.validate_schedule()?;
        self.check_sizes()?;
        self.validate_loop()?;
        self.data_parallel().validate()?;
        self.validate_comm()?;
        self.validate_network()?;
        self.network.models()?;
        Ok(())
    }

    /// The run's name, workers and device.
    fn validate_run(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() || self.name.contains('/') {
            return Err(err("name", "must be a non-empty name without '/'"));
        }
        if self.workers == 0 {
            return Err(err("workers", "must be at least 1"));
        }
        self.device.check().map_err(|p| err("device", p))?;
        Ok(())
    }

    /// `[data]`.
    fn validate_data(&self) -> Result<(), ConfigError> {
        if self.data.batch_size == 0 {
            return Err(err("data.batch_size", "must be at least 1"));
        }
        if self.data.dataset.is_text() != self.is_language_model() {
            return Err(err(
                "model.name",
                format!("{:?} does not fit dataset {:?} (the language models, lstm and gpt, take ptb, text or synthetic-tokens; the others take images)", self.model.name, self.data.dataset),
            ));
        }
        if self.data.bptt == 0 {
            return Err(err("data.bptt", "must be at least 1"));
        }
        self.validate_normalize()?;
        if self.data.augment.is_on() && self.data.dataset.is_text() {
            return Err(err(
                "data.augment",
                "applies to image datasets; a language model's inputs are tokens",
            ));
        }
        if self.data.variable_bptt && !self.data.dataset.is_text() {
            return Err(err(
                "data.variable_bptt",
                "applies to language models; an image dataset has no BPTT",
            ));
        }
        if self.data.synthetic_shape.contains(&0) {
            return Err(err("data.synthetic_shape", "every dimension must be at least 1"));
        }
        if !(2..=256).contains(&self.data.synthetic_classes) {
            return Err(err(
                "data.synthetic_classes",
                format!(
                    "{} is out of range: 2..=256 classes (one byte per label)",
                    self.data.synthetic_classes
                ),
            ));
        }
        if let Some(k) = self.data.classes {
            if self.data.dataset != Dataset::Images {
                return Err(err(
                    "data.classes",
                    format!(
                        "applies to dataset = \"images\" only ({:?} knows its classes)",
                        self.data.dataset
                    ),
                ));
            }
            if !(2..=256).contains(&k) {
                return Err(err(
                    "data.classes",
                    format!("{k} is out of range: 2..=256 classes (one byte per label)"),
                ));
            }
        }
        if matches!(self.data.dataset, Dataset::SyntheticImages | Dataset::SyntheticTokens)
            && self.data.synthetic_size == 0
        {
            return Err(err("data.synthetic_size", "must be at least 1"));
        }
        Ok(())
    }

    /// `[data.normalize]`: one mean and std, or one per channel, each finite
    /// (the stds > 0), and an image dataset to apply them to.
    fn validate_normalize(&self) -> Result<(), ConfigError> {
        if let Some(n) = &self.data.normalize {
            if n.mean.is_empty() || n.mean.len() != n.std.len() {
                return Err(err(
                    "data.normalize",
                    format!(
                        "{} mean(s) and {} std(s): give one value, or one per channel, of each",
                        n.mean.len(),
                        n.std.len()
                    ),
                ));
            }
            if let Some(m) = n.mean.iter().find(|m| !m.is_finite()) {
                return Err(err("data.normalize.mean", format!("{m} is not finite")));
            }
            if let Some(s) = n.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
                return Err(err(
                    "data.normalize.std",
                    format!("{s} is out of range: must be finite and > 0"),
                ));
            }
            if self.data.dataset.is_text() {
                return Err(err(
                    "data.normalize",
                    "applies to image datasets; a language model's inputs are tokens",
                ));
            }
        }
        Ok(())
    }

    /// `[model]`.
    fn validate_model(&self) -> Result<(), ConfigError> {
        let lstm = &self.model.lstm;
        for (key, v) in [
            ("model.lstm.vocab", lstm.vocab),
            ("model.lstm.embed", lstm.embed),
            ("model.lstm.hidden", lstm.hidden),
        ] {
            if v == 0 {
                return Err(err(key, "must be at least 1"));
            }
        }
        if !(0.0..1.0).contains(&lstm.dropout) {
            return Err(err(
                "model.lstm.dropout",
                format!("{} is out of range: a probability in [0, 1)", lstm.dropout),
            ));
        }
        self.validate_gpt()
    }

    /// `[model]`'s `gpt`: its sizes, and (when it trains) segments that fit
    /// its context.
    fn validate_gpt(&self) -> Result<(), ConfigError> {
        let gpt = &self.model.gpt;
        for (key, v) in [
            ("model.gpt.vocab", gpt.vocab),
            ("model.gpt.layers", gpt.layers),
            ("model.gpt.heads", gpt.heads),
            ("model.gpt.embed", gpt.embed),
            ("model.gpt.mlp", gpt.mlp_width()),
            ("model.gpt.context", gpt.context),
        ] {
            if v == 0 {
                return Err(err(key, "must be at least 1"));
            }
        }
        if !gpt.embed.is_multiple_of(gpt.heads) {
            return Err(err(
                "model.gpt.heads",
                format!(
                    "{} heads do not divide model.gpt.embed = {}: each head takes embed / heads of it",
                    gpt.heads, gpt.embed
                ),
            ));
        }
        if !(0.0..1.0).contains(&gpt.dropout) {
            return Err(err(
                "model.gpt.dropout",
                format!("{} is out of range: a probability in [0, 1)", gpt.dropout),
            ));
        }
        if self.model.name != ModelName::Gpt {
            return Ok(());
        }
        // A batch is a segment of `data.bptt` tokens, one position each.
        if self.data.bptt > gpt.context {
            return Err(err(
                "data.bptt",
                format!(
                    "{} is longer than model.gpt.context = {}: the position embedding holds that many positions; lower data.bptt or raise model.gpt.context",
                    self.data.bptt, gpt.context
                ),
            ));
        }
        if self.data.variable_bptt {
            return Err(err(
                "data.variable_bptt",
                "draws segments around data.bptt, some longer, past model.gpt.context: the gpt trains on fixed segments (set it to false)",
            ));
        }
        Ok(())
    }

    /// `[optimizer]`.
    fn validate_optimizer(&self) -> Result<(), ConfigError> {
        let o = &self.optimizer;
        for (key, v, ok) in [
            ("optimizer.lr", o.lr, o.lr > 0.0 && o.lr.is_finite()),
            ("optimizer.momentum", o.momentum, (0.0..1.0).contains(&o.momentum)),
            ("optimizer.weight_decay", o.weight_decay, o.weight_decay >= 0.0 && o.weight_decay.is_finite()),
            ("optimizer.beta1", o.beta1, (0.0..1.0).contains(&o.beta1)),
            ("optimizer.beta2", o.beta2, (0.0..1.0).contains(&o.beta2)),
            ("optimizer.eps", o.eps, o.eps > 0.0),
        ] {
            if !ok {
                return Err(err(key, format!("{v} is out of range")));
            }
        }
        if o.nesterov && o.momentum == 0.0 {
            return Err(err("optimizer.nesterov", "needs momentum > 0"));
        }
        Ok(())
    }

    /// `[schedule]`.
    fn validate_schedule(&self) -> Result<(), ConfigError> {
        let s = &self.schedule;
        // Checked whatever the kind, so a typo waits for no schedule change to show.
        if s.step_epochs == 0 {
            return Err(err("schedule.step_epochs", "must be at least 1"));
        }
        if !(positive(s.gamma) && s.gamma.is_finite()) {
            return Err(err(
                "schedule.gamma",
                format!("{} is out of range: must be finite and > 0", s.gamma),
            ));
        }
        if !(non_negative(s.warmup_epochs) && s.warmup_epochs.is_finite()) {
            return Err(err("schedule.warmup_epochs", "must be finite and ≥ 0"));
        }
        if !(non_negative(s.power) && s.power.is_finite()) {
            return Err(err(
                "schedule.power",
                format!("{} is out of range: the poly schedule needs a finite power ≥ 0", s.power),
            ));
        }
        Ok(())
    }

    /// `[train]`.
    fn validate_loop(&self) -> Result<(), ConfigError> {
        if self.train.epochs == 0 && self.train.max_steps == 0 {
            return Err(err("train.epochs", "must be at least 1 (or set train.max_steps)"));
        }
        if let Some(t) = self.train.target_accuracy {
            if !(t > 0.0 && t <= 1.0) {
                return Err(err("train.target_accuracy", "must be a fraction in (0, 1], e.g. 0.98"));
            }
            if !self.train.eval || self.is_language_model() {
                return Err(err(
                    "train.target_accuracy",
                    "needs train.eval = true and an image task (language models: train.target_perplexity)",
                ));
            }
        }
        if let Some(t) = self.train.target_perplexity {
            if !(t.is_finite() && t > 1.0) {
                return Err(err("train.target_perplexity", "must be a number > 1, e.g. 150"));
            }
            if !self.train.eval || !self.is_language_model() {
                return Err(err(
                    "train.target_perplexity",
                    "needs train.eval = true and a language model (image tasks: train.target_accuracy)",
                ));
            }
        }
        Ok(())
    }

    /// `[comm]`'s timeouts (its topology is the library's).
    fn validate_comm(&self) -> Result<(), ConfigError> {
        if !(positive(self.comm.timeout_seconds) && self.comm.timeout_seconds.is_finite()) {
            return Err(err("comm.timeout_seconds", "must be finite and positive"));
        }
        let hb = self.comm.heartbeat_seconds;
        if !(non_negative(hb) && hb.is_finite()) || (hb > 0.0 && hb < 2.0) {
            return Err(err(
                "comm.heartbeat_seconds",
                format!("{hb} is out of range: 0 (off) or at least 2 (heartbeats go every 0.5 s)"),
            ));
        }
        Ok(())
    }

    /// `[network]`.
    fn validate_network(&self) -> Result<(), ConfigError> {
        if let Some(b) = self.network.links_bps.iter().find(|&&b| !(positive(b) && b.is_finite())) {
            return Err(err(
                "network.links_bps",
                format!("{b} is out of range: every link must be finite and > 0"),
            ));
        }
        if !(non_negative(self.network.alpha) && self.network.alpha.is_finite()) {
            return Err(err("network.alpha", "must be finite and ≥ 0"));
        }
        Ok(())
    }
}
