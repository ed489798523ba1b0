//! What does not change from step to step: the compression units, how each
//! travels (its [`Route`], from the route table in `route.rs`), and the
//! buckets.

use std::ops::Range;

use gradcomp_comm::ServerPlacement;
use gradcomp_compress::Combine;

use super::recipe::Recipe;
use super::route::{CodeWidth, Route};
use crate::config::{CompressionConfig, Granularity, Topology};
use crate::layout::GradientLayout;

/// One compression unit: a range of the flat gradient, and how it travels
/// (the plan's record of it, fixed for the run).
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    pub id: u32,
    pub name: String,
    pub offset: usize,
    pub len: usize,
    /// The tensor's shape (`[len]` for the global unit).
    pub shape: Vec<usize>,
    /// Kept uncompressed by policy (`compression.exclude`): one reason for `uncompressed`.
    pub excluded: bool,
    /// Travels uncompressed: excluded, the dense compressor, or a tensor the
    /// compressor leaves alone (PowerSGD's vectors). No memory; no message
    /// unless the route needs an encoding.
    pub uncompressed: bool,
    /// Has a memory that is not the identity; its compensated gradient is
    /// the memory's buffer (`Memory::residual` between compensate and update).
    pub has_memory: bool,
    /// Its error feedback holds lr-scaled residuals: the aggregate is divided
    /// by the learning rate to come back to gradient units.
    pub lr_scaled: bool,
    /// How its workers' messages combine (an uncompressed unit's: a dense
    /// sum); per worker (`Route::Gather` or `Route::Server`): averaged, voted
    /// on (signSGD, Signum), or the senders' mean (SparseLoCo, DeMo).
    pub combine: Combine,
    /// The collective its message travels in.
    pub route: Route,
}

/// The units, their routes and the buckets, fixed for the run.
pub(crate) struct Plan {
    /// The units in layout order, each with how it travels.
    pub units: Vec<Unit>,
    pub code_width: CodeWidth,
    pub topology: Topology,
    pub placement: ServerPlacement,
    /// Runs of consecutive units, in the order they are exchanged.
    pub buckets: Vec<Range<usize>>,
}

impl Plan {
    /// Units from the layout (`exclude.last_layer` keeps the layout's output
    /// layer, [`GradientLayout::output_layer_start`], dense), for `workers`
    /// workers.
    pub(crate) fn new(
        layout: &GradientLayout,
        recipe: &Recipe,
        c: &CompressionConfig,
        granularity: Granularity,
        (topology, placement): (Topology, ServerPlacement),
        workers: usize,
    ) -> Plan {
        let mut units = units(layout, c, granularity);
        let nothing = recipe.compresses_nothing();
        let combine = recipe.combine;
        for u in &mut units {
            u.uncompressed = u.excluded || nothing || !recipe.compresses(&u.shape);
            u.has_memory = !u.uncompressed && recipe.has_memory();
            u.lr_scaled = u.has_memory && recipe.lr_scaled();
            u.combine = if u.uncompressed { Combine::DenseSum } else { combine };
            // The configuration's check refused a topology that cannot carry
            // the compressor (`DataParallelConfig::validate`, from the same table).
            u.route = Route::of(u.uncompressed, topology, combine)
                .expect("a validated configuration's topology carries its compressor");
        }
        let lens: Vec<usize> = units.iter().map(|u| u.len).collect();
        let buckets = cut_buckets(&lens, bucket_bytes(c.bucket_mb));
        Plan { units, code_width: CodeWidth::for_workers(workers), topology, placement, buckets }
    }

    /// Elements in all units: the flat gradient's length.
    pub(crate) fn total(&self) -> usize {
        self.units.last().map_or(0, |u| u.offset + u.len)
    }

    /// The units of buckets `group`, a run of consecutive buckets.
    pub(crate) fn units_of(&self, group: Range<usize>) -> Range<usize> {
        let (first, last) = (&self.buckets[group.start], &self.buckets[group.end - 1]);
        first.start.min(last.start)..first.end.max(last.end)
    }

