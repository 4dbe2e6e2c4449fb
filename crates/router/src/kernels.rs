//! The prefill's f32 matrix kernels: one register-blocked micro-kernel,
//! written once over a small vector trait, compiled for wasm32 SIMD128
//! (with relaxed-SIMD fused multiply–add when the build enables it), for
//! x86_64 AVX2+FMA (detected at run time) and for plain Rust elsewhere.
//!
//! Why our own: in the browser the prefill is all matmuls, and the generic
//! GEMM candle ships reaches a fraction of what SIMD128 allows; a router's
//! prefill has a fixed shape (a few hundred to a few thousand rows against
//! weights that never change), so the weights are repacked once at load into
//! the panels the micro-kernel streams, and the activations are read in place.
//!
//! Layout: `C[m × n] = A[m × k] · Bᵀ` with `B` a weight stored `[n × k]` (out ×
//! in, as GGUF stores it). [`Packed`] holds `B` as panels of [`NR`] columns,
//! each panel `k` rows of `NR` contiguous values, zero-padded at the right edge.
//! The same micro-kernel also multiplies by an unpacked row-major matrix
//! whose column count is a multiple of `NR` (attention's values).

#![allow(unsafe_code)]

use crate::parallel::{self, DisjointOut};

/// What computes the f32 projections in this build, for the precision line
/// of every report (natively the projections run on `gemm_dense`).
pub const KERNEL_NOTE: &str = if cfg!(all(target_arch = "wasm32", target_feature = "relaxed-simd")) {
    " (packed SIMD128 kernel, relaxed-SIMD FMA)"
} else if cfg!(target_arch = "wasm32") {
    " (packed SIMD128 kernel)"
} else {
    ""
};

/// Columns per panel: two SIMD128 vectors, one AVX2 vector.
pub const NR: usize = 8;
/// Rows of `k` per block: a block of one panel (8 KiB) stays in L1 while every
/// row tile of `A` streams past it.
const KC: usize = 256;

/// A weight repacked for the micro-kernel.
#[derive(Debug, Clone)]
pub struct Packed {
    /// Output features (columns of `C`).
    pub n: usize,
    /// Input features (the shared dimension).
    pub k: usize,
    panels: Vec<f32>,
}

impl Packed {
    /// Bytes held (the padded panels).
    pub fn bytes(&self) -> u64 {
        std::mem::size_of_val(self.panels.as_slice()) as u64
    }

    /// Packs a row-major `[n × k]` weight. Panics only if `rows` is shorter
    /// than `n × k` (a programming error: the loader checks shapes first).
    pub fn from_rows(rows: &[f32], n: usize, k: usize) -> Packed {
        assert!(rows.len() >= n * k, "weight of {} values for [{n} × {k}]", rows.len());
        Packed::from_row_fn(n, k, |r, out| out.copy_from_slice(&rows[r * k..(r + 1) * k]))
    }

    /// Packs from a row-producing closure, so a loader can dequantise
    /// straight into the panels instead of holding the whole f32 matrix
    /// twice. Panels are filled in parallel on the pool's threads.
    pub fn from_row_fn(n: usize, k: usize, row: impl Fn(usize, &mut [f32]) + Sync) -> Packed {
        let panel_count = n.div_ceil(NR);
        let mut panels = vec![0f32; panel_count * k * NR];
        let out = DisjointOut::new(&mut panels);
        parallel::for_each(panel_count, |p| {
            // SAFETY: task p alone has panel p.
            let panel = unsafe { out.run(p * k * NR..(p + 1) * k * NR) };
            let mut buffer = vec![0f32; k];
            for c in 0..NR.min(n - p * NR) {
                row(p * NR + c, &mut buffer);
                for (kk, &value) in buffer.iter().enumerate() {
                    panel[kk * NR + c] = value;
                }
            }
        });
        Packed { n, k, panels }
    }

