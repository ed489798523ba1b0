//! Zero allocations per call in steady state (issue #2 target): after a
//! warm-up call, compress, encode, decode, accumulate and the memories'
//! compensate/update allocate nothing. Counted by a global allocator, so this
//! file holds one test (tests run on threads that share the counter).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use gradcomp_compress::aggregate::TernarySum;
use gradcomp_compress::codec;
use gradcomp_compress::memory::{DgcMomentum, ErrorFeedback, Memory, ResidualForm};
use gradcomp_compress::{CompressorConfig, Message, RngKey, UnitContext, UnitRng};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCS.load(Ordering::Relaxed);
    f();
    ALLOCS.load(Ordering::Relaxed) - before
}

#[test]
fn steady_state_calls_do_not_allocate() {
    let mut r = UnitRng::from_parts(&[1]);
    let x: Vec<f32> = (0..100_003).map(|_| r.next_gaussian() as f32).collect();
    for name in CompressorConfig::NAMES {
        let mut cfg = CompressorConfig::named(name).unwrap();
        cfg.set_density(0.01);
        if let CompressorConfig::Powersgd(p) = &mut cfg {
            p.start_iter = 0; // compress from the first step
        }
        // PowerSGD sees the buffer as a one-column matrix.
        let mut c = cfg.build_for(&[x.len(), 1]);
        let mut contribution = Vec::new();
        let mut ef = ErrorFeedback::new(ResidualForm::Raw);
        let mut dgc = DgcMomentum::new(0.9);
        let mut msg = Message::default();
        let mut back = Message::default();
        let mut bytes = Vec::new();
        let mut out = vec![0.0f32; x.len()];
        let mut server = TernarySum::default();
        let mut step = |s: u64, c: &mut Box<dyn gradcomp_compress::Compressor>| {
            let ctx = UnitContext { key: RngKey::new(3, 0, s, 0), ..Default::default() };
            // Same input each step, so data-dependent counts repeat. One
            // worker's rounds: the combined values are its own.
            for round in 0..c.rounds() {
                contribution.clear();
                if c.round_contribution(round, &x, &ctx, &mut contribution).is_some() {
                    c.round_result(round, &contribution, 1);
                }
            }
            c.compress(&x, &ctx, &mut msg);
            bytes.clear();
            codec::encode(&msg, 0, &mut bytes);
            codec::decode(&bytes, &mut back).unwrap();
            codec::accumulate(&bytes, 1.0, &mut out).unwrap();
            let acc = ef.compensate(&x, 0.1);
            assert_eq!(acc.len(), x.len());
            ef.update(&msg);
            dgc.compensate(&x, 0.1);
            dgc.update(&msg);
            if name == "terngrad" {
                server.reset(x.len());
                server.add_encoded(&bytes).unwrap();
            }
        };
        step(0, &mut c);
        step(1, &mut c);
        let n = allocations(|| step(2, &mut c));
        assert_eq!(n, 0, "{name}: {n} allocations in a steady-state step");
    }
}
