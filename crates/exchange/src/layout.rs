//! The flat gradient layout: where each parameter's gradient lives in the one
//! `Vec<f32>` a worker reads out per step. Every worker builds it from the
//! same model definition, so it is identical everywhere; its fingerprint is
//! compared across workers before training starts.

/// One parameter's place in the flat buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamSlot {
    pub name: String,
    pub offset: usize,
    pub len: usize,
    pub shape: Vec<usize>,
}

/// The table of [`ParamSlot`]s, in model order, without gaps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GradientLayout {
    slots: Vec<ParamSlot>,
    total: usize,
}

impl GradientLayout {
    /// Lays out parameters of the given names and shapes one after another.
    pub fn new(params: impl IntoIterator<Item = (String, Vec<usize>)>) -> Self {
        let mut total = 0;
        let slots = params
            .into_iter()
            .map(|(name, shape)| {
                let len = shape.iter().product();
                let slot = ParamSlot { name, offset: total, len, shape };
                total += len;
                slot
            })
            .collect();
        Self { slots, total }
    }

    pub fn slots(&self) -> &[ParamSlot] {
        &self.slots
    }

    /// Elements in the flat buffer.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The slice of `flat` holding parameter `i`.
    pub fn view<'a>(&self, flat: &'a [f32], i: usize) -> &'a [f32] {
        let s = &self.slots[i];
        &flat[s.offset..s.offset + s.len]
    }

    /// Index of the output layer's first slot: the last tensor of two or more
    /// dimensions (its weight) and everything after it (its bias). What
    /// `exclude.last_layer` keeps dense; 0 for a model of vectors only.
    pub fn output_layer_start(&self) -> usize {
        self.slots.iter().rposition(|s| s.shape.len() >= 2).unwrap_or(0)
    }

    /// The slot holding flat index `j`.
    pub fn slot_of(&self, j: usize) -> Option<&ParamSlot> {
        self.slots.iter().find(|s| j < s.offset + s.len)
    }

    /// A 64-bit FNV-1a hash of names and shapes, for comparing layouts across workers.
    pub fn fingerprint(&self) -> u64 {
        let mut bytes = Vec::new();
        for s in &self.slots {
            bytes.extend_from_slice(s.name.as_bytes());
            bytes.push(0);
            for &d in &s.shape {
                bytes.extend_from_slice(&(d as u64).to_le_bytes());
            }
            bytes.push(1);
        }
        crate::checksum::checksum_bytes(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_contiguous_and_fingerprints_see_shapes() {
        let l = GradientLayout::new([("w".to_string(), vec![3, 4]), ("b".to_string(), vec![4])]);
        assert_eq!(l.total(), 16);
        assert_eq!(l.slots()[1].offset, 12);
        let flat: Vec<f32> = (0..16).map(|i| i as f32).collect();
        assert_eq!(l.view(&flat, 1), &[12.0, 13.0, 14.0, 15.0]);
        let m = GradientLayout::new([("w".to_string(), vec![4, 3]), ("b".to_string(), vec![4])]);
        assert_ne!(l.fingerprint(), m.fingerprint());
        assert_eq!(l.output_layer_start(), 0);
        let three = GradientLayout::new([
            ("a.weight".to_string(), vec![4, 3]),
            ("a.bias".to_string(), vec![4]),
            ("out.weight".to_string(), vec![2, 4]),
            ("out.bias".to_string(), vec![2]),
        ]);
        assert_eq!(three.output_layer_start(), 2);
        assert_eq!(three.slot_of(13).unwrap().name, "a.bias");
        assert!(three.slot_of(100).is_none());
        assert_eq!(l.fingerprint(), l.clone().fingerprint());
    }
}
