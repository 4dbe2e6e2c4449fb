//! K/V state in the layout attention reads, held in immutable segments.
//!
//! A prefill writes the keys and values of its new tokens, for every layer,
//! into one new [`Segment`], and their final hidden states beside them. A
//! sequence's state is a list of [`SegmentView`]s in token order: the
//! prefix a cache already held, then the new segment. Attention reads every
//! view in place (keys and values are plain rows, so a view may start and
//! end at any token), so continuing from a held prefix never copies or
//! repacks the tokens it holds, and a radix tree can split a cached run of
//! tokens into two nodes by making two views of one segment.

use std::ops::Range;
use std::sync::Arc;

use crate::decision::{Pooling, ENDS_WINDOW};
use crate::kernels::NR;

/// The shape of one token's state in a backbone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Width of the final hidden state.
    pub hidden: usize,
    /// Intermediate depths whose hidden states a token keeps beside its
    /// final one (the backbone's feature taps; 0 for a generating
    /// sequence, whose states only the next token reads).
    pub taps: usize,
}

impl KvLayout {
    /// A value row's length: `head_dim` rounded up to whole kernel panels,
    /// so the weighted sum of values reads them as the kernel's `B` in place.
    pub fn value_width(&self) -> usize {
        self.head_dim.div_ceil(NR) * NR
    }

    /// Bytes one token's keys and values take across all layers, in f32:
    /// the field guide's `2 × L × H_kv × d_head × b` with `b = 4` (padding
    /// of value rows included when `head_dim` is not a multiple of 8).
    pub fn kv_bytes_per_token(&self) -> u64 {
        (self.layers * self.kv_heads * (self.head_dim + self.value_width()) * 4) as u64
    }

    /// Bytes one token holds in a segment: its keys and values, and its
    /// final and tapped hidden states (kept so that a reused prefix still
    /// counts in the pooled features).
    pub fn bytes_per_token(&self) -> u64 {
        self.kv_bytes_per_token() + ((1 + self.taps) * self.hidden * 4) as u64
    }

    /// The same layout keeping only the final hidden state.
    pub fn without_taps(self) -> KvLayout {
        KvLayout { taps: 0, ..self }
    }
}

/// The state of a run of consecutive tokens: written once by a prefill,
/// read-only afterwards.
#[derive(Debug, Clone)]
pub struct Segment {
    layout: KvLayout,
    tokens: usize,
    /// Per layer: keys after RoPE, `[kv_heads × tokens × head_dim]`.
    keys: Vec<Vec<f32>>,
    /// Per layer: values, `[kv_heads × tokens × value_width]`, zero-padded.
    values: Vec<Vec<f32>>,
    /// Final hidden states after the output norm, `[tokens × hidden]`.
    hidden: Vec<f32>,
    /// The tapped depths' hidden states (read through the output norm),
    /// `[taps × tokens × hidden]`.
    taps: Vec<f32>,
    /// How the prefill that wrote it spent its time: projections and
    /// attention, in ms (the stage shares a report shows).
    pub(crate) projections_ms: f64,
    pub(crate) attention_ms: f64,
}

impl Segment {
    /// A zeroed segment for `tokens` tokens, for a prefill to fill.
    pub(crate) fn zeroed(layout: KvLayout, tokens: usize) -> Segment {
        let per_head = tokens * layout.head_dim;
        Segment {
            layout,
            tokens,
            keys: (0..layout.layers).map(|_| vec![0.0; layout.kv_heads * per_head]).collect(),
            values: (0..layout.layers).map(|_| vec![0.0; layout.kv_heads * tokens * layout.value_width()]).collect(),
            hidden: vec![0.0; tokens * layout.hidden],
            taps: vec![0.0; layout.taps * tokens * layout.hidden],
            projections_ms: 0.0,
            attention_ms: 0.0,
        }
    }

    /// The prefill that wrote it: milliseconds in projections and in attention.
    pub fn prefill_profile(&self) -> (f64, f64) {
        (self.projections_ms, self.attention_ms)
    }

    pub fn tokens(&self) -> usize {
        self.tokens
    }

    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    /// Bytes this segment holds.
    pub fn bytes(&self) -> u64 {
        self.tokens as u64 * self.layout.bytes_per_token()
    }

    /// Layer `layer`'s keys and values, for the forward pass writing them.
    pub(crate) fn layer_mut(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        (&mut self.keys[layer], &mut self.values[layer])
    }

    /// Bytes of keys and values this segment allocates (its hidden
    /// states left out): what a K/V budget counts.
    pub fn kv_bytes(&self) -> u64 {
        self.tokens as u64 * self.layout.kv_bytes_per_token()
    }

    pub(crate) fn hidden_mut(&mut self) -> &mut [f32] {
        &mut self.hidden
    }

    /// The final hidden states of `rows`, `[rows × hidden]`.
    pub fn hidden(&self, rows: Range<usize>) -> &[f32] {
        &self.hidden[rows.start * self.layout.hidden..rows.end * self.layout.hidden]
    }