    /// Whether bucket `b` has a unit on `route`. (Which collectives a bucket
    /// calls depends on the configuration only, so every worker calls the
    /// same ones.)
    pub(crate) fn has(&self, b: usize, route: Route) -> bool {
        self.units[self.buckets[b].clone()].iter().any(|u| u.route == route)
    }

    /// Bucket `b`'s units on `route`, in order.
    pub(crate) fn on_route(&self, b: usize, route: Route) -> impl Iterator<Item = &Unit> {
        self.units[self.buckets[b].clone()].iter().filter(move |u| u.route == route)
    }

    /// Adds the values of `ranges` (flat gradient ranges a stage filled) to
    /// the units' counts of filled values.
    pub(crate) fn count_filled(&self, ranges: &[Range<usize>], filled: &mut [usize]) {
        for r in ranges {
            // Units are sorted by offset: start at the one holding r.start.
            let first = self.units.partition_point(|u| u.offset + u.len <= r.start);
            for (u, unit) in self.units.iter().enumerate().skip(first) {
                if unit.offset >= r.end {
                    break;
                }
                filled[u] += r.end.min(unit.offset + unit.len) - r.start.max(unit.offset);
            }
        }
    }

    /// Divides unit `u`'s aggregate by `lr` if its residuals are lr-scaled.
    pub(crate) fn to_gradient_units(&self, u: usize, out: &mut [f32], lr: f32) {
        let unit = &self.units[u];
        if unit.lr_scaled {
            let inv = 1.0 / lr;
            out[unit.offset..unit.offset + unit.len].iter_mut().for_each(|o| *o *= inv);
        }
    }
}

/// The compression units of `layout`: one, or one per tensor with the
/// excluded ones marked; how each travels is [`Plan::new`]'s to fill in.
fn units(layout: &GradientLayout, c: &CompressionConfig, granularity: Granularity) -> Vec<Unit> {
    let unit = |id, name: &str, offset, len, shape, excluded| Unit {
        id,
        name: name.to_string(),
        offset,
        len,
        shape,
        excluded,
        uncompressed: excluded,
        has_memory: false,
        lr_scaled: false,
        combine: Combine::DenseSum,
        route: Route::SumF32,
    };
    if granularity == Granularity::Global {
        let len = layout.total();
        return vec![unit(0, "global", 0, len, vec![len], false)];
    }
    let output_start = layout.output_layer_start();
    layout
        .slots()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let excluded = s.len < c.exclude.min_size
                || (c.exclude.last_layer && i >= output_start)
                || (c.exclude.biases && s.shape.len() <= 1);
            unit(i as u32, &s.name, s.offset, s.len, s.shape.clone(), excluded)
        })
        .collect()
}

/// Cuts units of `unit_lens` values into runs of at least `bucket_bytes` bytes of f32 values
/// (the first run holds whatever is left), from the last unit backwards:
/// backpropagation finishes the output layers first, so DDP sends them
/// first. Units are never split. Returned in exchange order.
pub fn cut_buckets(unit_lens: &[usize], bucket_bytes: u64) -> Vec<Range<usize>> {
    let mut buckets = Vec::new();
    let (mut end, mut bytes) = (unit_lens.len(), 0u64);
    for u in (0..unit_lens.len()).rev() {
        bytes += 4 * unit_lens[u] as u64;
        if bytes >= bucket_bytes && u > 0 {
            buckets.push(u..end);
            (end, bytes) = (u, 0);
        }
    }
    if end > 0 || buckets.is_empty() {
        buckets.push(0..end);
    }
    buckets
}

/// `compression.bucket_mb` in bytes.
pub fn bucket_bytes(bucket_mb: f64) -> u64 {
    (bucket_mb * (1u64 << 20) as f64) as u64
}
