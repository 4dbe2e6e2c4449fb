//! P/D separation's transfer boundary: a sequence whose prompt one engine
//! instance prefilled leaves it as bytes and goes on decoding on another.
//!
//! What crosses is what decoding the rest needs: per layer, the keys and
//! values of the tokens that layer's attention can still see (all of them
//! under full attention; the last `window` under a sliding window, the
//! calculator's `retained(T)`), as little-endian f32, head by head, without
//! the padding the value rows carry for the kernels. So the bytes moved are
//! the `kv` crate's payload for the tokens held, not the pages the sender
//! had allocated (note 03's "payload bytes are not allocated bytes", on
//! the wire). The sequence's small state (its tokens, sampler, text so far)
//! travels beside the bytes as a value, as a request's metadata does beside
//! the K/V a real transfer engine (NIXL, Mooncake) moves.

use crate::error::{Result, RouterError};
use crate::generate::{Sequence, BLOCK_TOKENS};
use crate::model::Backbone;
use crate::segment::PagedKv;

/// A sequence's K/V on its way to another instance.
#[derive(Debug, Clone, PartialEq)]
pub struct KvParcel {
    /// Tokens the sender held: the prompt, when the hand-off follows the first token.
    pub held: usize,
    /// Layer by layer: for each K/V head, the kept tokens' keys, then their values.
    pub bytes: Vec<u8>,
}

/// The first token position a layer keeps of `held`: positions before it
/// are outside its window for every later query.
fn first_kept(window: Option<usize>, held: usize) -> usize {
    window.map_or(0, |w| held.saturating_sub(w))
}

/// The parcel's size for `held` tokens on `backbone`.
pub fn parcel_bytes(backbone: &Backbone, held: usize) -> usize {
    let h = &backbone.hparams;
    backbone.layer_windows().into_iter().map(|w| (held - first_kept(w, held)) * h.kv_heads * h.head_dim * 2 * 4).sum()
}

/// Takes `sequence`'s K/V out as bytes and returns the sequence without
/// it (its pages freed), to be [`receive`]d by another instance of the same
/// backbone. A sequence reading a shared prefix is refused: the prefix
/// belongs to the sender's cache, not to the sequence.
pub fn hand_off(backbone: &Backbone, mut sequence: Sequence) -> Result<(Sequence, KvParcel)> {
    if sequence.shared_tokens() > 0 {
        return Err(RouterError::Request(format!(
            "a sequence continuing {} tokens of a shared prefix cannot be handed off: the prefix stays in the sender's cache",
            sequence.shared_tokens()
        )));
    }
    let h = &backbone.hparams;
    let kv = sequence.own_kv();
    let held = kv.len();
    let mut bytes = Vec::with_capacity(parcel_bytes(backbone, held));
    let mut put = |row: &[f32]| row.iter().for_each(|x| bytes.extend_from_slice(&x.to_le_bytes()));
    for (layer, window) in backbone.layer_windows().into_iter().enumerate() {
        for head in 0..h.kv_heads {
            let kept = first_kept(window, held)..held;
            kept.clone().for_each(|t| put(kv.rows(layer, head, t).0));
            kept.for_each(|t| put(kv.rows(layer, head, t).1));
        }
    }
    sequence.set_own_kv(PagedKv::new(backbone.kv_layout().without_taps(), BLOCK_TOKENS));
    Ok((sequence, KvParcel { held, bytes }))
}

/// Puts a parcel's K/V into fresh pages of this instance under
/// `sequence` (as [`hand_off`] left it), ready to decode its next token.
/// Rows a sliding-window layer did not send stay zero: no query reads them.
pub fn receive(backbone: &Backbone, mut sequence: Sequence, parcel: &KvParcel) -> Result<Sequence> {
    let held = parcel.held;
    let expected = parcel_bytes(backbone, held);
    if parcel.bytes.len() != expected {
        return Err(RouterError::Request(format!(
            "a parcel of {} bytes for {held} tokens, where this backbone's K/V takes {expected}",
            parcel.bytes.len()
        )));
    }
    if sequence.shared_tokens() > 0
        || !sequence.own_kv().is_empty()
        || held == 0
        || held >= sequence.prompt_len() + sequence.generated().len()
    {
        return Err(RouterError::Request(format!(
            "a parcel of {held} tokens for a sequence of {} tokens that holds {}",
            sequence.prompt_len() + sequence.generated().len(),
            sequence.held()
        )));
    }
    let h = &backbone.hparams;
    let mut kv = PagedKv::new(backbone.kv_layout().without_taps(), BLOCK_TOKENS);
    kv.grow_to(held);
    let mut floats = parcel.bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let mut take = |row: &mut [f32]| row.iter_mut().for_each(|x| *x = floats.next().expect("the length was checked"));
    for (layer, window) in backbone.layer_windows().into_iter().enumerate() {
        for head in 0..h.kv_heads {
            let kept = first_kept(window, held)..held;
            kept.clone().for_each(|t| take(kv.rows_mut(layer, head, t).0));
            kept.for_each(|t| take(kv.rows_mut(layer, head, t).1));
        }
    }
    kv.advance(held);
    sequence.set_own_kv(kv);
    Ok(sequence)
}
