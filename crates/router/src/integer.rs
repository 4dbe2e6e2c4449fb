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
//! byte per value (two for the 4-bit formats: [`ValueWidth`]), a scale per
//! 32 (Q6_K: 16) values. The product then has
//! two parts. `Σ scale·q·x` is the integer dot of `q` with the quantized
//! activations, scaled per block; `Σ min·x` needs only each block's sum of
//! activations, one multiply–add per block beside the scaling (a vector of
//! weight rows' minimums times the activation row's sum, broadcast). As a separate
//! `k / 32`-wide f32 GEMM it took a fifth of the product's time, most of it
//! packing its narrow operands. Since `q` is unsigned and below
//! 128 it is the unsigned operand every integer dot instruction wants:
//! wasm relaxed-SIMD's `i16x8.relaxed_dot_i8x16_i7x16_s` (deterministic
//! only for operands below 128), x86's `vpmaddubsw` (its i16 pair sums
//! stay below 2 × 63 × 127, so never saturate, and two of them still fit
//! an i16).
//!
//! The weight's bytes sit in panels of 8 rows interleaved 4 values at a
//! time ([`IntPacked`]), so each dot instruction sums 4 values of 8 (AVX2)
//! or 4 (SIMD128) weight rows into one i32 lane each against a broadcast of
//! the activation row's 4 values, and the per-block conversion and scaling
//! cost one vector operation per 8 (or 4) weight rows instead of a
//! horizontal sum and a multiply–add per row.
//!
//! Kernels ([`kernels`]), natively detected at run time: AVX-VNNI or
//! AVX-512 VNNI (`vpdpbusd`: a weight row's 4 products summed into its i32
//! lane in one instruction), else AVX2 (`vpmaddubsw` + `vpmaddwd`: three
//! instructions for two steps' worth, plus the adds); in the threads build
//! relaxed SIMD's dots, in the single-thread build plain SIMD128's i16 dot
//! (`pmaddwd`) on the bytes widened as they load, and plain Rust elsewhere
//! (also the reference the others are tested against).

#![allow(unsafe_code)]

use crate::parallel;

/// Values per activation block (one scale each).
pub const BLOCK: usize = 32;

/// Activation rows per strip (the kernels' register tile is `R × PANEL`).
const R: usize = 4;

/// Weight rows per panel: one i32 lane each in an AVX2 vector, two
/// SIMD128 vectors' worth.
const PANEL: usize = 8;

/// Values one lane's dot sums per step (what `vpmaddubsw` + `vpmaddwd`,
/// or relaxed SIMD's dot, sum into one i32).
const STEP: usize = 4;

/// One integer kernel: what reports call it and the function that runs
/// its strips. Every kernel computes the same i32 sums exactly (the
/// products are integers and no partial sum overflows) and the SIMD ones
/// scale them with the same fused multiply–adds, so which SIMD kernel runs
/// changes the time, not a float; the portable reference rounds apart.
#[derive(Clone, Copy)]
pub struct Kernel {
    pub name: &'static str,
    strip: StripFn,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

const PORTABLE: Kernel = Kernel { name: "portable i32 dot", strip: portable_strip };

/// The kernels this build has and this CPU runs, the one [`IntPacked`]
/// uses first; the portable reference is always last.
pub fn kernels() -> Vec<Kernel> {
    let mut found = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let avx2 = has!("avx2") && has!("fma");
        // The same `vpdpbusd` on 256 bits, EVEX-encoded (AVX-512 VNNI with
        // VL: Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4) or
        // VEX-encoded (AVX-VNNI: Alder Lake, Sapphire Rapids, Zen 5).
        // Where both exist (Sapphire Rapids) the VEX form goes first: here
        // it measured 380 against 356 GFLOP/s for the EVEX one on the
        // probe's product (`gemm-probe --kernels`, 2 threads), though
        // before the minimums moved into the kernels the order was the
        // other way round (379 against 407): the two are close, and the
        // order is a measurement. On 512-bit vectors, two panels a step,
        // it measured no faster (401 GFLOP/s): the dots are not what
        // bounds the product, so that variant is not kept.
        //
        // Two panels a pass (each activation broadcast serving 16 weight
        // rows) measured 4–5 % faster for AVX-VNNI on the gate/up shape
        // and 1–4 % on the down projection's (331–353 against 316–338
        // GFLOP/s, `gemm-probe --kernels --repeats 25`, three runs), and
        // slower for the EVEX form (296–322 against 323–336), so only
        // AVX-VNNI has it.
        if avx2 && has!("avxvnni") {
            found.push(Kernel { name: "AVX-VNNI u8×i8 dot, 2 panels a pass", strip: x86::avx_vnni_2 });
            found.push(Kernel { name: "AVX-VNNI u8×i8 dot", strip: x86::avx_vnni });
        }
        if avx2 && has!("avx512vnni") && has!("avx512vl") {
            found.push(Kernel { name: "AVX-512 VNNI u8×i8 dot (256-bit)", strip: x86::avx512_vnni });
        }
        if avx2 {
            found.push(Kernel { name: "AVX2 u8×i8 dot", strip: x86::avx2 });
        }
    }
    #[cfg(target_arch = "wasm32")]
    found.extend(simd128::kernels());
    found.push(PORTABLE);
    found
}

/// The kernel products use: the first of [`kernels`], found once.
fn best() -> Kernel {
    static BEST: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
    *BEST.get_or_init(|| kernels()[0])
}

/// Which integer kernel this build and CPU run, for reports and the page.
pub fn kernel_name() -> &'static str {
    best().name
}