    /// The hidden states of `rows` at `depth` (0: the final ones; `k`: the
    /// backbone's `k`-th tap), `[rows × hidden]`.
    pub fn at_depth(&self, depth: usize, rows: Range<usize>) -> &[f32] {
        match depth {
            0 => self.hidden(rows),
            k => {
                let h = self.layout.hidden;
                &self.taps[((k - 1) * self.tokens + rows.start) * h..((k - 1) * self.tokens + rows.end) * h]
            }
        }
    }

    /// Row `row`'s hidden state at tap `tap` (0-based), to write.
    pub(crate) fn tap_mut(&mut self, tap: usize, row: usize) -> &mut [f32] {
        let h = self.layout.hidden;
        &mut self.taps[(tap * self.tokens + row) * h..][..h]
    }

    /// Layer `layer`'s keys and values as attention reads them.
    pub(crate) fn piece(&self, layer: usize, rows: Range<usize>) -> KvPiece<'_> {
        KvPiece { keys: &self.keys[layer], values: &self.values[layer], head_rows: self.tokens, rows }
    }
}

/// One layer's keys and values for a run of tokens, in place: head `g`'s
/// row `r` is at `(g × head_rows + r)` in rows of `head_dim` (keys) or
/// `value_width` (values), for `r` in `rows`.
#[derive(Debug, Clone)]
pub struct KvPiece<'a> {
    pub keys: &'a [f32],
    pub values: &'a [f32],
    pub head_rows: usize,
    pub rows: Range<usize>,
}

impl KvPiece<'_> {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// A run of tokens inside a shared segment.
#[derive(Debug, Clone)]
pub struct SegmentView {
    pub segment: Arc<Segment>,
    pub rows: Range<usize>,
}

impl SegmentView {
    /// The whole segment.
    pub fn whole(segment: Arc<Segment>) -> SegmentView {
        let rows = 0..segment.tokens();
        SegmentView { segment, rows }
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The first `len` tokens of this view.
    pub fn head(&self, len: usize) -> SegmentView {
        SegmentView { segment: self.segment.clone(), rows: self.rows.start..self.rows.start + len.min(self.len()) }
    }

    /// This view without its first `skip` tokens.
    pub fn tail(&self, skip: usize) -> SegmentView {
        SegmentView { segment: self.segment.clone(), rows: (self.rows.start + skip).min(self.rows.end)..self.rows.end }
    }
}

/// A sequence's state: views in token order, `tokens` in all.
#[derive(Debug, Clone, Default)]
pub struct KvState {
    views: Vec<SegmentView>,
    tokens: usize,
}

impl KvState {
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    pub fn views(&self) -> &[SegmentView] {
        &self.views
    }

    /// Appends a view (empty views are dropped).
    pub fn push(&mut self, view: SegmentView) {
        if !view.is_empty() {
            self.tokens += view.len();
            self.views.push(view);
        }
    }

    /// Every token's hidden state at `depth` ([`Segment::at_depth`]), in
    /// token order.
    fn rows_at(&self, depth: usize, hidden: usize) -> impl Iterator<Item = &[f32]> {
        self.views.iter().flat_map(move |view| view.segment.at_depth(depth, view.rows.clone()).chunks_exact(hidden))
    }

    /// The last token's final hidden state, L2-normalised (zeros for an
    /// empty sequence).
    pub fn last_embedding(&self, hidden: usize) -> Vec<f32> {
        self.pooled(0, Pooling::Last, hidden, 0)
    }

    /// The pooled embedding of the sequence after its first `skip` tokens:
    /// the mean of their final hidden states (summed in token order, in
    /// f64), L2-normalised.
    pub fn mean_embedding(&self, hidden: usize, skip: usize) -> Vec<f32> {
        self.pooled(0, Pooling::Mean, hidden, skip)
    }

    /// The hidden states at `depth` of the tokens after the first `skip`,
    /// pooled by `pooling` ([`Pooling`] says how; each mean is summed in
    /// token order in f64 and L2-normalised). `pooling.width(hidden)` values.
    pub fn pooled(&self, depth: usize, pooling: Pooling, hidden: usize, skip: usize) -> Vec<f32> {
        let text = self.tokens.saturating_sub(skip);
        match pooling {
            Pooling::Mean => unit_mean(self.rows_at(depth, hidden).skip(skip), hidden),
            Pooling::Last => match self.rows_at(depth, hidden).last() {
                Some(row) => unit_mean(std::iter::once(row), hidden),
                None => vec![0.0; hidden],
            },
            Pooling::Ends => {
                let window = ENDS_WINDOW.min(text);
                let mut out = unit_mean(self.rows_at(depth, hidden).skip(skip).take(window), hidden);
                out.extend(unit_mean(self.rows_at(depth, hidden).skip(skip + text - window), hidden));
                // Two unit vectors side by side: scaled to unit length as a whole.
                out.iter_mut().for_each(|v| *v *= std::f32::consts::FRAC_1_SQRT_2);
                out
            }
        }
    }
}

/// The mean of `rows` (summed in order, in f64), L2-normalised; zeros for
/// no rows.
fn unit_mean<'a>(rows: impl Iterator<Item = &'a [f32]>, hidden: usize) -> Vec<f32> {
    let mut sum = vec![0f64; hidden];
    let mut count = 0usize;
    for row in rows {
        sum.iter_mut().zip(row).for_each(|(s, &x)| *s += x as f64);
        count += 1;
    }
    let count = count.max(1) as f64;
    let norm = sum.iter().map(|s| (s / count) * (s / count)).sum::<f64>().sqrt().max(1e-12);
    sum.iter().map(|s| (s / count / norm) as f32).collect()
}

