//! Causal self-attention for the prefill, without materialising the T × T
//! score tensor, a mask or repeated K/V heads.
//!
//! The straightforward tensor version computes every query against every key
//! (twice the work causality needs), writes four `[heads × T × T]` tensors per
//! layer (scores, scaled, masked, softmaxed: 150 MB per layer at 1,024
//! tokens) and calls `exp` through libm for each of them. Here a block of
//! query rows meets only the keys its last row may see, as two small matrix
//! products on `kernels`' micro-kernel (scores, then weights × values) with
//! a causal softmax between them in one block-sized buffer; `exp` is a
//! branch-free polynomial that vectorises. Blocks and heads are independent
//! tasks for `parallel`, so results do not depend on the thread count.

#![allow(unsafe_code)]

use crate::kernels::{gemm_panel, Packed, NR};
use crate::parallel::{self, SharedMut};

/// The shapes of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub heads: usize,
    pub kv_heads: usize,
    /// New tokens (query rows).
    pub tokens: usize,
    /// Keys: cached plus new.
    pub total: usize,
    pub head_dim: usize,
    /// Position of the first new token (the cache length).
    pub start: usize,
}

/// `q`: `[heads, tokens, d]`, `k` and `v`: `[kv_heads, total, d]`, all
/// row-major. Query `i` (position `start + i`) attends to keys `0..=start + i`;
/// query head `h` reads K/V head `h / (heads / kv_heads)`. Returns
/// `[tokens, heads × d]`, the layout the output projection takes.
///
/// Work is cut into (head, block of query rows) tasks for the thread pool;
/// within a task the scores of a block against its visible keys and the
/// weighted sum of values are two small matrix products on the same
/// micro-kernel as the projections, so the attention runs at GEMM speed
/// rather than one dot product per key.
pub fn causal(q: &[f32], k: &[f32], v: &[f32], s: Shape, scale: f32) -> Vec<f32> {
    let d = s.head_dim;
    let group = (s.heads / s.kv_heads.max(1)).max(1);
    // Keys as "weights" `[total × d]`, packed once per K/V head; values are
    // read in place when their rows split into whole panels, else padded.
    let keys: Vec<Packed> = (0..s.kv_heads).map(|g| Packed::from_rows(&k[g * s.total * d..(g + 1) * s.total * d], s.total, d)).collect();
    let padded = d.div_ceil(NR) * NR;
    let values: Vec<std::borrow::Cow<'_, [f32]>> = (0..s.kv_heads)
        .map(|g| {
            let vg = &v[g * s.total * d..(g + 1) * s.total * d];
            if padded == d {
                std::borrow::Cow::Borrowed(vg)
            } else {
                let mut copy = vec![0f32; s.total * padded];
                for (dst, src) in copy.chunks_exact_mut(padded).zip(vg.chunks_exact(d)) {
                    dst[..d].copy_from_slice(src);
                }
                std::borrow::Cow::Owned(copy)
            }
        })
        .collect();
    let mut out = vec![0f32; s.tokens * s.heads * d];
    let out_ptr = SharedMut(out.as_mut_ptr());
    let blocks = s.tokens.div_ceil(QUERY_BLOCK);
    // Task t: the latest (longest) query blocks first, so the pool's last
    // tasks are its shortest.
    parallel::for_each(s.heads * blocks, |t| {
        let (h, block) = (t % s.heads, blocks - 1 - t / s.heads);
        let rows = block * QUERY_BLOCK..((block + 1) * QUERY_BLOCK).min(s.tokens);
        let g = h / group;
        let q_rows = &q[(h * s.tokens + rows.start) * d..(h * s.tokens + rows.end) * d];
        // SAFETY: this task alone writes rows `rows` × columns of head `h`.
        unsafe { query_block(q_rows, rows, &keys[g], &values[g], padded, s, scale, out_ptr.ptr().add(h * d)) };
    });
    out
}

/// Query rows per task.
const QUERY_BLOCK: usize = 32;

