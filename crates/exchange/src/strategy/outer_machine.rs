//! The outer-round machine: local updates' rounds, run in place or, for
//! Streaming DiLoCo's overlap, a round's first half on a thread of its own.
//! Both fronts run their rounds through it (the burn front's handle over
//! MPI or the in-process group, the PyTorch front over torch.distributed):
//! one implementation of the thread, the round in flight, start and merge.
//!
//! With a delay τ ≥ 1 a fragment's round starts τ steps before its result
//! is merged ([`OuterRounds`]). Run in place, the start (form the change,
//! exchange it, step θ_outer) blocks the step it begins; here it runs on a
//! thread over a second channel of the collective
//! ([`Collective::duplicate`]) while the caller's next steps compute, and
//! the caller's next call, at the merge, waits for it ("lands" it). The
//! arithmetic is the blocking form's, bit for bit: the start reads a
//! snapshot of the model taken where it begins, and the rounds' buffers are
//! touched by one thread at a time.
//!
//! One round is in flight at a time: a start that comes before the previous
//! round's merge (τ ≥ H/P) first lands it, so such a configuration hides
//! H/P steps, not τ. Eager and delayed outer steps (ALGORITHMS.md §2.3)
//! keep a round in flight through the whole next period: at each round the
//! last one lands, [`OuterRounds::step_ahead`] steps θ_m on its average and
//! the new change goes out. A collective with no second channel (an MPI without
//! `MPI_THREAD_MULTIPLE`) leaves the rounds blocking; the PyTorch front's
//! second channel is a process group of its own.

use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

use gradcomp_comm::{Collective, Metered, StepBytes};
use gradcomp_compress::StateError;

use super::outer_rounds::OuterRounds;
use super::outer_schedule::OuterSchedule;
use crate::error::ExchangeError;
use crate::{StateBuffers, Unit};

/// What travels to the round thread and back.
struct Desk {
    rounds: OuterRounds,
    /// The second channel, metered: its bytes are the rounds'.
    channel: Option<Metered<Box<dyn Collective>>>,
    /// The model where the round in flight began.
    snapshot: Vec<f32>,
    /// The round in flight's error, for the call that lands it.
    failed: Option<ExchangeError>,
}

enum Slot {
    Here(Box<Desk>),
    Away(JoinHandle<Box<Desk>>),
    /// The round thread panicked (or could not be started): the rounds are lost.
    Lost(String),
}

/// The outer rounds of a strategy, run in place or overlapped.
pub(crate) struct OuterRoundMachine {
    slot: Mutex<Slot>,
    /// The rounds' units and [`OuterRounds::merges_whole`], which the
    /// caller may ask while a round is in flight.
    units: Vec<Unit>,
    whole: bool,
    /// Whether to overlap: a delay, or eager or delayed outer steps, leave
    /// steps to hide a start behind.
    overlap: bool,
    /// Whether the collective was asked for a second channel yet.
    asked: bool,
    /// Bytes of landed rounds not yet taken.
    bytes: StepBytes,
}

/// Waits for a round in flight, leaving the slot `Here` or `Lost`.
fn land(slot: &mut Slot) {
    if matches!(slot, Slot::Away(_)) {
        let Slot::Away(handle) = std::mem::replace(slot, Slot::Lost(String::new())) else { unreachable!() };
        *slot = match handle.join() {
            Ok(desk) => Slot::Here(desk),
            Err(p) => Slot::Lost(
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into()),
            ),
        };
    }
}

/// The rounds in `slot`, landed.
fn desk_in(slot: &mut Mutex<Slot>) -> Result<&mut Desk, ExchangeError> {
    let slot = slot.get_mut().unwrap_or_else(|e| e.into_inner());
    land(slot);
    match slot {
        Slot::Here(desk) => Ok(desk),
        Slot::Lost(why) => Err(lost(why)),
        Slot::Away(_) => unreachable!("landed"),
    }
}

fn lost(why: &str) -> ExchangeError {
    ExchangeError::Thread(format!("the round thread failed ({why}); resume from the last checkpoint"))
}

