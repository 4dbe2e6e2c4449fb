//! A model from its GGUF header: the form's fields from the metadata and
//! tensor descriptions alone, never the weights.
//!
//! The caller reads the header with the `gguf` crate (the router's loader
//! reads checkpoints with the same reader and budgets) from the first bytes
//! of a file of any size, and hands it here. As with a `config.json`, every
//! assumption is a note the user can see and overrule: llama.cpp keeps some
//! layer patterns in code rather than in the file (Gemma's sliding layers),
//! and those are the notes.

use gguf::{Header, Value};

use crate::config_import::{Imported, MAX_IMPORTED_LAYERS};
use crate::error::KvError;
use crate::runs::{format_runs, Run};
use crate::units::group_digits;

/// The first slice a reader takes: most headers fit in it (SmolLM2's
/// vocabulary and merges are about 2 MB; Gemma 3's 262,144 tokens more).
pub const FIRST_READ: u64 = 1 << 20;

/// The most a reader reads before refusing: far above real headers, far
/// below the weights of any model worth sizing.
pub const HEADER_LIMIT: u64 = 64 << 20;

fn err(message: impl Into<String>) -> KvError {
    KvError::Gguf(message.into())
}

/// One ggml type's share of the weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightShare {
    pub type_name: &'static str,
    pub tensors: u64,
    pub elements: u64,
    pub bytes: u64,
}

/// The weights by type, largest share first.
pub fn weight_mix(header: &Header) -> Vec<WeightShare> {
    let mut shares: Vec<WeightShare> = Vec::new();
    for t in &header.tensors {
        match shares.iter_mut().find(|s| s.type_name == t.ggml_type.name) {
            Some(s) => {
                s.tensors += 1;
                s.elements = s.elements.saturating_add(t.elements);
                s.bytes = s.bytes.saturating_add(t.bytes);
            }
            None => shares.push(WeightShare { type_name: t.ggml_type.name, tensors: 1, elements: t.elements, bytes: t.bytes }),
        }
    }
    shares.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.type_name.cmp(b.type_name)));
    shares
}

/// The metadata of one architecture: `{arch}.{suffix}` keys.
struct Keys<'a> {
    header: &'a Header,
    arch: &'a str,
    layers: u64,
}

