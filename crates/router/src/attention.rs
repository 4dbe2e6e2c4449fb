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
//!
//! Both products stay f32 at every precision. Integer scores (queries to 8
//! bits and keys to the weights' 6-bit affine form per 32 values, through
//! `integer`'s kernels) ran one layer at 1,024 tokens in 42.7 ms against
//! 54.8 ms in the browser's threads build (one thread, best of 7), but took
//! the llama.cpp reference test's 23-token text to cosine 0.9970 on its last
//! token, below the test's 0.999. Rounding operands in this f32 path
//! instead gave 0.9986 for keys at 8 bits (symmetric, per 32 values) and
//! 0.9978 for the softmax weights at 0..=127 per 32 keys, against 0.9994
//! unrounded: attention keeps no 8-bit margin on this test.
//!
//! Nor does 16 bits pay where the browser runs it. This attention already
//! runs at 87 % of the f32 GEMM's rate in the same build (1,024 tokens,
//! SmolLM2's heads, one thread of headless Chromium 156 with relaxed SIMD:
//! 22.3 GFLOP/s against 25.7 for a [1,024 × 576] · [576 × 1,536] product),
//! and SIMD128's 16-bit product, `i32x4.dot_i16x8_s`, is `pmaddwd` on x86:
//! eight multiply–adds and then an `i32x4.add` to accumulate, where two
//! `f32x4.relaxed_madd`s (one FMA each) do the same eight. The same holds
//! natively on AVX2 without VNNI (`vpmaddwd` + `vpaddd` against two
//! `vfmadd`s). The instructions a multiply–add are the same; only the
//! bytes loaded halve, and at 87 % of the GEMM's rate that leaves little
//! to win for the rounding it costs.

#![allow(unsafe_code)]

use crate::kernels::{gemm_panel, Lanes, NR, WIDE};
use crate::parallel::{self, DisjointOut};
use crate::segment::KvPiece;

/// The shapes of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub heads: usize,
    pub kv_heads: usize,
    /// New tokens (query rows).
    pub tokens: usize,
    pub head_dim: usize,
    /// Position of the first new token (the tokens held before this call).
    pub start: usize,
    /// Keys a query may see, itself included (sliding-window layers);
    /// `None` is every earlier key.
    pub window: Option<usize>,
}