    /// `a` is `[m × k]` row-major; returns `[m × n]` row-major. Column panels
    /// are spread over the pool's threads.
    pub fn matmul(&self, a: &[f32], m: usize) -> Vec<f32> {
        assert_eq!(a.len(), m * self.k, "activations of {} values for [{m} × {}]", a.len(), self.k);
        self.matmul_strided(a, self.k, m)
    }

    /// [`Packed::matmul`] with `a`'s rows `lda ≥ k` values apart (`k` used
    /// of each), so a caller's matrix interleaved with other data is read
    /// in place.
    pub fn matmul_strided(&self, a: &[f32], lda: usize, m: usize) -> Vec<f32> {
        let mut c = Vec::new();
        self.matmul_strided_into(a, lda, m, &mut c);
        c
    }

    /// [`Packed::matmul_strided`] into `c` (resized to `[m × n]`), reusing
    /// its allocation from one call to the next.
    pub fn matmul_strided_into(&self, a: &[f32], lda: usize, m: usize, c: &mut Vec<f32>) {
        assert!(
            lda >= self.k && (m == 0 || a.len() >= (m - 1) * lda + self.k),
            "activations of {} values for [{m} × {}] at stride {lda}",
            a.len(),
            self.k
        );
        // Every value is overwritten; the resize only sets the length.
        c.resize(m * self.n, 0.0);
        let panel_count = self.n.div_ceil(NR);
        if panel_count == 0 || m == 0 {
            return;
        }
        // Enough tasks to balance uneven threads, few enough that each keeps
        // a useful run of panels; a small product is not worth waking helpers.
        let tasks = if m * self.n * self.k < 1 << 18 { 1 } else { (parallel::threads() * 4).min(panel_count) };
        let per_task = panel_count.div_ceil(tasks);
        let out = DisjointOut::new(c);
        parallel::for_each(panel_count.div_ceil(per_task), |t| {
            let panels = t * per_task..((t + 1) * per_task).min(panel_count);
            for p in panels {
                let b = &self.panels[p * self.k * NR..(p + 1) * self.k * NR];
                let cols = NR.min(self.n - p * NR);
                // Panel p's columns of every row, in rows of `n`.
                let tile = out.region(p * NR..(m - 1) * self.n + p * NR + cols);
                // SAFETY: each task writes only the columns of its own
                // panels, inside the span `region` checked.
                unsafe { gemm_panel::<NR>(a, lda, m, self.k, b, NR, tile, self.n, cols) };
            }
        });
    }
}

/// `C[m × n] = A[m × k] · Wᵀ` for a weight `W` stored `[n × k]`, natively,
/// on the `gemm` crate (the GEMM candle itself calls, AVX2/AVX-512 and
/// multi-threaded), straight on the caller's buffers: going through candle
/// tensors copied every activation in and out, a serial 4 % of a 1,024-token
/// prefill. Measured faster here than [`Packed`] (156 vs 94 GFLOP/s on 2
/// threads for the backbone's largest projection).
#[cfg(not(target_arch = "wasm32"))]
pub fn gemm_dense(a: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    let mut c = Vec::new();
    gemm_dense_into(a, m, k, w, n, &mut c);
    c
}

