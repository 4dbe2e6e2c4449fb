//! Model presets: real configurations with the `config.json` they come from.
//!
//! Layer counts, head counts, head dimensions, windows and MLA sizes are copied
//! from each model's published `config.json` (the `source` link). Parameter
//! counts only feed the weight-memory estimate of the budget inversion; they are
//! the published totals (safetensors metadata or model card).

use crate::dtype::Dtype;

/// One preset model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    pub id: &'static str,
    pub name: &'static str,
    /// The published `config.json` the values come from.
    pub source: &'static str,
    pub layers: u32,
    pub attention_heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Run-length `layer_types`, empty when every layer is full attention.
    pub layer_types: &'static str,
    pub window: Option<u64>,
    pub mla: Option<(u32, u32)>,
    pub params: u64,
    pub weight_dtype: Dtype,
    pub note: &'static str,
}

/// The presets, in menu order.
pub const PRESETS: &[Preset] = &[
    Preset {
        id: "llama-3.1-8b",
        name: "Llama-3.1-8B",
        source: "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
        layers: 32,
        attention_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        layer_types: "",
        window: None,
        mla: None,
        params: 8_030_261_248,
        weight_dtype: Dtype::Bf16,
        note: "",
    },
    Preset {
        id: "llama-3.1-70b",
        name: "Llama-3.1-70B",
        source: "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json",
        layers: 80,
        attention_heads: 64,
        kv_heads: 8,
        head_dim: 128,
        layer_types: "",
        window: None,
        mla: None,
        params: 70_553_706_496,
        weight_dtype: Dtype::Bf16,
        note: "",
    },
    Preset {
        id: "llama-3.2-1b",
        name: "Llama-3.2-1B",
        source: "https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json",
        layers: 16,
        attention_heads: 32,
        kv_heads: 8,
        head_dim: 64,
        layer_types: "",
        window: None,
        mla: None,
        params: 1_235_814_400,
        weight_dtype: Dtype::Bf16,
        note: "",
    },
    Preset {
        id: "qwen3-0.6b",
        name: "Qwen3-0.6B",
        source: "https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json",
        layers: 28,
        attention_heads: 16,
        kv_heads: 8,
        head_dim: 128,
        layer_types: "",
        window: None,
        mla: None,
        params: 596_049_920,
        weight_dtype: Dtype::Bf16,
        note: "head_dim 128 is set explicitly (hidden 1024 / 16 heads would give 64); sliding window disabled (use_sliding_window: false).",
    },
    Preset {
        id: "qwen3-8b",
        name: "Qwen3-8B",
        source: "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
        layers: 36,
        attention_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        layer_types: "",
        window: None,
        mla: None,
        params: 8_190_735_360,
        weight_dtype: Dtype::Bf16,
        note: "sliding window disabled (use_sliding_window: false).",
    },
    Preset {
        id: "qwen2.5-7b",
        name: "Qwen2.5-7B",
        source: "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json",
        layers: 28,
        attention_heads: 28,
        kv_heads: 4,
        head_dim: 128,
        layer_types: "",
        window: None,
        mla: None,
        params: 7_615_616_512,
        weight_dtype: Dtype::Bf16,
        note: "head_dim = hidden 3584 / 28 heads; sliding window disabled (use_sliding_window: false).",
    },
    Preset {
        id: "mistral-7b-v0.1",
        name: "Mistral-7B-v0.1",
        source: "https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
        layers: 32,
        attention_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        layer_types: "slidingx32",
        window: Some(4096),
        mla: None,
        params: 7_241_732_096,
        weight_dtype: Dtype::Bf16,
        note: "sliding_window 4096 on every layer (v0.3 removed it).",
    },
    Preset {
        id: "gemma-2-9b",
        name: "Gemma-2-9B",
        source: "https://huggingface.co/google/gemma-2-9b/blob/main/config.json",
        layers: 42,
        attention_heads: 16,
        kv_heads: 8,
        head_dim: 256,
        layer_types: "sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full",
        window: Some(4096),
        mla: None,
        params: 9_241_705_984,
        weight_dtype: Dtype::Bf16,
        note: "local (sliding 4096) and global layers alternate, starting with local.",
    },
    Preset {
        id: "gemma-3-27b",
        name: "Gemma-3-27B (text)",
        source: "https://huggingface.co/google/gemma-3-27b-pt/blob/main/config.json",
        layers: 62,
        attention_heads: 32,
        kv_heads: 16,
        head_dim: 128,
        layer_types: "slidingx5,full,slidingx5,full,slidingx5,full,slidingx5,full,slidingx5,full,slidingx5,full,slidingx5,full,slidingx5,full,slidingx5,full,slidingx5,full,slidingx2",
        window: Some(1024),
        mla: None,
        params: 27_009_002_240,
        weight_dtype: Dtype::Bf16,
        note: "text_config: sliding_window 1024, sliding_window_pattern 6 (five local layers, then one global).",
    },
    Preset {
        id: "gpt-oss-20b",
        name: "gpt-oss-20b",
        source: "https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json",
        layers: 24,
        attention_heads: 64,
        kv_heads: 8,
        head_dim: 64,
        layer_types: "sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full",
        window: Some(128),
        mla: None,
        params: 20_914_757_184,
        weight_dtype: Dtype::Int4,
        note: "layer_types alternate sliding_attention (window 128) and full_attention; MoE weights are MXFP4 (≈4.25 bits), int4 is the nearest weight dtype here.",
    },
    Preset {
        id: "gpt-oss-120b",
        name: "gpt-oss-120b",
        source: "https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json",
        layers: 36,
        attention_heads: 64,
        kv_heads: 8,
        head_dim: 64,
        layer_types: "sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full,sliding,full",
        window: Some(128),
        mla: None,
        params: 116_829_156_672,
        weight_dtype: Dtype::Int4,
        note: "layer_types alternate sliding_attention (window 128) and full_attention; MoE weights are MXFP4 (≈4.25 bits).",
    },
    Preset {
        id: "deepseek-v3",
        name: "DeepSeek-V3",
        source: "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        layers: 61,
        attention_heads: 128,
        kv_heads: 128,
        head_dim: 128,
        layer_types: "",
        window: None,
        mla: Some((512, 64)),
        params: 671_026_419_200,
        weight_dtype: Dtype::Fp8,
        note: "every layer is MLA: kv_lora_rank 512 + qk_rope_head_dim 64 = 576 elements per token per layer. kv_heads 128 × head_dim 128 (v_head_dim) only feed the conventional comparison line.",
    },
    Preset {
        id: "smollm2-135m",
        name: "SmolLM2-135M",
        source: "https://huggingface.co/HuggingFaceTB/SmolLM2-135M/blob/main/config.json",
        layers: 30,
        attention_heads: 9,
        kv_heads: 3,
        head_dim: 64,
        layer_types: "",
        window: None,
        mla: None,
        params: 134_515_008,
        weight_dtype: Dtype::Bf16,
        note: "head_dim = hidden 576 / 9 heads; the router's bundled backbone.",
    },
];