impl Shape {
    /// The first key position query position `pos` may see.
    fn first_visible(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// `q`: `[tokens × heads·d]`, row-major, as the query projection writes it.
/// `pieces`: this layer's keys and values for positions `0..start + tokens`,
/// in order (a cached prefix's segments, then the new tokens' own), read in
/// place. Query `i` (position `start + i`) attends to keys
/// `first_visible..=start + i`; query head `h` reads K/V head
/// `h / (heads / kv_heads)`. Writes `out`, `[tokens × heads·d]`, the layout
/// the output projection takes.
///
/// Work is cut into (head, block of query rows) tasks for the thread pool;
/// within a task the scores of a block against its visible keys and the
/// weighted sum of values are small matrix products on the projections'
/// micro-kernel: the block's queries are its `A` (rows read in place), the
/// keys, packed once per call into panels, its `B`, and the score tiles go
/// straight into the weights' rows; then the softmaxed weights are `A` and
/// the values, packed likewise, `B`. Packing once per call (per layer)
/// instead of reading keys and values in place and packing each block's
/// queries took the attention probe at 1,024 tokens from 25.3 to 19.3 ms
/// on the 2-core AVX2 machine (the median of six alternated runs'
/// medians, on a noisy machine), and a 1,024-token int8 decide's attention
/// from 632–765 to 594–629 ms (27–28 % of the decide instead of 29 %;
/// three alternated runs): the values were read a 32-byte panel of every
/// 256-byte row, and the transposed score store was scalar.
pub fn causal(q: &[f32], pieces: &[KvPiece<'_>], s: Shape, scale: f32, out: &mut [f32]) {
    causal_at(panel_widths(s.head_dim)[0], q, pieces, s, scale, out);
}

/// The panel widths [`causal`] can run at for heads of `head_dim` values
/// on this CPU, the one it uses first: 16 keys (and value columns) a panel
/// (one AVX-512 vector; the value rows, `head_dim` wide, must then hold
/// whole panels of 16), and [`NR`] everywhere.
pub fn panel_widths(head_dim: usize) -> &'static [usize] {
    if crate::kernels::wide_available() && head_dim.is_multiple_of(WIDE) {
        &[WIDE, NR]
    } else {
        &[NR]
    }
}

/// [`causal`] at one of [`panel_widths`].
fn causal_at(width: usize, q: &[f32], pieces: &[KvPiece<'_>], s: Shape, scale: f32, out: &mut [f32]) {
    match width {
        WIDE => causal_panels::<WIDE>(q, pieces, s, scale, out),
        NR => causal_panels::<NR>(q, pieces, s, scale, out),
        other => unreachable!("attention's panels are {NR} or {WIDE} queries wide, not {other}"),
    }
}

fn causal_panels<const W: usize>(q: &[f32], pieces: &[KvPiece<'_>], s: Shape, scale: f32, out: &mut [f32]) {
    let d = s.head_dim;
    let held: usize = pieces.iter().map(KvPiece::len).sum();
    assert_eq!(held, s.start + s.tokens, "keys held for {} positions, queries need {}", held, s.start + s.tokens);
    assert!(q.len() >= s.tokens * s.heads * d && out.len() >= s.tokens * s.heads * d);
    let group = (s.heads / s.kv_heads.max(1)).max(1);
    let ld = s.heads * d;
    // Every key and value some query sees, from a panel boundary, packed
    // once per call as the micro-kernel's B, per K/V head, shared by every
    // block of queries and every query head of the group: keys in panels
    // of W keys (d rows each) for the scores, whose A is then the queries
    // read in place; values in panels of W of their `width` columns (one
    // row a key) for the weighted sum. Read in place, a values panel was
    // 32 bytes of every 256-byte row, the rows (256 KB at 1,024 keys) read
    // again for each of the d / W panels.
    let base = s.first_visible(s.start) / W * W;
    let width = d.div_ceil(NR) * NR;
    let key_rows = held - base;
    let per_head = key_rows.div_ceil(W) * d * W + width * key_rows;
    // Taken out of the thread's slot, not borrowed in place, for the whole
    // call: natively, a thread waiting in the pool below may run another
    // forward pass's task, which calls this again on the same thread.
    let mut packed = PACKED_KV.take();
    packed.clear();
    packed.resize(s.kv_heads * per_head, 0.0);
    parallel::for_each_rows_mut(&mut packed, per_head, 1, |g, head| {
        let (key_panels, value_panels) = head.split_at_mut(key_rows.div_ceil(W) * d * W);
        for_each_overlap(pieces, base, held, |piece, first_row, count, at| {
            let at_head = g * piece.head_rows + first_row;
            let keys = &piece.keys[at_head * d..][..count * d];
            for (i, key) in keys.chunks_exact(d).enumerate() {
                let (panel, lane) = ((at + i) / W, (at + i) % W);
                for (x, &value) in key.iter().enumerate() {
                    key_panels[(panel * d + x) * W + lane] = value;
                }
            }
            let values = &piece.values[at_head * width..][..count * width];
            for (i, row) in values.chunks_exact(width).enumerate() {
                for (panel, part) in row.chunks_exact(W).enumerate() {
                    value_panels[(panel * key_rows + at + i) * W..][..W].copy_from_slice(part);
                }
            }
        });
    });
    let panels = &packed[..];
    let out = DisjointOut::new(out);
    let blocks = s.tokens.div_ceil(QUERY_BLOCK);
    // Task t: the latest (longest) query blocks first, so the pool's last
    // tasks are its shortest.
    parallel::for_each(s.heads * blocks, |t| {
        let (h, block) = (t % s.heads, blocks - 1 - t / s.heads);
        let rows = block * QUERY_BLOCK..((block + 1) * QUERY_BLOCK).min(s.tokens);
        let (keys, values) = panels[(h / group) * per_head..][..per_head].split_at(key_rows.div_ceil(W) * d * W);
        let kv = PackedKv { keys, values, base, rows: key_rows };
        // The tile: rows `rows` × head `h`'s `d` columns, in rows of `ld`.
        let tile = out.region(rows.start * ld + h * d..(rows.end - 1) * ld + (h + 1) * d);
        // SAFETY: this task alone writes that tile (other tasks: other heads
        // or other rows), and `region` checked it lies inside `out`.
        unsafe { query_block::<W>(q, rows, h, &kv, s, scale, tile) };
    });
    PACKED_KV.set(packed);
}

/// Query rows per task.
const QUERY_BLOCK: usize = 32;

/// One K/V head's keys and values packed for [`query_block`], from key
/// position `base` for `rows` positions: the keys in panels of `W` keys
/// (`d` rows of `W` values each, the last zero-padded), the values in
/// panels of `W` columns (`rows` rows of `W` values each).
struct PackedKv<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    base: usize,
    rows: usize,
}

/// One head's block of query rows: scores against every key the block may
/// see, a causal (and windowed) softmax per row, then the weighted values,
/// written into `out` (row stride `heads × d`) at head `h`'s columns.
/// The queries are read in place and the keys and values come packed
/// (`kv`, the head's K/V head's), so each score tile is stored as rows,
/// straight into the weights.
///
/// SAFETY: `tile` points at row `rows.start`, head `h`'s first column, of
/// an output of row stride `heads × d` valid for the rows `rows` × head
/// `h`'s `d` columns, which only this call writes; `W` is one of
/// [`panel_widths`]`(d)`.
#[allow(clippy::too_many_arguments)]
unsafe fn query_block<const W: usize>(
    q: &[f32],
    rows: std::ops::Range<usize>,
    h: usize,
    kv: &PackedKv<'_>,
    s: Shape,
    scale: f32,
    tile: *mut f32,
) {
    let d = s.head_dim;
    let ld = s.heads * d;
    let m = rows.len();
    // Key positions [lo, hi) that some row of the block sees, from a panel
    // boundary (the keys before the first visible one get weight 0).
    let (lo, hi) = (s.first_visible(s.start + rows.start) / W * W, s.start + rows.end);
    let visible = hi - lo;

    // Scores as row-major weights `[m × ldw]`, a row per query: the block's
    // query rows are the kernel's A, each key panel its B. The row stride
    // is padded past a multiple of 16 floats: at 1,024 visible keys an
    // unpadded row is 4 KiB, so the eight rows a tile touches, and the
    // eight A rows the values product reads, fall in one L1 set and evict
    // each other.
    let ldw = visible.next_multiple_of(16) + 16;
    WEIGHTS.with_borrow_mut(|weights| {
        if weights.len() < m * ldw {
            weights.resize(m * ldw, 0.0);
        }
        let weights = &mut weights[..m * ldw];
        let queries = &q[rows.start * ld + h * d..];
        for first_key in (lo..hi).step_by(W) {
            let panel = (first_key - kv.base) / W;
            // SAFETY: `weights` has m rows of ldw ≥ visible values; this
            // writes rows 0..m, columns first_key - lo.. + cols ≤ visible;
            // `queries` holds m rows of `ld` from head h's column (the
            // block's rows are rows of `q`), the panel d rows of W.
            unsafe {
                gemm_panel::<W>(
                    queries,
                    ld,
                    m,
                    d,
                    &kv.keys[panel * d * W..][..d * W],
                    W,
                    weights.as_mut_ptr().add(first_key - lo),
                    ldw,
                    W.min(hi - first_key),
                )
            };
        }
        // Softmax per query row; keys a row may not see get weight 0. Its max,
        // exponentials and sum are passes over the row rather than one: a
        // running maximum or sum is a serial chain of float operations that
        // the compiler may not reorder, so a fused loop stayed scalar (with the
        // old transpose pass, most of the 61 % of the attention's time a profile
        // at 1,024 tokens found outside the matrix products), while each pass
        // alone vectorises.
        for (r, row) in weights.chunks_exact_mut(ldw).enumerate() {
            let row = &mut row[..visible];
            let pos = s.start + rows.start + r;
            let seen = s.first_visible(pos) - lo..pos + 1 - lo;
            row[..seen.start].fill(0.0);
            row[seen.end..].fill(0.0);
            softmax(&mut row[seen], scale);
        }

        // Weighted values: the weights times each panel of value columns
        // (at W = WIDE, d itself is a multiple of W: `panel_widths`).
        let width = d.div_ceil(NR) * NR;
        for panel in 0..width / W {
            let cols = W.min(d - panel * W);
            let values = &kv.values[(panel * kv.rows + lo - kv.base) * W..][..visible * W];
            // SAFETY: per this function's contract; `weights` has m rows of
            // `ldw` ≥ `visible` values, columns 0..visible read.
            unsafe { gemm_panel::<W>(weights, ldw, m, visible, values, W, tile.add(panel * W), ld, cols) };
        }
    });
}

thread_local! {
    /// The calling thread's packed keys and values for [`causal`] (one
    /// layer's at a time, 1.5 MB at 1,024 tokens for SmolLM2): kept from
    /// call to call, as a fresh allocation of that size is fresh pages to
    /// fault in every layer. A call takes it and puts it back.
    static PACKED_KV: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };

    /// Each pool thread's score buffer, kept from task to task: a block's
    /// `[32 × visible]` scores are 135 KB at 1,024 tokens, 270 tasks a
    /// layer, and a fresh zeroed allocation per task was part of the
    /// prefill's `memset` time. No value is read before this task writes
    /// it: the scores' products overwrite columns `0..visible` of every
    /// row and the softmax only rewrites them, so the buffer is never
    /// cleared; the row padding past `visible` is never read.
    static WEIGHTS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What [`probe`] measured: one layer's causal attention of `tokens` new
/// tokens against themselves, the prefill's attention stage alone, at one
/// panel width.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AttentionProbe {
    pub tokens: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Keys (and value columns) per panel (`panel_widths`): 16 on
    /// AVX-512, else 8.
    pub panel_width: usize,
    pub repeats: usize,
    pub best_ms: f64,
    pub median_ms: f64,
    /// The causal work (4·d operations per visible query–key pair and head:
    /// scores, then weights × values) over the best repeat.
    pub gflops: f64,
}

/// One sequence's single new token for [`single_queries`]: its query row
/// (`heads × d`), its keys and values (as for [`causal`]) and which row of
/// the output it writes.
pub struct SingleQuery<'a> {
    pub q: &'a [f32],
    pub pieces: &'a [KvPiece<'a>],
    /// `tokens` is 1.
    pub shape: Shape,
    pub out_row: usize,
}

