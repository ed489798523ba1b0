//! Moving parameters and gradients between a burn model and flat `Vec<f32>`
//! buffers in the [`GradientLayout`] order.
//!
//! Read-out flattens every tensor inside burn and concatenates them, so one
//! `into_data` crosses to host memory (reading non-contiguous tensors one by
//! one was far slower). The way back is one upload of the whole buffer, cut
//! into per-parameter views inside burn. Parameters that do not require a
//! gradient (BatchNorm's running statistics) are skipped everywhere.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::Gradients;
use burn::tensor::{Device, Tensor, TensorData};

pub use crate::checksum::{checksum, checksum_bytes};
use crate::layout::GradientLayout;

/// Where a parameter's gradient comes from: the [`Gradients`] of
/// `loss.backward()`, or burn's per-parameter [`GradientsParams`] (what
/// burn-train's `Learner` hands over).
pub trait GradSource {
    /// The gradient of `param` (without autodiff), if the loss depends on it.
    fn grad<const D: usize>(&self, param: &Param<Tensor<D>>) -> Option<Tensor<D>>;
}

impl GradSource for Gradients {
    fn grad<const D: usize>(&self, param: &Param<Tensor<D>>) -> Option<Tensor<D>> {
        param.val().grad(self)
    }
}

/// Borrowed gradients, so the caller keeps them (to hand the same gradients
/// to two handles, or to burn afterwards).
impl<G: GradSource> GradSource for &G {
    fn grad<const D: usize>(&self, param: &Param<Tensor<D>>) -> Option<Tensor<D>> {
        (**self).grad(param)
    }
}

impl GradSource for GradientsParams {
    fn grad<const D: usize>(&self, param: &Param<Tensor<D>>) -> Option<Tensor<D>> {
        self.get(param.id)
    }
}

/// The model's trainable parameters' names and shapes, in visit order.
pub fn layout<M: Module>(model: &M) -> GradientLayout {
    struct Shapes {
        path: Vec<String>,
        out: Vec<(String, Vec<usize>)>,
    }
    impl ModuleVisitor for Shapes {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.is_require_grad() {
                self.out.push((self.path.join("."), param.val().dims().to_vec()));
            }
        }
    }
    let mut v = Shapes { path: Vec::new(), out: Vec::new() };
    model.visit(&mut v);
    GradientLayout::new(v.out)
}

/// Flattens a list of tensors into `out` with one read-back.
pub(crate) fn flatten_into(tensors: Vec<Tensor<1>>, out: &mut Vec<f32>) {
    out.clear();
    if tensors.is_empty() {
        return;
    }
    let data = Tensor::cat(tensors, 0).into_data();
    out.extend_from_slice(data.as_slice::<f32>().expect("float parameters are f32"));
}

/// The model's trainable parameter values, flat.
pub fn read_params<M: Module>(model: &M, out: &mut Vec<f32>) {
    read_values(model, true, out);
}

/// The model's buffers (float tensors that take no gradient: BatchNorm's
/// running statistics), flat, in visit order. burn keeps a forward pass's
/// update of a running statistic aside until it is synced: read a model
/// through `train()` or `valid()` (which sync) for the latest values.
pub fn read_buffers<M: Module>(model: &M, out: &mut Vec<f32>) {
    read_values(model, false, out);
}

/// The values of the float tensors that do (`trainable`) or do not take a gradient.
fn read_values<M: Module>(model: &M, trainable: bool, out: &mut Vec<f32>) {
    struct Values(Vec<Tensor<1>>, bool);
    impl ModuleVisitor for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.is_require_grad() == self.1 {
                let t = param.val();
                let n = t.shape().num_elements();
                self.0.push(t.detach().reshape([n]));
            }
        }
    }
    let mut v = Values(Vec::new(), trainable);
    model.visit(&mut v);
    flatten_into(v.0, out);
}

/// The gradients of the model's trainable parameters, flat. A parameter the
/// loss does not depend on gets zeros.
pub fn read_grads<M: Module, G: GradSource>(model: &M, grads: &G, out: &mut Vec<f32>) {
    flatten_into(grad_tensors(model, grads), out);
}

/// The gradient of each trainable parameter, flattened to one dimension and
/// left on its device, in layout order (zeros where the loss does not depend
/// on the parameter).
pub(crate) fn grad_tensors<M: Module, G: GradSource>(model: &M, grads: &G) -> Vec<Tensor<1>> {
    struct Grads<'a, G> {
        grads: &'a G,
        out: Vec<Tensor<1>>,
    }
    impl<G: GradSource> ModuleVisitor for Grads<'_, G> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.is_require_grad() {
                let shape = param.val().shape();
                let n = shape.num_elements();
                let g = self
                    .grads
                    .grad(param)
                    .unwrap_or_else(|| Tensor::zeros(shape, &param.val().device().inner()));
                self.out.push(g.reshape([n]));
            }
        }
    }
    let mut v = Grads { grads, out: Vec::new() };
    model.visit(&mut v);
    v.out
}

/// The error for a parameter whose gradient comes in two backward stages.
pub(crate) fn in_two_stages(name: &str) -> String {
    format!(
        "parameter {name} has a gradient in two backward stages: it is used on both sides of a cut; \
         move the cut so each parameter lies on one side"
    )
}

