//! Half-precision baseline (ALGORITHMS.md §5): values rounded to IEEE f16
//! (round to nearest even; out-of-range values become ±inf), summed by a
//! half-precision allreduce (`Combine::HalfSum`).

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use crate::compressor::{Combine, Compressor, UnitContext};
use crate::memory::MemoryKind;
use crate::message::Message;
use crate::method::Method;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default)]
pub struct Fp16;

impl Compressor for Fp16 {
    fn name(&self) -> &'static str {
        "fp16"
    }

    fn combine(&self) -> Combine {
        Combine::HalfSum
    }

    fn compress(&mut self, input: &[f32], _ctx: &UnitContext, out: &mut Message) {
        let m = out.half_mut();
        m.values.clear();
        m.values.resize(input.len(), 0);
        // u16 bit patterns viewed as f16: same layout, every pattern valid.
        let halves: &mut [half::f16] = m.values.reinterpret_cast_mut();
        halves.convert_from_f32_slice(input);
    }
}

/// fp16's options: none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fp16Config {}

impl Method for Fp16Config {
    fn default_memory(&self) -> MemoryKind {
        MemoryKind::None
    }
    fn build(&self, _shape: &[usize]) -> Box<dyn crate::Compressor> {
        Box::new(Fp16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_half() {
        let g = [1.0f32, -2.5, 1.0e-8, 70000.0, 0.1];
        let mut msg = Message::default();
        Fp16.compress(&g, &UnitContext::default(), &mut msg);
        let mut out = [0.0f32; 5];
        msg.decompress_into(&mut out);
        assert_eq!(out[0], 1.0);
        assert_eq!(out[1], -2.5);
        assert_eq!(out[2], 0.0);
        assert!(out[3].is_infinite());
        assert!((out[4] - 0.1).abs() < 1e-4);
    }
}