/// Keys per task of [`single_queries`]: a long context is cut into chunks
/// whose partial softmaxes are combined afterwards (flash-decoding's
/// split), so one sequence's keys spread over every thread. Gemma 3 has
/// one K/V head: without the split its decode attention ran on one thread.
const KEY_CHUNK: usize = 128;

/// Attention of one new token per sequence, for a decode step of several
/// sequences at once: `out` rows of `heads × d` (the output projection's
/// input), row `out_row` per query.
///
/// [`causal`]'s tasks are (head, block of query rows) and pack a block's
/// queries into a panel [`NR`] or [`WIDE`] queries wide: with one token,
/// one query filled a panel of 16 (AVX-512), so its score products did 16
/// times the work, and each sequence was a pool dispatch of its own per
/// layer. Measured natively (SmolLM2, int8, a 969-token context): 11.0 ms
/// of a 24.8 ms step at one sequence, 83 of 112 ms at eight. Here the
/// panel holds every query head of one K/V head (SmolLM2: 3, Gemma 3: 4),
/// which read the same keys, and the tasks are (sequence, K/V head, chunk
/// of [`KEY_CHUNK`] keys) in one dispatch for the whole batch; each task
/// keeps its chunk's row maxima, sums and unnormalised weighted values,
/// and the chunks are combined per head at the end (exactly the softmax:
/// `Σ_c e^(m_c − M) o_c / Σ_c e^(m_c − M) l_c`).
pub fn single_queries(queries: &[SingleQuery<'_>], scale: f32, out: &mut [f32]) {
    let Some(first) = queries.first() else { return };
    let (d, heads, kv_heads) = (first.shape.head_dim, first.shape.heads, first.shape.kv_heads.max(1));
    let group = (heads / kv_heads).max(1);
    let ld = heads * d;
    // (query, K/V head, chunk) tasks, and each query's first task.
    let mut tasks = Vec::new();
    for (i, query) in queries.iter().enumerate() {
        let s = query.shape;
        assert!(
            s.tokens == 1 && s.head_dim == d && s.heads == heads && s.kv_heads.max(1) == kv_heads,
            "{s:?} in a batch of single queries"
        );
        assert!(query.q.len() >= ld && (query.out_row + 1) * ld <= out.len());
        let held: usize = query.pieces.iter().map(KvPiece::len).sum();
        assert_eq!(held, s.start + 1, "keys held for {held} positions, the query is at {}", s.start);
        let (lo, hi) = (s.first_visible(s.start), s.start + 1);
        // Chunks of equal size, none above KEY_CHUNK (257 keys: three of
        // 86, not 128, 128 and a task for one key).
        let size = (hi - lo).div_ceil((hi - lo).div_ceil(KEY_CHUNK));
        for g in 0..kv_heads {
            for chunk in (lo..hi).step_by(size) {
                tasks.push((i, g, chunk..(chunk + size).min(hi)));
            }
        }
    }
    // Per task and head of its group: the chunk's maximum, its sum of
    // exponentials and its weighted values (d).
    let slot = group * (d + 2);
    let mut partials = vec![0f32; tasks.len() * slot];
    parallel::for_each_rows_mut(&mut partials, slot, 1, |t, partial| {
        let (i, g, ref keys) = tasks[t];
        let query = &queries[i];
        chunk_partial(&query.q[g * group * d..][..group * d], query.pieces, keys.clone(), g, group, d, scale, partial);
    });
    // Combine each query head's chunks, in order.
    let mut at = 0;
    while at < tasks.len() {
        let (i, g) = (tasks[at].0, tasks[at].1);
        let end = at + tasks[at..].iter().take_while(|t| t.0 == i && t.1 == g).count();
        for hh in 0..group {
            let head = |t: usize| &partials[t * slot + hh * (d + 2)..][..d + 2];
            let max = (at..end).map(|t| head(t)[0]).fold(f32::NEG_INFINITY, larger);
            let row = &mut out[queries[i].out_row * ld + (g * group + hh) * d..][..d];
            row.fill(0.0);
            let mut sum = 0.0;
            for t in at..end {
                let part = head(t);
                let weight = exp(part[0] - max);
                sum += weight * part[1];
                row.iter_mut().zip(&part[2..]).for_each(|(o, &v)| *o += weight * v);
            }
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|o| *o *= inv);
        }
        at = end;
    }
}

