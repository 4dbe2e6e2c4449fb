//! Gemma 3 (the 270M checkpoint is the one tested against llama.cpp):
//! QK-norm, post-norms around both sub-blocks, GeGLU, embeddings scaled by
//! √hidden, NeoX (half-split) RoPE, and five sliding-window layers (RoPE
//! base 10,000, window `attention.sliding_window`) before every global one
//! (`rope.freq_base`).
//!
//! What the description does not need to say, because the GGUF already
//! did: llama.cpp's converter stores Gemma's norm weights with the `+ 1`
//! already added, so they are plain RMSNorm weights; the attention scale is
//! `1/√head_dim` because the models up to 12B have
//! `query_pre_attn_scalar = head_dim` (llama.cpp makes the same choice,
//! except for the 27B, whose `head_dim` differs from it); the head dim
//! (256) is `attention.key_length`, not `hidden / heads` (160).

use super::{Activation, Arch, EmbeddingScale, LayerPattern, RopeStyle};

pub const GEMMA3: Arch = Arch {
    name: "gemma3",
    rope: RopeStyle::HalfSplit,
    qk_norm: true,
    qkv_bias: false,
    post_norms: true,
    activation: Activation::GeluTanh,
    embedding_scale: EmbeddingScale::SqrtHidden,
    tied_embeddings: true,
    layers: LayerPattern::SlidingExceptEvery { period: 6, local_rope_base: 10_000.0 },
};
