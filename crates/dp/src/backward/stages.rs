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
//! and [`DataParallel::step`](crate::DataParallel::step) sends each
//! stage's buckets while the next stage runs:
//!
//! ```ignore
//! let mut cuts = Cuts::new();
//! let h = cuts.cut(model.trunk(x));              // cut after the trunk
//! let loss = model.head(h, y);
//! model = dp.step(model, cuts.backward(loss), &mut optim, lr)?;
//! ```
//!
//! Every parameter must lie on one side of each cut (a parameter used on
//! both sides would get two partial gradients; the step refuses it),
//! and every worker must cut the same way.

use burn::tensor::{Gradients, Tensor};

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
    /// The loss's value is read now (as a loop that logs it would), so the
    /// step's own timing holds only the backward pass.
    pub fn backward(self, loss: Tensor<1>) -> StagedBackward {
        let value = f64::from(loss.clone().into_scalar::<f32>());
        StagedBackward { loss: Some(value), root: Some(loss), cuts: self.cuts }
    }
}

/// The stages of a cut backward pass, each computed when asked for: the
/// gradients after the last cut first, then the stage before it, ...
pub struct StagedBackward {
    /// The loss's value.
    loss: Option<f64>,
    root: Option<Tensor<1>>,
    cuts: Vec<Cut>,
}

impl StagedBackward {
    /// The loss's value.
    pub fn loss(&self) -> Option<f64> {
        self.loss
    }
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
