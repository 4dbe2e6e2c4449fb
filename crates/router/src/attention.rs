//! Causal self-attention for the prefill, without materialising the T × T
//! score tensor, a mask or repeated K/V heads.
//!
//! The straightforward tensor version computes every query against every key
//! (twice the work causality needs), writes four `[heads × T × T]` tensors per
//! layer (scores, scaled, masked, softmaxed: 150 MB per layer at 1,024
//! tokens) and calls `exp` through libm for each of them. Here each query row
//! walks only the keys it may see, its scores live in one reused row buffer,
//! and `exp` is a branch-free polynomial that vectorises. The inner loops keep
//! eight independent partial sums, which LLVM turns into SIMD on every target
//! (SSE/AVX natively, simd128 in the browser) with the same order of
//! operations, so native and wasm results agree to rounding.

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
pub fn causal(q: &[f32], k: &[f32], v: &[f32], s: Shape, scale: f32) -> Vec<f32> {
    let d = s.head_dim;
    // Heads are independent: each fills its own `[tokens × d]` block, and the
    // blocks are interleaved into `[tokens, heads × d]` at the end.
    let mut per_head = vec![0f32; s.heads * s.tokens * d];
    let blocks: Vec<(usize, &mut [f32])> = per_head.chunks_mut(s.tokens * d).enumerate().collect();
    for_each_head(blocks, |h, block| head(q, k, v, s, scale, h, block));
    let mut out = vec![0f32; s.tokens * s.heads * d];
    for (h, block) in per_head.chunks_exact(s.tokens * d).enumerate() {
        for (i, row) in block.chunks_exact(d).enumerate() {
            out[(i * s.heads + h) * d..(i * s.heads + h + 1) * d].copy_from_slice(row);
        }
    }
    out
}

/// Natively, heads are spread over the available cores (as candle spreads
/// its matmuls); wasm32 without threads runs them in turn. Same arithmetic
/// either way: a head's result does not depend on which thread ran it.
#[cfg(not(target_arch = "wasm32"))]
fn for_each_head(blocks: Vec<(usize, &mut [f32])>, work: impl Fn(usize, &mut [f32]) + Sync) {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(blocks.len()).max(1);
    let per_thread = blocks.len().div_ceil(threads);
    let mut blocks = blocks;
    std::thread::scope(|scope| {
        while !blocks.is_empty() {
            let rest = blocks.split_off(per_thread.min(blocks.len()));
            let mine = std::mem::replace(&mut blocks, rest);
            let work = &work;
            scope.spawn(move || {
                for (h, block) in mine {
                    work(h, block);
                }
            });
        }
    });
}

#[cfg(target_arch = "wasm32")]
fn for_each_head(blocks: Vec<(usize, &mut [f32])>, work: impl Fn(usize, &mut [f32]) + Sync) {
    for (h, block) in blocks {
        work(h, block);
    }
}

/// One query head: `out` is its `[tokens × d]` block.
fn head(q: &[f32], k: &[f32], v: &[f32], s: Shape, scale: f32, h: usize, out: &mut [f32]) {
    let d = s.head_dim;
    let g = h / (s.heads / s.kv_heads.max(1)).max(1);
    let kh = &k[g * s.total * d..(g + 1) * s.total * d];
    let vh = &v[g * s.total * d..(g + 1) * s.total * d];
    let mut row = vec![0f32; s.total];
    for i in 0..s.tokens {
        let qi = &q[(h * s.tokens + i) * d..(h * s.tokens + i + 1) * d];
        let visible = s.start + i + 1;
        let scores = &mut row[..visible];
        for (score, kj) in scores.iter_mut().zip(kh.chunks_exact(d)) {
            *score = dot(qi, kj) * scale;
        }
        let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let mut sum = 0.0f32;
        for score in scores.iter_mut() {
            *score = exp(*score - max);
            sum += *score;
        }
        let inv = 1.0 / sum;
        let o = &mut out[i * d..(i + 1) * d];
        for (&p, vj) in scores.iter().zip(vh.chunks_exact(d)) {
            axpy(o, p * inv, vj);
        }
    }
}

/// Dot product with eight independent lanes (vectorises without reassociating
/// any single sum), then a fixed pairwise reduction.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut tail = 0.0;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// `o += a × x`.
#[inline]
fn axpy(o: &mut [f32], a: f32, x: &[f32]) {
    for (oi, xi) in o.iter_mut().zip(x) {
        *oi += a * xi;
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
    // floor(y + 0.5) rather than round(): one instruction on every target
    // (f32x4.floor in simd128), where round() is a libm call that stops the
    // loop from vectorising.
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
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
        let mut state = 0x9e37_79b9u32 ^ salt;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
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