impl OuterRoundMachine {
    /// The machine of `rounds`; `overlap`: run their starts on the round
    /// thread (with a delay τ ≥ 1 or eager or delayed outer steps).
    pub fn new(rounds: OuterRounds, overlap: bool) -> Self {
        Self {
            units: rounds.units().to_vec(),
            whole: rounds.merges_whole(),
            overlap,
            asked: false,
            bytes: StepBytes::default(),
            slot: Mutex::new(Slot::Here(Box::new(Desk {
                rounds,
                channel: None,
                snapshot: Vec::new(),
                failed: None,
            }))),
        }
    }

    /// The rounds, landed, through `&self` (a checkpoint's read).
    fn landed(&self) -> MutexGuard<'_, Slot> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        land(&mut slot);
        slot
    }

    /// Whether a merge takes the whole model with nothing mixed in.
    pub fn merges_whole(&self) -> bool {
        self.whole
    }

    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// The rounds due at `step` on `params`: the round in flight landed
    /// and merged, then the rounds starting here started (on the round
    /// thread when overlapping, else in place, start before merge as
    /// [`OuterRounds`] documents). The first call asks `c` for a second
    /// channel when overlapping (every worker makes it at the same step).
    pub fn average(
        &mut self,
        step: u64,
        params: &mut [f32],
        c: &mut dyn Collective,
    ) -> Result<(), ExchangeError> {
        let ask = self.overlap && !self.asked;
        self.asked = true;
        let desk = desk_in(&mut self.slot)?;
        let starts = desk.rounds.schedule().starts_any(step);
        if let Some(c) = &mut desk.channel {
            self.bytes.add(&c.meter_mut().take_step());
        }
        if let Some(e) = desk.failed.take() {
            return Err(e);
        }
        if ask {
            desk.channel = c.duplicate()?.map(Metered::new);
        }
        let first = !desk.rounds.anchored(params.len());
        if starts && !first {
            // Eager or delayed: the landed round's average is applied now.
            desk.rounds.step_ahead(params, c.world_size());
        }
        if desk.channel.is_none() || first {
            desk.rounds.start(step, params, c)?;
            desk.rounds.merge(step, params);
            return Ok(());
        }
        // A start and a merge at one step touch different fragments (τ < H),
        // so merging first leaves the start's snapshot as the blocking form reads it.
        desk.rounds.merge(step, params);
        if !starts {
            return Ok(());
        }
        desk.snapshot.resize(params.len(), 0.0);
        if !desk.rounds.steps_ahead() {
            // (A step ahead has taken the change already: the start reads
            // only the model's length.)
            desk.snapshot.copy_from_slice(params);
        }
        let slot = self.slot.get_mut().unwrap_or_else(|e| e.into_inner());
        let Slot::Here(mut desk) = std::mem::replace(slot, Slot::Lost("it was never started".into())) else {
            unreachable!("landed above")
        };
        let spawned = std::thread::Builder::new().name("gradcomp-rounds".into()).spawn(move || {
            let channel = desk.channel.as_mut().expect("an overlapping desk has a channel");
            if let Err(e) = desk.rounds.start(step, &desk.snapshot, channel) {
                desk.failed = Some(e);
            }
            desk
        });
        match spawned {
            Ok(handle) => {
                *slot = Slot::Away(handle);
                Ok(())
            }
            Err(e) => Err(lost(&format!("it could not be started: {e}"))),
        }
    }

    /// The bytes of the rounds landed since the last call (at a merge, or
    /// by a checkpoint's read); a round in flight counts once landed.
    pub fn take_bytes(&mut self) -> StepBytes {
        if let Slot::Here(desk) = self.slot.get_mut().unwrap_or_else(|e| e.into_inner()) {
            if let Some(c) = &mut desk.channel {
                self.bytes.add(&c.meter_mut().take_step());
            }
        }
        std::mem::take(&mut self.bytes)
    }

    /// Waits for the round in flight; its failure is an error here (and
    /// again at its merge, which stays due). A non-finite model keeps its
    /// own error (the workers and the round), which a caller acts on.
    pub fn wait(&mut self) -> Result<(), ExchangeError> {
        let desk = desk_in(&mut self.slot)?;
        match &desk.failed {
            Some(ExchangeError::NonFiniteModel { step, ranks }) => {
                Err(ExchangeError::NonFiniteModel { step: *step, ranks: ranks.clone() })
            }
            Some(e) => Err(lost(&e.to_string())),
            None => Ok(()),
        }
    }

    /// The next round's contributors ([`OuterRounds::set_contributors`]),
    /// a round in flight landed first.
    pub fn set_contributors(&mut self, contributors: usize) -> Result<(), ExchangeError> {
        desk_in(&mut self.slot)?.rounds.set_contributors(contributors);
        Ok(())
    }

    /// Replaces the rounds' schedule, a round in flight landed first.
    pub fn set_schedule(&mut self, schedule: OuterSchedule) -> Result<(), ExchangeError> {
        desk_in(&mut self.slot)?.rounds.set_schedule(schedule);
        Ok(())
    }

    pub fn set_density(&mut self, rho: f64) {
        if let Ok(d) = desk_in(&mut self.slot) {
            d.rounds.set_density(rho);
        }
    }

    /// The rounds' state, the round in flight landed first (its start is
    /// then part of θ_outer; its merge follows from the step).
    pub fn state(&self, s: &mut StateBuffers) -> Result<(), ExchangeError> {
        match &*self.landed() {
            Slot::Here(desk) => match &desk.failed {
                Some(e) => Err(lost(&e.to_string())),
                None => desk.rounds.state(s),
            },
            Slot::Lost(why) => Err(lost(why)),
            Slot::Away(_) => unreachable!("landed"),
        }
    }

    pub fn restore(&mut self, s: &StateBuffers) -> Result<(), StateError> {
        let desk = desk_in(&mut self.slot)
            .map_err(|e| StateError::Missing { buffer: format!("the outer rounds (lost: {e})") })?;
        desk.failed = None;
        desk.rounds.restore(s)
    }
}