/// One task of [`single_queries`]: the `group` query heads `q`
/// (`[group × d]`) of K/V head `g` against key positions `keys`, into
/// `partial` (`group` rows of maximum, sum and `d` weighted values). A key
/// row is read once for every head of the group, from L1 after the first.
#[allow(clippy::too_many_arguments)]
fn chunk_partial(
    q: &[f32],
    pieces: &[KvPiece<'_>],
    keys: std::ops::Range<usize>,
    g: usize,
    group: usize,
    d: usize,
    scale: f32,
    partial: &mut [f32],
) {
    let width = d.div_ceil(NR) * NR;
    // The chunk's key and value rows, in position order.
    let mut rows: Vec<(&[f32], &[f32])> = Vec::with_capacity(keys.len());
    for_each_overlap(pieces, keys.start, keys.end, |piece, first_row, count, _| {
        let at = g * piece.head_rows + first_row;
        let key_rows = piece.keys[at * d..][..count * d].chunks_exact(d);
        let value_rows = piece.values[at * width..][..count * width].chunks_exact(width);
        rows.extend(key_rows.zip(value_rows).map(|(k, v)| (k, &v[..d])));
    });
    let visible = rows.len();
    WEIGHTS.with_borrow_mut(|scores| {
        if scores.len() < visible {
            scores.resize(visible, 0.0);
        }
        let row = &mut scores[..visible];
        for hh in 0..group {
            let query = &q[hh * d..][..d];
            let part = &mut partial[hh * (d + 2)..][..d + 2];
            let (stats, out) = part.split_at_mut(2);
            (stats[0], stats[1]) = decode_head(query, &rows, row, scale, out);
        }
    });
}

/// One query head of [`chunk_partial`]: `scores[j] = query · rows[j].0`,
/// their exponentials (returning the maximum and sum the chunks are
/// combined by), and `out = Σ_j scores[j] · rows[j].1`, on this target's
/// widest vectors: AVX2 with fused multiply–adds natively (on AVX-512
/// machines too: eight lanes already make these loops wait on memory and
/// the L1, not on arithmetic), SIMD128 in wasm32 (with relaxed SIMD's
/// fused multiply–add where the build has it), four plain lanes
/// elsewhere. The same two loops for every target, over `kernels`'
/// [`Lanes`].
///
/// Natively, the portable loops compiled for the same CPU left the dot at
/// two lanes and the weighted sum as one chain of dependent adds: 1.1–1.4
/// ms a layer for eight sequences at 969 keys. In the browser, what LLVM
/// vectorised of those loops took 9.5–10.0 ms for a step's 30 layers of
/// one sequence at 1,024 keys (SmolLM2's 9 query and 3 K/V heads of 64,
/// one thread of headless Chromium 156, best of 15, three runs), these
/// 4.2–4.4 ms with relaxed SIMD and 4.9–5.0 without; eight sequences at
/// 256 keys 19.2–21.6 ms before, 8.5–9.7 after. In the page's decode
/// panel (single-thread build, two alternated rounds) a step's attention
/// at 1,024 tokens went from 13.4–13.8 to 9.9–11.0 ms: there the keys
/// and values come from memory, not the cache. Two accumulators per key
/// (eight chains of fused multiply–adds instead of four) measured no
/// faster in wasm, so the scores keep one.
fn decode_head(query: &[f32], rows: &[(&[f32], &[f32])], scores: &mut [f32], scale: f32, out: &mut [f32]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::avx2::available() {
        #[target_feature(enable = "avx2,fma")]
        fn on_avx2(query: &[f32], rows: &[(&[f32], &[f32])], scores: &mut [f32], scale: f32, out: &mut [f32]) -> (f32, f32) {
            decode_head_on::<crate::kernels::avx2::V>(query, rows, scores, scale, out)
        }
        // SAFETY: the CPU has AVX2 and FMA (just detected).
        return unsafe { on_avx2(query, rows, scores, scale, out) };
    }
    #[cfg(target_arch = "wasm32")]
    return decode_head_on::<crate::kernels::simd128::V>(query, rows, scores, scale, out);
    #[cfg(not(target_arch = "wasm32"))]
    decode_head_on::<crate::kernels::portable::V>(query, rows, scores, scale, out)
}

#[inline(always)]
fn decode_head_on<L: Lanes>(query: &[f32], rows: &[(&[f32], &[f32])], scores: &mut [f32], scale: f32, out: &mut [f32]) -> (f32, f32) {
    let d = query.len();
    assert!(rows.iter().all(|(key, value)| key.len() == d && value.len() == d) && scores.len() == rows.len() && out.len() == d);
    // Columns in whole vectors; the rest (none for the models' heads of
    // 64, 128 or 256) one by one.
    let whole = d / L::WIDTH * L::WIDTH;
    let tail = |a: &[f32], b: &[f32]| -> f32 { a[whole..].iter().zip(&b[whole..]).map(|(x, y)| x * y).sum() };
    // Scores four keys at a time, their lane sums folded together.
    let mut quads = rows.chunks_exact(4);
    let mut j = 0;
    for quad in quads.by_ref() {
        let mut acc = [L::zero(); 4];
        for c in (0..whole).step_by(L::WIDTH) {
            // SAFETY: c + WIDTH ≤ whole ≤ d, the length of the query and of
            // every key row (asserted).
            let q = unsafe { L::load(query.as_ptr().add(c)) };
            for (acc, (key, _)) in acc.iter_mut().zip(quad) {
                // SAFETY: as above.
                *acc = acc.mul_add(q, unsafe { L::load(key.as_ptr().add(c)) });
            }
        }
        let four = &mut scores[j..j + 4];
        // SAFETY: `four` holds four values.
        unsafe { L::store_sums4(acc, four.as_mut_ptr()) };
        // Tested, not looped over empty tails: a key's every nanosecond
        // is 0.28 ms of a 1,024-token step.
        if whole < d {
            for (score, (key, _)) in four.iter_mut().zip(quad) {
                *score += tail(query, key);
            }
        }
        j += 4;
    }
    for (key, _) in quads.remainder() {
        let mut acc = L::zero();
        for c in (0..whole).step_by(L::WIDTH) {
            // SAFETY: as above.
            acc = acc.mul_add(unsafe { L::load(query.as_ptr().add(c)) }, unsafe { L::load(key.as_ptr().add(c)) });
        }
        scores[j] = acc.sum() + tail(query, key);
        j += 1;
    }
    let stats = exponentials::<false>(scores, scale);
    // The weighted values, eight vectors of columns (independent
    // accumulators) a pass over the rows, then one vector a pass.
    let mut c = 0;
    while c + 8 * L::WIDTH <= whole {
        // SAFETY: every value row holds d ≥ c + 8·WIDTH values (asserted).
        unsafe { weighted_columns::<L, 8>(scores, rows, c, out) };
        c += 8 * L::WIDTH;
    }
    while c < whole {
        // SAFETY: as above, c + WIDTH ≤ whole ≤ d.
        unsafe { weighted_columns::<L, 1>(scores, rows, c, out) };
        c += L::WIDTH;
    }
    for (x, o) in out.iter_mut().enumerate().skip(whole) {
        *o = scores.iter().zip(rows).map(|(&w, (_, value))| w * value[x]).sum();
    }
    stats
}

/// `out[c..c + N·WIDTH] = Σ_j weights[j] · rows[j].1[c..c + N·WIDTH]`,
/// `N` accumulators held in registers over the rows.
///
/// SAFETY: every value row holds at least `c + N·WIDTH` values (checked
/// once by the caller for all its calls, not per call here).
#[inline(always)]
unsafe fn weighted_columns<L: Lanes, const N: usize>(weights: &[f32], rows: &[(&[f32], &[f32])], c: usize, out: &mut [f32]) {
    assert!(out.len() >= c + N * L::WIDTH);
    let mut acc = [L::zero(); N];
    for (&w, (_, value)) in weights.iter().zip(rows) {
        let w = L::splat_value(w);
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: c + N·WIDTH ≤ the row's length (the function's contract).
            *acc = acc.mul_add(w, unsafe { L::load(value.as_ptr().add(c + i * L::WIDTH)) });
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        // SAFETY: c + N·WIDTH ≤ out.len() (asserted).
        unsafe { acc.store(out.as_mut_ptr().add(c + i * L::WIDTH)) };
    }
}