/// Whether this build's kernel reads the activations widened to i16: the
/// single-thread wasm build's (plain SIMD128, no relaxed dots), whose
/// products are `i32x4.dot_i16x8_s` of widened values. Widened once at
/// quantization, each two steps of a row are two 8-byte broadcasts
/// instead of two 4-byte ones and two sign extensions, once per strip
/// and pass; its product ran 10 % faster (1,024 × 576 × 1,536: 46.1
/// against 51.1 ms; 1,024 × 1,536 × 576: 47.2 against 52.1 ms; best of 7
/// alternated runs each in headless Chromium, the quantization included),
/// and with `attention::larger` the single-thread page's 1,024-token
/// decide went from 11.4, 9.5, 9.7 and 10.2 s to 10.2, 8.5, 7.9 and 8.2 s
/// (warm p50 of 3 calls, the two builds alternated ABBA in one Chromium).
const WIDENED_ACTIVATIONS: bool = cfg!(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")));

/// Activations `[m × k]` quantized per block of [`BLOCK`] values:
/// `x ≈ scale × q` with `q` in −127..=127. [`Activations::quantize_into`]
/// refills one in place, so a prefill keeps one per weight group for all
/// its layers instead of allocating megabytes for each projection.
#[derive(Default)]
pub struct Activations {
    pub m: usize,
    pub k: usize,
    /// Values per sum (the weight's group).
    pub group: usize,
    /// `[m × k]`.
    pub q: Vec<i8>,
    /// `q` widened to i16, where the build's kernel multiplies in i16
    /// ([`WIDENED_ACTIVATIONS`]); empty elsewhere.
    q_wide: Vec<i16>,
    /// `[m × (k / BLOCK + k / group)]`: a row's scales, then its groups'
    /// `scale × Σ q` (what the weights' minimums multiply).
    meta: Vec<f32>,
}

impl Activations {
    /// Quantizes `x` (`[m × k]`, `k` a multiple of [`BLOCK`]) with sums per
    /// `group` values (16 or 32), rows spread over the pool.
    pub fn quantize(x: &[f32], m: usize, k: usize, group: usize) -> Activations {
        let mut acts = Activations::default();
        acts.quantize_into(x, m, k, group);
        acts
    }

    /// [`Activations::quantize`] into this value's buffers, reusing them.
    pub fn quantize_into(&mut self, x: &[f32], m: usize, k: usize, group: usize) {
        assert!(k.is_multiple_of(BLOCK) && BLOCK.is_multiple_of(group) && x.len() == m * k, "[{m} × {k}] activations, groups of {group}");
        let (blocks, meta_row) = (k / BLOCK, k / BLOCK + k / group);
        (self.m, self.k, self.group) = (m, k, group);
        let (q, meta) = (&mut self.q, &mut self.meta);
        // Every value is written below; the resize only sets the lengths.
        q.resize(m * k, 0);
        meta.resize(m * meta_row, 0.0);
        parallel::for_each_rows_mut2(q, k, meta, meta_row, parallel::rows_per_task(m), |first, q_rows, meta_rows| {
            for (i, (qs, meta)) in q_rows.chunks_exact_mut(k).zip(meta_rows.chunks_exact_mut(meta_row)).enumerate() {
                let xs = &x[(first + i) * k..][..k];
                let (scales, sums) = meta.split_at_mut(blocks);
                for ((xb, qb), scale) in xs.chunks_exact(BLOCK).zip(qs.chunks_exact_mut(BLOCK)).zip(scales.iter_mut()) {
                    // Folded in independent lanes: a single running maximum
                    // is a serial chain the compiler may not reorder, and
                    // with it (and a saturating `as i8` per value) this loop
                    // stayed scalar: 6.6 % of a 1,024-token native profile,
                    // 4.7 % after (both counting the load's repacking, which
                    // shares the closure's symbol).
                    let amax = crate::attention::lanes(xb, 0.0, |a, v| crate::attention::larger(a, v.abs()));
                    let inverse = if amax > 0.0 { 127.0 / amax } else { 0.0 };
                    qb.iter_mut().zip(xb).for_each(|(q, &v)| *q = round_to_i8(v * inverse));
                    // The scale rounded to f16, as ggml's Q8_0 and Q8_1
                    // blocks store it. Not for precision (f32 is finer) but
                    // so that our 8-bit rounding is llama.cpp's own, not
                    // merely the same kind: each product's error was already
                    // candle's and llama.cpp's, yet with f32 scales the
                    // roundings drifted apart over 30 layers and one
                    // reference text's last token ended at cosine 0.9981
                    // from llama.cpp's (0.9992 with f16 scales, 0.9994 for
                    // candle's quantized matmul, which stores f16 too).
                    *scale = half::f16::from_f32(amax / 127.0).to_f32();
                }
                for (g, (sum, qg)) in sums.iter_mut().zip(qs.chunks_exact(group)).enumerate() {
                    *sum = scales[g * group / BLOCK] * qg.iter().map(|&v| v as i32).sum::<i32>() as f32;
                }
            }
        });
        if WIDENED_ACTIVATIONS {
            // One pass that vectorises; this build has no helper threads.
            self.q_wide.clear();
            self.q_wide.extend(self.q.iter().map(|&v| i16::from(v)));
        }
    }

    fn meta_row(&self) -> usize {
        self.k / BLOCK + self.k / self.group
    }

    /// Row `r`'s block scales.
    pub fn scales(&self, r: usize) -> &[f32] {
        &self.meta[r * self.meta_row()..][..self.k / BLOCK]
    }

    /// Row `r`'s group sums (`scale × Σ q` per group), what the weights'
    /// minimums multiply.
    fn sums(&self, r: usize) -> &[f32] {
        &self.meta[r * self.meta_row() + self.k / BLOCK..][..self.k / self.group]
    }
}

/// `y` (|y| ≤ 127, or slightly above by the scale's rounding) to the
/// nearest integer, ties to even, as an i8: adding 1.5·2²³ leaves the
/// integer in the sum's low mantissa bits, taken out with an integer
/// subtraction, so the loop vectorises (Rust's saturating `as i8` has no
/// vector instruction on x86). Ties to even is also what llama.cpp's SIMD
/// activation quantizers round with (`_mm256_round_ps` to nearest); its
/// scalar reference rounds ties away from zero, which differs only for
/// values exactly halfway.
#[inline(always)]
fn round_to_i8(y: f32) -> i8 {
    const SHIFT: f32 = 12_582_912.0;
    (y + SHIFT).to_bits().wrapping_sub(SHIFT.to_bits()) as i8
}

/// How many bits a weight's values take in [`IntPacked`]'s panels.
///
/// A decode step multiplies one activation row per sequence by every
/// weight, so it reads each weight byte once and does a few integer
/// operations with it: its time is the weight's bytes over the memory
/// bandwidth. Q4_0, Q4_1 and Q4_K values (≤ 15) held a byte each made the
/// projections 1.25 bytes a weight with their f32 scales and minimums,
/// against llama.cpp's 0.56 (Q4_0) and 0.63 (Q4_1); two a byte makes them
/// 0.75, at the price of splitting each loaded vector into its two
/// nibbles (an `and`, a shift and an `and` per two steps, shared by the
/// strip's activation rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueWidth {
    /// Two values a byte: step `2j` in the low nibbles, step `2j + 1` in
    /// the high ones. Values ≤ 15.
    Nibble,
    /// One value a byte. Values ≤ 63.
    Byte,
}

impl ValueWidth {
    /// The narrowest width that holds values of `bits` bits.
    pub fn for_bits(bits: u32) -> ValueWidth {
        if bits <= 4 {
            ValueWidth::Nibble
        } else {
            ValueWidth::Byte
        }
    }

    /// Bytes one panel of [`PANEL`] rows × `k` values takes.
    fn panel_bytes(self, k: usize) -> usize {
        match self {
            ValueWidth::Nibble => PANEL * k / 2,
            ValueWidth::Byte => PANEL * k,
        }
    }

    /// Where steps `step` (even) and `step + 1` of a panel begin, in bytes
    /// from the panel's start: the two steps' 32 bytes side by side, or
    /// one 32-byte vector whose low and high nibbles are the two.
    #[inline(always)]
    fn step_pair_offset(self, step: usize) -> usize {
        match self {
            ValueWidth::Nibble => step / 2 * PANEL * STEP,
            ValueWidth::Byte => step * PANEL * STEP,
        }
    }

    /// Value `i` of a panel's row `lane`, read from the panel's bytes.
    fn value(self, panel: &[u8], i: usize, lane: usize) -> u8 {
        let step = i / STEP;
        let byte = self.step_pair_offset(step & !1) + lane * STEP + i % STEP;
        match self {
            ValueWidth::Nibble if step % 2 == 1 => panel[byte] >> 4,
            ValueWidth::Nibble => panel[byte] & 0x0f,
            ValueWidth::Byte => panel[byte + (step % 2) * PANEL * STEP],
        }
    }
}

/// A weight `[n × k]` repacked for the integer kernels: its unsigned
/// values (≤ 63, or ≤ 15 two a byte: [`ValueWidth`]) in panels of
/// [`PANEL`] rows, a scale per `group` values, and the minimums as a
/// packed f32 matrix `[n × k / group]`.
///
/// Within a panel the rows are interleaved [`STEP`] values at a time: step
/// `s` holds values `4s..4s + 4` of each of the panel's 8 rows, 32 bytes
/// side by side. A dot instruction then sums each row's 4 values into its
/// own i32 lane, so one instruction serves 8 weight rows against one
/// activation row's 4 values (broadcast), and a block's 8 per-row dots come
/// out as one vector: converted to f32 and scaled once per block for the 8
/// rows, where a row-at-a-time layout ends each block with a horizontal
/// sum, a conversion and a multiply–add per weight row (llama.cpp's
/// repacked `Q4_0` layouts rest on the same observation).
pub struct IntPacked {
    pub n: usize,
    pub k: usize,
    /// Values per scale: 32, or 16 for Q6_K.
    pub group: usize,
    /// Values a byte.
    pub width: ValueWidth,
    /// `[⌈n / PANEL⌉ × k / STEP × PANEL × STEP]` values, one or two a
    /// byte; rows past `n` are zero.
    q: Vec<u8>,
    /// `[⌈n / PANEL⌉ × k / group × PANEL]`: each group's scales for the
    /// panel's rows side by side (zero past `n`).
    scales: Vec<f32>,
    /// The minimums, laid out as the scales.
    mins: Vec<f32>,
}

impl IntPacked {
    /// Bytes held: a byte or half a byte a value, and a scale and a
    /// minimum a group.
    pub fn bytes(&self) -> u64 {
        (self.q.len() + 4 * (self.scales.len() + self.mins.len())) as u64
    }

