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

use crate::kernels::NR;

/// The shape of one token's state in a backbone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Width of the final hidden state.
    pub hidden: usize,
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
    /// final hidden state (kept so that a reused prefix still counts in the
    /// pooled embedding).
    pub fn bytes_per_token(&self) -> u64 {
        self.kv_bytes_per_token() + (self.hidden * 4) as u64
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

    /// Layer `layer`'s keys and values, for the prefill writing them.
    pub(crate) fn layer_mut(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        (&mut self.keys[layer], &mut self.values[layer])
    }

    pub(crate) fn hidden_mut(&mut self) -> &mut [f32] {
        &mut self.hidden
    }

    /// The final hidden states of `rows`, `[rows × hidden]`.
    pub fn hidden(&self, rows: Range<usize>) -> &[f32] {
        &self.hidden[rows.start * self.layout.hidden..rows.end * self.layout.hidden]
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

    /// The last token's final hidden state, L2-normalised (zeros for an
    /// empty sequence).
    pub fn last_embedding(&self, hidden: usize) -> Vec<f32> {
        let Some(view) = self.views.last() else { return vec![0.0; hidden] };
        let last = view.rows.end - 1;
        let row = view.segment.hidden(last..last + 1);
        let norm = row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt().max(1e-12);
        row.iter().map(|&x| (x as f64 / norm) as f32).collect()
    }

    /// The pooled embedding of the sequence after its first `skip` tokens:
    /// the mean of their final hidden states (summed in token order, in
    /// f64), L2-normalised.
    pub fn mean_embedding(&self, hidden: usize, skip: usize) -> Vec<f32> {
        let mut sum = vec![0f64; hidden];
        let mut seen = 0;
        for view in &self.views {
            for row in view.segment.hidden(view.rows.clone()).chunks_exact(hidden) {
                if seen >= skip {
                    sum.iter_mut().zip(row).for_each(|(s, &x)| *s += x as f64);
                }
                seen += 1;
            }
        }
        let count = self.tokens.saturating_sub(skip).max(1) as f64;
        let norm = sum.iter().map(|s| (s / count) * (s / count)).sum::<f64>().sqrt().max(1e-12);
        sum.iter().map(|s| (s / count / norm) as f32).collect()
    }
}
