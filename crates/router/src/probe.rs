//! Benchmark probes: the attainable rate of this build's projection GEMM
//! (`gemm-probe`, the page's probe button, the peer bench's GEMM floor) and
//! of every integer kernel this CPU runs. Kept apart from the forward pass
//! they measure, through the same `Weights` it multiplies with.

use candle_core::{Device, Tensor};
use web_time::Instant;

use crate::elapsed_ms;
use crate::error::{Result, RouterError};
use crate::integer::{IntPacked, ValueWidth};
use crate::model::{Precision, Weights};

/// Times the projection GEMM a prefill at `precision` runs, `[m × k]` times
/// a `[n × k]` weight, through the very `Linear` the backbone uses, so the
/// rate is what this build's matmul attains on this device (native or
/// wasm32), not a separate kernel's. The integer path's weight is a Q4_1-like
/// one (4-bit values, a scale and minimum per 32), its time includes the
/// activations' quantization, and its rate counts the same 2·m·k·n
/// operations, so the two rates compare directly.
pub fn gemm_probe(m: usize, k: usize, n: usize, repeats: usize, precision: Precision) -> Result<crate::GemmProbe> {
    let x = probe_values(m * k, 1);
    let weight = match precision {
        Precision::IntegerQ8 if k.is_multiple_of(crate::integer::BLOCK) => Weights::Integer(probe_integer_weight(n, k)),
        _ => Weights::from_f32(Tensor::from_vec(probe_values(n * k, 5), (n, k), &Device::Cpu)?)?,
    };
    let kernel = match &weight {
        Weights::Integer(_) => crate::integer::kernel_name().to_string(),
        _ => format!("f32{}", crate::kernels::KERNEL_NOTE),
    };
    time_probe(m, k, n, repeats, kernel, || weight.forward(&x, m))
}

/// The integer product through every kernel this build and CPU run (the
/// one prefills use first), each timed as [`gemm_probe`] times it: the
/// activations' quantization included, repeats alternated between kernels
/// so that a noisy machine's slow spell does not fall on one of them.
pub fn integer_kernel_probes(m: usize, k: usize, n: usize, repeats: usize) -> Result<Vec<crate::GemmProbe>> {
    if !k.is_multiple_of(crate::integer::BLOCK) {
        return Err(RouterError::Request(format!(
            "the integer kernels need a width that is a multiple of {}, not {k}",
            crate::integer::BLOCK
        )));
    }
    let (x, weight) = (probe_values(m * k, 1), probe_integer_weight(n, k));
    let kernels = crate::integer::kernels();
    let product = |kernel| weight.matmul_with(&crate::integer::Activations::quantize(&x, m, k, 32), kernel);
    let mut times = vec![Vec::with_capacity(repeats.max(1)); kernels.len()];
    for &kernel in &kernels {
        // One untimed call each: the first allocates.
        std::hint::black_box(product(kernel));
    }
    for _ in 0..repeats.max(1) {
        for (&kernel, times) in kernels.iter().zip(&mut times) {
            let started = Instant::now();
            std::hint::black_box(product(kernel));
            times.push(elapsed_ms(started));
        }
    }
    Ok(kernels.iter().zip(times).map(|(kernel, times)| probe_result(m, k, n, times, kernel.name.to_string())).collect())
}

/// Streams a buffer of `bytes` (rounded to whole 64-byte lines) from
/// memory on every thread of the pool, `repeats` times after one untimed
/// pass that also faults its pages in, and reports the best rate. Each
/// task sums its run in 16 independent lanes (a sum, so the loads cannot
/// be skipped; lanes, so the adds are not one serial chain that would
/// bound the rate below the memory's). Choose `bytes` well past the last
/// level cache (`router-generate --decode-speed` streams 256 MiB), or the
/// rate is the cache's.
pub fn memory_bandwidth(bytes: usize, repeats: usize) -> crate::BandwidthProbe {
    let values = (bytes / 64).max(1) * 16;
    let buffer: Vec<f32> = (0..values).map(|i| (i % 7) as f32).collect();
    let threads = crate::parallel::threads();
    // A few tasks a thread, so one slow thread does not hold the rest.
    let run = values.div_ceil(threads * 4).next_multiple_of(16);
    let mut sums = vec![0f32; values.div_ceil(run)];
    let pass = |sums: &mut Vec<f32>| {
        crate::parallel::for_each_rows_mut(sums, 1, 1, |task, sum| {
            let chunk = &buffer[task * run..((task + 1) * run).min(values)];
            sum[0] = crate::attention::lanes_sum(chunk);
        });
        std::hint::black_box(&sums);
    };
    pass(&mut sums);
    let mut times = Vec::with_capacity(repeats.max(1));
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        pass(&mut sums);
        times.push(elapsed_ms(started));
    }
    times.sort_by(f64::total_cmp);
    let best_ms = times[0].max(1e-3);
    let bytes = (values * 4) as u64;
    crate::BandwidthProbe {
        bytes,
        threads,
        repeats: times.len(),
        best_ms,
        median_ms: times[times.len() / 2],
        gb_per_s: bytes as f64 / best_ms / 1e6,
    }
}

/// Varied values, so no kernel meets only zeros or ones.
fn probe_values(len: usize, salt: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 7 + salt) % 13) as f32 / 13.0 - 0.5).collect()
}

/// A Q4_1-like weight for the integer probes: 4-bit values (two a byte, as
/// the model holds Q4_1), a scale and a minimum per 32.
fn probe_integer_weight(n: usize, k: usize) -> IntPacked {
    IntPacked::from_row_fn(n, k, 32, ValueWidth::Nibble, |r, q, scales, mins| {
        q.iter_mut().enumerate().for_each(|(i, v)| *v = ((r * 5 + i * 3) % 16) as u8);
        scales.iter_mut().enumerate().for_each(|(g, v)| *v = 0.01 + ((r + g) % 7) as f32 * 0.002);
        mins.iter_mut().enumerate().for_each(|(g, v)| *v = -0.05 + ((r + 3 * g) % 5) as f32 * 0.01);
    })
}

fn time_probe(
    m: usize,
    k: usize,
    n: usize,
    repeats: usize,
    kernel: String,
    product: impl Fn() -> Result<Vec<f32>>,
) -> Result<crate::GemmProbe> {
    // One untimed call: the first allocates.
    product()?;
    let mut times = Vec::with_capacity(repeats.max(1));
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        // Make sure the result exists before the clock stops.
        std::hint::black_box(product()?);
        times.push(elapsed_ms(started));
    }
    Ok(probe_result(m, k, n, times, kernel))
}

fn probe_result(m: usize, k: usize, n: usize, mut times: Vec<f64>, kernel: String) -> crate::GemmProbe {
    times.sort_by(f64::total_cmp);
    // A clock coarser than the call (some browsers round to 0.1 ms) must not divide by zero.
    let best_ms = times[0].max(1e-3);
    crate::GemmProbe {
        m,
        k,
        n,
        repeats: times.len(),
        best_ms,
        median_ms: times[times.len() / 2],
        gflops: 2.0 * (m * k * n) as f64 / best_ms / 1e6,
        kernel,
    }
}
