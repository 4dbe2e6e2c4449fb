//! Qwen2 (and Qwen2.5): llama's block with biases on the query, key and
//! value projections, and NeoX (half-split) RoPE. Added as one description
//! to show what a new architecture costs; tested on a synthetic checkpoint.

use super::{Activation, Arch, EmbeddingScale, LayerPattern, RopeStyle};

pub const QWEN2: Arch = Arch {
    name: "qwen2",
    rope: RopeStyle::HalfSplit,
    qk_norm: false,
    qkv_bias: true,
    post_norms: false,
    activation: Activation::Silu,
    embedding_scale: EmbeddingScale::One,
    tied_embeddings: true,
    layers: LayerPattern::AllGlobal,
};
