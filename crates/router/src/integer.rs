//! The prefill's integer kernels: activations quantized to 8 bits per block
//! of 32 values, multiplied by the GGUF's own quantized weights with integer
//! dot products accumulated in i32, llama.cpp's scheme (its `Q8` activation
//! blocks times `Q4_1`/`Q5_0`/k-quant weights) on our own buffers.
//!
//! Why: a dequantized f32 prefill multiplies 4 values per 128-bit
//! instruction; an 8-bit dot multiplies 16 (SSE/SIMD128) or 32 (AVX2), so
//! where the f32 path sits at its own ceiling the integer one has room.
//! The price is the activations' rounding to 8 bits, which llama.cpp pays
//! too; `Precision::DequantizedF32` stays for whoever wants f32.
//!
//! The weights are repacked once at load ([`IntPacked`]): every weight is
//! `scale × q + min` with `q ≤ 63` ([`crate::dequant::affine_row`]), one
//! byte per value, a scale per 32 (Q6_K: 16) values. The product then has
//! two parts. `Σ scale·q·x` is the integer dot of `q` with the quantized
//! activations, scaled per block; `Σ min·x` needs only each block's sum of
//! activations, so it is a small f32 GEMM (`k / 32` wide, on
//! [`crate::kernels::Packed`]) added first. Since `q` is unsigned and below
//! 128 it is the unsigned operand every integer dot instruction wants:
//! wasm relaxed-SIMD's `i32x4.relaxed_dot_i8x16_i7x16_add_s` (deterministic
//! only for operands below 128), x86's `vpmaddubsw` (its i16 pair sums
//! stay below 2 × 63 × 128, so never saturate).
//!
//! Kernels: AVX2 natively (detected at run time; this machine has no
//! VNNI, so `vpdpbusd` variants are not written: they could not be tested
//! here), relaxed-SIMD's dot in the threads build, plain SIMD128 widening to
//! i16 in the single-thread build, and plain Rust elsewhere (also the
//! reference the others are tested against).

#![allow(unsafe_code)]

use crate::kernels::Packed;
use crate::parallel;

/// Values per activation block (one scale each).
pub const BLOCK: usize = 32;

/// Activation rows per register tile, and weight rows per tile.
const R: usize = 4;
const C: usize = 2;

