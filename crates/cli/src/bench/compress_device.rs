//! `gradcomp bench compress --device wgpu|cuda`: the device kernels of
//! gradcomp-kernels on a gradient already in device memory.
//!
//! Every timed call ends with the compressed payload on the host (that read
//! is how the call synchronizes with the device), so a figure is what a
//! training step pays: kernels, launch and the payload's transfer. The read
//! pass is the statistics kernel (one pass over the input, a few bytes per
//! cube back), the device's cost floor for touching every element once.

use std::time::Duration;

use anyhow::{anyhow, Result};
use gradcomp_compress::{codec, CompressorConfig, Message, RngKey, UnitContext, UnitRng};
use gradcomp_kernels::aggregate::TernaryCodes;
use gradcomp_kernels::{reduce, DeviceCompressor, DeviceF32};

use super::compress_cases::{config_for, density_cases, emit, Row};
use super::compress_model::matrix_shape;
use super::timing::median_seconds;

pub fn run(
    device: &str,
    sizes: &[usize],
    densities: &[f64],
    names: &[&str],
    seed: u64,
    min_time: Duration,
    json: bool,
) -> Result<()> {
    let client = gradcomp_kernels::device::client(device).map_err(|e| anyhow!("{e}"))?;
    if !json {
        println!("gradcomp bench compress --device {device}: f32 input ~ N(0,1) in device memory, GB/s of dense input");
        println!("(each compress ends with its payload on the host; ops without a device kernel are listed at the end)");
        println!(
            "{:<10} {:<17} {:>10} {:>8} {:>11} {:>9} {:>8} {:>10}",
            "compressor", "op", "elements", "density", "ms", "GB/s", "x read", "selected"
        );
    }
    let on_device: Vec<&str> =
        names.iter().copied().filter(|n| DeviceCompressor::new(&config_for(n, None), &[]).is_ok()).collect();
    let missing: Vec<&str> = names.iter().copied().filter(|n| !on_device.contains(n)).collect();
    for &n in sizes {
        let mut rng = UnitRng::from_parts(&[seed, n as u64]);
        let host: Vec<f32> = (0..n).map(|_| rng.next_gaussian() as f32).collect();
        let x = DeviceF32::upload(&client, &host);
        let read = median_seconds(min_time, 5, || {
            reduce::sum(&client, &x).expect("device read");
        });
        let row = |name: &str, op: &str, density: Option<f64>, secs: f64, msg: &Message| Row {
            compressor: name.into(),
            op: op.into(),
            elements: n,
            density,
            seconds: secs,
            gbytes_per_s: 4.0 * n as f64 / secs / 1e9,
            ratio_to_read_pass: read / secs,
            selected: msg.selected(),
            wire_bytes: codec::encoded_len(msg),
        };
        print_row(&row("read_pass", "stats", None, read, &Message::Dense(Default::default())), json);
        for &name in &on_device {
            for density in density_cases(name, densities) {
                let config = config_for(name, density);
                let mut msg = Message::default();
                let secs = time_compress(&client, &x, &config, n, min_time, &mut msg)?;
                print_row(&row(name, "compress", density, secs, &msg), json);
                if name == "terngrad" {
                    let secs = ternary_aggregate(&client, &msg, n, min_time)?;
                    print_row(&row(name, "decode_aggregate", None, secs, &msg), json);
                }
            }
        }
    }
    if !missing.is_empty() && !json {
        println!("\nno device kernel (CPU only): {}", missing.join(", "));
    }
    Ok(())
}

/// Prints one row: a JSON line, or a line of the table.
fn print_row(r: &Row, json: bool) {
    if json {
        emit(true, r);
    } else {
        let density = r.density.map_or("-".to_string(), |d| d.to_string());
        println!(
            "{:<10} {:<17} {:>10} {:>8} {:>11.4} {:>9.2} {:>8.3} {:>10}",
            r.compressor,
            r.op,
            r.elements,
            density,
            r.seconds * 1e3,
            r.gbytes_per_s,
            r.ratio_to_read_pass,
            r.selected
        );
    }
}

/// Median seconds of one compression of `x` (`n` elements) on the device
/// with `config`, its payload on the host, into `msg`: every call runs the
/// compressor's rounds as the sole worker.
fn time_compress(
    client: &gradcomp_kernels::Client,
    x: &DeviceF32,
    config: &CompressorConfig,
    n: usize,
    min_time: Duration,
    msg: &mut Message,
) -> Result<f64> {
    // PowerSGD sees the squarest matrix, as on the CPU; every
    // compressor runs its rounds as the sole worker.
    let mut compressor = DeviceCompressor::new(config, &matrix_shape(n)).map_err(|e| anyhow!("{e}"))?;
    let mut step = config.first_compressed_step();
    let mut values = Vec::new();
    Ok(median_seconds(min_time, 5, || {
        let ctx = UnitContext { key: RngKey::new(7, 0, step, 0), ..UnitContext::default() };
        step += 1;
        for round in 0..compressor.rounds() {
            values.clear();
            let op = compressor.round_contribution(client, round, x, &ctx, &mut values);
            if op.expect("device round").is_some() {
                compressor.round_result(round, &values, 1);
            }
        }
        compressor.compress(client, x, &ctx, msg).expect("device compress");
    }))
}

/// Seconds to decode and sum 4 workers' ternary messages into a device
/// vector, codes already on the device (their upload is the collective's).
fn ternary_aggregate(
    client: &gradcomp_kernels::Client,
    msg: &Message,
    n: usize,
    min_time: Duration,
) -> Result<f64> {
    let Message::Ternary(t) = msg else { return Err(anyhow!("TernGrad produced no ternary message")) };
    let codes = TernaryCodes::upload(client, &[t, t, t, t]).map_err(|e| anyhow!("{e}"))?;
    let out = DeviceF32::zeros(client, n);
    Ok(median_seconds(min_time, 5, || {
        codes.add_to(client, 0.25, &out).expect("aggregate");
        gradcomp_kernels::sync(client).expect("device sync");
    }))
}