/// [`gemm_dense`] into `c` (resized to `[m × n]`), reusing its allocation.
#[cfg(not(target_arch = "wasm32"))]
pub fn gemm_dense_into(a: &[f32], m: usize, k: usize, w: &[f32], n: usize, c: &mut Vec<f32>) {
    assert!(a.len() >= m * k && w.len() >= n * k, "[{m} × {k}] · [{n} × {k}]ᵀ with {} and {} values", a.len(), w.len());
    // Every value is overwritten (`read_dst` is false below).
    c.resize(m * n, 0.0);
    if m == 0 || n == 0 {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let parallelism = if threads > 1 && m * n * k >= 1 << 16 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: `c` is [m × n] row-major (column stride 1, row stride n); `a`
    // is [m × k] row-major; `w` read as Wᵀ [k × n]: element (i, j) at
    // w[j·k + i] (column stride k, row stride 1); all in bounds (asserted).
    // `read_dst` is false, so `c`'s old values are overwritten, never read.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    };
}

/// Columns per panel of the wide micro-kernel: one AVX-512 vector. Only
/// attention uses it (its key and value panels are its own layout); the
/// weights' panels stay [`NR`] wide on every target.
pub(crate) const WIDE: usize = 16;

/// Whether this build and CPU run [`WIDE`] panels (x86_64 with AVX-512F,
/// detected once).
pub(crate) fn wide_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        avx512::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `C[m × cols] = A[m × k] · B[k × W]` for one column panel `W` wide
/// ([`NR`], or [`WIDE`] where [`wide_available`]), overwriting `C`: `a`
/// holds `m` rows of `k` values at stride `lda`; `b` holds `k` rows of `W`
/// values with stride `ldb`; `c` points at the panel's first column in a
/// row-major matrix with stride `ldc`.
///
/// SAFETY: `c` must be valid for `m` rows of `cols` values at stride `ldc`,
/// and not written by anyone else meanwhile.
// BLAS-style: a matrix argument is a pointer, its rows and its stride.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_panel<const W: usize>(
    a: &[f32],
    lda: usize,
    m: usize,
    k: usize,
    b: &[f32],
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    cols: usize,
) {
    // One tile buffer for the whole panel, sized for the widest panels:
    // each `micro` call writes every value read back after it, so it is
    // never cleared between tiles (a fresh zeroed tile per call cleared
    // 512 bytes beside the 8 × 64 multiply–adds of an attention score tile).
    let mut tile = [0f32; MR * WIDE];
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(k - k0);
        // The first block of `k` writes the product, the later ones add to it.
        let overwrite = k0 == 0;
        let mut r0 = 0;
        while r0 < m {
            let rows = MR.min(m - r0);
            micro::<W>(rows, kc, &a[r0 * lda + k0..], lda, &b[k0 * ldb..], ldb, &mut tile);
            for r in 0..rows {
                // SAFETY: row r0 + r < m, columns < cols ≤ W, per the caller.
                let dst = unsafe { std::slice::from_raw_parts_mut(c.add((r0 + r) * ldc), cols) };
                let src = &tile[r * W..r * W + cols];
                match (overwrite, <&mut [f32; W]>::try_from(&mut *dst)) {
                    // A whole panel row as one fixed-size copy: a slice's
                    // `copy_from_slice` of 8 floats was a call to `memmove`
                    // per row, 5 % of attention's time once its scores
                    // were stored this way.
                    (true, Ok(whole)) => *whole = src.try_into().expect("a whole row is W values"),
                    (true, Err(_)) => dst.copy_from_slice(src),
                    (false, _) => dst.iter_mut().zip(src).for_each(|(d, s)| *d += s),
                }
            }
            r0 += rows;
        }
        k0 += kc;
    }
}

/// Rows per register tile. Eight rows × one 8-lane vector on AVX2; on
/// SIMD128 four rows × two 4-lane vectors (eight accumulators, two B vectors
/// and a broadcast: 11 of the 16 registers V8 has on x86_64). The shared
/// tile buffer is sized for the larger.
const MR: usize = 8;