/// Every stage's gradients of a staged backward pass in one
/// [`GradientsParams`]; a parameter with a gradient in two stages is an error.
pub fn merge_stages<M: Module, G: GradSource>(
    model: &M,
    stages: impl IntoIterator<Item = G>,
) -> Result<GradientsParams, String> {
    struct Merge<'a, G> {
        grads: &'a G,
        path: Vec<String>,
        out: &'a mut GradientsParams,
        twice: Option<String>,
    }
    impl<G: GradSource> ModuleVisitor for Merge<'_, G> {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if !param.is_require_grad() {
                return;
            }
            if let Some(g) = self.grads.grad(param) {
                if self.out.get::<D>(param.id).is_some() {
                    self.twice.get_or_insert_with(|| self.path.join("."));
                }
                self.out.register(param.id, g);
            }
        }
    }
    let mut out = GradientsParams::new();
    for grads in stages {
        let mut v = Merge { grads: &grads, path: Vec::new(), out: &mut out, twice: None };
        model.visit(&mut v);
        if let Some(name) = v.twice {
            return Err(in_two_stages(&name));
        }
    }
    Ok(out)
}

/// The device the model's trainable parameters live on, without autodiff
/// (where gradients and optimizer state live). `None` for a model without any.
pub fn grad_device<M: Module>(model: &M) -> Option<Device> {
    struct First(Option<Device>);
    impl ModuleVisitor for First {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if self.0.is_none() && param.is_require_grad() {
                self.0 = Some(param.val().device().inner());
            }
        }
    }
    let mut v = First(None);
    model.visit(&mut v);
    v.0
}

/// burn gradients for the model's trainable parameters from a flat buffer
/// (layout order): one upload, then a view per parameter, registered under
/// the parameter's id, ready for any burn optimizer.
pub fn grads_params<M: Module>(model: &M, flat: &[f32]) -> GradientsParams {
    struct Register {
        all: Option<Tensor<1>>,
        at: usize,
        out: GradientsParams,
    }
    impl ModuleVisitor for Register {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if !param.is_require_grad() {
                return;
            }
            let shape = param.val().shape();
            let n = shape.num_elements();
            let all = self.all.as_ref().expect("a model with parameters has a device");
            let g: Tensor<D> = all.clone().narrow(0, self.at, n).reshape(shape);
            self.at += n;
            self.out.register(param.id, g);
        }
    }
    let all = grad_device(model).map(|d| Tensor::from_data(TensorData::new(flat.to_vec(), [flat.len()]), &d));
    let mut v = Register { all, at: 0, out: GradientsParams::new() };
    model.visit(&mut v);
    assert_eq!(v.at, flat.len(), "gradient buffer length differs from the model's");
    v.out
}

/// Replaces the model's trainable parameter values by `flat` (layout order),
/// each on the device it was on.
pub fn write_params<M: Module>(model: M, flat: &[f32]) -> M {
    write_values(model, true, flat)
}

/// Replaces the model's buffers by `flat` ([`read_buffers`]' order).
pub fn write_buffers<M: Module>(model: M, flat: &[f32]) -> M {
    write_values(model, false, flat)
}

fn write_values<M: Module>(model: M, trainable: bool, flat: &[f32]) -> M {
    struct Writer<'a> {
        flat: &'a [f32],
        at: usize,
        trainable: bool,
    }
    impl ModuleMapper for Writer<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if param.is_require_grad() != self.trainable {
                return param;
            }
            let (flat, at, trainable) = (self.flat, &mut self.at, self.trainable);
            param.map(|old| {
                let shape = old.shape();
                let n = shape.num_elements();
                let values = flat[*at..*at + n].to_vec();
                *at += n;
                let t = Tensor::from_data(TensorData::new(values, shape), &old.device());
                if trainable {
                    t.require_grad()
                } else {
                    t
                }
            })
        }
    }
    let mut w = Writer { flat, at: 0, trainable };
    let model = model.map(&mut w);
    assert_eq!(w.at, flat.len(), "parameter buffer length differs from the model's");
    model
}

/// The ids of the model's trainable parameters, in layout order. Optimizer
/// state is keyed by them, so a checkpoint keeps them beside the state.
pub fn param_ids<M: Module>(model: &M) -> Vec<u64> {
    struct Ids(Vec<u64>);
    impl ModuleVisitor for Ids {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.is_require_grad() {
                self.0.push(param.id.val());
            }
        }
    }
    let mut v = Ids(Vec::new());
    model.visit(&mut v);
    v.0
}

/// Gives the model's trainable parameters the ids `ids` (layout order), so an
/// optimizer state saved by another process applies to this model.
pub fn assign_param_ids<M: Module>(model: M, ids: &[u64]) -> M {
    struct Assign<'a> {
        ids: &'a [u64],
        at: usize,
    }
    impl ModuleMapper for Assign<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if !param.is_require_grad() {
                return param;
            }
            let (_, value, mapper) = param.consume();
            let id = ParamId::from(self.ids[self.at]);
            self.at += 1;
            Param::from_mapped_value(id, value, mapper)
        }
    }
    let mut a = Assign { ids, at: 0 };
    let model = model.map(&mut a);
    assert_eq!(a.at, ids.len(), "parameter id list length differs from the model's");
    model
}