    /// Repacks from a row decoder: `row(r, q, scales, mins)` fills row `r`'s
    /// `k` values and `k / group` scales and minimums. Panels are decoded on
    /// the pool's threads, each through one row's scratch: no row-major
    /// copy of the weight exists beside the panels.
    ///
    /// # Panics
    /// If a row decoder gives a value wider than `width` holds (a caller's
    /// bug: the width comes from the format's bits).
    pub fn from_row_fn(
        n: usize,
        k: usize,
        group: usize,
        width: ValueWidth,
        row: impl Fn(usize, &mut [u8], &mut [f32], &mut [f32]) + Sync,
    ) -> IntPacked {
        assert!(k.is_multiple_of(BLOCK) && (group == 16 || group == 32), "[{n} × {k}] in groups of {group}");
        let (panels, groups, panel_bytes) = (n.div_ceil(PANEL), k / group, width.panel_bytes(k));
        // Per panel: its scales interleaved, then its minimums likewise.
        let meta_len = 2 * groups * PANEL;
        let (mut q, mut meta) = (vec![0u8; panels * panel_bytes], vec![0f32; panels * meta_len]);
        let per_task = (parallel::rows_per_task(n) / PANEL).max(1);
        parallel::for_each_rows_mut2(&mut q, panel_bytes, &mut meta, meta_len, per_task, |first, q_panels, meta_panels| {
            let (mut values, mut scales, mut mins) = (vec![0u8; k], vec![0f32; groups], vec![0f32; groups]);
            for (i, (panel, meta)) in q_panels.chunks_exact_mut(panel_bytes).zip(meta_panels.chunks_exact_mut(meta_len)).enumerate() {
                let (panel_scales, panel_mins) = meta.split_at_mut(groups * PANEL);
                for lane in 0..PANEL.min(n - (first + i) * PANEL) {
                    row((first + i) * PANEL + lane, &mut values, &mut scales, &mut mins);
                    match width {
                        ValueWidth::Byte => {
                            for (s, four) in values.chunks_exact(STEP).enumerate() {
                                panel[(s * PANEL + lane) * STEP..][..STEP].copy_from_slice(four);
                            }
                        }
                        ValueWidth::Nibble => {
                            assert!(values.iter().all(|&v| v <= 0x0f), "row {} has a value past 4 bits", (first + i) * PANEL + lane);
                            for (j, eight) in values.chunks_exact(2 * STEP).enumerate() {
                                let byte = &mut panel[(j * PANEL + lane) * STEP..][..STEP];
                                for (b, (&low, &high)) in byte.iter_mut().zip(eight[..STEP].iter().zip(&eight[STEP..])) {
                                    *b = low | high << 4;
                                }
                            }
                        }
                    }
                    scales.iter().enumerate().for_each(|(g, &v)| panel_scales[g * PANEL + lane] = v);
                    mins.iter().enumerate().for_each(|(g, &v)| panel_mins[g * PANEL + lane] = v);
                }
            }
        });
        let scales = meta.chunks_exact(meta_len).flat_map(|m| &m[..groups * PANEL]).copied().collect();
        let mins = meta.chunks_exact(meta_len).flat_map(|m| &m[groups * PANEL..]).copied().collect();
        IntPacked { n, k, group, width, q, scales, mins }
    }

    /// `x` is `[m × k]` f32; returns `[m × n]`: `x` quantized per block
    /// times the weight, as `Σ_blocks (a_scale · w_scale · Σ q_x·q_w) + Σ min · sum`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Vec<f32> {
        let acts = Activations::quantize(x, m, self.k, self.group);
        self.matmul_quantized(&acts)
    }

    /// The product with already-quantized activations.
    pub fn matmul_quantized(&self, acts: &Activations) -> Vec<f32> {
        self.matmul_with(acts, best())
    }

    /// [`IntPacked::matmul_quantized`] into `c`, reusing its allocation.
    pub fn matmul_quantized_into(&self, acts: &Activations, c: &mut Vec<f32>) {
        self.matmul_into(acts, best(), c)
    }

    /// The product through a given kernel (one of [`kernels`]), for tests
    /// and probes that compare them.
    pub fn matmul_with(&self, acts: &Activations, kernel: Kernel) -> Vec<f32> {
        let mut c = Vec::new();
        self.matmul_into(acts, kernel, &mut c);
        c
    }

    /// The product into `c` (resized to `[m × n]`), reusing its allocation:
    /// a fresh output of megabytes a projection is mapped, faulted in page
    /// by page and unmapped again at every call. Every value of `c` is
    /// written once by the kernels, never read, so `c` is not cleared
    /// either: zeroing it took 3 % of a 1,024-token native profile, on the
    /// calling thread alone while the pool waited.
    pub fn matmul_into(&self, acts: &Activations, kernel: Kernel, c: &mut Vec<f32>) {
        let strip = kernel.strip;
        let (m, n) = (acts.m, self.n);
        assert_eq!(acts.k, self.k, "activations of width {} for a weight of width {}", acts.k, self.k);
        assert_eq!(acts.group, self.group, "sums per {} values for a weight scaled per {}", acts.group, self.group);
        // Every value is overwritten; the resize only sets the length.
        c.resize(m * n, 0.0);
        if m == 0 || n == 0 {
            return;
        }
        let threads = parallel::threads();
        // Whole rows per task need at least two tasks of `MIN_TASK_ROWS`
        // for every thread to work: below that, a split by rows gave 16
        // to 31 rows (a decode step of 16 sequences) to one task, and the
        // step's projections ran on one thread (29 ms at 16 sequences
        // against 12 ms at 8).
        const MIN_TASK_ROWS: usize = 16;
        if m >= 2 * MIN_TASK_ROWS * threads || threads == 1 {
            // Long prompts: each task owns whole rows of C (a safe split),
            // and streams every weight panel past its rows. Many tasks a
            // thread, so a thread the host slows for a while takes fewer of
            // them instead of holding the rest back. On this 2-vCPU VM, two
            // sets of three alternated runs of native `bench-decide
            // --precision int8` at 1,024 tokens had medians of 1,203 and
            // 1,438 ms with 16 tasks a thread against 1,487 and 1,636 ms
            // with 2; with a busy loop pinned to one vCPU, 8 tasks a thread
            // took 1,938–2,260 ms against 2,173–2,286 ms. Re-reading a
            // weight per task costs little: its bands stay in L3 between
            // tasks. One thread has nothing to balance and keeps two passes.
            const TASKS_A_THREAD: usize = 16;
            let tasks = if threads == 1 { 2 } else { threads * TASKS_A_THREAD };
            let rows = m.div_ceil(tasks).next_multiple_of(R).max(MIN_TASK_ROWS);
            parallel::for_each_rows_mut(c, n, rows, |first, out| self.product_rows(acts, first, out.len() / n, 0..n, out, n, strip));
        } else {
            // Short prompts: split the weight's panels (C's columns) so
            // every thread works; each task fills its own [m × columns]
            // block, copied into C afterwards.
            let (width, parts) = column_split(n, threads);
            let mut blocks = vec![0f32; parts.len() * m * width];
            parallel::for_each_rows_mut(&mut blocks, m * width, 1, |t, out| {
                self.product_rows(acts, 0, m, parts[t].clone(), out, width, strip);
            });
            for (cols, block) in parts.iter().zip(blocks.chunks_exact(m * width)) {
                for (row, c_row) in block.chunks_exact(width).zip(c.chunks_exact_mut(n)) {
                    c_row[cols.clone()].copy_from_slice(&row[..cols.len()]);
                }
            }
        }
    }

    /// Writes the product for activation rows `first..first + rows` and
    /// weight rows `cols` (starting on a panel) into `out` (`rows` rows at
    /// stride `ld`, column 0 = `cols.start`). Panels go in bands that stay
    /// in L2 while every strip of `R` activation rows (in L1) passes them.
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
        /// Panels per band: 64 weight rows × k bytes (≤ 128 KiB at k = 2,048).
        const BAND: usize = 64 / PANEL;
        debug_assert!(cols.start.is_multiple_of(PANEL) && cols.end <= self.n);
        let k = self.k;
        let (first_panel, panels) = (cols.start / PANEL, cols.end.div_ceil(PANEL));
        let mut band = first_panel;
        while band < panels {
            let band_panels = band..(band + BAND).min(panels);
            let mut r0 = 0;
            while r0 < rows {
                let rn = R.min(rows - r0);
                // A partial strip repeats its last row (in bounds, results dropped).
                let x_rows: [usize; R] = std::array::from_fn(|i| first + r0 + i.min(rn - 1));
                let input = Strip {
                    k,
                    group: self.group,
                    width: self.width,
                    x: x_rows.map(|r| &acts.q[r * k..][..k]),
                    x_wide: x_rows.map(|r| acts.q_wide.get(r * k..(r + 1) * k).unwrap_or_default()),
                    x_scales: x_rows.map(|r| acts.scales(r)),
                    x_sums: x_rows.map(|r| acts.sums(r)),
                    q: &self.q,
                    scales: &self.scales,
                    mins: &self.mins,
                    panels: band_panels.clone(),
                    cols_end: cols.end,
                    rows: rn,
                };
                strip(&input, &mut out[r0 * ld + (band - first_panel) * PANEL..], ld);
                r0 += rn;
            }
            band = band_panels.end;
        }
    }
}