/// Operations of one causal attention call: 4·d per visible pair per head.
pub fn causal_flops(s: Shape) -> f64 {
    let pairs: usize = (0..s.tokens).map(|i| s.start + i + 1 - s.first_visible(s.start + i)).sum();
    4.0 * (pairs * s.heads * s.head_dim) as f64
}

/// Times [`causal`] on varied data of shape `s` (one piece, as a prefill
/// from scratch has) at every panel width this CPU runs, the one prefills
/// use first, repeats alternated between them (a noisy machine's slow
/// spell then falls on no one width), so the attention stage's rate can be
/// compared with the projections' GEMM probe on the same device.
pub fn probe(s: Shape, repeats: usize) -> Vec<AttentionProbe> {
    let d = s.head_dim;
    let total = s.start + s.tokens;
    let width = d.div_ceil(NR) * NR;
    let q = crate::kernels::xorshift_values(s.tokens * s.heads * d, 1);
    let keys = crate::kernels::xorshift_values(s.kv_heads * total * d, 2);
    let values = crate::kernels::xorshift_values(s.kv_heads * total * width, 3);
    let pieces = [KvPiece { keys: &keys, values: &values, head_rows: total, rows: 0..total }];
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; s.tokens * s.heads * d];
    let widths = panel_widths(d);
    for &w in widths {
        // One untimed call each: the first allocates.
        causal_at(w, &q, &pieces, s, scale, &mut out);
    }
    let mut times = vec![Vec::with_capacity(repeats.max(1)); widths.len()];
    for _ in 0..repeats.max(1) {
        for (&w, times) in widths.iter().zip(&mut times) {
            let started = web_time::Instant::now();
            causal_at(w, &q, &pieces, s, scale, &mut out);
            std::hint::black_box(&out);
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    widths
        .iter()
        .zip(times)
        .map(|(&panel_width, mut times)| {
            times.sort_by(f64::total_cmp);
            let best_ms = times[0].max(1e-3);
            AttentionProbe {
                tokens: s.tokens,
                heads: s.heads,
                kv_heads: s.kv_heads,
                head_dim: d,
                panel_width,
                repeats: times.len(),
                best_ms,
                median_ms: times[times.len() / 2],
                gflops: causal_flops(s) / best_ms / 1e6,
            }
        })
        .collect()
}

/// Calls `f(piece, first_row, count, at)` for each piece's part inside key
/// positions `[lo, hi)`: `count` rows from the piece's row `first_row`,
/// which are positions `lo + at..`.
fn for_each_overlap<'a, 'b>(pieces: &'a [KvPiece<'b>], lo: usize, hi: usize, mut f: impl FnMut(&'a KvPiece<'b>, usize, usize, usize)) {
    let mut base = 0;
    for piece in pieces {
        let (from, to) = (base.max(lo), (base + piece.len()).min(hi));
        if from < to {
            f(piece, piece.rows.start + (from - base), to - from, from - lo);
        }
        base += piece.len();
    }
}

