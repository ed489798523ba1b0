//! Moving parameters and gradients between a burn model and flat `Vec<f32>`
//! buffers in the [`GradientLayout`] order.
//!
//! Read-out flattens every tensor inside burn and concatenates them, so one
//! `into_data` crosses to host memory (reading non-contiguous tensors one by
//! one was far slower). Write-back replaces each parameter's value, keeping
//! its id, so the model is ready for the next forward pass.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::Gradients;
use burn::tensor::{Device, Tensor, TensorData};

use crate::layout::GradientLayout;

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
fn flatten_into(tensors: Vec<Tensor<1>>, out: &mut Vec<f32>) {
    out.clear();
    if tensors.is_empty() {
        return;
    }
    let data = Tensor::cat(tensors, 0).into_data();
    out.extend_from_slice(data.as_slice::<f32>().expect("float parameters are f32"));
}

/// The model's trainable parameter values, flat.
pub fn read_params<M: Module>(model: &M, out: &mut Vec<f32>) {
    struct Values(Vec<Tensor<1>>);
    impl ModuleVisitor for Values {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.is_require_grad() {
                let t = param.val();
                let n = t.shape().num_elements();
                self.0.push(t.detach().reshape([n]));
            }
        }
    }
    let mut v = Values(Vec::new());
    model.visit(&mut v);
    flatten_into(v.0, out);
}

/// The gradients of the model's trainable parameters after `backward`, flat.
/// A parameter the loss does not depend on gets zeros.
pub fn read_grads<M: Module>(model: &M, grads: &Gradients, out: &mut Vec<f32>) {
    struct Grads<'a> {
        grads: &'a Gradients,
        out: Vec<Tensor<1>>,
    }
    impl ModuleVisitor for Grads<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if param.is_require_grad() {
                let t = param.val();
                let n = t.shape().num_elements();
                let g = t.grad(self.grads).unwrap_or_else(|| Tensor::zeros(t.shape(), &t.device().inner()));
                self.out.push(g.reshape([n]));
            }
        }
    }
    let mut v = Grads { grads, out: Vec::new() };
    model.visit(&mut v);
    flatten_into(v.out, out);
}

/// Replaces the model's trainable parameter values by `flat` (layout order).
pub fn write_params<M: Module>(model: M, flat: &[f32], device: &Device) -> M {
    struct Writer<'a> {
        flat: &'a [f32],
        at: usize,
        device: &'a Device,
    }
    impl ModuleMapper for Writer<'_> {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            if !param.is_require_grad() {
                return param;
            }
            let device = self.device;
            let (flat, at) = (self.flat, &mut self.at);
            param.map(|old| {
                let shape = old.shape();
                let n = shape.num_elements();
                let values = flat[*at..*at + n].to_vec();
                *at += n;
                Tensor::from_data(TensorData::new(values, shape), device).require_grad()
            })
        }
    }
    let mut w = Writer { flat, at: 0, device };
    let model = model.map(&mut w);
    assert_eq!(w.at, flat.len(), "parameter buffer length differs from the model's");
    model
}
