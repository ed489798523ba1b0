//! A backward pass in stages, so the exchange can send the output layers'
//! gradients while the earlier layers' are still being computed.
//!
//! burn's `loss.backward()` returns every gradient at once, with no hook
//! per parameter as PyTorch DDP uses. The same overlap comes from cutting
//! the forward pass: at a cut, the rest of the model consumes a detached
//! copy `h` of the activation `a`. Backpropagating the loss then stops at
//! the cut and yields the gradients after it and ∂L/∂h; backpropagating
//! `Σ a ⊙ ∂L/∂h` next yields the gradients before it, the same values the
//! whole backward pass gives (∂(Σ a ⊙ g)/∂a = g exactly). [`Cuts`] records
//! the cuts in a forward pass, [`StagedBackward`] runs the stages lazily,
//! and [`DataParallel::sync_stages`](super::DataParallel::sync_stages)
//! sends each stage's buckets while the next stage runs:
//!
//! ```ignore
//! let mut cuts = Cuts::new();
//! let h = cuts.cut(model.trunk(x));              // cut after the trunk
//! let loss = model.head(h, y);
//! dp.report_loss(loss.clone().into_scalar::<f32>().into());
//! let synced = dp.sync_stages(&model, cuts.backward(loss), lr)?;
//! ```
//!
//! Every parameter must lie on one side of each cut (a parameter used on
//! both sides would get two partial gradients; `sync_stages` refuses it),
//! and every worker must cut the same way.

use std::ops::Range;
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor};

use crate::layout::GradientLayout;
use crate::params::GradSource;
use crate::strategy::{GradStages, StrategyError};

/// The cuts of one forward pass, in forward order.
pub struct Cuts {
    enabled: bool,
    cuts: Vec<Cut>,
}

/// One cut: the activation before it (flattened, still in the graph) and
/// how to find the gradient at the detached copy after it.
struct Cut {
    before: Tensor<1>,
    grad_after: GradAt,
}

/// Finds the (flattened) gradient at a cut's detached side.
type GradAt = Box<dyn Fn(&Gradients) -> Option<Tensor<1>>>;

impl Default for Cuts {
    fn default() -> Self {
        Self::new()
    }
}

impl Cuts {
    /// Records the cuts of a forward pass.
    pub fn new() -> Self {
        Self { enabled: true, cuts: Vec::new() }
    }

    /// Records nothing: [`cut`](Self::cut) passes tensors through, so one
    /// forward function serves a whole and a staged backward pass.
    pub fn none() -> Self {
        Self { enabled: false, cuts: Vec::new() }
    }

    /// The number of cuts recorded (stages − 1).
    pub fn len(&self) -> usize {
        self.cuts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cuts.is_empty()
    }

    /// Cuts the graph at `a`: returns the tensor the rest of the forward
    /// pass consumes (`a` itself when disabled or outside autodiff).
    pub fn cut<const D: usize>(&mut self, a: Tensor<D>) -> Tensor<D> {
        if !self.enabled || !a.is_tracked() {
            return a;
        }
        let n = a.shape().num_elements();
        let after = a.clone().detach().require_grad();
        let probe = after.clone();
        self.cuts.push(Cut {
            before: a.reshape([n]),
            grad_after: Box::new(move |g| probe.grad(g).map(|t| t.reshape([n]))),
        });
        after
    }

    /// The backward pass of `loss`, stage by stage from the last cut back.
    pub fn backward(self, loss: Tensor<1>) -> StagedBackward {
        StagedBackward { root: Some(loss), cuts: self.cuts }
    }
}

/// The stages of a cut backward pass, each computed when asked for: the
/// gradients after the last cut first, then the stage before it, ...
pub struct StagedBackward {
    root: Option<Tensor<1>>,
    cuts: Vec<Cut>,
}

impl Iterator for StagedBackward {
    type Item = Gradients;

    fn next(&mut self) -> Option<Gradients> {
        let root = self.root.take()?;
        let grads = root.backward();
        if let Some(cut) = self.cuts.pop() {
            // No gradient at the cut: nothing after it depends on the stages
            // before, which then have no gradient (zeros).
            if let Some(g) = (cut.grad_after)(&grads) {
                self.root = Some((cut.before * g.autodiff()).sum());
            }
        }
        Some(grads)
    }
}

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

    fn next_stage(&mut self, filled: &mut Vec<Range<usize>>) -> Result<bool, StrategyError> {
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
                return Err(StrategyError::Usage(crate::params::in_two_stages(&slot.name)));
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