impl Keys<'_> {
    fn value(&self, suffix: &str) -> Option<(&Value, String)> {
        let key = format!("{}.{suffix}", self.arch);
        self.header.get(&key).map(|v| (v, key))
    }

    fn uint(&self, suffix: &str) -> Result<Option<u64>, KvError> {
        match self.value(suffix) {
            None => Ok(None),
            Some((v, key)) => v.as_u64().map(Some).ok_or_else(|| err(format!("`{key}` is not a whole number"))),
        }
    }

    /// A value llama.cpp allows per layer: one number, or one per layer.
    fn per_layer(&self, suffix: &str) -> Result<Option<Vec<u64>>, KvError> {
        let Some((v, key)) = self.value(suffix) else { return Ok(None) };
        if let Some(n) = v.as_u64() {
            return Ok(Some(vec![n; self.layers as usize]));
        }
        let Some(items) = v.as_array() else {
            return Err(err(format!("`{key}` is neither a whole number nor a short per-layer list")));
        };
        if items.len() as u64 != self.layers {
            return Err(err(format!("`{key}` lists {} layers but block_count = {}", items.len(), self.layers)));
        }
        items
            .iter()
            .map(|i| i.as_u64().ok_or_else(|| err(format!("`{key}` has {i:?}, not a whole number"))))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// llama.cpp's sliding-window pattern for architectures whose files do not
/// carry one (`set_swa_pattern(n)`: layer i slides unless i mod n = n − 1).
fn code_pattern(arch: &str) -> Option<u64> {
    match arch {
        "gemma2" | "gpt-oss" => Some(2),
        "gemma3" => Some(6),
        "cohere2" => Some(4),
        _ => None,
    }
}

/// Mamba-2 layers (heads × head dim × state); the other Mamba layers are Mamba-1.
fn is_mamba2(arch: &str) -> bool {
    matches!(arch, "mamba2" | "granitehybrid" | "nemotron_h" | "falcon-h1" | "plamo2")
}

/// Reads a header into form fields, with a note for each assumption.
pub fn import(header: &Header) -> Result<Imported, KvError> {
    let arch = header
        .get("general.architecture")
        .and_then(Value::as_str)
        .ok_or_else(|| err("`general.architecture` is missing or not a string"))?;
    let mut notes = Vec::new();
    let probe = Keys { header, arch, layers: 0 };
    let layers = probe.uint("block_count")?.ok_or_else(|| err(format!("`{arch}.block_count` is missing")))?;
    if layers == 0 || layers > MAX_IMPORTED_LAYERS {
        return Err(err(format!("`{arch}.block_count` = {layers} is out of range (1 to {MAX_IMPORTED_LAYERS})")));
    }
    let k = Keys { header, arch, layers };
    let heads = k.per_layer("attention.head_count")?.ok_or_else(|| err(format!("`{arch}.attention.head_count` is missing")))?;
    let max_heads = heads.iter().copied().max().unwrap_or(0);
    let kv = match k.per_layer("attention.head_count_kv")? {
        Some(kv) => kv,
        None => {
            notes.push(format!("`{arch}.attention.head_count_kv` is absent: multi-head attention, H_kv = head_count"));
            heads.clone()
        }
    };
    // Recurrent layers: a state of constant size, sized from the ssm keys.
    let conv_kernel = k.uint("ssm.conv_kernel")?;
    let inner = k.uint("ssm.inner_size")?;
    let state_size = k.uint("ssm.state_size")?;
    let groups = k.uint("ssm.group_count")?;
    let dt_rank = k.uint("ssm.time_step_rank")?;
    let ffn = k.per_layer("feed_forward_length").ok().flatten();
    let mut kinds: Vec<&'static str> = Vec::with_capacity(layers as usize);
    let mut state = None;
    if arch == "qwen3next" {
        let interval = k.uint("full_attention_interval")?.unwrap_or(4).max(1);
        kinds = (0..layers).map(|i| if (i + 1) % interval == 0 { "full" } else { "linear" }).collect();
        notes.push(format!(
            "`{arch}.full_attention_interval` {interval}: every {interval}th layer is full attention, the others linear (gated delta rule)"
        ));
        let (Some(kernel), Some(inner), Some(key_dim), Some(key_heads), Some(value_heads)) =
            (conv_kernel, inner, state_size, groups, dt_rank)
        else {
            return Err(err(
                "a qwen3next file needs ssm.conv_kernel, ssm.inner_size, ssm.state_size, ssm.group_count and ssm.time_step_rank",
            ));
        };
        let value_dim = inner / value_heads.max(1);
        // Saturating: a crafted file's sizes must not overflow here; the
        // form then names the field whose number is out of range.
        let channels = (2 * key_heads as u128).saturating_mul(key_dim as u128).saturating_add(inner as u128);
        notes.push(format!(
            "linear-attention state: conv (ssm.conv_kernel {kernel} − 1) × (2 × {key_heads} key heads × {key_dim} + ssm.inner_size {inner} = {channels}); delta-rule state {value_heads} value heads × {value_dim} × {key_dim}"
        ));
        state = Some((format!("{}x{channels}", kernel.saturating_sub(1)), format!("{value_heads}x{value_dim}x{key_dim}")));
    } else if let (Some(kernel), Some(inner), Some(state_size)) = (conv_kernel, inner, state_size) {
        // Mamba layers are the ones without KV heads (or every layer of a pure Mamba model).
        for i in 0..layers as usize {
            kinds.push(match (kv[i], ffn.as_ref().map(|f| f[i])) {
                (0, Some(f)) if arch == "nemotron_h" && f > 0 => "none",
                (0, _) => "mamba",
                _ => "full",
            });
        }
        if is_mamba2(arch) {
            let heads = dt_rank.unwrap_or(1).max(1);
            let groups = groups.unwrap_or(1);
            let channels = (2 * groups as u128).saturating_mul(state_size as u128).saturating_add(inner as u128);
            notes.push(format!(
                "Mamba-2 state: conv (ssm.conv_kernel {kernel} − 1) × (ssm.inner_size {inner} + 2 × {groups} groups × {state_size} = {channels}); SSM {heads} heads × {} × {state_size}",
                inner / heads
            ));
            state = Some((format!("{}x{channels}", kernel.saturating_sub(1)), format!("{heads}x{}x{state_size}", inner / heads)));
        } else {
            notes.push(format!(
                "Mamba-1 state: conv (ssm.conv_kernel {kernel} − 1) × ssm.inner_size {inner}; SSM {inner} × ssm.state_size {state_size}"
            ));
            state = Some((format!("{}x{inner}", kernel.saturating_sub(1)), format!("{inner}x{state_size}")));
        }
        notes.push("layers without KV heads (`attention.head_count_kv` 0) are taken as the recurrent ones".into());
    } else if kv.contains(&0) {
        // No recurrent keys: a layer without KV heads has no attention at
        // all (Nemotron's pruned layers) and keeps nothing.
        kinds = kv.iter().map(|&h| if h == 0 { "none" } else { "full" }).collect();
        notes.push("layers without KV heads (`attention.head_count_kv` 0) keep no cache".into());
    }
    let attention_kv: Vec<u64> = kv.iter().copied().filter(|&h| h > 0).collect();
    let kv_heads = attention_kv.iter().copied().max().unwrap_or(max_heads).max(1);
    let embedding = k.uint("embedding_length")?;
    let key_length = k.uint("attention.key_length")?;
    let value_length = k.uint("attention.value_length")?;
    let head_dim = match key_length {
        Some(d) => d,
        None => {
            let e =
                embedding.ok_or_else(|| err(format!("neither `{arch}.attention.key_length` nor `{arch}.embedding_length` is given")))?;
            if max_heads == 0 || e % max_heads != 0 {
                return Err(err(format!(
                    "`{arch}.attention.key_length` is absent and embedding_length {e} is not divisible by head_count {max_heads}"
                )));
            }
            notes.push(format!(
                "`{arch}.attention.key_length` is absent: d_head = embedding_length / head_count = {e} / {max_heads} = {}",
                e / max_heads
            ));
            e / max_heads
        }
    };
    if let Some(v) = value_length.filter(|&v| v != head_dim) {
        notes.push(format!("keys are {head_dim} wide and values {v}: d_head is the keys' width; the K/V bytes per token are off by H_kv × ({head_dim} − {v}) elements a layer"));
    }
    // MLA (deepseek2): a latent and a shared RoPE key instead of K and V per head.
    let (mut rank, mut rope) = (String::new(), String::new());
    if let Some(r) = k.uint("attention.kv_lora_rank")? {
        let p = k
            .uint("rope.dimension_count")?
            .ok_or_else(|| err(format!("`{arch}.attention.kv_lora_rank` is given without `{arch}.rope.dimension_count`")))?;
        notes.push(format!("MLA: every layer keeps kv_lora_rank {r} + rope.dimension_count {p} = {} elements per token", r + p));
        rank = r.to_string();
        rope = p.to_string();
    }
    // Sliding windows: a per-layer list, a period, or llama.cpp's code.
    let window = k.uint("attention.sliding_window")?.filter(|&w| w > 0);
    if let Some(w) = window {
        if kinds.is_empty() {
            match k.value("attention.sliding_window_pattern") {
                Some((v, key)) => match (v.as_u64(), v.as_array()) {
                    (Some(n), _) => {
                        let n = n.max(1);
                        kinds = (0..layers).map(|i| if i % n < n - 1 { "sliding" } else { "full" }).collect();
                        notes.push(format!("`{key}` {n}: every {n}th layer is global, the others slide over {w} tokens"));
                    }
                    (None, Some(items)) if items.len() as u64 == layers && items.iter().all(|i| i.as_bool().is_some()) => {
                        kinds = items.iter().map(|i| if i.as_bool() == Some(true) { "sliding" } else { "full" }).collect();
                        notes.push(format!("sliding layers from `{key}`"));
                    }
                    _ => return Err(err(format!("`{key}` is neither a period nor one true/false per layer"))),
                },
                None => match code_pattern(arch) {
                    Some(n) => {
                        kinds = (0..layers).map(|i| if i % n < n - 1 { "sliding" } else { "full" }).collect();
                        notes.push(format!("{arch} files carry no layer pattern: llama.cpp's code makes every {n}th layer global, the others slide over {w} tokens"));
                    }
                    None => {
                        kinds = vec!["sliding"; layers as usize];
                        notes.push(format!("`{arch}.attention.sliding_window` {w} with no pattern: assumed every layer slides"));
                    }
                },
            }
        }
    }
    if !rank.is_empty() && kinds.iter().any(|k| *k != "full") {
        return Err(err("MLA together with sliding-window or recurrent layers is not supported"));
    }
    let mixed = kinds.iter().any(|k| *k != "full");
    let has_sliding = kinds.contains(&"sliding");
    let kind_runs: Vec<Run<&str>> = kinds.iter().map(|t| Run { value: *t, count: 1 }).collect();
    // Per-layer KV heads only where attention layers differ; a recurrent
    // layer's 0 is written as the attention layers' count (it holds no K/V).
    let layer_kv_heads = if attention_kv.windows(2).all(|w| w[0] == w[1]) {
        String::new()
    } else {
        let runs: Vec<Run<u64>> = kv.iter().map(|&h| Run { value: if h == 0 { kv_heads } else { h }, count: 1 }).collect();
        notes.push("per-layer KV-head counts from the `attention.head_count_kv` list".into());
        format_runs(&runs, |v| v.to_string())
    };
    if let Some(ctx) = k.uint("context_length")? {
        notes.push(format!("context length {ctx} tokens (`{arch}.context_length`): no sequence holds more"));
    }
    // Weights: every tensor's elements and bytes, exactly.
    let mix = weight_mix(header);
    let params: u64 = mix.iter().map(|s| s.elements).fold(0, u64::saturating_add);
    let bytes: u64 = mix.iter().map(|s| s.bytes).fold(0, u64::saturating_add);
    let bits = if params == 0 { 16 } else { (bytes as u128 * 8).div_ceil(params as u128) };
    // The form's dtype nearest the file's bits per weight (the exact bytes
    // below are what the budget uses).
    let dtype = match bits {
        0..=6 => "int4",
        7..=12 => "int8",
        13..=24 => {
            if mix.first().is_some_and(|s| s.type_name == "F16") {
                "fp16"
            } else {
                "bf16"
            }
        }
        _ => "fp32",
    };
    let parts: Vec<String> =
        mix.iter().map(|s| format!("{} {} tensors {} bytes", s.type_name, s.tensors, group_digits(s.bytes as u128))).collect();
    notes.push(format!(
        "weights: {} parameters in {} tensors, {} bytes, {}.{:02} bits each (by type: {}); the budget uses these exact bytes",
        group_digits(params as u128),
        header.tensors.len(),
        group_digits(bytes as u128),
        (bytes as u128 * 8) / params.max(1) as u128,
        (bytes as u128 * 800 / params.max(1) as u128) % 100,
        parts.join("; ")
    ));
    let model = header.get("general.name").and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(arch).to_string();
    let (conv_state, ssm_state) = state.unwrap_or_default();
    let patch = vec![
        ("preset", String::new()),
        ("layers", layers.to_string()),
        ("kv_heads", kv_heads.to_string()),
        ("head_dim", head_dim.to_string()),
        ("layer_types", if mixed { format_runs(&kind_runs, |t| t.to_string()) } else { String::new() }),
        ("window", if has_sliding { window.map(|w| w.to_string()).unwrap_or_default() } else { String::new() }),
        ("layer_kv_heads", layer_kv_heads),
        ("kv_lora_rank", rank),
        ("qk_rope_head_dim", rope),
        ("conv_state", conv_state),
        ("ssm_state", ssm_state),
        ("params", params.to_string()),
        ("weight_dtype", dtype.to_string()),
        ("weight_bytes", bytes.to_string()),
    ];
    Ok(Imported { patch, notes, model })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form::Form;
    use gguf::Value::{Array, String as S, U32};

    fn header(arch: &str, entries: Vec<(&str, Value)>) -> Header {
        let mut metadata = vec![("general.architecture".to_string(), S(arch.into()))];
        metadata.extend(entries.into_iter().map(|(k, v)| (format!("{arch}.{k}"), v)));
        Header { version: 3, metadata, tensors: Vec::new(), alignment: 32, data_start: 0, file_len: 0 }
    }

    fn form(h: &Header) -> Form {
        let mut f = Form::default();
        f.apply(&import(h).unwrap().patch);
        f
    }

    /// Qwen3-Next's GGUF keys, as llama.cpp prints them for the 80B-A3B
    /// file (ssm_d_conv 4, ssm_d_inner 4096, ssm_d_state 128, ssm_dt_rank
    /// 32, ssm_n_group 16): the preset's fields, from the header alone.
    #[test]
    fn a_qwen3next_header_gives_the_preset() {
        let h = header(
            "qwen3next",
            vec![
                ("block_count", U32(48)),
                ("attention.head_count", U32(16)),
                ("attention.head_count_kv", U32(2)),
                ("attention.key_length", U32(256)),
                ("attention.value_length", U32(256)),
                ("ssm.conv_kernel", U32(4)),
                ("ssm.inner_size", U32(4096)),
                ("ssm.state_size", U32(128)),
                ("ssm.group_count", U32(16)),
                ("ssm.time_step_rank", U32(32)),
                ("full_attention_interval", U32(4)),
            ],
        );
        let f = form(&h);
        let preset = crate::presets::find("qwen3-next-80b-a3b").unwrap();
        for (name, value) in preset.patch() {
            if matches!(name, "layers" | "kv_heads" | "head_dim" | "layer_types" | "conv_state" | "ssm_state") {
                assert_eq!(f.get(name), value, "{name}");
            }
        }
    }

    /// Jamba's file marks its Mamba layers by 0 KV heads.
    #[test]
    fn zero_kv_heads_mark_the_recurrent_layers() {
        let kv: Vec<Value> = (0..8).map(|i| U32(if i % 8 == 4 { 8 } else { 0 })).collect();
        let h = header(
            "jamba",
            vec![
                ("block_count", U32(8)),
                ("attention.head_count", U32(32)),
                ("attention.head_count_kv", Array { element_type: 4, len: 8, items: Some(kv) }),
                ("embedding_length", U32(4096)),
                ("ssm.conv_kernel", U32(4)),
                ("ssm.inner_size", U32(8192)),
                ("ssm.state_size", U32(16)),
                ("ssm.time_step_rank", U32(256)),
            ],
        );
        let f = form(&h);
        assert_eq!(f.get("layer_types"), "mambax4,full,mambax3");
        assert_eq!((f.get("conv_state"), f.get("ssm_state")), ("3x8192", "8192x16"));
        assert_eq!((f.get("kv_heads"), f.get("head_dim"), f.get("layer_kv_heads")), ("8", "128", ""));
        assert!(f.validate().is_ok());
    }

    #[test]
    fn a_per_layer_list_of_the_wrong_length_is_named() {
        let h = header(
            "llama",
            vec![
                ("block_count", U32(3)),
                ("attention.head_count", U32(8)),
                ("attention.head_count_kv", Array { element_type: 4, len: 2, items: Some(vec![U32(2), U32(2)]) }),
            ],
        );
        assert_eq!(import(&h).unwrap_err().to_string(), "GGUF: `llama.attention.head_count_kv` lists 2 layers but block_count = 3");
    }
}