/// `row ← softmax(row · scale)` in place.
fn softmax(row: &mut [f32], scale: f32) {
    exponentials::<true>(row, scale);
}

/// `row ← e^(row · scale − max)`, divided by their sum when `NORMALISE`
/// (the softmax); returns the maximum (of `row · scale`) and the sum
/// before any division, what [`single_queries`] combines chunks by.
/// Natively the same code is also compiled for AVX-512 and AVX2 (sixteen
/// or eight lanes instead of SSE2's four) and chosen at run time, as the
/// matmul kernels are; wasm32 has SIMD128 only.
fn exponentials<const NORMALISE: bool>(row: &mut [f32], scale: f32) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::wide_available() {
        // SAFETY: the CPU has AVX-512F (just detected), and so AVX2 and FMA.
        return unsafe { exponentials_avx512::<NORMALISE>(row, scale) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::avx2::available() {
        // SAFETY: the CPU has AVX2 and FMA (just detected).
        return unsafe { exponentials_avx2::<NORMALISE>(row, scale) };
    }
    exponentials_body::<NORMALISE>(row, scale)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exponentials_avx2<const NORMALISE: bool>(row: &mut [f32], scale: f32) -> (f32, f32) {
    exponentials_body::<NORMALISE>(row, scale)
}

/// Sixteen lanes a vector: `lanes`' 16 accumulators are then one register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
fn exponentials_avx512<const NORMALISE: bool>(row: &mut [f32], scale: f32) -> (f32, f32) {
    exponentials_body::<NORMALISE>(row, scale)
}

#[inline(always)]
fn exponentials_body<const NORMALISE: bool>(row: &mut [f32], scale: f32) -> (f32, f32) {
    let max = lanes(row, f32::NEG_INFINITY, larger) * scale;
    row.iter_mut().for_each(|x| *x = exp(*x * scale - max));
    let sum = lanes(row, 0.0, |a, b| a + b);
    if NORMALISE {
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|x| *x *= inv);
    }
    (max, sum)
}

/// Folds `values` with `f` in 16 independent lanes, then the lanes: the
/// shape that vectorises (a single running accumulator is a serial chain).
#[inline(always)]
pub(crate) fn lanes(values: &[f32], start: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [start; 16];
    let chunks = values.chunks_exact(16);
    let rest = chunks.remainder();
    for chunk in chunks {
        acc.iter_mut().zip(chunk).for_each(|(a, &x)| *a = f(*a, x));
    }
    rest.iter().fold(acc.into_iter().fold(start, &f), |a, &x| f(a, x))
}

/// The sum of `values` in [`lanes`]' 16 lanes, vectorised for this CPU
/// (natively AVX-512 or AVX2 where detected; SIMD128 in wasm32).
pub(crate) fn lanes_sum(values: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::avx2::available() {
        #[target_feature(enable = "avx2,fma")]
        fn sum_avx2(values: &[f32]) -> f32 {
            lanes(values, 0.0, |a, b| a + b)
        }
        // SAFETY: the CPU has AVX2 and FMA (just detected).
        return unsafe { sum_avx2(values) };
    }
    lanes(values, 0.0, |a, b| a + b)
}

/// The larger of `a` and `b` as one compare and select, for folds over
/// finite values (a NaN `b` is skipped, as `f32::max` skips it).
/// `f32::max` must also return the other operand when `a` is NaN, which
/// wasm's `f32.max` and `f32x4.max` do not do, so in wasm32 each call was
/// a call to libm's `fmaxf` and its loop stayed scalar: 1.5 % of the
/// samples of a profile of the single-thread build at 1,024 tokens (its
/// other core idle), beside the softmax's own 2.5 %. This form is
/// `f32x4.pmax` there (and `maxps` natively). Over 1,024 × 1,536 values
/// in the single-thread build, row maxima of 528 values went from 2.24 to
/// 0.27 ms and the quantization's maxima of 32 (in `integer`) from 2.49
/// to 1.01 ms; in the threads build, with relaxed SIMD, from 0.30 to 0.26
/// and from 2.51 to 0.71 ms (best of 15 alternated runs each in headless
/// Chromium).
#[inline(always)]
pub(crate) fn larger(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

/// `e^x` for the softmax's arguments (≤ 0), to about 2 ulp: x = n·ln 2 + r
/// with |r| ≤ ln 2 / 2, a degree-6 polynomial for e^r, and 2^n built in the
/// exponent bits. Branch-free, so a loop over it vectorises; arguments below
/// −87 give e^−87 (≈ 1.6e−38), which next to the row maximum's e^0 = 1 is
/// the same as the true value's underflow.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Rounding to nearest by adding 1.5·2²³: the sum's low mantissa bits
    // then hold the integer n (|n| ≤ 127 here) in two's complement, so n
    // comes out as a float (subtracting the constant again) and, for 2^n,
    // as an integer (the sum's bits minus the constant's) with no
    // float-to-int conversion. Rust's `as i32` saturates and maps NaN to 0,
    // which x86 has no vector instruction for: with it the loop was
    // scalar natively.
    const SHIFT: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * std::f32::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Taylor coefficients 1/k! up to k = 6: on |r| ≤ 0.347 the truncation
    // error is below 1e-8 relative.
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // n + 127 ∈ [1, 254] on the clamped range: a normal float's exponent.
    let bits = t.to_bits().wrapping_sub(SHIFT.to_bits()).wrapping_add(127) << 23;
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
    /// `k` and `v` are `[kv_heads × total × d]`, `q` `[tokens × heads × d]`.
    fn reference(q: &[f32], k: &[f32], v: &[f32], s: Shape, scale: f32) -> Vec<f32> {
        let d = s.head_dim;
        let total = s.start + s.tokens;
        let mut out = vec![0f32; s.tokens * s.heads * d];
        for h in 0..s.heads {
            let g = h / (s.heads / s.kv_heads);
            for i in 0..s.tokens {
                let pos = s.start + i;
                let scores: Vec<f64> = (0..total)
                    .map(|j| {
                        if j > pos || j < s.first_visible(pos) {
                            f64::NEG_INFINITY
                        } else {
                            (0..d).map(|x| q[(i * s.heads + h) * d + x] as f64 * k[(g * total + j) * d + x] as f64).sum::<f64>()
                                * scale as f64
                        }
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for x in 0..d {
                    out[(i * s.heads + h) * d + x] =
                        (0..total).map(|j| exps[j] / sum * v[(g * total + j) * d + x] as f64).sum::<f64>() as f32;
                }
            }
        }
        out
    }

    fn data(len: usize, salt: u32) -> Vec<f32> {
        crate::kernels::xorshift_values(len, 0x9e37_79b9u32 ^ salt)
    }

    /// Values padded to whole panels, as a segment stores them.
    fn padded(v: &[f32], d: usize) -> Vec<f32> {
        let width = d.div_ceil(NR) * NR;
        v.chunks_exact(d).flat_map(|row| row.iter().copied().chain(std::iter::repeat_n(0.0, width - d))).collect()
    }

    /// A decode step's batch: each sequence's one new token against its
    /// own keys (cut into pieces, longer than a chunk, windowed or not),
    /// written to its own output row and nowhere else.
    #[test]
    fn single_queries_match_the_definition_in_one_batch() {
        /// One batch: its heads, and each query's position and where its keys are cut.
        struct Batch {
            heads: usize,
            kv_heads: usize,
            d: usize,
            window: Option<usize>,
            positions: &'static [usize],
            cuts: &'static [usize],
        }
        let cases = [
            Batch { heads: 9, kv_heads: 3, d: 64, window: None, positions: &[0, 300, 129, 17], cuts: &[16, 32, 200] },
            Batch { heads: 4, kv_heads: 1, d: 16, window: Some(50), positions: &[0, 129, 257], cuts: &[100] },
            Batch { heads: 8, kv_heads: 2, d: 128, window: None, positions: &[256, 1], cuts: &[128] },
            Batch { heads: 16, kv_heads: 1, d: 8, window: Some(3), positions: &[40, 2], cuts: &[] },
            // Heads whose values are not whole vectors (AVX2's eight
            // lanes, SIMD128's four): the columns past them one by one.
            Batch { heads: 4, kv_heads: 2, d: 12, window: None, positions: &[70, 5, 2], cuts: &[3] },
            Batch { heads: 3, kv_heads: 3, d: 6, window: None, positions: &[9, 0], cuts: &[] },
        ];
        for Batch { heads, kv_heads, d, window, positions, cuts } in cases {
            let scale = 1.0 / (d as f32).sqrt();
            let inputs: Vec<_> = positions
                .iter()
                .enumerate()
                .map(|(i, &start)| {
                    let s = Shape { heads, kv_heads, tokens: 1, head_dim: d, start, window };
                    let total = start + 1;
                    let salt = 10 * i as u32;
                    let (q, k, v) = (data(heads * d, salt + 1), data(kv_heads * total * d, salt + 2), data(kv_heads * total * d, salt + 3));
                    let want = reference(&q, &k, &v, s, scale);
                    (s, q, k, padded(&v, d), want)
                })
                .collect();
            let pieces: Vec<Vec<KvPiece<'_>>> = inputs
                .iter()
                .map(|(s, _, k, vp, _)| {
                    let total = s.start + 1;
                    let mut bounds = vec![0];
                    bounds.extend(cuts.iter().copied().filter(|&c| c < total));
                    bounds.push(total);
                    bounds.windows(2).map(|w| KvPiece { keys: k, values: vp, head_rows: total, rows: w[0]..w[1] }).collect()
                })
                .collect();
            // Rows in reverse order, and one row no query writes.
            let n = inputs.len();
            let queries: Vec<SingleQuery<'_>> = inputs
                .iter()
                .zip(&pieces)
                .enumerate()
                .map(|(i, ((s, q, ..), pieces))| SingleQuery { q, pieces, shape: *s, out_row: n - 1 - i })
                .collect();
            let ld = heads * d;
            let mut out = vec![f32::NAN; (n + 1) * ld];
            single_queries(&queries, scale, &mut out);
            for (i, (s, .., want)) in inputs.iter().enumerate() {
                let ours = &out[(n - 1 - i) * ld..][..ld];
                let worst = ours.iter().zip(want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(worst < 2e-5, "{s:?}: worst |difference| {worst}");
            }
            assert!(out[n * ld..].iter().all(|x| x.is_nan()), "a row no query owns was written");
        }
    }

    #[test]
    fn matches_the_masked_softmax_definition_with_grouped_heads_pieces_and_windows() {
        let shape = |heads, kv_heads, tokens, start, head_dim, window| Shape { heads, kv_heads, tokens, head_dim, start, window };
        // Shapes, and where the held keys are cut into pieces.
        let cases: [(Shape, &[usize]); 7] = [
            (shape(9, 3, 17, 0, 64, None), &[]),
            (shape(4, 4, 5, 7, 12, None), &[3]),
            (shape(8, 2, 33, 3, 128, None), &[1, 2, 20]),
            (shape(2, 1, 1, 0, 8, None), &[]),
            (shape(4, 2, 70, 9, 16, Some(24)), &[9, 40]),
            (shape(2, 2, 40, 0, 8, Some(1)), &[]),
            (shape(6, 2, 45, 5, 32, Some(30)), &[2, 21]),
        ];
        for (s, cuts) in cases {
            let Shape { heads, kv_heads, tokens, head_dim: d, start, .. } = s;
            let total = start + tokens;
            let (q, k, v) = (data(tokens * heads * d, 1), data(kv_heads * total * d, 2), data(kv_heads * total * d, 3));
            let vp = padded(&v, d);
            // Views of one buffer, cut at `cuts`: as a cached prefix's segments and the new one.
            let mut bounds = vec![0];
            bounds.extend_from_slice(cuts);
            bounds.push(total);
            let pieces: Vec<KvPiece<'_>> =
                bounds.windows(2).map(|w| KvPiece { keys: &k, values: &vp, head_rows: total, rows: w[0]..w[1] }).collect();
            let scale = 1.0 / (d as f32).sqrt();
            let want = reference(&q, &k, &v, s, scale);
            // Every panel width this CPU runs (16 on AVX-512 where d allows).
            for &width in panel_widths(d) {
                let mut ours = vec![f32::NAN; tokens * heads * d];
                causal_at(width, &q, &pieces, s, scale, &mut ours);
                assert!(ours.iter().all(|x| x.is_finite()), "{s:?}, panels of {width}: every output written");
                let worst = ours.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(worst < 2e-5, "{s:?} cut at {cuts:?}, panels of {width}: worst |difference| {worst}");
            }
        }
    }
}