/// Finds a preset by id.
pub fn find(id: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.id == id)
}

impl Preset {
    /// The form fields this preset sets. The KV dtype is left alone: it is the
    /// user's serving choice, not the model's.
    pub fn patch(&self) -> Vec<(&'static str, String)> {
        let opt = |v: Option<String>| v.unwrap_or_default();
        vec![
            ("preset", self.id.to_string()),
            ("layers", self.layers.to_string()),
            ("kv_heads", self.kv_heads.to_string()),
            ("head_dim", self.head_dim.to_string()),
            (
                "layer_types",
                crate::runs::format_runs(
                    &crate::runs::parse_runs(self.layer_types, |s| Ok::<_, String>(s.to_string())).unwrap_or_default(),
                    |s| s.clone(),
                ),
            ),
            ("window", opt(self.window.map(|w| w.to_string()))),
            ("layer_kv_heads", String::new()),
            ("kv_lora_rank", opt(self.mla.map(|m| m.0.to_string()))),
            ("qk_rope_head_dim", opt(self.mla.map(|m| m.1.to_string()))),
            ("params", self.params.to_string()),
            ("weight_dtype", self.weight_dtype.name().to_string()),
        ]
    }

    /// Whether the form still holds exactly this preset's model fields.
    pub fn matches(&self, form: &crate::form::Form) -> bool {
        self.patch().iter().filter(|(name, _)| *name != "preset").all(|(name, value)| form.get(name) == value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form::Form;
    use crate::{compute, units};

    fn report(id: &str, seqs: &str) -> crate::Report {
        let mut form = Form::default();
        form.apply(&find(id).unwrap().patch());
        form.set("seqs", seqs);
        compute(&form.validate().unwrap_or_else(|e| panic!("{id}: {e:?}"))).unwrap()
    }

    #[test]
    fn every_preset_validates() {
        assert!(PRESETS.len() >= 10);
        for p in PRESETS {
            let r = report(p.id, "4096x2");
            assert!(r.logical_bytes > 0, "{}", p.id);
            assert!(p.source.starts_with("https://huggingface.co/"), "{}", p.id);
        }
    }

    #[test]
    fn known_per_token_figures() {
        // Llama-3.1-8B: 2 × 32 × 8 × 128 × 2 = 128 KiB per token.
        assert_eq!(report("llama-3.1-8b", "1").per_token_bytes, 131_072);
        // DeepSeek-V3 MLA: 61 × 576 × 2 = 70,272 bytes per token.
        assert_eq!(report("deepseek-v3", "1").per_token_bytes, 70_272);
        // Gemma-3-27B at 32k: 10 global layers keep 32,768 tokens, 52 local keep 1,024.
        let r = report("gemma-3-27b", "32768");
        let per = 2 * 16 * 128 * 2u128;
        assert_eq!(r.logical_bytes, per * (10 * 32_768 + 52 * 1_024));
        assert_eq!(units::binary(r.logical_bytes), "2.91 GiB");
        // gpt-oss-20b: 12 sliding layers keep 128 tokens.
        let r = report("gpt-oss-20b", "8192");
        assert_eq!(r.logical_bytes, 2 * 8 * 64 * 2 * (12 * 8192 + 12 * 128));
    }
}