/// One tile: `out[rows × W] = A[rows × kc] · B[kc × W]`, rows `W` apart.
fn micro<const W: usize>(rows: usize, kc: usize, a: &[f32], lda: usize, b: &[f32], ldb: usize, out: &mut [f32; MR * WIDE]) {
    assert!(rows <= MR && a.len() >= (rows - 1) * lda + kc && b.len() >= (kc - 1) * ldb + W);
    if W == WIDE {
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            // SAFETY: the CPU has AVX-512F; bounds asserted above.
            unsafe { avx512::micro(rows, kc, a.as_ptr(), lda, b.as_ptr(), ldb, out.as_mut_ptr()) };
            return;
        }
        panic!("{WIDE}-wide panels need AVX-512F: callers check `wide_available` first");
    }
    assert_eq!(W, NR, "panels are {NR} or {WIDE} wide");
    #[cfg(target_arch = "wasm32")]
    {
        // Four-row tiles on SIMD128; a tile of up to eight rows is two calls.
        let mut r = 0;
        while r < rows {
            let now = 4.min(rows - r);
            let (_, rest) = out.split_at_mut(r * NR);
            // SAFETY: bounds asserted above.
            unsafe { dispatch_rows::<simd128::V, 2>(now, kc, a[r * lda..].as_ptr(), lda, b.as_ptr(), ldb, rest.as_mut_ptr()) };
            r += now;
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        if avx2::available() {
            // SAFETY: the CPU has AVX2 and FMA; bounds asserted above.
            unsafe { avx2::micro(rows, kc, a.as_ptr(), lda, b.as_ptr(), ldb, out.as_mut_ptr()) };
            return;
        }
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let mut r = 0;
        while r < rows {
            let now = 4.min(rows - r);
            let (_, rest) = out.split_at_mut(r * NR);
            // SAFETY: bounds asserted above.
            unsafe { dispatch_rows::<portable::V, 2>(now, kc, a[r * lda..].as_ptr(), lda, b.as_ptr(), ldb, rest.as_mut_ptr()) };
            r += now;
        }
    }
}

/// A vector of `WIDTH` f32 lanes: what the micro-kernel here and decode
/// attention's loops (in `attention`) are written over, once for every
/// target. An implementation's methods use its target's instructions
/// without enabling them: callers reach them only from code compiled with
/// those instructions (a `#[target_feature]` function, or a build whose
/// target has them).
pub(crate) trait Lanes: Copy {
    const WIDTH: usize;
    fn zero() -> Self;
    /// `x` in every lane.
    fn splat_value(x: f32) -> Self;
    /// SAFETY: `p` is valid for `WIDTH` reads.
    unsafe fn load(p: *const f32) -> Self;
    /// SAFETY: `p` is valid for one read.
    unsafe fn splat(p: *const f32) -> Self;
    /// SAFETY: `p` is valid for `WIDTH` writes.
    unsafe fn store(self, p: *mut f32);
    /// `self + a × b`, fused where the target has it.
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// The sum of the lanes.
    fn sum(self) -> f32;
    /// Each of four vectors' lane sums, written to `p[0..4]`: transposed
    /// and added together, a few instructions for all four instead of a
    /// whole reduction each.
    ///
    /// SAFETY: `p` is valid for four writes.
    unsafe fn store_sums4(a: [Self; 4], p: *mut f32);
}

/// Picks the compile-time row count, so every accumulator is a register.
#[inline(always)]
unsafe fn dispatch_rows<L: Lanes, const V: usize>(
    rows: usize,
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    out: *mut f32,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match rows {
            8 => tile::<L, 8, V>(kc, a, lda, b, ldb, out),
            7 => tile::<L, 7, V>(kc, a, lda, b, ldb, out),
            6 => tile::<L, 6, V>(kc, a, lda, b, ldb, out),
            5 => tile::<L, 5, V>(kc, a, lda, b, ldb, out),
            4 => tile::<L, 4, V>(kc, a, lda, b, ldb, out),
            3 => tile::<L, 3, V>(kc, a, lda, b, ldb, out),
            2 => tile::<L, 2, V>(kc, a, lda, b, ldb, out),
            _ => tile::<L, 1, V>(kc, a, lda, b, ldb, out),
        }
    }
}

