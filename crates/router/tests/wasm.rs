//! The router core in headless Chromium (wasm32): a synthetic qwen3
//! checkpoint is written, parsed, loaded and run entirely inside the browser,
//! and must give the same hidden state as the native build (the expected
//! numbers come from `tests/synthetic_native.rs`'s computation, pinned here).

#![cfg(target_arch = "wasm32")]

use candle_core::quantized::GgmlDType;
use router::gguf::Checkpoint;
use std::sync::Arc;

use router::model::{Backbone, Precision};
use router::segment::{KvState, SegmentView};
use router::synthetic::{self, SyntheticSpec};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn spec() -> SyntheticSpec {
    SyntheticSpec { vocab: 4096, ..SyntheticSpec::qwen3(GgmlDType::Q8_0) }
}

#[wasm_bindgen_test]
fn forward_in_wasm_matches_native_and_continues_from_its_cache() {
    let gguf = synthetic::write(&spec()).unwrap();
    let ck = Checkpoint::parse(&gguf, "synthetic.gguf").unwrap();
    let model = Backbone::load(&ck, Precision::DequantizedF32).unwrap();
    let ids: Vec<u32> = (0..16).map(|i| 7 + i * 251).collect();
    let mean = model.mean_hidden_state(&ids).unwrap();
    let expected = include!("fixtures/synthetic_mean_head.rs");
    for (i, (a, b)) in mean.iter().zip(expected.iter()).enumerate() {
        assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "dim {i}: wasm {a} vs native {b}");
    }
    let whole = model.hidden_states(&ids).unwrap();
    let mut prefix = KvState::default();
    prefix.push(SegmentView::whole(Arc::new(model.prefill(&KvState::default(), &ids[..9]).unwrap())));
    let rest = model.prefill(&prefix, &ids[9..]).unwrap();
    let width = model.hparams.hidden;
    for (a, b) in rest.hidden(6..7).iter().zip(&whole[15 * width..16 * width]) {
        assert!((a - b).abs() < 1e-3, "continued {a} vs whole {b}");
    }
}

#[wasm_bindgen_test]
fn corrupt_bytes_are_errors_in_wasm_too() {
    let gguf = synthetic::write(&spec()).unwrap();
    for cut in [3, 64, gguf.len() / 3] {
        let err = Checkpoint::parse(&gguf[..cut], "cut.gguf").err().expect("must fail").to_string();
        assert!(err.starts_with("cut.gguf: not a valid GGUF checkpoint"), "{err}");
    }
}

/// The SIMD128 micro-kernel (the path the browser's prefill takes), against
/// the definition in f64, at shapes that leave partial tiles and panels.
#[wasm_bindgen_test]
fn simd128_kernel_matches_the_definition() {
    let value = |i: usize, salt: usize| ((i * 7 + salt) % 23) as f32 / 11.0 - 1.0;
    for (m, n, k) in [(1, 1, 1), (5, 13, 300), (33, 576, 64), (4, 8, 1536)] {
        let a: Vec<f32> = (0..m * k).map(|i| value(i, 1)).collect();
        let w: Vec<f32> = (0..n * k).map(|i| value(i, 5)).collect();
        let ours = router::kernels::Packed::from_rows(&w, n, k).matmul(&a, m);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|x| a[i * k + x] as f64 * w[j * k + x] as f64).sum();
                let got = ours[i * n + j] as f64;
                assert!((got - want).abs() <= 1e-4 * (k as f64).sqrt(), "[{m}×{k}]·[{n}×{k}]ᵀ at ({i}, {j}): {got} vs {want}");
            }
        }
    }
}