/// Which integer kernel this build and CPU run, for reports and the page.
pub fn kernel_name() -> &'static str {
    if cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")) {
        "relaxed-SIMD i8 dot"
    } else if cfg!(target_arch = "wasm32") {
        "SIMD128 i16 dot"
    } else if avx2_available() {
        "AVX2 u8×i8 dot"
    } else {
        "portable i32 dot"
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    use std::sync::OnceLock;
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_available() -> bool {
    false
}

/// Activations `[m × k]` quantized per block of [`BLOCK`] values:
/// `x ≈ scale × q` with `q` in −127..=127.
pub struct Activations {
    pub m: usize,
    pub k: usize,
    /// Values per sum (the weight's group).
    pub group: usize,
    /// `[m × k]`.
    pub q: Vec<i8>,
    /// `[m × (k / BLOCK + k / group)]`: a row's scales, then its groups'
    /// `scale × Σ q` (what the weights' minimums multiply).
    meta: Vec<f32>,
}

impl Activations {
    /// Quantizes `x` (`[m × k]`, `k` a multiple of [`BLOCK`]) with sums per
    /// `group` values (16 or 32), rows spread over the pool.
    pub fn quantize(x: &[f32], m: usize, k: usize, group: usize) -> Activations {
        assert!(k.is_multiple_of(BLOCK) && BLOCK.is_multiple_of(group) && x.len() == m * k, "[{m} × {k}] activations, groups of {group}");
        let (blocks, meta_row) = (k / BLOCK, k / BLOCK + k / group);
        let (mut q, mut meta) = (vec![0i8; m * k], vec![0f32; m * meta_row]);
        parallel::for_each_rows_mut2(&mut q, k, &mut meta, meta_row, parallel::rows_per_task(m), |first, q_rows, meta_rows| {
            for (i, (qs, meta)) in q_rows.chunks_exact_mut(k).zip(meta_rows.chunks_exact_mut(meta_row)).enumerate() {
                let xs = &x[(first + i) * k..][..k];
                let (scales, sums) = meta.split_at_mut(blocks);
                for ((xb, qb), scale) in xs.chunks_exact(BLOCK).zip(qs.chunks_exact_mut(BLOCK)).zip(scales.iter_mut()) {
                    let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
                    let inverse = if amax > 0.0 { 127.0 / amax } else { 0.0 };
                    // Half away from zero, as `f32::round`, which without
                    // SSE4.1 is a library call per value.
                    qb.iter_mut().zip(xb).for_each(|(q, v)| {
                        let y = v * inverse;
                        *q = (y + 0.5f32.copysign(y)) as i8;
                    });
                    *scale = amax / 127.0;
                }
                for (g, (sum, qg)) in sums.iter_mut().zip(qs.chunks_exact(group)).enumerate() {
                    *sum = scales[g * group / BLOCK] * qg.iter().map(|&v| v as i32).sum::<i32>() as f32;
                }
            }
        });
        Activations { m, k, group, q, meta }
    }

    fn meta_row(&self) -> usize {
        self.k / BLOCK + self.k / self.group
    }

    /// Row `r`'s block scales.
    pub fn scales(&self, r: usize) -> &[f32] {
        &self.meta[r * self.meta_row()..][..self.k / BLOCK]
    }

    /// Every row's group sums, `[m × k / group]`, for the minimums' product.
    fn sums(&self) -> Vec<f32> {
        self.meta.chunks_exact(self.meta_row()).flat_map(|row| &row[self.k / BLOCK..]).copied().collect()
    }
}

/// A weight `[n × k]` repacked for the integer kernels: one unsigned byte
/// per value (≤ 63), a scale per `group` values, and the minimums as a
/// packed f32 matrix `[n × k / group]`.
pub struct IntPacked {
    pub n: usize,
    pub k: usize,
    /// Values per scale: 32, or 16 for Q6_K.
    pub group: usize,
    q: Vec<u8>,
    /// `[n × k / group]`.
    scales: Vec<f32>,
    mins: Packed,
}

impl IntPacked {
    /// Repacks from a row decoder: `row(r, q, scales, mins)` fills row `r`'s
    /// `k` values and `k / group` scales and minimums. Rows are decoded on
    /// the pool's threads.
    pub fn from_row_fn(n: usize, k: usize, group: usize, row: impl Fn(usize, &mut [u8], &mut [f32], &mut [f32]) + Sync) -> IntPacked {
        assert!(k.is_multiple_of(BLOCK) && (group == 16 || group == 32), "[{n} × {k}] in groups of {group}");
        let groups = k / group;
        // Scales and minimums side by side per row while decoding.
        let (mut q, mut meta) = (vec![0u8; n * k], vec![0f32; n * 2 * groups]);
        parallel::for_each_rows_mut2(&mut q, k, &mut meta, 2 * groups, parallel::rows_per_task(n), |first, q_rows, meta_rows| {
            for (i, (qr, meta)) in q_rows.chunks_exact_mut(k).zip(meta_rows.chunks_exact_mut(2 * groups)).enumerate() {
                let (s, m) = meta.split_at_mut(groups);
                row(first + i, qr, s, m);
            }
        });
        let scales = meta.chunks_exact(2 * groups).flat_map(|r| &r[..groups]).copied().collect();
        let mins = Packed::from_row_fn(n, groups, |r, out| out.copy_from_slice(&meta[r * 2 * groups + groups..][..groups]));
        IntPacked { n, k, group, q, scales, mins }
    }

    /// Bytes held (values, scales and the packed minimums).
    pub fn bytes(&self) -> usize {
        self.q.len() + 4 * self.scales.len() + 4 * self.mins.n.div_ceil(crate::kernels::NR) * crate::kernels::NR * self.mins.k
    }

    /// `x` is `[m × k]` f32; returns `[m × n]`: `x` quantized per block
    /// times the weight, as `Σ_blocks (a_scale · w_scale · Σ q_x·q_w) + Σ min · sum`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let acts = Activations::quantize(x, m, self.k, self.group);
        self.matmul_quantized(&acts)
    }

    /// The product with already-quantized activations.
    pub fn matmul_quantized(&self, acts: &Activations) -> Vec<f32> {
        self.matmul_with(acts, best_strip())
    }

    fn matmul_with(&self, acts: &Activations, strip: StripFn) -> Vec<f32> {
        let (m, n) = (acts.m, self.n);
        assert_eq!(acts.k, self.k, "activations of width {} for a weight of width {}", acts.k, self.k);
        // Σ min · sum first: a [m × k/group] · [n × k/group]ᵀ f32 product.
        assert_eq!(acts.group, self.group, "sums per {} values for a weight scaled per {}", acts.group, self.group);
        let mut c = self.mins.matmul(&acts.sums(), m);
        if m == 0 || n == 0 {
            return c;
        }
        let threads = parallel::threads();
        if m >= 2 * R * threads || threads == 1 {
            // Long prompts: each task owns whole rows of C (a safe split),
            // and streams every weight tile past its rows.
            let rows = m.div_ceil(threads * 2).next_multiple_of(R).max(R);
            parallel::for_each_rows_mut(&mut c, n, rows, |first, out| self.product_rows(acts, first, out.len() / n, 0..n, out, n, strip));
        } else {
            // Short prompts: split the weight's rows (C's columns) so every
            // thread works; each task fills its own [m × columns] block,
            // copied into C afterwards.
            let (width, parts) = column_split(n, threads);
            let mut blocks = vec![0f32; parts.len() * m * width];
            parallel::for_each_rows_mut(&mut blocks, m * width, 1, |t, out| {
                self.product_rows(acts, 0, m, parts[t].clone(), out, width, strip);
            });
            for (cols, block) in parts.iter().zip(blocks.chunks_exact(m * width)) {
                for (row, c_row) in block.chunks_exact(width).zip(c.chunks_exact_mut(n)) {
                    c_row[cols.clone()].iter_mut().zip(row).for_each(|(c, v)| *c += v);
                }
            }
        }
        c
    }

    /// Adds the integer part for activation rows `first..first + rows` and
    /// weight rows `cols` into `out` (`rows` rows at stride `ld`, column 0 =
    /// `cols.start`). Weight rows go in bands that stay in L2 while every
    /// strip of `R` activation rows (in L1) passes them.
    // A GEMM's loop: matrices, their ranges and the strip function.
    #[allow(clippy::too_many_arguments)]
    fn product_rows(
        &self,
        acts: &Activations,
        first: usize,
        rows: usize,
        cols: std::ops::Range<usize>,
        out: &mut [f32],
        ld: usize,
        strip: StripFn,
    ) {
        /// Weight rows per band: 64 × k bytes (≤ 128 KiB at k = 2,048).
        const BAND: usize = 64;
        let k = self.k;
        let mut band = cols.start;
        while band < cols.end {
            let band_cols = band..(band + BAND).min(cols.end);
            let mut r0 = 0;
            while r0 < rows {
                let rn = R.min(rows - r0);
                // A partial strip repeats its last row (in bounds, results dropped).
                let x_rows: [usize; R] = std::array::from_fn(|i| first + r0 + i.min(rn - 1));
                let input = Strip {
                    blocks: k / BLOCK,
                    halves: self.group == 16,
                    k,
                    groups: k / self.group,
                    x: x_rows.map(|r| &acts.q[r * k..][..k]),
                    x_scales: x_rows.map(|r| acts.scales(r)),
                    w: &self.q,
                    w_scales: &self.scales,
                    cols: band_cols.clone(),
                    rows: rn,
                };
                strip(&input, &mut out[r0 * ld + (band - cols.start)..], ld);
                r0 += rn;
            }
            band = band_cols.end;
        }
    }
}