/// Splits `n` weight rows into at most `threads` runs of `width` (a
/// multiple of [`PANEL`]; the last may be shorter), none empty.
fn column_split(n: usize, threads: usize) -> (usize, Vec<std::ops::Range<usize>>) {
    let width = n.div_ceil(threads.clamp(1, n.div_ceil(PANEL).max(1))).next_multiple_of(PANEL);
    (width, (0..n).step_by(width).map(|start| start..(start + width).min(n)).collect())
}

/// A strip: `R` activation rows (whole rows of `k` values, with their
/// block scales) against a run of the weight's panels.
struct Strip<'a> {
    k: usize,
    /// Values per weight scale (32, or 16).
    group: usize,
    width: ValueWidth,
    x: [&'a [i8]; R],
    /// The same rows widened to i16 where [`WIDENED_ACTIVATIONS`]; else empty.
    x_wide: [&'a [i16]; R],
    x_scales: [&'a [f32]; R],
    /// The rows' group sums.
    x_sums: [&'a [f32]; R],
    /// The whole weight's panels, their scales and minimums (`IntPacked`'s
    /// layout).
    q: &'a [u8],
    scales: &'a [f32],
    mins: &'a [f32],
    panels: std::ops::Range<usize>,
    /// Weight rows from here on are not written (past `n`, or another
    /// task's).
    cols_end: usize,
    /// How many of the `R` rows are real (the rest repeat the last).
    rows: usize,
}

impl Strip<'_> {
    fn groups(&self) -> usize {
        self.k / self.group
    }

    /// What the SIMD kernels' raw pointers rely on: the strip's panels,
    /// their scales and minimums lie inside the weight, and every
    /// activation row holds `k` values, `k / 32` scales and `k / group`
    /// sums.
    fn assert_in_bounds(&self) {
        let meta = self.panels.end * self.groups() * PANEL;
        assert!(self.panels.end * self.width.panel_bytes(self.k) <= self.q.len() && meta <= self.scales.len() && meta <= self.mins.len());
        // Nibbles pair steps within a group: never Q6_K's 16-value groups
        // (6-bit values), so a group's steps come in whole pairs.
        assert!(self.width == ValueWidth::Byte || self.group == BLOCK);
        assert!(self.x.iter().all(|x| x.len() >= self.k) && self.x_scales.iter().all(|x| x.len() >= self.k / BLOCK));
        assert!(!WIDENED_ACTIVATIONS || self.x_wide.iter().all(|x| x.len() >= self.k));
        assert!(self.x_sums.iter().all(|x| x.len() >= self.groups()));
    }

    /// Stores a panel's `R × PANEL` sums into `out` (the strip's rows at
    /// stride `ld`, column 0 = the strip's first panel), dropping repeated
    /// rows and rows past `cols_end`: each output value is one panel's
    /// complete sum over `k`, written once.
    fn store_panel(&self, p: usize, sums: &[[f32; PANEL]; R], out: &mut [f32], ld: usize) {
        let columns = PANEL.min(self.cols_end - p * PANEL);
        for (r, sums_r) in sums.iter().enumerate().take(self.rows) {
            let dst = &mut out[r * ld + (p - self.panels.start) * PANEL..][..columns];
            // A whole panel as a fixed-size copy (two vector stores): a
            // slice copy of variable length is a `memmove` call, which took
            // 2.7 % of a 1,024-token profile for 8 floats at a time.
            match <&mut [f32; PANEL]>::try_from(&mut *dst) {
                Ok(whole) => *whole = *sums_r,
                Err(_) => dst.copy_from_slice(&sums_r[..columns]),
            }
        }
    }
}

/// Writes a strip's products into `out`: its rows at stride `ld`, column 0 =
/// the strip's first panel.
type StripFn = fn(&Strip, &mut [f32], usize);

/// The reference: scalar i32 dots per group, scaled in f32.
fn portable_strip(s: &Strip, out: &mut [f32], ld: usize) {
    let (k, group, groups) = (s.k, s.group, s.groups());
    let panel_bytes = s.width.panel_bytes(k);
    for p in s.panels.clone() {
        let panel = &s.q[p * panel_bytes..][..panel_bytes];
        let scales = &s.scales[p * groups * PANEL..][..groups * PANEL];
        let mins = &s.mins[p * groups * PANEL..][..groups * PANEL];
        let mut sums = [[0f32; PANEL]; R];
        for (r, sums_r) in sums.iter_mut().enumerate() {
            for (lane, sum) in sums_r.iter_mut().enumerate() {
                for g in 0..groups {
                    let dot: i32 = (g * group..(g + 1) * group).map(|i| s.x[r][i] as i32 * s.width.value(panel, i, lane) as i32).sum();
                    *sum += dot as f32 * (s.x_scales[r][g * group / BLOCK] * scales[g * PANEL + lane]);
                    *sum += s.x_sums[r][g] * mins[g * PANEL + lane];
                }
            }
        }
        s.store_panel(p, &sums, out, ld);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Strip, ValueWidth, BLOCK, PANEL, R, STEP};
    use std::arch::x86_64::*;

    /// How a kernel adds two steps of a panel against one activation row:
    /// `w0`, `w1` hold steps `s`, `s + 1` of the panel's 8 weight rows (4
    /// bytes each), `x0`, `x1` the row's 4 values of each step, broadcast.
    /// The one place the x86 kernels differ.
    trait TwoSteps {
        /// # Safety
        /// The caller runs with this kernel's target features enabled.
        unsafe fn add(dots: __m256i, w0: __m256i, x0: __m256i, w1: __m256i, x1: __m256i) -> __m256i;
    }

    /// `vpmaddubsw` + `vpmaddwd`: u8 weights (≤ 63) × i8 activations
    /// (|x| ≤ 127) give i16 pair sums (≤ 16,002), two steps' sums stay
    /// below 32,768, then one widening adds each weight row's 8 products
    /// into its i32 lane.
    struct Avx2;

    impl TwoSteps for Avx2 {
        #[inline(always)]
        unsafe fn add(dots: __m256i, w0: __m256i, x0: __m256i, w1: __m256i, x1: __m256i) -> __m256i {
            // SAFETY: AVX2 is enabled (the trait's contract).
            unsafe {
                let two_steps = _mm256_add_epi16(_mm256_maddubs_epi16(w0, x0), _mm256_maddubs_epi16(w1, x1));
                _mm256_add_epi32(dots, _mm256_madd_epi16(two_steps, _mm256_set1_epi16(1)))
            }
        }
    }

    /// `vpdpbusd` (VEX): each weight row's 4 u8 × i8 products summed into
    /// its i32 lane and accumulated, one instruction a step.
    struct AvxVnni;

    impl TwoSteps for AvxVnni {
        #[inline(always)]
        unsafe fn add(dots: __m256i, w0: __m256i, x0: __m256i, w1: __m256i, x1: __m256i) -> __m256i {
            // SAFETY: AVX-VNNI is enabled (the trait's contract).
            unsafe { _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(dots, w0, x0), w1, x1) }
        }
    }

    /// The same instruction, EVEX-encoded (AVX-512 VNNI with VL).
    struct Avx512Vnni;

    impl TwoSteps for Avx512Vnni {
        #[inline(always)]
        unsafe fn add(dots: __m256i, w0: __m256i, x0: __m256i, w1: __m256i, x1: __m256i) -> __m256i {
            // SAFETY: AVX-512 VNNI and VL are enabled (the trait's contract).
            unsafe { _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(dots, w0, x0), w1, x1) }
        }
    }

    /// A kernel's entry: checks the strip's bounds, then runs the body
    /// compiled with the kernel's target features (`STEPS` a constant: 4
    /// steps per Q6_K scale, 8 per 32-value one), `PANELS` weight panels
    /// (1 or 2) per pass over the activation rows.
    macro_rules! kernel {
        ($name:ident, $features:literal, $two_steps:ty, $panels:literal) => {
            pub fn $name(s: &Strip, out: &mut [f32], ld: usize) {
                #[target_feature(enable = $features)]
                unsafe fn steps<const STEPS: usize, const NIBBLES: bool>(s: &Strip, out: &mut [f32], ld: usize) {
                    // SAFETY: the body's features are enabled here; bounds
                    // as asserted by the caller below.
                    unsafe { strip_body::<STEPS, NIBBLES, $panels, $two_steps>(s, out, ld) }
                }
                s.assert_in_bounds();
                // SAFETY: `kernels` offers this function only where the CPU
                // has these features.
                unsafe {
                    match (s.group, s.width) {
                        (16, _) => steps::<4, false>(s, out, ld),
                        (_, ValueWidth::Byte) => steps::<8, false>(s, out, ld),
                        (_, ValueWidth::Nibble) => steps::<8, true>(s, out, ld),
                    }
                }
            }
        };
    }

    kernel!(avx2, "avx2,fma", Avx2, 1);
    kernel!(avx_vnni, "avx2,fma,avxvnni", AvxVnni, 1);
    kernel!(avx_vnni_2, "avx2,fma,avxvnni", AvxVnni, 2);
    kernel!(avx512_vnni, "avx2,fma,avx512vnni,avx512vl", Avx512Vnni, 1);

    /// The strip's panels, `PANELS` at a time (a last odd one alone).
    ///
    /// # Safety
    /// AVX2, FMA and `D`'s features are enabled; the strip's bounds hold
    /// (`Strip::assert_in_bounds`).
    #[inline(always)]
    unsafe fn strip_body<const STEPS: usize, const NIBBLES: bool, const PANELS: usize, D: TwoSteps>(s: &Strip, out: &mut [f32], ld: usize) {
        // A strip of fewer real rows than `R` (a decode step's one row
        // per sequence, a prompt's last rows) runs a body for that many:
        // computing the repeated rows too made one row cost as much as
        // four (natively, int8, SmolLM2: the projections of a one-sequence
        // decode step took 8.4 ms, of four 9.4 ms).
        // SAFETY: forwarded.
        unsafe {
            match s.rows {
                1 => strip_rows::<STEPS, NIBBLES, PANELS, D, 1>(s, out, ld),
                2 => strip_rows::<STEPS, NIBBLES, PANELS, D, 2>(s, out, ld),
                3 => strip_rows::<STEPS, NIBBLES, PANELS, D, 3>(s, out, ld),
                _ => strip_rows::<STEPS, NIBBLES, PANELS, D, R>(s, out, ld),
            }
        }
    }

    /// [`strip_body`] for the strip's first `RR` rows (`RR ≤ R`).
    ///
    /// # Safety
    /// As [`strip_body`].
    #[inline(always)]
    unsafe fn strip_rows<const STEPS: usize, const NIBBLES: bool, const PANELS: usize, D: TwoSteps, const RR: usize>(
        s: &Strip,
        out: &mut [f32],
        ld: usize,
    ) {
        let mut p = s.panels.start;
        while p < s.panels.end {
            // SAFETY: forwarded; panels p..p + PANELS lie in the strip's.
            if PANELS == 2 && p + 1 < s.panels.end {
                unsafe { panels_body::<STEPS, NIBBLES, 2, D, RR>(s, p, out, ld) };
                p += 2;
            } else {
                unsafe { panels_body::<STEPS, NIBBLES, 1, D, RR>(s, p, out, ld) };
                p += 1;
            }
        }
    }

    /// Panels `first..first + P` against the strip's `R` activation rows,
    /// with `STEPS` steps of 4 values per weight scale; on raw pointers
    /// and plain loops. Each activation broadcast serves the `P` panels'
    /// weight vectors: at `P = 2`, 12 loads for 16 dots instead of 20,
    /// for twice the accumulators (16 ymm registers hold the dots, the
    /// weights and the broadcasts; AVX-512's 32 also the f32 sums).
    /// Inlined into each kernel's entry, whose target features the
    /// intrinsics then compile with.
    ///
    /// # Safety
    /// AVX2, FMA and `D`'s features are enabled; the strip's bounds hold
    /// (`Strip::assert_in_bounds`) and `first + P ≤ s.panels.end`.
    #[inline(always)]
    unsafe fn panels_body<const STEPS: usize, const NIBBLES: bool, const P: usize, D: TwoSteps, const RR: usize>(
        s: &Strip,
        first: usize,
        out: &mut [f32],
        ld: usize,
    ) {
        let (k, group, groups) = (s.k, s.group, s.groups());
        // SAFETY (every block below): panels first..first + P, their scales
        // and minimums lie inside the weight; each activation row holds k
        // values, k / 32 scales and k / group sums, and step s reads values
        // 4s..4s + 8 < k; the features are enabled (this function's
        // contract).
        let width = if NIBBLES { ValueWidth::Nibble } else { ValueWidth::Byte };
        let wq: [*const u8; P] = std::array::from_fn(|i| unsafe { s.q.as_ptr().add((first + i) * width.panel_bytes(k)) });
        let ws: [*const f32; P] = std::array::from_fn(|i| unsafe { s.scales.as_ptr().add((first + i) * groups * PANEL) });
        let wm: [*const f32; P] = std::array::from_fn(|i| unsafe { s.mins.as_ptr().add((first + i) * groups * PANEL) });
        // The strip's first RR activation rows (RR ≤ R: `strip_body`).
        let xs: [&[i8]; RR] = std::array::from_fn(|r| s.x[r]);
        // Panel-major: `acc[i][r]` is panel i's sums for activation row r.
        let mut acc = [[unsafe { _mm256_setzero_ps() }; RR]; P];
        for g in 0..groups {
            let mut dots = [[unsafe { _mm256_setzero_si256() }; P]; RR];
            for pair in 0..STEPS / 2 {
                let step = g * STEPS + 2 * pair;
                let w: [(__m256i, __m256i); P] = std::array::from_fn(|i| unsafe {
                    let w = wq[i].add(width.step_pair_offset(step)) as *const __m256i;
                    if NIBBLES {
                        // One load, both steps: low nibbles, then high.
                        let (both, low4) = (_mm256_loadu_si256(w), _mm256_set1_epi8(0x0f));
                        (_mm256_and_si256(both, low4), _mm256_and_si256(_mm256_srli_epi16(both, 4), low4))
                    } else {
                        (_mm256_loadu_si256(w), _mm256_loadu_si256(w.add(1)))
                    }
                });
                for (dots_r, x_row) in dots.iter_mut().zip(xs) {
                    unsafe {
                        let x = x_row.as_ptr().add(step * STEP) as *const i32;
                        let (x0, x1) = (_mm256_set1_epi32(x.read_unaligned()), _mm256_set1_epi32(x.add(1).read_unaligned()));
                        for (dots_ri, &(w0, w1)) in dots_r.iter_mut().zip(&w) {
                            *dots_ri = D::add(*dots_ri, w0, x0, w1, x1);
                        }
                    }
                }
            }
            unsafe {
                let x_scales: [__m256; RR] = std::array::from_fn(|r| _mm256_broadcast_ss(&*s.x_scales[r].as_ptr().add(g * group / BLOCK)));
                let x_sums: [__m256; RR] = std::array::from_fn(|r| _mm256_broadcast_ss(&*s.x_sums[r].as_ptr().add(g)));
                for (i, acc_i) in acc.iter_mut().enumerate() {
                    let (w_scales, w_mins) = (_mm256_loadu_ps(ws[i].add(g * PANEL)), _mm256_loadu_ps(wm[i].add(g * PANEL)));
                    for (r, acc_ir) in acc_i.iter_mut().enumerate() {
                        *acc_ir = _mm256_fmadd_ps(
                            w_mins,
                            x_sums[r],
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[r][i]), _mm256_mul_ps(w_scales, x_scales[r]), *acc_ir),
                        );
                    }
                }
            }
        }
        for (i, acc_i) in acc.iter().enumerate() {
            // Rows past RR are not real (`store_panel` writes `s.rows` ≤ RR).
            let mut sums = [[0f32; PANEL]; R];
            for (row, sum) in sums.iter_mut().zip(acc_i) {
                // SAFETY: a store of 8 f32 into an array of 8.
                unsafe { _mm256_storeu_ps(row.as_mut_ptr(), *sum) };
            }
            s.store_panel(first + i, &sums, out, ld);
        }
    }
}