/// The integer kernel the browser runs (SIMD128 here; the threads build's
/// relaxed-SIMD dot is checked end to end), against the dequantized
/// operands in f64, with 32-value and 16-value (Q6_K) weight scales and
/// tiles cut at every edge.
#[wasm_bindgen_test]
fn integer_kernel_matches_the_dequantized_operands() {
    use router::integer::{Activations, IntPacked, ValueWidth};
    for (m, n, k, group, width) in [
        (1, 1, 32, 32, ValueWidth::Byte),
        (5, 7, 96, 16, ValueWidth::Byte),
        (17, 9, 576, 32, ValueWidth::Byte),
        (1, 3, 64, 32, ValueWidth::Nibble),
        (17, 9, 576, 32, ValueWidth::Nibble),
    ] {
        let top = if width == ValueWidth::Nibble { 16 } else { 64 };
        let q_of = |r: usize, i: usize| ((r * 7 + i * 5) % top) as u8;
        let scale_of = |r: usize, g: usize| 0.01 + ((r + g) % 5) as f32 * 0.003;
        let min_of = |r: usize, g: usize| ((r * 3 + g) % 7) as f32 * 0.02 - 0.06;
        let w = IntPacked::from_row_fn(n, k, group, width, |r, q, s, mins| {
            q.iter_mut().enumerate().for_each(|(i, v)| *v = q_of(r, i));
            s.iter_mut().enumerate().for_each(|(g, v)| *v = scale_of(r, g));
            mins.iter_mut().enumerate().for_each(|(g, v)| *v = min_of(r, g));
        });
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 11 + 3) % 29) as f32 / 14.0 - 1.0).collect();
        let acts = Activations::quantize(&x, m, k, group);
        let ours = w.matmul_quantized(&acts);
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|c| {
                        let xq = acts.q[i * k + c] as f64 * acts.scales(i)[c / 32] as f64;
                        let wv = scale_of(j, c / group) as f64 * q_of(j, c) as f64 + min_of(j, c / group) as f64;
                        xq * wv
                    })
                    .sum();
                let got = ours[i * n + j] as f64;
                assert!((got - want).abs() <= 2e-5 * k as f64, "[{m}×{k}]·[{n}×{k}]ᵀ/{group} at ({i}, {j}): {got} vs {want}");
            }
        }
    }
}

/// Every integer kernel of this build (the single-thread build's widened
/// SIMD128 dot; with `+relaxed-simd`, as `scripts/test.sh` builds this test
/// a second time, the threads build's two relaxed-SIMD sums) gives the same
/// floats, and the definition's, with every product at its largest: nibble
/// weights of 15 and byte weights of 63 against activations of ±127, where
/// the nibble kernel's i16 sums of a 32-value group reach 30,480 of the
/// 32,767 they may.
#[wasm_bindgen_test]
fn every_integer_kernel_agrees_at_the_largest_sums() {
    use router::integer::{kernels, Activations, IntPacked, ValueWidth};
    let (m, n, k) = (9, 24, 576);
    for (width, top) in [(ValueWidth::Nibble, 15u8), (ValueWidth::Byte, 63)] {
        // Even rows hold the largest value throughout, odd ones a spread.
        let row = |r: usize, q: &mut [u8], s: &mut [f32], mins: &mut [f32]| {
            q.iter_mut()
                .enumerate()
                .for_each(|(i, v)| *v = if r.is_multiple_of(2) { top } else { ((r * 7 + i * 5) % (top as usize + 1)) as u8 });
            s.iter_mut().enumerate().for_each(|(g, v)| *v = 0.01 + ((r + g) % 5) as f32 * 0.003);
            mins.iter_mut().enumerate().for_each(|(g, v)| *v = ((r * 3 + g) % 7) as f32 * 0.02 - 0.06);
        };
        let w = IntPacked::from_row_fn(n, k, 32, width, row);
        let dequantized: Vec<f64> = (0..n)
            .flat_map(|r| {
                let (mut q, mut s, mut mins) = (vec![0u8; k], vec![0f32; k / 32], vec![0f32; k / 32]);
                row(r, &mut q, &mut s, &mut mins);
                (0..k).map(move |c| s[c / 32] as f64 * q[c] as f64 + mins[c / 32] as f64)
            })
            .collect();
        // ±1 everywhere quantizes to ±127 (the block's largest value is the
        // scale's step times 127): one sign throughout in every third row,
        // alternating in the others.
        let x: Vec<f32> = (0..m * k).map(|i| if (i / k).is_multiple_of(3) || i.is_multiple_of(2) { 1.0 } else { -1.0 }).collect();
        let acts = Activations::quantize(&x, m, k, 32);
        assert!(acts.q.iter().all(|&q| q.unsigned_abs() == 127));
        let simd: Vec<_> = kernels().into_iter().filter(|kernel| !kernel.name.starts_with("portable")).collect();
        let first = w.matmul_with(&acts, simd[0]);
        for kernel in &simd[1..] {
            assert!(w.matmul_with(&acts, *kernel) == first, "{kernel:?} against {:?}, {width:?}", simd[0]);
        }
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|c| acts.q[i * k + c] as f64 * acts.scales(i)[c / 32] as f64 * dequantized[j * k + c]).sum();
                let got = first[i * n + j] as f64;
                assert!((got - want).abs() <= 2e-6 * want.abs().max(1.0), "{:?}, {width:?} at ({i}, {j}): {got} vs {want}", simd[0]);
            }
        }
    }
}

