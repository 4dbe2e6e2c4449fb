//! Llama (SmolLM2 is one): pre-norms, SwiGLU, RoPE on interleaved pairs
//! (as llama.cpp's converter stores Q and K), every layer global.

use super::{Activation, Arch, EmbeddingScale, LayerPattern, RopeStyle};

pub const LLAMA: Arch = Arch {
    name: "llama",
    rope: RopeStyle::Interleaved,
    qk_norm: false,
    qkv_bias: false,
    post_norms: false,
    activation: Activation::Silu,
    embedding_scale: EmbeddingScale::One,
    tied_embeddings: true,
    layers: LayerPattern::AllGlobal,
};
