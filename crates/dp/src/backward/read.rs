//! [`BurnStages`]: a burn backward pass, whole or in stages, read into the
//! flat gradient the exchange works on, stage by stage.

use std::ops::Range;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;

use crate::grad_stages::GradStages;
use crate::layout::GradientLayout;
use crate::params::GradSource;
use crate::ExchangeError;

/// Reads each stage's gradients into their places in a flat buffer, for
/// [`GradStages`]: the adaptor between a burn backward pass in stages and
/// the exchange. A stage's non-finite values are replaced by zeros (so the
/// compressors never see them) and the first is remembered for the step's
/// agreement.
pub struct BurnStages<'a, M, I> {
    model: &'a M,
    stages: I,
    layout: &'a GradientLayout,
    grad: &'a mut Vec<f32>,
    seen: Vec<bool>,
    scratch: Vec<f32>,
    /// The first parameter with a non-finite gradient value.
    pub nonfinite: Option<String>,
    /// Seconds in the stages' backward passes, and in reading them out.
    pub backward_seconds: f64,
    pub read_seconds: f64,
}

impl<'a, M: Module, G: GradSource, I: Iterator<Item = G>> BurnStages<'a, M, I> {
    /// `grad` becomes the flat gradient (zeros until a stage fills it).
    pub fn new(model: &'a M, stages: I, layout: &'a GradientLayout, grad: &'a mut Vec<f32>) -> Self {
        grad.clear();
        grad.resize(layout.total(), 0.0);
        Self {
            model,
            stages,
            layout,
            grad,
            seen: vec![false; layout.slots().len()],
            scratch: Vec::new(),
            nonfinite: None,
            backward_seconds: 0.0,
            read_seconds: 0.0,
        }
    }
}

impl<M: Module, G: GradSource, I: Iterator<Item = G>> GradStages for BurnStages<'_, M, I> {
    fn grad(&self) -> &[f32] {
        self.grad
    }

    fn next_stage(&mut self, filled: &mut Vec<Range<usize>>) -> Result<bool, ExchangeError> {
        let t = Instant::now();
        let Some(grads) = self.stages.next() else {
            return Ok(false);
        };
        self.backward_seconds += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let slots = read_present(self.model, &grads, &mut self.scratch);
        drop(grads);
        let mut from = 0;
        for i in slots {
            let slot = &self.layout.slots()[i];
            if std::mem::replace(&mut self.seen[i], true) {
                return Err(ExchangeError::Usage(crate::params::in_two_stages(&slot.name)));
            }
            let dst = &mut self.grad[slot.offset..slot.offset + slot.len];
            dst.copy_from_slice(&self.scratch[from..from + slot.len]);
            from += slot.len;
            if !gradcomp_compress::reduce::all_finite(dst) {
                self.nonfinite.get_or_insert_with(|| slot.name.clone());
                dst.fill(0.0);
            }
            filled.push(slot.offset..slot.offset + slot.len);
        }
        self.read_seconds += t.elapsed().as_secs_f64();
        Ok(true)
    }
}

/// The gradients `grads` holds for the model's trainable parameters,
/// flattened into `out` with one read-back; returns their layout indices.
fn read_present<M: Module, G: GradSource>(model: &M, grads: &G, out: &mut Vec<f32>) -> Vec<usize> {
    struct Present<'a, G> {
        grads: &'a G,
        index: usize,
        slots: Vec<usize>,
        tensors: Vec<Tensor<1>>,
    }
    impl<G: GradSource> ModuleVisitor for Present<'_, G> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.is_require_grad() {
                if let Some(g) = self.grads.grad(param) {
                    let n = g.shape().num_elements();
                    self.tensors.push(g.reshape([n]));
                    self.slots.push(self.index);
                }
                self.index += 1;
            }
        }
    }
    let mut v = Present { grads, index: 0, slots: Vec::new(), tensors: Vec::new() };
    model.visit(&mut v);
    crate::params::flatten_into(v.tensors, out);
    v.slots
}
