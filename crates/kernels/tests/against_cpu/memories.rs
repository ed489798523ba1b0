//! Error feedback, DGC momentum and scaling in device memory against the CPU.

use super::*;

/// Error feedback over several steps: the device residual and every message
/// equal the CPU's `ErrorFeedback` + compressor, in both residual forms.
#[test]
fn error_feedback_on_the_device_tracks_the_cpu_bit_for_bit() {
    use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
    use gradcomp_kernels::memory::DeviceErrorFeedback;
    let n = 20_011;
    for form in [ResidualForm::Raw, ResidualForm::LrScaled] {
        for name in ["topk", "terngrad"] {
            let mut cpu_ef = ErrorFeedback::new(form);
            let mut dev_ef = DeviceErrorFeedback::new(form);
            let config =
                if name == "topk" { CompressorConfig::topk(0.01) } else { CompressorConfig::terngrad() };
            let mut cpu_c = config.build();
            for step in 0..4u64 {
                let g = gaussian(n, 40 + step);
                let lr = 0.1;
                let acc = cpu_ef.compensate(&g, lr).to_vec();
                // One worker: TernGrad quantizes under its own scaler.
                let ctx = UnitContext { key: RngKey::new(1, 0, step, 0), loss: None };
                let mut cpu = Message::default();
                cpu_c.compress(&acc, &ctx, &mut cpu);
                cpu_ef.update(&cpu);

                let dev_acc = dev_ef.compensate(client(), &DeviceF32::upload(client(), &g), lr).clone();
                assert_eq!(dev_acc.read(client()).unwrap(), acc, "{name} {form:?} step {step}: compensated");
                // TernGrad draws differ by design: feed the CPU's message to the
                // device memory, which must then land on the CPU's residual.
                if name == "topk" {
                    let mut dev = Message::default();
                    select::top_k(client(), &dev_acc, 0.01, SparseWire::default(), &mut dev).unwrap();
                    assert_eq!(dev, cpu, "{name} {form:?} step {step}: message");
                }
                dev_ef.update(client(), &cpu).unwrap();
                let e = dev_ef.residual().unwrap().read(client()).unwrap();
                assert!(
                    e.iter().zip(cpu_ef.residual()).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name} {form:?} step {step}: residual"
                );
            }
        }
    }
}

/// DGC momentum on the device: `u` and `v` equal the CPU's after every step,
/// with sparse messages (masking where sent) and a dense one (masking all).
#[test]
fn dgc_momentum_on_the_device_tracks_the_cpu_bit_for_bit() {
    use gradcomp_compress::memory::{DgcMomentum, Memory};
    use gradcomp_kernels::memory::DeviceDgcMomentum;
    let n = 10_007;
    let mut cpu_m = DgcMomentum::new(0.9);
    let mut dev_m = DeviceDgcMomentum::new(0.9);
    for step in 0..5u64 {
        let g = gaussian(n, 70 + step);
        let v = cpu_m.compensate(&g, 0.1).to_vec();
        let dev_v = dev_m.compensate(client(), &DeviceF32::upload(client(), &g)).clone();
        assert_eq!(dev_v.read(client()).unwrap(), v, "step {step}: velocity");
        let config = if step == 3 { CompressorConfig::fp16() } else { CompressorConfig::topk(0.01) };
        let sent = cpu_message(&config, &v, &UnitContext::default());
        cpu_m.update(&sent);
        dev_m.update(client(), &sent).unwrap();
        let (u, v) = dev_m.state().unwrap();
        let (u, v) = (u.read(client()).unwrap(), v.read(client()).unwrap());
        let [cu, cv] = cpu_m.state()[..] else { panic!("two buffers") };
        assert!(u.iter().zip(cu).all(|(a, b)| a.to_bits() == b.to_bits()), "step {step}: u");
        assert!(v.iter().zip(cv).all(|(a, b)| a.to_bits() == b.to_bits()), "step {step}: v");
    }
    // Out-of-range indices are an error, not a wild write.
    let bad = Message::Sparse(gradcomp_compress::message::SparseMessage {
        len: n,
        indices: vec![n as u32],
        values: vec![1.0],
        ..Default::default()
    });
    assert!(dev_m.update(client(), &bad).is_err());
    // State restored from the host continues where the host left off.
    let (cu, cv) = (cpu_m.state()[0].to_vec(), cpu_m.state()[1].to_vec());
    let mut fresh = DeviceDgcMomentum::new(0.9);
    fresh.restore(client(), &cu, &cv).unwrap();
    let g = gaussian(n, 99);
    let next = cpu_m.compensate(&g, 0.1).to_vec();
    let dev_next = fresh.compensate(client(), &DeviceF32::upload(client(), &g)).read(client()).unwrap();
    assert!(dev_next.iter().zip(&next).all(|(a, b)| a.to_bits() == b.to_bits()), "after restore");
    assert!(fresh.restore(client(), &cu, &cv[1..]).is_err(), "u and v of different lengths");
}

#[test]
fn scaling_on_the_device_is_the_cpus_product_and_leaves_its_input() {
    let g = awkward(5_003, 17);
    let dev = DeviceF32::upload(client(), &g);
    let s = 0.3712f32;
    let out = gradcomp_kernels::elementwise::scaled(client(), &dev, s).unwrap().read(client()).unwrap();
    assert!(out.iter().zip(&g).all(|(o, x)| o.to_bits() == (s * x).to_bits()));
    assert_eq!(dev.read(client()).unwrap(), g, "the input was modified");
    let empty = DeviceF32::from_handle(client().empty(4), 0);
    assert!(gradcomp_kernels::elementwise::scaled(client(), &empty, s)
        .unwrap()
        .read(client())
        .unwrap()
        .is_empty());
}

/// SparseLoCo's decaying error feedback on the device (`e ← 0.95·e + g`)
/// tracks the CPU's memory and messages over several steps.
#[test]
fn decaying_error_feedback_on_the_device_tracks_the_cpu_bit_for_bit() {
    use gradcomp_compress::chunked::SparseLocoConfig;
    use gradcomp_compress::memory::{ErrorFeedback, Memory, ResidualForm};
    use gradcomp_kernels::chunked;
    use gradcomp_kernels::memory::DeviceErrorFeedback;
    let shape = [130, 70];
    let cfg = SparseLocoConfig::default();
    let mut cpu_ef = ErrorFeedback::with_decay(ResidualForm::Raw, cfg.decay);
    let mut dev_ef = DeviceErrorFeedback::with_decay(ResidualForm::Raw, cfg.decay);
    let mut cpu_c = CompressorConfig::Sparseloco(cfg.clone()).build_for(&shape);
    for step in 0..4u64 {
        let g = gaussian(130 * 70, 60 + step);
        let acc = cpu_ef.compensate(&g, 0.1).to_vec();
        let mut cpu = Message::default();
        cpu_c.compress(&acc, &UnitContext::default(), &mut cpu);
        cpu_ef.update(&cpu);
        let dev_acc = dev_ef.compensate(client(), &DeviceF32::upload(client(), &g), 0.1).clone();
        assert_eq!(dev_acc.read(client()).unwrap(), acc, "step {step}: compensated");
        let mut dev = Message::default();
        chunked::compress(client(), &dev_acc, &shape, &cfg.options(), &mut dev).unwrap();
        assert_eq!(dev, cpu, "step {step}: message");
        dev_ef.update(client(), &dev).unwrap();
        let e = dev_ef.residual().unwrap().read(client()).unwrap();
        assert!(
            e.iter().zip(cpu_ef.residual()).all(|(a, b)| a.to_bits() == b.to_bits()),
            "step {step}: residual"
        );
    }
}
