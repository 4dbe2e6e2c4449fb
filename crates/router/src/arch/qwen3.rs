//! Qwen3: llama's block plus a per-head RMSNorm of queries and keys, and
//! NeoX (half-split) RoPE.

use super::{Activation, Arch, EmbeddingScale, LayerPattern, RopeStyle};

pub const QWEN3: Arch = Arch {
    name: "qwen3",
    rope: RopeStyle::HalfSplit,
    qk_norm: true,
    qkv_bias: false,
    post_norms: false,
    activation: Activation::Silu,
    embedding_scale: EmbeddingScale::One,
    tied_embeddings: true,
    layers: LayerPattern::AllGlobal,
};