#[cfg(target_arch = "wasm32")]
mod simd128 {
    use super::{Kernel, Strip, ValueWidth, BLOCK, PANEL, R, STEP};
    use core::arch::wasm32::*;

    /// Weight rows per vector: a panel is two halves of 4.
    const HALF: usize = PANEL / 2;

    /// The build's kernels, fastest first.
    ///
    /// The threads build has two ways to sum relaxed SIMD's dots, and which
    /// is faster depends on how the engine lowers them, which wasm cannot
    /// ask: V8 lowers `i32x4.relaxed_dot_i8x16_i7x16_add_s` to one
    /// `vpdpbusd` where the CPU has AVX-VNNI (arm64: one `sdot`) and to
    /// `pmaddubsw`, `pmaddwd` by a ones vector it builds each time, and an
    /// add where it has not, against `i16x8.relaxed_dot_i8x16_i7x16_s`
    /// (one `pmaddubsw`) twice, an i16 add and one widening per two steps.
    /// Which lowering runs shows in the dot's result where the operands are
    /// outside the range relaxed SIMD makes deterministic
    /// ([`dot_add_is_one_instruction`]), so the order is read off that
    /// instead of timed. (It was timed on one strip at load: on a noisy
    /// 2-vCPU machine without VNNI that race picked the i32 dots in two of
    /// three page loads, where the page's roofline then showed an int8
    /// GEMM ceiling of 67 and 82 GOP/s and a 1,024-token decide's
    /// projections took 3.8 and 3.3 s; read off the engine, with the
    /// nibble sums of [`NibblesI16`], 89–111 GOP/s and 2.2–2.8 s.)
    pub fn kernels() -> Vec<Kernel> {
        #[cfg(target_feature = "relaxed-simd")]
        {
            let i32_dots = Kernel { name: "relaxed-SIMD i8 dot, summed in i32", strip: strip::<DotI32> };
            let i16_pairs = Kernel { name: "relaxed-SIMD i8 dot, pairs summed in i16", strip: strip::<PairsI16> };
            if dot_add_is_one_instruction() {
                vec![i32_dots, i16_pairs]
            } else {
                vec![i16_pairs, i32_dots]
            }
        }
        #[cfg(not(target_feature = "relaxed-simd"))]
        vec![Kernel { name: "SIMD128 i16 dot of widened bytes", strip: strip::<WidenedI16> }]
    }