/// The micro-kernel: `R` rows × `V` vectors of accumulators, one pass over `kc`.
#[inline(always)]
unsafe fn tile<L: Lanes, const R: usize, const V: usize>(kc: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, out: *mut f32) {
    let mut acc = [[L::zero(); V]; R];
    // SAFETY: the caller guarantees `a` has R rows of kc values at stride
    // lda, `b` kc rows of V × WIDTH values at stride ldb, `out` R rows of
    // V × WIDTH values.
    unsafe {
        for kk in 0..kc {
            let row = b.add(kk * ldb);
            let bv: [L; V] = std::array::from_fn(|v| L::load(row.add(v * L::WIDTH)));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let av = L::splat(a.add(r * lda + kk));
                for (acc_rv, &bvv) in acc_r.iter_mut().zip(&bv) {
                    *acc_rv = acc_rv.mul_add(av, bvv);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for (v, acc_rv) in acc_r.iter().enumerate() {
                acc_rv.store(out.add(r * V * L::WIDTH + v * L::WIDTH));
            }
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) mod simd128 {
    use super::Lanes;
    use core::arch::wasm32::*;

    #[derive(Clone, Copy)]
    pub struct V(v128);

    impl Lanes for V {
        const WIDTH: usize = 4;
        #[inline(always)]
        fn zero() -> V {
            V(f32x4_splat(0.0))
        }
        #[inline(always)]
        fn splat_value(x: f32) -> V {
            V(f32x4_splat(x))
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            let pair = f32x4_add(self.0, i32x4_shuffle::<2, 3, 2, 3>(self.0, self.0));
            f32x4_extract_lane::<0>(f32x4_add(pair, i32x4_shuffle::<1, 1, 1, 1>(pair, pair)))
        }
        #[inline(always)]
        unsafe fn store_sums4(a: [V; 4], p: *mut f32) {
            // [a0+a2, b0+b2, a1+a3, b1+b3] and the same of c and d; then
            // their halves interleaved and added: [Σa, Σb, Σc, Σd].
            let half = |x: v128, y: v128| f32x4_add(i32x4_shuffle::<0, 4, 1, 5>(x, y), i32x4_shuffle::<2, 6, 3, 7>(x, y));
            let (ab, cd) = (half(a[0].0, a[1].0), half(a[2].0, a[3].0));
            let sums = f32x4_add(i32x4_shuffle::<0, 1, 4, 5>(ab, cd), i32x4_shuffle::<2, 3, 6, 7>(ab, cd));
            // SAFETY: per the trait.
            unsafe { v128_store(p as *mut v128, sums) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> V {
            // SAFETY: per the trait.
            V(unsafe { v128_load(p as *const v128) })
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> V {
            // SAFETY: per the trait.
            V(unsafe { v128_load32_splat(p as *const u32) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: per the trait.
            unsafe { v128_store(p as *mut v128, self.0) }
        }
        #[inline(always)]
        fn mul_add(self, a: V, b: V) -> V {
            // Relaxed SIMD's madd is one fused instruction where the engine
            // has FMA (and a multiply then an add where it has not); plain
            // SIMD128 has no fused form.
            #[cfg(target_feature = "relaxed-simd")]
            {
                V(f32x4_relaxed_madd(a.0, b.0, self.0))
            }
            #[cfg(not(target_feature = "relaxed-simd"))]
            {
                V(f32x4_add(self.0, f32x4_mul(a.0, b.0)))
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod portable {
    use super::Lanes;

    /// Four lanes in plain Rust; LLVM maps it to the target's SIMD.
    #[derive(Clone, Copy)]
    pub struct V([f32; 4]);

    impl Lanes for V {
        const WIDTH: usize = 4;
        #[inline(always)]
        fn zero() -> V {
            V([0.0; 4])
        }
        #[inline(always)]
        fn splat_value(x: f32) -> V {
            V([x; 4])
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            (self.0[0] + self.0[2]) + (self.0[1] + self.0[3])
        }
        #[inline(always)]
        unsafe fn store_sums4(a: [V; 4], p: *mut f32) {
            // SAFETY: per the trait.
            unsafe { std::ptr::write_unaligned(p as *mut [f32; 4], a.map(V::sum)) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> V {
            // SAFETY: per the trait.
            V(unsafe { std::ptr::read_unaligned(p as *const [f32; 4]) })
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> V {
            // SAFETY: per the trait.
            V([unsafe { *p }; 4])
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: per the trait.
            unsafe { std::ptr::write_unaligned(p as *mut [f32; 4], self.0) }
        }
        #[inline(always)]
        fn mul_add(self, a: V, b: V) -> V {
            V(std::array::from_fn(|i| self.0[i] + a.0[i] * b.0[i]))
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::{Lanes, NR};
    use std::arch::x86_64::*;

    /// Whether this CPU has AVX2 and FMA (detected once).
    pub fn available() -> bool {
        use std::sync::OnceLock;
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }

    /// Eight f32 lanes summed (the block dots of the LM head and of
    /// decode attention end in one).
    #[target_feature(enable = "avx2,fma")]
    pub fn sum(v: __m256) -> f32 {
        let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
        _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<1>(pair, pair)))
    }

    #[derive(Clone, Copy)]
    pub struct V(__m256);

    impl Lanes for V {
        const WIDTH: usize = 8;
        #[inline(always)]
        fn zero() -> V {
            // SAFETY: only reached from code with AVX2 enabled (the trait's
            // contract), as every method below.
            V(unsafe { _mm256_setzero_ps() })
        }
        #[inline(always)]
        fn splat_value(x: f32) -> V {
            // SAFETY: as `zero`.
            V(unsafe { _mm256_set1_ps(x) })
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // SAFETY: as `zero`.
            unsafe { sum(self.0) }
        }
        #[inline(always)]
        unsafe fn store_sums4(a: [V; 4], p: *mut f32) {
            // Two rounds of pairwise adds and the halves added: five
            // instructions for four sums where `sum` takes five for one.
            // SAFETY: as `zero`; `p` per the trait.
            unsafe {
                let both = _mm256_hadd_ps(_mm256_hadd_ps(a[0].0, a[1].0), _mm256_hadd_ps(a[2].0, a[3].0));
                _mm_storeu_ps(p, _mm_add_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps::<1>(both)));
            }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> V {
            // SAFETY: per the trait.
            V(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> V {
            // SAFETY: per the trait.
            V(unsafe { _mm256_broadcast_ss(&*p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: per the trait.
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn mul_add(self, a: V, b: V) -> V {
            // SAFETY: as `zero` (FMA with AVX2).
            V(unsafe { _mm256_fmadd_ps(a.0, b.0, self.0) })
        }
    }

    const _: () = assert!(NR == 8, "one AVX2 vector per panel row");

    /// SAFETY: the CPU has AVX2 and FMA; pointers as for `super::tile`.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn micro(rows: usize, kc: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, out: *mut f32) {
        // SAFETY: forwarded.
        unsafe { super::dispatch_rows::<V, 1>(rows, kc, a, lda, b, ldb, out) }
    }
}

/// The wide panels: one AVX-512 vector of 16 lanes per panel row, for
/// attention natively. Its scores and weighted values are [`MR`] × 16
/// tiles instead of [`MR`] × 8: the same loads and broadcasts a step, each
/// fused multiply–add twice as wide. The rest of the prefill keeps [`NR`]
/// (its f32 projections run on `gemm_dense` natively anyway).
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use super::{Lanes, WIDE};
    use std::arch::x86_64::*;

    /// Whether this CPU has AVX-512F (detected once).
    pub fn available() -> bool {
        use std::sync::OnceLock;
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| is_x86_feature_detected!("avx512f"))
    }

    #[derive(Clone, Copy)]
    pub struct V(__m512);

    impl Lanes for V {
        const WIDTH: usize = 16;
        #[inline(always)]
        fn zero() -> V {
            // SAFETY: only reached from code with AVX-512F enabled (the
            // trait's contract), as every method below.
            V(unsafe { _mm512_setzero_ps() })
        }
        #[inline(always)]
        fn splat_value(x: f32) -> V {
            // SAFETY: as `zero`.
            V(unsafe { _mm512_set1_ps(x) })
        }
        #[inline(always)]
        fn sum(self) -> f32 {
            // SAFETY: as `zero`.
            unsafe { _mm512_reduce_add_ps(self.0) }
        }
        #[inline(always)]
        unsafe fn store_sums4(a: [V; 4], p: *mut f32) {
            // SAFETY: per the trait.
            unsafe { std::ptr::write_unaligned(p as *mut [f32; 4], a.map(V::sum)) }
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> V {
            // SAFETY: per the trait.
            V(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline(always)]
        unsafe fn splat(p: *const f32) -> V {
            // SAFETY: per the trait.
            V(unsafe { _mm512_set1_ps(*p) })
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: per the trait.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
        #[inline(always)]
        fn mul_add(self, a: V, b: V) -> V {
            // SAFETY: as `zero`.
            V(unsafe { _mm512_fmadd_ps(a.0, b.0, self.0) })
        }
    }

    const _: () = assert!(WIDE == 16, "one AVX-512 vector per wide panel row");

    /// SAFETY: the CPU has AVX-512F; pointers as for `super::tile`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn micro(rows: usize, kc: usize, a: *const f32, lda: usize, b: *const f32, ldb: usize, out: *mut f32) {
        // SAFETY: forwarded.
        unsafe { super::dispatch_rows::<V, 1>(rows, kc, a, lda, b, ldb, out) }
    }
}

/// Data in [−1, 1] from a xorshift generator: varied, reproducible, shared
/// by the kernel and attention tests and the attention probe.
pub(crate) fn xorshift_values(len: usize, seed: u32) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize, salt: u32) -> Vec<f32> {
        xorshift_values(len, 0x2545_f491u32 ^ salt)
    }

    fn naive(a: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|x| a[i * k + x] as f64 * w[j * k + x] as f64).sum::<f64>() as f32;
            }
        }
        c
    }

    #[test]
    fn packed_matmul_matches_the_definition_at_awkward_shapes() {
        for (m, n, k) in [(1, 1, 1), (3, 5, 7), (15, 576, 576), (17, 9, 300), (64, 24, 513), (9, 1536, 40)] {
            let a = data(m * k, 1);
            let w = data(n * k, 2);
            let packed = Packed::from_rows(&w, n, k);
            let ours = packed.matmul(&a, m);
            let want = naive(&a, m, &w, n, k);
            let worst = ours.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(worst < 1e-4 * (k as f32).sqrt(), "[{m}×{k}]·[{n}×{k}]ᵀ: worst |difference| {worst}");
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn dense_gemm_matches_the_definition() {
        for (m, n, k) in [(1, 1, 1), (3, 5, 7), (33, 576, 96), (64, 24, 513)] {
            let (a, w) = (data(m * k, 5), data(n * k, 6));
            let ours = gemm_dense(&a, m, k, &w, n);
            let want = naive(&a, m, &w, n, k);
            let worst = ours.iter().zip(&want).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(worst < 1e-4 * (k as f32).sqrt(), "[{m}×{k}]·[{n}×{k}]ᵀ: worst |difference| {worst}");
        }
    }

    #[test]
    fn threads_do_not_change_the_bits() {
        let (m, n, k) = (33, 200, 96);
        let (a, w) = (data(m * k, 3), data(n * k, 4));
        let packed = Packed::from_rows(&w, n, k);
        let all = packed.matmul(&a, m);
        // Row by row, each call is below the parallel threshold.
        for i in 0..m {
            assert_eq!(packed.matmul(&a[i * k..(i + 1) * k], 1), all[i * n..(i + 1) * n]);
        }
    }
}