/// One head's block of query rows: scores against every key the block's last
/// row may see, a causal softmax per row (a row's later keys get weight 0),
/// then the weighted values, written at `out` with row stride `heads × d`.
///
/// SAFETY: `out` is valid for the block's rows at that stride, and only this
/// call writes those `d` columns of them.
#[allow(clippy::too_many_arguments)]
unsafe fn query_block(
    q: &[f32],
    rows: std::ops::Range<usize>,
    keys: &Packed,
    values: &[f32],
    ldv: usize,
    s: Shape,
    scale: f32,
    out: *mut f32,
) {
    let d = s.head_dim;
    let m = rows.len();
    let visible_max = s.start + rows.end;
    let mut p = vec![0f32; m * visible_max];
    keys.matmul_prefix_into(q, m, visible_max, &mut p);
    for (r, row) in p.chunks_exact_mut(visible_max).enumerate() {
        let visible = s.start + rows.start + r + 1;
        let (seen, hidden) = row.split_at_mut(visible);
        let max = seen.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) * scale;
        let mut sum = 0.0f32;
        for score in seen.iter_mut() {
            *score = exp(*score * scale - max);
            sum += *score;
        }
        let inv = 1.0 / sum;
        seen.iter_mut().for_each(|x| *x *= inv);
        hidden.fill(0.0);
    }
    for panel in 0..ldv / NR {
        let cols = NR.min(d - panel * NR);
        // SAFETY: per this function's contract; `values` has `visible_max`
        // rows of `ldv` values.
        unsafe {
            gemm_panel(&p, m, visible_max, &values[panel * NR..], ldv, out.add(rows.start * s.heads * d + panel * NR), s.heads * d, cols)
        };
    }
}

/// `e^x` for the softmax's arguments (≤ 0), to about 2 ulp: x = n·ln 2 + r
/// with |r| ≤ ln 2 / 2, a degree-6 polynomial for e^r, and 2^n built in the
/// exponent bits. Branch-free, so a loop over it vectorises; arguments below
/// −87 give e^−87 (≈ 1.6e−38), which next to the row maximum's e^0 = 1 is
/// the same as the true value's underflow.
#[inline]
pub fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    // round(y) as floor(y + 0.5), and floor as a truncating conversion of a
    // value shifted positive (y + 0.5 + 128 > 0 on the clamped range): one
    // instruction on every target (i32x4.trunc_sat_f32x4_s in simd128,
    // cvttps2dq natively), where round() and floor() are libm calls on
    // baseline x86_64 and stop the loop from vectorising.
    let n = ((x * std::f32::consts::LOG2_E + 128.5) as i32 - 128) as f32;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Taylor coefficients 1/k! up to k = 6: on |r| ≤ 0.347 the truncation
    // error is below 1e-8 relative.
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let bits = ((n as i32 + 127) << 23) as u32;
    p * f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_close_to_libm_over_the_softmax_range() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -87.0 + 87.0 * i as f32 / 200_000.0;
            let (ours, libm) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((ours - libm) / libm).abs());
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert!(exp(-1000.0) < 1e-37);
        assert_eq!(exp(0.0), 1.0);
    }

    /// The naive definition: full scores, a mask, softmax with libm, weights × V.
    fn reference(q: &[f32], k: &[f32], v: &[f32], s: Shape, scale: f32) -> Vec<f32> {
        let d = s.head_dim;
        let mut out = vec![0f32; s.tokens * s.heads * d];
        for h in 0..s.heads {
            let g = h / (s.heads / s.kv_heads);
            for i in 0..s.tokens {
                let scores: Vec<f64> = (0..s.total)
                    .map(|j| {
                        if j > s.start + i {
                            f64::NEG_INFINITY
                        } else {
                            (0..d).map(|x| q[(h * s.tokens + i) * d + x] as f64 * k[(g * s.total + j) * d + x] as f64).sum::<f64>()
                                * scale as f64
                        }
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for x in 0..d {
                    out[(i * s.heads + h) * d + x] =
                        (0..s.total).map(|j| exps[j] / sum * v[(g * s.total + j) * d + x] as f64).sum::<f64>() as f32;
                }
            }
        }
        out
    }

    fn data(len: usize, salt: u32) -> Vec<f32> {
        crate::kernels::xorshift_values(len, 0x9e37_79b9u32 ^ salt)
    }

    #[test]
    fn matches_the_masked_softmax_definition_with_grouped_heads_and_a_cache() {
        for (heads, kv_heads, tokens, start, d) in [(9, 3, 17, 0, 64), (4, 4, 5, 7, 12), (8, 2, 33, 3, 128), (2, 1, 1, 0, 8)] {
            let s = Shape { heads, kv_heads, tokens, total: start + tokens, head_dim: d, start };
            let (q, k, v) = (data(heads * tokens * d, 1), data(kv_heads * s.total * d, 2), data(kv_heads * s.total * d, 3));
            let scale = 1.0 / (d as f32).sqrt();
            let ours = causal(&q, &k, &v, s, scale);
            let want = reference(&q, &k, &v, s, scale);
            let worst = ours.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst < 2e-5, "{s:?}: worst |difference| {worst}");
        }
    }
}