impl Drop for OuterRoundMachine {
    /// A round in flight finishes before its channel goes (a peer waiting
    /// in it would otherwise see this worker fail).
    fn drop(&mut self) {
        land(self.slot.get_mut().unwrap_or_else(|e| e.into_inner()));
    }
}

#[cfg(test)]
mod tests {
    use gradcomp_comm::{CommError, InProcessGroup};
    use gradcomp_compress::CompressorConfig;

    use super::*;
    use crate::config::{DataParallelConfig, Overlap, StrategyConfig};
    use crate::layout::GradientLayout;
    use crate::strategy::OuterSchedule;

    fn layout() -> GradientLayout {
        GradientLayout::new([
            ("a".to_string(), vec![3]),
            ("b".to_string(), vec![2]),
            ("c".to_string(), vec![3]),
            ("d".to_string(), vec![4]),
        ])
    }

    fn rounds(st: &StrategyConfig, compressor: &str, overlap: bool) -> OuterRoundMachine {
        let cfg =
            DataParallelConfig::new(CompressorConfig::named(compressor).unwrap()).with_strategy(st.clone());
        let rounds = OuterRounds::new(&cfg, &layout(), 2, compressor != "dense").unwrap();
        OuterRoundMachine::new(rounds, overlap && (st.delay > 0 || st.overlap.whole_period()))
    }

    /// What one worker saw: its model after every step, the bytes its rounds
    /// moved, and at each start step whether the round was left in flight.
    type Seen = (Vec<Vec<f32>>, u64, Vec<bool>);