    /// Whether this engine's `i32x4.relaxed_dot_i8x16_i7x16_add_s` sums
    /// each lane's 4 products without saturating on the way, as one
    /// `vpdpbusd` (x86 with VNNI) or `sdot` (arm64) does, rather than
    /// through `pmaddubsw`'s saturating i16 pair sums and a widening (x86
    /// without VNNI, in V8 and SpiderMonkey alike). With 127 against bytes
    /// 0xFF (outside the i7 range, so each engine keeps its instruction's
    /// own answer) the pair path gives 2 × 32,767 = 65,534, `vpdpbusd`
    /// 4 × 255 × 127 = 129,540 and `sdot` 4 × −127 = −508.
    #[cfg(target_feature = "relaxed-simd")]
    fn dot_add_is_one_instruction() -> bool {
        static FUSED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FUSED.get_or_init(|| {
            // Through `black_box`, so the compiler cannot fold the dot with
            // its own answer.
            let (a, b) = (std::hint::black_box(i8x16_splat(127)), std::hint::black_box(i8x16_splat(-1)));
            i32x4_extract_lane::<0>(i32x4_relaxed_dot_i8x16_i7x16_add(a, b, i32x4_splat(0))) != 65_534
        })
    }

    /// Two steps of an activation row, each step's 4 bytes broadcast across
    /// a vector.
    ///
    /// # Safety
    /// 8 bytes from `x` are readable.
    #[inline(always)]
    unsafe fn broadcast_steps(x: *const i8) -> (v128, v128) {
        // SAFETY: the caller's 8 bytes, as two 4-byte loads.
        unsafe { (v128_load32_splat(x as *const u32), v128_load32_splat(x.add(4) as *const u32)) }
    }

    /// Running sums of two steps' products for 4 weight rows (a half
    /// panel): the one place the wasm kernels differ.
    trait Dots: Copy {
        /// Halves of a panel one pass over its steps accumulates: 2 where
        /// a half's running sums are one vector (the relaxed dots: in the
        /// inner loop 8 accumulators, 4 weight vectors and 2 broadcasts
        /// fit the 16 vector registers V8 has on x86_64; the f32 sums,
        /// touched once a block, may wait in memory), 1 where they are
        /// two (`WidenedI16`: 16 accumulators alone would spill).
        const HALVES_AT_ONCE: usize;
        /// One step's 4 values of the half's 4 weight rows, as the dots
        /// take them.
        type Weights: Copy;
        /// The dots this kernel runs on nibble weights (values ≤ 15),
        /// whose smaller products may allow a cheaper sum; `Self` where
        /// they do not.
        type Nibbles: Dots;
        fn new() -> Self;
        /// Loads one step of a half panel: 16 bytes, 4 rows' 4 values.
        ///
        /// # Safety
        /// 16 bytes from `w` are readable.
        unsafe fn load_weights(w: *const u8) -> Self::Weights;
        /// One step of a half panel from a vector of its 16 values (each
        /// ≤ 15: a nibble-packed weight's, already split).
        fn weights(v: v128) -> Self::Weights;
        /// Loads activation row `r`'s steps `step` and `step + 1`, 8
        /// values, as the dots take each step's 4 (repeated across the
        /// vector). By default each step's 4 bytes broadcast, as the
        /// relaxed dots take them.
        ///
        /// # Safety
        /// The strip's bounds hold (`Strip::assert_in_bounds`), `r < R`,
        /// and `4 · step + 8 ≤ k`.
        #[inline(always)]
        unsafe fn load_row(s: &Strip, r: usize, step: usize) -> (v128, v128) {
            // SAFETY: 8 of the row's k values (the caller's bounds).
            unsafe { broadcast_steps(s.x[r].as_ptr().add(step * STEP)) }
        }
        /// Adds steps `s`, `s + 1`: `x0`, `x1` the activation row's 4
        /// values of each, `w0`, `w1` the 4 weight rows' 4 values of each.
        fn add_two_steps(&mut self, x0: v128, w0: Self::Weights, x1: v128, w1: Self::Weights);
        /// The 4 weight rows' i32 sums.
        fn rows(self) -> v128;
    }

    /// The [`Dots`] items of a kernel that takes a step's 16 weight bytes
    /// as they are loaded (the relaxed dots, which multiply bytes).
    #[cfg(target_feature = "relaxed-simd")]
    macro_rules! weights_as_loaded {
        () => {
            type Weights = v128;
            #[inline(always)]
            unsafe fn load_weights(w: *const u8) -> v128 {
                // SAFETY: the caller's 16 bytes.
                unsafe { v128_load(w as *const v128) }
            }
            #[inline(always)]
            fn weights(v: v128) -> v128 {
                v
            }
        };
    }

    /// Each step's i16x8 pair dot (one `pmaddubsw` on x86; the weights
    /// are below 128, where every engine agrees), added to the next in i16
    /// (≤ 2 × 16,002) and widened once into the 4 rows' i32 lanes.
    #[cfg(target_feature = "relaxed-simd")]
    #[derive(Clone, Copy)]
    struct PairsI16(v128);

    #[cfg(target_feature = "relaxed-simd")]
    impl Dots for PairsI16 {
        type Nibbles = NibblesI16;
        const HALVES_AT_ONCE: usize = 2;
        weights_as_loaded!();
        #[inline(always)]
        fn new() -> Self {
            PairsI16(i32x4_splat(0))
        }

        #[inline(always)]
        fn add_two_steps(&mut self, x0: v128, w0: v128, x1: v128, w1: v128) {
            let two = i16x8_add(i16x8_relaxed_dot_i8x16_i7x16(x0, w0), i16x8_relaxed_dot_i8x16_i7x16(x1, w1));
            self.0 = i32x4_add(self.0, i32x4_extadd_pairwise_i16x8(two));
        }

        #[inline(always)]
        fn rows(self) -> v128 {
            self.0
        }
    }

    /// Nibble weights' steps (values ≤ 15) summed in i16 for a whole
    /// 32-value group and widened once, where [`PairsI16`] widens every two
    /// steps: a step's pair sums are at most 2 × 15 × 127 = 3,810, so the
    /// group's 8 steps stay within ±30,480 and never wrap. Per two steps of
    /// a half panel that is 2 dots and 2 adds instead of 2 dots, 2 adds and
    /// a widening (V8: a `pmaddwd` from memory, its constant's address
    /// loaded each time), and the group's widening happens once per row
    /// and half.
    #[cfg(target_feature = "relaxed-simd")]
    #[derive(Clone, Copy)]
    struct NibblesI16(v128);

    #[cfg(target_feature = "relaxed-simd")]
    impl Dots for NibblesI16 {
        type Nibbles = Self;
        const HALVES_AT_ONCE: usize = 2;
        weights_as_loaded!();
        #[inline(always)]
        fn new() -> Self {
            NibblesI16(i16x8_splat(0))
        }

        #[inline(always)]
        fn add_two_steps(&mut self, x0: v128, w0: v128, x1: v128, w1: v128) {
            self.0 = i16x8_add(i16x8_add(self.0, i16x8_relaxed_dot_i8x16_i7x16(x0, w0)), i16x8_relaxed_dot_i8x16_i7x16(x1, w1));
        }

