//! DGC momentum correction with factor masking (Lin et al. 2018; ALGORITHMS.md
//! §3.4): accumulate velocity, not gradients: `u = m·u + g; v = v + u`; select
//! on `v`; zero `v` and `u` where sent, so stale momentum does not push the
//! sent coordinates again.

use super::{remove_sent, Memory};
use crate::message::Message;

#[derive(Clone, Debug, Default)]
pub struct DgcMomentum {
    pub momentum: f32,
    u: Vec<f32>,
    v: Vec<f32>,
}

impl DgcMomentum {
    pub fn new(momentum: f32) -> Self {
        Self { momentum, u: Vec::new(), v: Vec::new() }
    }
}

impl Memory for DgcMomentum {
    fn compensate<'a>(&'a mut self, grad: &'a [f32], _lr: f32) -> &'a [f32] {
        if self.u.len() != grad.len() {
            self.u = vec![0.0; grad.len()];
            self.v = vec![0.0; grad.len()];
        }
        let m = self.momentum;
        for ((u, v), &g) in self.u.iter_mut().zip(&mut self.v).zip(grad) {
            *u = m * *u + g;
            *v += *u;
        }
        &self.v
    }

    fn update(&mut self, sent: &Message) {
        remove_sent(&mut self.v, sent, Some(&mut self.u));
    }

    fn residual(&self) -> &[f32] {
        &self.v
    }

    fn state(&self) -> Vec<&[f32]> {
        vec![&self.u, &self.v]
    }

    fn restore(&mut self, state: &[Vec<f32>]) -> Result<(), crate::StateError> {
        crate::state::expect_buffers("DGC momentum", state, 2)?;
        let (u, v) = (&state[0], &state[1]);
        if u.len() != v.len() {
            let buffer = "DGC's velocity (as long as its momentum)".to_string();
            return Err(crate::StateError::Length { buffer, expected: u.len(), got: v.len() });
        }
        self.u.clone_from(u);
        self.v.clone_from(v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::SparseMessage;

    #[test]
    fn masks_momentum_where_sent() {
        let mut mem = DgcMomentum::new(0.9);
        assert_eq!(mem.compensate(&[1.0, 2.0], 0.0), &[1.0, 2.0]);
        let sent = Message::Sparse(SparseMessage {
            len: 2,
            indices: vec![1],
            values: vec![2.0],
            ..Default::default()
        });
        mem.update(&sent);
        // u = [0.9 + 1, 0 + 1], v = [1 + 1.9, 0 + 1]
        let v = mem.compensate(&[1.0, 1.0], 0.0).to_vec();
        assert!((v[0] - 2.9).abs() < 1e-6 && (v[1] - 1.0).abs() < 1e-6, "{v:?}");
    }
}