/// A sequence's own K/V, written as it grows: fixed-size blocks (pages),
/// each a [`Segment`] of `block_tokens` rows filled in order, as vLLM's
/// paged attention holds them. A block is allocated whole and only when the
/// previous one is full, so what a sequence allocates is its length rounded
/// up to a block, not a reservation for the longest answer it may give.
/// Attention reads each block in place as one more piece after the shared
/// views a [`KvState`] holds.
///
/// A prefill that keeps its new tokens as one shared segment (a decide, the
/// prefix cache) uses one block of exactly its length.
#[derive(Debug, Clone)]
pub struct PagedKv {
    layout: KvLayout,
    block_tokens: usize,
    blocks: Vec<Segment>,
    len: usize,
}

impl PagedKv {
    /// No blocks yet; each will hold `block_tokens` tokens.
    pub fn new(layout: KvLayout, block_tokens: usize) -> PagedKv {
        PagedKv { layout, block_tokens: block_tokens.max(1), blocks: Vec::new(), len: 0 }
    }

    /// One block of exactly `tokens` rows: a prefill's new segment.
    pub fn single(layout: KvLayout, tokens: usize) -> PagedKv {
        let mut paged = PagedKv::new(layout, tokens);
        paged.grow_to(tokens);
        paged
    }

    /// Tokens written.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn layout(&self) -> KvLayout {
        self.layout
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Blocks allocated.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Tokens the allocated blocks can hold.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * self.block_tokens
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_tokens)
    }

    /// Allocates blocks until `tokens` tokens fit.
    pub fn grow_to(&mut self, tokens: usize) {
        while self.capacity() < tokens {
            self.blocks.push(Segment::zeroed(self.layout, self.block_tokens));
        }
    }

    /// Bytes of keys and values allocated (the engine's figure), against
    /// `len × kv_bytes_per_token` written (the payload).
    pub fn allocated_kv_bytes(&self) -> u64 {
        self.blocks.iter().map(Segment::kv_bytes).sum()
    }

    /// Frees every block (a preemption by recompute).
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.len = 0;
    }

    /// Block and row of token `index` (0-based within this sequence's own tokens).
    pub(crate) fn slot(&self, index: usize) -> (usize, usize) {
        (index / self.block_tokens, index % self.block_tokens)
    }

    pub(crate) fn block_mut(&mut self, block: usize) -> &mut Segment {
        &mut self.blocks[block]
    }

    /// Marks `tokens` more tokens as written (their rows were filled).
    pub(crate) fn advance(&mut self, tokens: usize) {
        assert!(self.len + tokens <= self.capacity(), "{} tokens written into {} allocated", self.len + tokens, self.capacity());
        self.len += tokens;
    }

    /// Layer `layer`'s pieces for the first `tokens` tokens, in order.
    pub(crate) fn pieces(&self, layer: usize, tokens: usize) -> impl Iterator<Item = KvPiece<'_>> {
        self.blocks.iter().enumerate().filter_map(move |(b, block)| {
            let first = b * self.block_tokens;
            (first < tokens).then(|| block.piece(layer, 0..(tokens - first).min(self.block_tokens)))
        })
    }

    /// Layer `layer`'s key and value rows of K/V head `head` at token
    /// `index` (the value without its padding), as a hand-off reads them.
    pub(crate) fn rows(&self, layer: usize, head: usize, index: usize) -> (&[f32], &[f32]) {
        let (block, row) = self.slot(index);
        let (d, width) = (self.layout.head_dim, self.layout.value_width());
        let segment = &self.blocks[block];
        let at = head * self.block_tokens + row;
        (&segment.keys[layer][at * d..][..d], &segment.values[layer][at * width..][..d])
    }

    /// The same rows, to write (a hand-off arriving).
    pub(crate) fn rows_mut(&mut self, layer: usize, head: usize, index: usize) -> (&mut [f32], &mut [f32]) {
        let (block, row) = self.slot(index);
        let (d, width) = (self.layout.head_dim, self.layout.value_width());
        let block_tokens = self.block_tokens;
        let segment = &mut self.blocks[block];
        let at = head * block_tokens + row;
        (&mut segment.keys[layer][at * d..][..d], &mut segment.values[layer][at * width..][..d])
    }

    /// The final hidden state of token `index`.
    pub fn hidden_row(&self, index: usize) -> &[f32] {
        let (block, row) = self.slot(index);
        self.blocks[block].hidden(row..row + 1)
    }

    /// The single block of a [`PagedKv::single`], as a shared segment.
    pub(crate) fn into_segment(mut self) -> Segment {
        assert_eq!(self.blocks.len(), 1, "a prefill's new tokens are one block");
        self.blocks.pop().expect("one block")
    }
}