        #[inline(always)]
        fn rows(self) -> v128 {
            i32x4_extadd_pairwise_i16x8(self.0)
        }
    }

    /// Each step's 4-value dots summed straight into the rows' i32 lanes
    /// (one `vpdpbusd` a step under V8 on an AVX-VNNI CPU).
    #[cfg(target_feature = "relaxed-simd")]
    #[derive(Clone, Copy)]
    struct DotI32(v128);

    #[cfg(target_feature = "relaxed-simd")]
    impl Dots for DotI32 {
        type Nibbles = Self;
        const HALVES_AT_ONCE: usize = 2;
        weights_as_loaded!();
        #[inline(always)]
        fn new() -> Self {
            DotI32(i32x4_splat(0))
        }

        #[inline(always)]
        fn add_two_steps(&mut self, x0: v128, w0: v128, x1: v128, w1: v128) {
            self.0 = i32x4_relaxed_dot_i8x16_i7x16_add(x1, w1, i32x4_relaxed_dot_i8x16_i7x16_add(x0, w0, self.0));
        }

        #[inline(always)]
        fn rows(self) -> v128 {
            self.0
        }
    }

    /// Plain SIMD128: the weights' bytes widened to i16 (4 rows' 4 values
    /// as two vectors, rows 0–1 and rows 2–3) and multiplied by the
    /// activation's 4 values, widened and repeated, with `i32x4.dot_i16x8_s`
    /// (one `pmaddwd`: 8 products summed in pairs into 4 i32 lanes), so
    /// each vector holds `[row 0, row 0, row 1, row 1]` (or rows 2, 3),
    /// folded once per group. Per two steps that is 4 dots and 4 adds
    /// beside the loads; the weights widen as they load, once a pass for
    /// all the strip's activation rows. The i16 products it replaced
    /// (`i16x8.extmul_*_i8x16`, each several x86 instructions under V8,
    /// then pairwise widening adds) left the single-thread build's int8
    /// slower than its f32: on a 64 × 576 × 1,536 product (best of 15
    /// alternated runs in one headless Chromium) they ran at 22.9 GFLOP/s
    /// on one thread, these dots at 37.7.
    #[cfg(not(target_feature = "relaxed-simd"))]
    #[derive(Clone, Copy)]
    struct WidenedI16([v128; 2]);

    #[cfg(not(target_feature = "relaxed-simd"))]
    impl Dots for WidenedI16 {
        type Nibbles = Self;
        const HALVES_AT_ONCE: usize = 1;
        /// Rows 0–1 and rows 2–3, widened to i16.
        type Weights = [v128; 2];
        #[inline(always)]
        fn new() -> Self {
            WidenedI16([i32x4_splat(0); 2])
        }

        #[inline(always)]
        unsafe fn load_weights(w: *const u8) -> [v128; 2] {
            // Widened as they load (one `pmovzxbw` from memory each): the
            // weights are unsigned (≤ 63). SAFETY: the caller's 16 bytes.
            unsafe { [u16x8_load_extend_u8x8(w), u16x8_load_extend_u8x8(w.add(8))] }
        }

        #[inline(always)]
        fn weights(v: v128) -> [v128; 2] {
            [u16x8_extend_low_u8x16(v), u16x8_extend_high_u8x16(v)]
        }

        #[inline(always)]
        unsafe fn load_row(s: &Strip, r: usize, step: usize) -> (v128, v128) {
            // Each step's 4 values, widened at quantization, as one 8-byte
            // broadcast. (Broadcasting the bytes and widening them here,
            // the form before, was 10 % slower, see `WIDENED_ACTIVATIONS`;
            // and loading 8 bytes widened and repeating each half with a
            // shuffle was 7 % slower than that.) SAFETY: 8 of the widened
            // row's k values (the caller's bounds; `assert_in_bounds`
            // checks the widened rows in this build).
            unsafe {
                let x = s.x_wide[r].as_ptr().add(step * STEP);
                (v128_load64_splat(x as *const u64), v128_load64_splat(x.add(STEP) as *const u64))
            }
        }

        #[inline(always)]
        fn add_two_steps(&mut self, x0: v128, [w0_low, w0_high]: [v128; 2], x1: v128, [w1_low, w1_high]: [v128; 2]) {
            // Every product and pair sum fits an i32 (|x| ≤ 127, w ≤ 63).
            let [low, high] = &mut self.0;
            *low = i32x4_add(*low, i32x4_add(i32x4_dot_i16x8(w0_low, x0), i32x4_dot_i16x8(w1_low, x1)));
            *high = i32x4_add(*high, i32x4_add(i32x4_dot_i16x8(w0_high, x0), i32x4_dot_i16x8(w1_high, x1)));
        }

