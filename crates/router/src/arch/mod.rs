//! Architectures as data. One forward pass (`model::Backbone`) reads an
//! [`Arch`]: which tensors a layer has, where its norms sit, its activation,
//! its embedding scale, its RoPE layout and each layer's kind (global or
//! sliding-window attention, and that kind's RoPE base). Adding an
//! architecture is one file here with one `Arch` value, listed in
//! [`ARCHITECTURES`], plus a fixture that checks it against llama.cpp; the
//! forward pass is not edited.
//!
//! Tensor names are llama.cpp's (`blk.N.attn_q.weight`, …), which GGUF
//! files of every architecture share; a description says which optional
//! ones a layer has.

mod gemma3;
mod llama;
mod qwen2;
mod qwen3;

pub use gemma3::GEMMA3;
pub use llama::LLAMA;
pub use qwen2::QWEN2;
pub use qwen3::QWEN3;

/// Every architecture the backbone runs, by GGUF `general.architecture`.
pub const ARCHITECTURES: &[&Arch] = &[&LLAMA, &QWEN3, &QWEN2, &GEMMA3];

/// Looks an architecture up by its GGUF name.
pub fn find(name: &str) -> Option<&'static Arch> {
    ARCHITECTURES.iter().copied().find(|a| a.name == name)
}

/// The names of every supported architecture, for error messages.
pub fn supported() -> String {
    ARCHITECTURES.iter().map(|a| a.name).collect::<Vec<_>>().join(", ")
}

/// A decoder architecture, as the forward pass reads it.
#[derive(Debug, PartialEq)]
pub struct Arch {
    /// GGUF `general.architecture`, also the prefix of its metadata keys.
    pub name: &'static str,
    /// Which pairs of a head's dimensions RoPE rotates.
    pub rope: RopeStyle,
    /// Per-head RMSNorm of queries and keys before RoPE
    /// (`attn_q_norm`, `attn_k_norm`, `[head_dim]`).
    pub qk_norm: bool,
    /// Biases on the query, key and value projections (`attn_q.bias`, …).
    pub qkv_bias: bool,
    /// RMSNorm of the attention and feed-forward outputs before they are
    /// added to the residual (`post_attention_norm`, `post_ffw_norm`), as
    /// well as the usual pre-norms.
    pub post_norms: bool,
    /// The gate's activation in the gated feed-forward.
    pub activation: Activation,
    /// What the token embeddings are multiplied by.
    pub embedding_scale: EmbeddingScale,
    /// The LM head shares the embedding table. A router never loads the
    /// head, so this is recorded for the description's completeness only.
    pub tied_embeddings: bool,
    /// Which layers attend globally and which through a sliding window.
    pub layers: LayerPattern,
}

/// RoPE's pairing of a head's dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i + 1)`: llama.cpp's converter permutes llama's Q and K
    /// rows so that this layout is the original's rotation.
    Interleaved,
    /// Pairs `(i, i + head_dim / 2)` (GPT-NeoX layout).
    HalfSplit,
}

/// The gated feed-forward's activation: `down(act(gate(x)) ⊙ up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU.
    Silu,
    /// GeGLU with the tanh approximation of GELU.
    GeluTanh,
}

/// The factor on the token embeddings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingScale {
    One,
    /// `√hidden` (Gemma).
    SqrtHidden,
}

/// Which layers are global and which are sliding-window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LayerPattern {
    /// Every layer attends to every earlier token, with `rope.freq_base`.
    AllGlobal,
    /// Every `period`-th layer (1-based) is global, with `rope.freq_base`;
    /// the others attend to the last `attention.sliding_window` tokens with
    /// `local_rope_base`.
    SlidingExceptEvery { period: usize, local_rope_base: f32 },
}

/// One layer's attention, resolved from the pattern and the metadata.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerKind {
    /// Keys a query may see, itself included; `None` is unlimited.
    pub window: Option<usize>,
    pub rope_base: f32,
}

impl Arch {
    /// Layer `index`'s kind, given the checkpoint's global RoPE base and
    /// sliding window.
    pub fn layer_kind(&self, index: usize, rope_base: f32, sliding_window: Option<usize>) -> LayerKind {
        match self.layers {
            LayerPattern::AllGlobal => LayerKind { window: None, rope_base },
            LayerPattern::SlidingExceptEvery { period, local_rope_base } => {
                if (index + 1).is_multiple_of(period.max(1)) {
                    LayerKind { window: None, rope_base }
                } else {
                    LayerKind { window: sliding_window, rope_base: local_rope_base }
                }
            }
        }
    }
}

impl serde::Serialize for Arch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for arch in ARCHITECTURES {
            assert_eq!(find(arch.name), Some(*arch));
            assert_eq!(ARCHITECTURES.iter().filter(|a| a.name == arch.name).count(), 1);
        }
        assert_eq!(find("gpt2"), None);
    }

    #[test]
    fn a_sliding_pattern_keeps_every_nth_layer_global() {
        let arch = Arch { layers: LayerPattern::SlidingExceptEvery { period: 6, local_rope_base: 10_000.0 }, ..LLAMA };
        let kinds: Vec<LayerKind> = (0..12).map(|i| arch.layer_kind(i, 1e6, Some(512))).collect();
        let global: Vec<usize> = (0..12).filter(|&i| kinds[i].window.is_none()).collect();
        assert_eq!(global, [5, 11]);
        assert_eq!(kinds[0], LayerKind { window: Some(512), rope_base: 10_000.0 });
        assert_eq!(kinds[5].rope_base, 1e6);
    }
}