/// Decode attention's SIMD128 loops (one new token per sequence, the
/// path every generated token takes in the browser), against the softmax
/// definition in f64: grouped heads, keys cut into pieces, a sliding
/// window, contexts long enough to be split into chunks, and heads of 12
/// and 6 values, which leave columns past the last whole vector.
#[wasm_bindgen_test]
fn decode_attention_matches_the_definition() {
    use router::attention::{single_queries, Shape, SingleQuery};
    use router::segment::KvPiece;
    let value = |i: usize, salt: usize| ((i * 13 + salt * 7) % 29) as f32 / 14.0 - 1.0;
    for (heads, kv_heads, d, window, start) in
        [(9usize, 3usize, 64usize, None, 300usize), (4, 2, 12, Some(40), 129), (3, 3, 6, None, 17), (4, 1, 256, None, 5)]
    {
        let (total, width) = (start + 1, d.div_ceil(8) * 8);
        let q: Vec<f32> = (0..heads * d).map(|i| value(i, 1)).collect();
        let keys: Vec<f32> = (0..kv_heads * total * d).map(|i| value(i, 2)).collect();
        // Value rows padded to whole panels of 8, as the K/V pages hold them.
        let values: Vec<f32> = (0..kv_heads * total * width).map(|i| if i % width < d { value(i, 3) } else { f32::NAN }).collect();
        let cut = total / 3;
        let pieces = [0..cut, cut..total].map(|rows| KvPiece { keys: &keys, values: &values, head_rows: total, rows });
        let shape = Shape { heads, kv_heads, tokens: 1, head_dim: d, start, window };
        let mut out = vec![f32::NAN; heads * d];
        single_queries(&[SingleQuery { q: &q, pieces: &pieces, shape, out_row: 0 }], 1.0 / (d as f32).sqrt(), &mut out);
        let first = window.map_or(0, |w| total.saturating_sub(w));
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            let key = |j: usize| &keys[(g * total + j) * d..][..d];
            let scores: Vec<f64> =
                (first..total).map(|j| (0..d).map(|x| q[h * d + x] as f64 * key(j)[x] as f64).sum::<f64>() / (d as f64).sqrt()).collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            for x in 0..d {
                let want: f64 =
                    (first..total).zip(&weights).map(|(j, w)| w * values[(g * total + j) * width + x] as f64).sum::<f64>() / sum;
                let got = out[h * d + x] as f64;
                assert!(
                    (got - want).abs() <= 1e-5,
                    "{heads} heads of {d} over {kv_heads}, query at {start}, head {h}, column {x}: {got} vs {want}"
                );
            }
        }
    }
}