        #[inline(always)]
        fn rows(self) -> v128 {
            let [low, high] = self.0;
            i32x4_add(i32x4_shuffle::<0, 2, 4, 6>(low, high), i32x4_shuffle::<1, 3, 5, 7>(low, high))
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

    fn strip<D: Dots>(s: &Strip, out: &mut [f32], ld: usize) {
        // The pointers below stay inside their slices (see `strip_steps`).
        s.assert_in_bounds();
        match (s.group, s.width) {
            (16, _) => halves::<4, false, D>(s, out, ld),
            (_, ValueWidth::Byte) => halves::<8, false, D>(s, out, ld),
            (_, ValueWidth::Nibble) => halves::<8, true, D::Nibbles>(s, out, ld),
        }
    }

    /// [`strip_steps`] with `D`'s halves a pass.
    #[inline(always)]
    fn halves<const STEPS: usize, const NIBBLES: bool, D: Dots>(s: &Strip, out: &mut [f32], ld: usize) {
        if D::HALVES_AT_ONCE == 2 {
            strip_steps::<STEPS, NIBBLES, 2, D>(s, out, ld)
        } else {
            strip_steps::<STEPS, NIBBLES, 1, D>(s, out, ld)
        }
    }

    /// The strip's panels, as two halves of 4 weight rows against the `R`
    /// activation rows, `H` halves per pass over the panel's steps, with
    /// `STEPS` steps of 4 values per weight scale. At `H = 2` each
    /// activation broadcast serves both halves: 12 loads for 16 dots
    /// instead of 20, for 8 dot accumulators instead of 4 (see
    /// [`Dots::HALVES_AT_ONCE`]).
    fn strip_steps<const STEPS: usize, const NIBBLES: bool, const H: usize, D: Dots>(s: &Strip, out: &mut [f32], ld: usize) {
        let (k, group, groups) = (s.k, s.group, s.groups());
        let width = if NIBBLES { ValueWidth::Nibble } else { ValueWidth::Byte };
        for p in s.panels.clone() {
            let wq = s.q.as_ptr().wrapping_add(p * width.panel_bytes(k));
            let ws = s.scales.as_ptr().wrapping_add(p * groups * PANEL);
            let wm = s.mins.as_ptr().wrapping_add(p * groups * PANEL);
            let mut sums = [[0f32; PANEL]; R];
            for pass in 0..2 / H {
                let mut acc = [[f32x4_splat(0.0); H]; R];
                for g in 0..groups {
                    let mut dots = [[D::new(); H]; R];
                    // A loop, as LLVM keeps it: written out by hand, its
                    // loads were all hoisted to the top of the block and V8
                    // spilled most of the registers they took.
                    for pair in 0..STEPS / 2 {
                        let step = g * STEPS + 2 * pair;
                        // SAFETY: panel p lies inside the weight (asserted by
                        // `strip`); these are H × 16 of each step's (or
                        // step pair's) 32 bytes.
                        let (w0, w1): ([D::Weights; H], [D::Weights; H]) = unsafe {
                            let w = wq.add(width.step_pair_offset(step) + pass * H * HALF * STEP);
                            if NIBBLES {
                                // One load, both steps: low nibbles, then high.
                                let both: [v128; H] = std::array::from_fn(|h| v128_load(w.add(h * HALF * STEP) as *const v128));
                                (
                                    std::array::from_fn(|h| D::weights(v128_and(both[h], u8x16_splat(0x0f)))),
                                    std::array::from_fn(|h| D::weights(u8x16_shr(both[h], 4))),
                                )
                            } else {
                                (
                                    std::array::from_fn(|h| D::load_weights(w.add(h * HALF * STEP))),
                                    std::array::from_fn(|h| D::load_weights(w.add(PANEL * STEP + h * HALF * STEP))),
                                )
                            }
                        };
                        for (r, dots_r) in dots.iter_mut().enumerate() {
                            // SAFETY: values 4·step..4·step + 8 < k of a whole row.
                            let (x0, x1) = unsafe { D::load_row(s, r, step) };
                            for h in 0..H {
                                dots_r[h].add_two_steps(x0, w0[h], x1, w1[h]);
                            }
                        }
                    }
                    for h in 0..H {
                        let half = pass * H + h;
                        // SAFETY: the group's scales and minimums for this
                        // half's 4 rows, inside the panel's.
                        let (w_scales, w_mins) = unsafe {
                            (
                                v128_load(ws.add(g * PANEL + half * HALF) as *const v128),
                                v128_load(wm.add(g * PANEL + half * HALF) as *const v128),
                            )
                        };
                        for (r, acc_r) in acc.iter_mut().enumerate() {
                            let scale = f32x4_mul(w_scales, f32x4_splat(s.x_scales[r][g * group / BLOCK]));
                            acc_r[h] =
                                madd(w_mins, f32x4_splat(s.x_sums[r][g]), madd(f32x4_convert_i32x4(dots[r][h].rows()), scale, acc_r[h]));
                        }
                    }
                }
                for (r, acc_r) in acc.iter().enumerate() {
                    for (h, acc_rh) in acc_r.iter().enumerate() {
                        // SAFETY: a store of 4 f32 into 4 of an array of 8.
                        unsafe { v128_store(sums[r][(pass * H + h) * HALF..].as_mut_ptr() as *mut v128, *acc_rh) };
                    }
                }
            }
            s.store_panel(p, &sums, out, ld);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::xorshift_values;

    /// A weight in the affine form with random bytes, scales and minimums.
    fn weight(n: usize, k: usize, group: usize, width: ValueWidth, seed: u32) -> (IntPacked, Vec<f32>) {
        let noise = xorshift_values(n * k + 2 * n * (k / group), seed);
        let top = if width == ValueWidth::Nibble { 7.5 } else { 31.5 };
        let q_of = |r: usize, i: usize| ((noise[r * k + i] + 1.0) * top) as u8;
        let scale_of = |r: usize, g: usize| 0.01 + 0.02 * noise[n * k + r * (k / group) + g].abs();
        let min_of = |r: usize, g: usize| 0.3 * noise[n * k + n * (k / group) + r * (k / group) + g];
        let packed = IntPacked::from_row_fn(n, k, group, width, |r, q, s, m| {
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
        use ValueWidth::{Byte, Nibble};
        let shapes = [
            (1, 1, 32, 32, Byte),
            (3, 5, 64, 16, Byte),
            (15, 37, 576, 32, Byte),
            (17, 9, 256, 16, Byte),
            (70, 24, 192, 32, Byte),
            (1, 1, 32, 32, Nibble),
            (2, 17, 64, 32, Nibble),
            (15, 37, 576, 32, Nibble),
            (70, 24, 192, 32, Nibble),
        ];
        for (m, n, k, group, width) in shapes {
            let (packed, dense) = weight(n, k, group, width, 7 + m as u32);
            assert_eq!(packed.width, width);
            let x = xorshift_values(m * k, 11 + n as u32);
            let acts = Activations::quantize(&x, m, k, group);
            let want = reference(&acts, &dense, n);
            let mut first_simd: Option<(Kernel, Vec<f32>)> = None;
            for kernel in kernels() {
                let ours = packed.matmul_with(&acts, kernel);
                let worst = ours.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst < 2e-5 * k as f32, "{kernel:?} [{m}×{k}]·[{n}×{k}]ᵀ/{group} {width:?}: worst |difference| {worst}");
                // The SIMD kernels sum the same i32s and scale them with the
                // same fused multiply–adds: the same floats, whichever runs
                // (the portable one rounds its products apart).
                if kernel.name == PORTABLE.name {
                    continue;
                }
                match &first_simd {
                    None => first_simd = Some((kernel, ours)),
                    Some((other, theirs)) => assert!(ours == *theirs, "{kernel:?} and {other:?} differ at [{m}×{k}]·[{n}×{k}]ᵀ/{group}"),
                }
            }
        }
    }

    /// The same 4-bit values held two a byte and one a byte: every kernel
    /// gives the same floats from either (the nibbles only change where
    /// the bytes come from), for whole and partial strips and panels.
    #[test]
    fn nibbles_and_bytes_of_the_same_values_give_the_same_products() {
        let (n, k) = (19, 320);
        let noise = xorshift_values(n * k, 3);
        let pack = |width| {
            IntPacked::from_row_fn(n, k, 32, width, |r, q, s, mins| {
                q.iter_mut().enumerate().for_each(|(i, v)| *v = ((noise[r * k + i] + 1.0) * 7.5) as u8);
                s.iter_mut().enumerate().for_each(|(g, v)| *v = 0.01 * (1 + (r + g) % 5) as f32);
                mins.iter_mut().enumerate().for_each(|(g, v)| *v = -0.02 * ((r * 3 + g) % 4) as f32);
            })
        };
        let (nibbles, bytes) = (pack(ValueWidth::Nibble), pack(ValueWidth::Byte));
        assert_eq!(2 * nibbles.q.len(), bytes.q.len());
        for m in [1, 2, 3, 4, 5, 9] {
            let acts = Activations::quantize(&xorshift_values(m * k, 5 + m as u32), m, k, 32);
            for kernel in kernels() {
                assert!(nibbles.matmul_with(&acts, kernel) == bytes.matmul_with(&acts, kernel), "{kernel:?}, {m} rows");
            }
        }
    }

    /// One build's SIMD kernels compute the same exact integer sums and
    /// scale them alike, so they give the same floats (the portable
    /// reference rounds apart): what lets the browser's descriptor cache
    /// ignore which kernel its timing probe picked (`Router::descriptor_key`).
    #[test]
    fn every_kernel_of_this_build_gives_the_same_floats() {
        let (n, k) = (21, 576);
        let noise = xorshift_values(n * k, 11);
        let simd: Vec<Kernel> = kernels().into_iter().filter(|k| k.name != PORTABLE.name).collect();
        let Some((&head, rest)) = simd.split_first() else { return };
        for (width, top) in [(ValueWidth::Byte, 63.0), (ValueWidth::Nibble, 15.0)] {
            let w = IntPacked::from_row_fn(n, k, 32, width, |r, q, s, mins| {
                q.iter_mut().enumerate().for_each(|(i, v)| *v = ((noise[r * k + i] + 1.0) * top / 2.0) as u8);
                s.iter_mut().enumerate().for_each(|(g, v)| *v = 0.013 * (1 + (r + g) % 7) as f32);
                mins.iter_mut().enumerate().for_each(|(g, v)| *v = -0.021 * ((r * 5 + g) % 3) as f32);
            });
            for m in [1, 2, 4, 7, 9, 17] {
                let acts = Activations::quantize(&xorshift_values(m * k, 13 + m as u32), m, k, 32);
                let first = w.matmul_with(&acts, head);
                for kernel in rest {
                    assert!(w.matmul_with(&acts, *kernel) == first, "{kernel:?} against {head:?}, {width:?}, {m} rows");
                }
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
                assert!(width % PANEL == 0 && parts.len() <= threads.max(1));
                assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= width), "n {n}, threads {threads}: {parts:?}");
                assert_eq!(parts.iter().map(|p| p.len()).sum::<usize>(), n);
                assert!(parts.windows(2).all(|w| w[0].end == w[1].start) && parts[0].start == 0);
            }
        }
    }

    #[test]
    fn quantized_activations_stay_within_half_a_step_and_an_f16_scale() {
        let (m, k) = (3, 96);
        let mut x = xorshift_values(m * k, 5);
        x[40..64].iter_mut().for_each(|v| *v = 0.0);
        let acts = Activations::quantize(&x, m, k, 16);
        for (i, v) in x.iter().enumerate() {
            let scale = acts.scales(i / k)[i % k / BLOCK];
            // Half a step, plus |q| ≤ 127 times the scale's rounding to f16
            // (relative 2⁻¹¹).
            assert!((acts.q[i] as f32 * scale - v).abs() <= (0.5 + 127.0 / 2048.0) * scale + 1e-7, "value {i}");
        }
        assert!(acts.q[40..64].iter().all(|&q| q == 0));
        // Sums per group are the group's dequantized total.
        let sums: Vec<f32> = (0..m).flat_map(|r| acts.sums(r)).copied().collect();
        for (g, sum) in sums.iter().enumerate() {
            let want: f32 = (0..16).map(|j| acts.q[g * 16 + j] as f32 * acts.scales((g * 16) / k)[(g * 16) % k / BLOCK]).sum();
            assert!((sum - want).abs() < 1e-4, "group {g}: {sum} against {want}");
        }
    }
}