/// Splits `n` weight rows into at most `threads` runs of `width` (a
/// multiple of `C`; the last may be shorter), none empty.
fn column_split(n: usize, threads: usize) -> (usize, Vec<std::ops::Range<usize>>) {
    let width = n.div_ceil(threads.clamp(1, n.div_ceil(C).max(1))).next_multiple_of(C);
    (width, (0..n).step_by(width).map(|start| start..(start + width).min(n)).collect())
}

/// A strip: `R` activation rows (whole rows of `k = blocks × 32` values,
/// with their scales) against the weight rows `cols` of a whole weight.
struct Strip<'a> {
    blocks: usize,
    /// Weight scales per 16 values (two a block) instead of per 32.
    halves: bool,
    k: usize,
    /// Weight scales per row.
    groups: usize,
    x: [&'a [i8]; R],
    x_scales: [&'a [f32]; R],
    /// The weight's values, `[n × k]`, and scales, `[n × groups]`.
    w: &'a [u8],
    w_scales: &'a [f32],
    cols: std::ops::Range<usize>,
    /// How many of the `R` rows are real (the rest repeat the last).
    rows: usize,
}

/// Adds a strip's products into `out`: its rows at stride `ld`, column 0 =
/// the strip's first weight row.
type StripFn = fn(&Strip, &mut [f32], usize);

/// A strip as register tiles of `C` weight rows through `tile`; a partial
/// tile repeats its last weight row (results dropped).
fn strip_by_tiles(s: &Strip, out: &mut [f32], ld: usize, tile: fn(&TileIn, &mut [[f32; C]; R])) {
    let mut c0 = s.cols.start;
    while c0 < s.cols.end {
        let cn = C.min(s.cols.end - c0);
        let w_rows: [usize; C] = std::array::from_fn(|j| c0 + j.min(cn - 1));
        let tile_in = TileIn {
            blocks: s.blocks,
            halves: s.halves,
            x: s.x,
            x_scales: s.x_scales,
            w: w_rows.map(|r| &s.w[r * s.k..][..s.k]),
            w_scales: w_rows.map(|r| &s.w_scales[r * s.groups..][..s.groups]),
        };
        let mut sums = [[0f32; C]; R];
        tile(&tile_in, &mut sums);
        for (i, sums_i) in sums.iter().enumerate().take(s.rows) {
            let dst = &mut out[i * ld + (c0 - s.cols.start)..][..cn];
            dst.iter_mut().zip(sums_i).for_each(|(d, v)| *d += v);
        }
        c0 += cn;
    }
}

/// One register tile's inputs: `R` activation rows and `C` weight rows,
/// each a whole row of `k = blocks × 32` values with its scales.
struct TileIn<'a> {
    blocks: usize,
    /// Weight scales per 16 values (two a block) instead of per 32.
    halves: bool,
    x: [&'a [i8]; R],
    x_scales: [&'a [f32]; R],
    w: [&'a [u8]; C],
    w_scales: [&'a [f32]; C],
}

fn best_strip() -> StripFn {
    #[cfg(target_arch = "x86_64")]
    if avx2_available() {
        return avx2::strip;
    }
    #[cfg(target_arch = "wasm32")]
    return |s, out, ld| strip_by_tiles(s, out, ld, simd128::tile);
    #[allow(unreachable_code)]
    portable_strip
}

fn portable_strip(s: &Strip, out: &mut [f32], ld: usize) {
    strip_by_tiles(s, out, ld, portable_tile)
}

/// The reference: scalar i32 dots, scaled per block in f32.
fn portable_tile(t: &TileIn, out: &mut [[f32; C]; R]) {
    for (r, out_r) in out.iter_mut().enumerate() {
        for (c, out_rc) in out_r.iter_mut().enumerate() {
            let mut acc = 0f32;
            for b in 0..t.blocks {
                let x = &t.x[r][b * BLOCK..][..BLOCK];
                let w = &t.w[c][b * BLOCK..][..BLOCK];
                let dot = |range: std::ops::Range<usize>| range.map(|i| x[i] as i32 * w[i] as i32).sum::<i32>() as f32;
                let xs = t.x_scales[r][b];
                if t.halves {
                    acc += dot(0..16) * (xs * t.w_scales[c][2 * b]) + dot(16..32) * (xs * t.w_scales[c][2 * b + 1]);
                } else {
                    acc += dot(0..32) * (xs * t.w_scales[c][b]);
                }
            }
            *out_rc = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Strip, BLOCK, C, R};
    use std::arch::x86_64::*;

    pub fn strip(s: &Strip, out: &mut [f32], ld: usize) {
        // Every pointer below stays inside its slice: weight rows come from
        // `cols` (rows of the weight), activation rows are whole rows, and
        // `out` holds the strip's rows × columns at stride `ld` (checked).
        assert!(s.cols.end * s.k <= s.w.len() && s.cols.end * s.groups <= s.w_scales.len());
        assert!(s.rows >= 1 && out.len() >= (s.rows - 1) * ld + s.cols.len());
        // SAFETY: only chosen when the CPU has AVX2 and FMA (`best_strip`);
        // bounds as asserted.
        unsafe {
            if s.halves {
                strip_avx2::<true>(s, out, ld)
            } else {
                strip_avx2::<false>(s, out, ld)
            }
        }
    }

    /// The strip's register tiles, `C` weight rows at a time, on raw
    /// pointers and plain loops: closures would not inherit the target
    /// features, and each intrinsic would become a call.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn strip_avx2<const HALVES: bool>(s: &Strip, out: &mut [f32], ld: usize) {
        let (mut xp, mut xsp) = ([std::ptr::null::<i8>(); R], [std::ptr::null::<f32>(); R]);
        for r in 0..R {
            (xp[r], xsp[r]) = (s.x[r].as_ptr(), s.x_scales[r].as_ptr());
        }
        let mut c0 = s.cols.start;
        while c0 < s.cols.end {
            let cn = C.min(s.cols.end - c0);
            let (mut wp, mut wsp) = ([std::ptr::null::<u8>(); C], [std::ptr::null::<f32>(); C]);
            for c in 0..C {
                // A partial tile repeats its last weight row (results dropped).
                let row = c0 + c.min(cn - 1);
                // SAFETY: row < cols.end, inside the weight (asserted by `strip`).
                (wp[c], wsp[c]) = unsafe { (s.w.as_ptr().add(row * s.k), s.w_scales.as_ptr().add(row * s.groups)) };
            }
            // SAFETY: whole rows of `blocks × 32` values and their scales.
            let sums = unsafe { tile::<HALVES>(s.blocks, &xp, &xsp, &wp, &wsp) };
            for (r, sums_r) in sums.iter().enumerate().take(s.rows) {
                let dst = &mut out[r * ld + (c0 - s.cols.start)..][..cn];
                dst.iter_mut().zip(sums_r).for_each(|(d, v)| *d += v);
            }
            c0 += cn;
        }
    }

    /// One `R × C` tile over whole rows.
    ///
    /// SAFETY: each `xp` row holds `blocks × 32` values and its `xsp` row
    /// `blocks` scales; each `wp` row `blocks × 32` values and its `wsp` row
    /// `blocks` scales (2 × `blocks` with HALVES).
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn tile<const HALVES: bool>(
        blocks: usize,
        xp: &[*const i8; R],
        xsp: &[*const f32; R],
        wp: &[*const u8; C],
        wsp: &[*const f32; C],
    ) -> [[f32; C]; R] {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut w = [_mm256_setzero_si256(); C];
        let mut ws = [_mm256_setzero_ps(); C];
        for b in 0..blocks {
            // SAFETY (all loads below): in bounds per this function's
            // contract; the 32-byte loads are unaligned ones.
            for c in 0..C {
                unsafe {
                    w[c] = _mm256_loadu_si256(wp[c].add(b * BLOCK) as *const __m256i);
                    ws[c] = if HALVES {
                        _mm256_set_m128(_mm_broadcast_ss(&*wsp[c].add(2 * b + 1)), _mm_broadcast_ss(&*wsp[c].add(2 * b)))
                    } else {
                        _mm256_broadcast_ss(&*wsp[c].add(b))
                    };
                }
            }
            for r in 0..R {
                let (x, xs) = unsafe { (_mm256_loadu_si256(xp[r].add(b * BLOCK) as *const __m256i), _mm256_broadcast_ss(&*xsp[r].add(b))) };
                for c in 0..C {
                    // u8 weights (≤ 63) × i8 activations, pairs summed to
                    // i16 (no saturation: 2 × 63 × 128 < 32768), then to i32.
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(w[c], x), ones);
                    acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(ws[c], xs), acc[r][c]);
                }
            }
        }
        let mut sums = [[0f32; C]; R];
        for r in 0..R {
            for c in 0..C {
                let v = acc[r][c];
                let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
                let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
                let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
                sums[r][c] = _mm_cvtss_f32(h);
            }
        }
        sums
    }
}

#[cfg(target_arch = "wasm32")]
mod simd128 {
    use super::{TileIn, BLOCK, C, R};
    use core::arch::wasm32::*;

    /// The i32x4 dot of 32 signed activations (`x0`, `x1`) with 32 unsigned
    /// weights. With relaxed SIMD, two i16x8 pair dots (one `pmaddubsw`
    /// each on x86; the weights are below 128, where every engine agrees
    /// and no pair sum saturates) are added in i16 (|sum| ≤ 4 × 63 × 128 <
    /// 32768) and widened once: one widening per 32 values instead of the
    /// i32 dot's one per 16.
    #[inline(always)]
    fn dot32(x0: v128, w0: v128, x1: v128, w1: v128) -> v128 {
        #[cfg(target_feature = "relaxed-simd")]
        {
            i32x4_extadd_pairwise_i16x8(i16x8_add(i16x8_relaxed_dot_i8x16_i7x16(x0, w0), i16x8_relaxed_dot_i8x16_i7x16(x1, w1)))
        }
        #[cfg(not(target_feature = "relaxed-simd"))]
        {
            i32x4_add(dot16(x0, w0), dot16(x1, w1))
        }
    }

    /// The i32x4 dot of 16 signed activations with 16 unsigned weights.
    #[inline(always)]
    fn dot16(x: v128, w: v128) -> v128 {
        #[cfg(target_feature = "relaxed-simd")]
        {
            i32x4_extadd_pairwise_i16x8(i16x8_relaxed_dot_i8x16_i7x16(x, w))
        }
        #[cfg(not(target_feature = "relaxed-simd"))]
        {
            let low = i32x4_dot_i16x8(i16x8_extend_low_i8x16(x), i16x8_extend_low_u8x16(w));
            let high = i32x4_dot_i16x8(i16x8_extend_high_i8x16(x), i16x8_extend_high_u8x16(w));
            i32x4_add(low, high)
        }
    }

    #[inline(always)]
    fn madd(a: v128, b: v128, acc: v128) -> v128 {
        #[cfg(target_feature = "relaxed-simd")]
        {
            f32x4_relaxed_madd(a, b, acc)
        }
        #[cfg(not(target_feature = "relaxed-simd"))]
        {
            f32x4_add(acc, f32x4_mul(a, b))
        }
    }

    pub fn tile(t: &TileIn, out: &mut [[f32; C]; R]) {
        let mut acc = [[f32x4_splat(0.0); C]; R];
        for b in 0..t.blocks {
            // SAFETY: every row holds `blocks × 32` values (TileIn's
            // contract), so both 16-byte loads at b × 32 are in bounds.
            let w: [[v128; 2]; C] = std::array::from_fn(|c| {
                let p = t.w[c].as_ptr().wrapping_add(b * BLOCK) as *const v128;
                unsafe { [v128_load(p), v128_load(p.add(1))] }
            });
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let p = t.x[r].as_ptr().wrapping_add(b * BLOCK) as *const v128;
                // SAFETY: as above.
                let (x0, x1) = unsafe { (v128_load(p), v128_load(p.add(1))) };
                let xs = t.x_scales[r][b];
                for (c, acc_rc) in acc_r.iter_mut().enumerate() {
                    if t.halves {
                        let s0 = f32x4_splat(xs * t.w_scales[c][2 * b]);
                        let s1 = f32x4_splat(xs * t.w_scales[c][2 * b + 1]);
                        *acc_rc = madd(f32x4_convert_i32x4(dot16(x0, w[c][0])), s0, *acc_rc);
                        *acc_rc = madd(f32x4_convert_i32x4(dot16(x1, w[c][1])), s1, *acc_rc);
                    } else {
                        let s = f32x4_splat(xs * t.w_scales[c][b]);
                        *acc_rc = madd(f32x4_convert_i32x4(dot32(x0, w[c][0], x1, w[c][1])), s, *acc_rc);
                    }
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let v = acc[r][c];
                out[r][c] =
                    f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v) + f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::xorshift_values;

    /// A weight in the affine form with random bytes, scales and minimums.
    fn weight(n: usize, k: usize, group: usize, seed: u32) -> (IntPacked, Vec<f32>) {
        let noise = xorshift_values(n * k + 2 * n * (k / group), seed);
        let q_of = |r: usize, i: usize| ((noise[r * k + i] + 1.0) * 31.5) as u8;
        let scale_of = |r: usize, g: usize| 0.01 + 0.02 * noise[n * k + r * (k / group) + g].abs();
        let min_of = |r: usize, g: usize| 0.3 * noise[n * k + n * (k / group) + r * (k / group) + g];
        let packed = IntPacked::from_row_fn(n, k, group, |r, q, s, m| {
            q.iter_mut().enumerate().for_each(|(i, v)| *v = q_of(r, i));
            s.iter_mut().enumerate().for_each(|(g, v)| *v = scale_of(r, g));
            m.iter_mut().enumerate().for_each(|(g, v)| *v = min_of(r, g));
        });
        let dense = (0..n * k).map(|i| scale_of(i / k, i % k / group) * q_of(i / k, i % k) as f32 + min_of(i / k, i % k / group)).collect();
        (packed, dense)
    }

    /// The exact product of the dequantized operands, in f64.
    fn reference(acts: &Activations, w: &[f32], n: usize) -> Vec<f32> {
        let (m, k) = (acts.m, acts.k);
        let x: Vec<f64> = (0..m * k).map(|i| acts.q[i] as f64 * acts.scales(i / k)[i % k / BLOCK] as f64).collect();
        (0..m * n).map(|i| (0..k).map(|j| x[i / n * k + j] * w[i % n * k + j] as f64).sum::<f64>() as f32).collect()
    }

    #[test]
    fn products_match_the_dequantized_operands_at_awkward_shapes() {
        for (m, n, k, group) in [(1, 1, 32, 32), (3, 5, 64, 16), (15, 37, 576, 32), (17, 9, 256, 16), (70, 24, 192, 32)] {
            let (packed, dense) = weight(n, k, group, 7 + m as u32);
            let x = xorshift_values(m * k, 11 + n as u32);
            let acts = Activations::quantize(&x, m, k, group);
            let want = reference(&acts, &dense, n);
            for (name, strip) in [("best", best_strip()), ("portable", portable_strip as StripFn)] {
                let ours = packed.matmul_with(&acts, strip);
                let worst = ours.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst < 2e-5 * k as f32, "{name} [{m}×{k}]·[{n}×{k}]ᵀ/{group}: worst |difference| {worst}");
            }
        }
    }

    /// Found reading the code: 24 threads split 256 weight rows into runs of
    /// 12, the 23rd starting past the end.
    #[test]
    fn column_runs_cover_the_rows_once_for_any_thread_count() {
        for n in 1..300 {
            for threads in 1..40 {
                let (width, parts) = column_split(n, threads);
                assert!(width % C == 0 && parts.len() <= threads.max(1));
                assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= width), "n {n}, threads {threads}: {parts:?}");
                assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), n);
                assert!(parts.windows(2).all(|w| w[0].end == w[1].start) && parts[0].start == 0);
            }
        }
    }

    #[test]
    fn quantized_activations_stay_within_half_a_step() {
        let (m, k) = (3, 96);
        let mut x = xorshift_values(m * k, 5);
        x[40..64].iter_mut().for_each(|v| *v = 0.0);
        let acts = Activations::quantize(&x, m, k, 16);
        for (i, v) in x.iter().enumerate() {
            let scale = acts.scales(i / k)[i % k / BLOCK];
            assert!((acts.q[i] as f32 * scale - v).abs() <= 0.5 * scale + 1e-7, "value {i}");
        }
        assert!(acts.q[40..64].iter().all(|&q| q == 0));
        // Sums per group are the group's dequantized total.
        let sums = acts.sums();
        for (g, sum) in sums.iter().enumerate() {
            let want: f32 = (0..16).map(|j| acts.q[g * 16 + j] as f32 * acts.scales((g * 16) / k)[(g * 16) % k / BLOCK]).sum();
            assert!((sum - want).abs() < 1e-4, "group {g}: {sum} against {want}");
        }
    }
}