    /// Two workers, `steps` local steps, the rounds called where due; a
    /// checkpoint of the rounds is read after step `read_at` (mid-overlap).
    fn run(st: &StrategyConfig, compressor: &str, overlap: bool, steps: u64, read_at: u64) -> Vec<Seen> {
        InProcessGroup::new(2)
            .run(|c| {
                let r = c.rank();
                let mut c = Metered::new(c);
                let mut rounds = rounds(st, compressor, overlap);
                let schedule = OuterSchedule::new(st);
                let mut params: Vec<f32> = (0..12).map(|j| j as f32 * 0.125 - 0.5).collect();
                let (mut seen, mut away) = (Vec::new(), Vec::new());
                let mut sent = 0;
                for t in 0..=steps {
                    if t > 0 {
                        let change = |j: usize| ((r * 5 + t as usize * 3 + j * 7) % 11) as f32 * 0.0625 - 0.3;
                        params.iter_mut().enumerate().for_each(|(j, p)| *p += change(j));
                    }
                    if schedule.due(t) {
                        rounds.average(t, &mut params, &mut c).unwrap();
                        sent += rounds.take_bytes().sent();
                        if t > 0 && schedule.starts_any(t) {
                            away.push(matches!(*rounds.slot.lock().unwrap(), Slot::Away(_)));
                        }
                    }
                    if t == read_at {
                        let mut s = StateBuffers::new();
                        rounds.state(&mut s).unwrap();
                        assert!(s[crate::state::ANCHOR_KEY].len() == 12);
                    }
                    seen.push(params.clone());
                }
                // A checkpoint's read lands the last round in flight.
                rounds.state(&mut StateBuffers::new()).unwrap();
                sent += rounds.take_bytes().sent();
                (seen, sent + c.meter().total().sent(), away)
            })
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn overlapped_rounds_equal_blocking_ones_bit_for_bit_and_are_left_in_flight() {
        for (st, compressor) in [
            (StrategyConfig::local(4).with_streaming(2, 2), "dense"),
            (StrategyConfig::local(8).with_streaming(4, 1), "dense"),
            (StrategyConfig::local(8).with_streaming(2, 3).with_compress_change(true), "topk"),
            (StrategyConfig::local(6).with_streaming(1, 2), "terngrad"),
            (StrategyConfig::local(4).with_overlap(Overlap::Eager), "dense"),
            (StrategyConfig::local(5).with_overlap(Overlap::Delayed).with_compress_change(true), "fp4"),
            (StrategyConfig::local(4).with_overlap(Overlap::Eager).with_compress_change(true), "topk"),
            (StrategyConfig::local(8).with_streaming(2, 2).with_overlap(Overlap::Eager), "dense"),
            (
                StrategyConfig::local(8)
                    .with_streaming(4, 1)
                    .with_overlap(Overlap::Eager)
                    .with_compress_change(true),
                "fp4",
            ),
        ] {
            let blocking = run(&st, compressor, false, 30, 13);
            let overlapped = run(&st, compressor, true, 30, 13);
            for w in 0..2 {
                assert_eq!(overlapped[w].0, blocking[w].0, "{st:?} {compressor}: worker {w}'s models");
                assert_eq!(overlapped[w].1, blocking[w].1, "{st:?} {compressor}: the rounds' bytes");
                assert!(overlapped[w].2.iter().all(|&a| a), "{st:?}: every start runs on the round thread");
                assert!(blocking[w].2.iter().all(|&a| !a), "{st:?}: nothing in flight without a delay");
                assert!(!overlapped[w].2.is_empty());
            }
            assert!(blocking[0].1 > 0);
        }
    }

    #[test]
    fn a_peer_lost_during_a_round_in_flight_is_an_error_at_the_merge_and_at_a_checkpoint() {
        let st = StrategyConfig::local(4).with_streaming(1, 2);
        let results = InProcessGroup::new(2)
            .run(|mut c| {
                let mut rounds = rounds(&st, "dense", true);
                let mut params = vec![0.5f32; 12];
                rounds.average(0, &mut params, &mut c).unwrap();
                if c.rank() == 1 {
                    return Ok(()); // worker 1 leaves: its channels drop
                }
                params[0] = 1.0;
                rounds.average(2, &mut params, &mut c).unwrap(); // the start, in flight
                let mut s = StateBuffers::new();
                let at_checkpoint = rounds.state(&mut s).unwrap_err().to_string();
                assert!(at_checkpoint.contains("round thread failed"), "{at_checkpoint}");
                rounds.average(4, &mut params, &mut c)
            })
            .unwrap();
        match &results[0] {
            Ok(Err(ExchangeError::Comm(CommError::PeerFailed { rank: 1 }))) => {}
            other => panic!("worker 0 got {other:?}"),
        }
    }
}
