//! Offline import of a Hugging Face `config.json`.
//!
//! The caller hands over the file's bytes (pasted or dropped; nothing is
//! fetched). The result is a set of form fields plus a note for every
//! assumption the import made, so the user can see and overrule each one.

use serde_json::{Map, Value};

use crate::dtype::Dtype;
use crate::error::KvError;
use crate::runs::{format_runs, Run};

/// Form fields read from a config, and what was assumed on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub patch: Vec<(&'static str, String)>,
    pub notes: Vec<String>,
    /// `model_type` or `architectures[0]`, for the label.
    pub model: String,
}

fn err(message: impl Into<String>) -> KvError {
    KvError::Config(message.into())
}

fn uint(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, KvError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| err(format!("`{key}` is {n}, not a non-negative whole number"))),
        Some(other) => Err(err(format!("`{key}` is {other}, not a number"))),
    }
}

/// The most layers an imported config may declare. A layer pattern
/// (`sliding_window_pattern`, Gemma's defaults) is written out layer by
/// layer, so the count sizes an allocation: the largest real models have a
/// few hundred layers, and a crafted config with four billion would exhaust
/// the page's memory (found by the `kv_config_import` fuzz target). Typed
/// into the form, larger counts still work: the form keeps runs, not layers.
pub const MAX_IMPORTED_LAYERS: u64 = 100_000;

/// Reads `config.json` bytes into form fields.
pub fn import(bytes: &[u8]) -> Result<Imported, KvError> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| err(format!("not valid JSON ({e})")))?;
    let Value::Object(root) = root else {
        return Err(err("the top level is not a JSON object"));
    };
    let mut notes = Vec::new();
    // Multimodal configs (Gemma 3, Llama 4, Qwen-VL) keep the language model in
    // `text_config`; its keys win over the top level's.
    let mut cfg = root.clone();
    if let Some(Value::Object(text)) = root.get("text_config") {
        for (k, v) in text {
            cfg.insert(k.clone(), v.clone());
        }
        notes.push("read the language model from `text_config`".into());
    }
    let model = cfg
        .get("model_type")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| root.get("architectures").and_then(|a| a.get(0)).and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| "unknown model".into());

    let layers = uint(&cfg, "num_hidden_layers")?
        .or(uint(&cfg, "n_layer")?)
        .or(uint(&cfg, "num_layers")?)
        .ok_or_else(|| err("`num_hidden_layers` is missing"))?;
    if layers == 0 || layers > MAX_IMPORTED_LAYERS {
        return Err(err(format!("`num_hidden_layers` = {layers} is out of range (1 to {MAX_IMPORTED_LAYERS})")));
    }
    let heads = uint(&cfg, "num_attention_heads")?.or(uint(&cfg, "n_head")?).ok_or_else(|| err("`num_attention_heads` is missing"))?;
    if heads == 0 {
        return Err(err("`num_attention_heads` is 0"));
    }

    // KV heads: a number, a per-layer list, or absent (multi-head attention).
    let mut layer_kv_heads = String::new();
    let kv_heads = match cfg.get("num_key_value_heads").or_else(|| cfg.get("num_kv_heads")) {
        None | Some(Value::Null) => {
            notes.push(format!("`num_key_value_heads` is absent: assumed multi-head attention, H_kv = num_attention_heads = {heads}"));
            heads
        }
        Some(Value::Array(list)) => {
            let counts = list
                .iter()
                .map(|v| {
                    v.as_u64()
                        .filter(|n| *n > 0 && *n <= u32::MAX as u64)
                        .ok_or_else(|| err(format!("`num_key_value_heads` has {v}, not a positive whole number")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if counts.len() as u64 != layers {
                return Err(err(format!("`num_key_value_heads` lists {} layers but num_hidden_layers = {layers}", counts.len())));
            }
            let runs: Vec<Run<u64>> = counts.iter().map(|&c| Run { value: c, count: 1 }).collect();
            layer_kv_heads = format_runs(&runs, |v| v.to_string());
            notes.push("per-layer KV-head counts taken from the `num_key_value_heads` list".into());
            *counts.iter().max().unwrap_or(&heads)
        }
        Some(_) => uint(&cfg, "num_key_value_heads")?.or(uint(&cfg, "num_kv_heads")?).unwrap_or(heads),
    };

    let head_dim = match uint(&cfg, "head_dim")? {
        Some(d) => d,
        None => {
            let hidden =
                uint(&cfg, "hidden_size")?.or(uint(&cfg, "n_embd")?).ok_or_else(|| err("neither `head_dim` nor `hidden_size` is given"))?;
            if hidden % heads != 0 {
                return Err(err(format!("`head_dim` is absent and hidden_size {hidden} is not divisible by num_attention_heads {heads}")));
            }
            notes.push(format!(
                "`head_dim` is absent: d_head = hidden_size / num_attention_heads = {hidden} / {heads} = {}",
                hidden / heads
            ));
            hidden / heads
        }
    };

    let mut patch: Vec<(&'static str, String)> = vec![
        ("preset", String::new()),
        ("layers", layers.to_string()),
        ("kv_heads", kv_heads.to_string()),
        ("head_dim", head_dim.to_string()),
        ("layer_kv_heads", layer_kv_heads),
    ];

    // MLA (DeepSeek-V2/V3, Kimi-K2): a latent per token instead of K and V per head.
    let rank = uint(&cfg, "kv_lora_rank")?;
    let rope = uint(&cfg, "qk_rope_head_dim")?;
    let (mla_rank, mla_rope) = match (rank, rope) {
        (Some(r), Some(p)) => {
            notes.push(format!("MLA: every layer keeps kv_lora_rank {r} + qk_rope_head_dim {p} = {} elements per token", r + p));
            if let Some(v) = uint(&cfg, "v_head_dim")? {
                patch[3] = ("head_dim", v.to_string());
                notes.push(format!("the conventional comparison line uses v_head_dim {v} as d_head"));
            }
            (r.to_string(), p.to_string())
        }
        (Some(_), None) => return Err(err("`kv_lora_rank` is given without `qk_rope_head_dim`")),
        _ => (String::new(), String::new()),
    };
    patch.push(("kv_lora_rank", mla_rank.clone()));
    patch.push(("qk_rope_head_dim", mla_rope));

    // Layer types: an explicit list, a pattern, or a model-family default.
    let window = uint(&cfg, "sliding_window")?;
    let use_sliding = cfg.get("use_sliding_window").and_then(Value::as_bool);
    let mut types: Vec<&'static str> = Vec::new();
    if let Some(Value::Array(list)) = cfg.get("layer_types") {
        if list.len() as u64 != layers {
            return Err(err(format!("`layer_types` lists {} layers but num_hidden_layers = {layers}", list.len())));
        }
        for v in list {
            types.push(match v.as_str() {
                Some("full_attention") => "full",
                Some("sliding_attention") => "sliding",
                Some(other) => {
                    return Err(err(format!(
                        "`layer_types` has \"{other}\", which this calculator cannot size (supported: full_attention, sliding_attention)"
                    )))
                }
                None => return Err(err(format!("`layer_types` has {v}, not a string"))),
            });
        }
        notes.push("layer kinds taken from `layer_types`".into());
    } else if let Some(w) = window {
        if use_sliding == Some(false) {
            notes.push(format!("`sliding_window` {w} is ignored because `use_sliding_window` is false: every layer is full attention"));
        } else if let Some(p) = uint(&cfg, "sliding_window_pattern")? {
            let p = p.max(1);
            types = (0..layers).map(|i| if (i + 1) % p == 0 { "full" } else { "sliding" }).collect();
            notes.push(format!("`sliding_window_pattern` {p}: every {p}th layer is global, the others slide over {w} tokens"));
        } else if model.starts_with("gemma2") {
            types = (0..layers).map(|i| if i % 2 == 0 { "sliding" } else { "full" }).collect();
            notes.push(format!("gemma2 has no layer list: assumed its alternation, local (window {w}) then global"));
        } else if model.starts_with("gemma3") {
            types = (0..layers).map(|i| if (i + 1) % 6 == 0 { "full" } else { "sliding" }).collect();
            notes.push(format!(
                "gemma3 without `sliding_window_pattern`: assumed its default of 6 (five local layers of window {w}, then one global)"
            ));
        } else {
            types = vec!["sliding"; layers as usize];
            notes.push(format!("`sliding_window` {w} with no layer list or pattern: assumed every layer slides (as in Mistral-7B-v0.1)"));
        }
    }
    if !mla_rank.is_empty() && !types.is_empty() {
        return Err(err("MLA together with sliding-window layers is not supported"));
    }
    let has_sliding = types.contains(&"sliding");
    let type_runs: Vec<Run<&str>> = types.iter().map(|t| Run { value: *t, count: 1 }).collect();
    patch.push(("layer_types", if has_sliding { format_runs(&type_runs, |t| t.to_string()) } else { String::new() }));
    patch.push(("window", if has_sliding { window.map(|w| w.to_string()).unwrap_or_default() } else { String::new() }));
    if has_sliding && window.is_none() {
        return Err(err("`layer_types` has sliding layers but `sliding_window` is missing"));
    }

    // Weights: dtype and an estimate of the parameter count.
    let dtype_text = cfg.get("torch_dtype").or_else(|| cfg.get("dtype")).and_then(Value::as_str);
    match dtype_text.and_then(Dtype::parse) {
        Some(d) => {
            patch.push(("weight_dtype", d.name().to_string()));
            notes.push(format!(
                "weight dtype {} from `torch_dtype`; the KV dtype is yours to set (engines default it to the model dtype)",
                d.name()
            ));
        }
        None => notes.push(format!("`torch_dtype` is {}: weight dtype left as it was", dtype_text.unwrap_or("absent"))),
    }
    match estimate_params(&cfg, layers, heads, kv_heads, head_dim, !mla_rank.is_empty()) {
        Some(p) => {
            patch.push(("params", p.to_string()));
            notes.push(format!(
                "weight parameters ≈ {p} estimated from the shapes (embeddings, attention, MLP/experts; norms and biases ignored)"
            ));
        }
        None => {
            patch.push(("params", String::new()));
            notes.push("weight parameters not estimated for this architecture: type them in for the budget".into());
        }
    }
    Ok(Imported { patch, notes, model })
}

fn estimate_params(cfg: &Map<String, Value>, layers: u64, heads: u64, kv_heads: u64, head_dim: u64, mla: bool) -> Option<u64> {
    if mla || cfg.get("num_key_value_heads").is_some_and(Value::is_array) {
        return None;
    }
    let get = |k: &str| cfg.get(k).and_then(Value::as_u64);
    let hidden = get("hidden_size")?;
    let vocab = get("vocab_size")?;
    let inter = get("intermediate_size")?;
    let attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2;
    let experts = get("num_local_experts").or(get("num_experts")).or(get("n_routed_experts")).unwrap_or(0);
    let mlp = if experts > 0 {
        let moe_inter = get("moe_intermediate_size").unwrap_or(inter);
        let shared = get("n_shared_experts").unwrap_or(0) + get("shared_expert_intermediate_size").map(|_| 1).unwrap_or(0);
        experts * 3 * hidden * moe_inter + shared * 3 * hidden * moe_inter + hidden * experts
    } else {
        3 * hidden * inter
    };
    let tied = cfg.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    let embed = vocab * hidden * if tied { 1 } else { 2 };
    layers.checked_mul(attn.checked_add(mlp)?)?.checked_add(embed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form::Form;

    fn apply(json: &str) -> (Form, Imported) {
        let imported = import(json.as_bytes()).unwrap();
        let mut form = Form::default();
        form.apply(&imported.patch);
        (form, imported)
    }

    /// Found by the `kv_config_import` fuzz target: 77 million layers with a
    /// sliding-window pattern ran out of memory expanding the pattern.
    #[test]
    fn a_layer_count_past_the_limit_is_refused_before_the_pattern_is_expanded() {
        let config = br#"{"model_type":"gemma3_text","num_hidden_layers":77308642,"num_attention_heads":32,"num_key_value_heads":16,"head_dim":128,"hidden_size":5376,"sliding_window":1024,"sliding_window_pattern":2}"#;
        let e = import(config).unwrap_err().to_string();
        assert!(e.contains("`num_hidden_layers` = 77308642 is out of range (1 to 100000)"), "{e}");
    }

    #[test]
    fn llama_like_with_defaults_noted() {
        let (form, imp) = apply(
            r#"{"model_type":"llama","num_hidden_layers":16,"num_attention_heads":32,"hidden_size":2048,"vocab_size":128256,"intermediate_size":8192,"tie_word_embeddings":true,"torch_dtype":"bfloat16"}"#,
        );
        assert_eq!(form.get("kv_heads"), "32");
        assert_eq!(form.get("head_dim"), "64");
        assert!(imp.notes.iter().any(|n| n.contains("multi-head attention")));
        assert!(imp.notes.iter().any(|n| n.contains("hidden_size / num_attention_heads")));
        assert!(form.validate().is_ok());
    }

    #[test]
    fn gemma3_pattern_and_mla_and_layer_list() {
        let (form, _) = apply(
            r#"{"architectures":["Gemma3ForConditionalGeneration"],"text_config":{"model_type":"gemma3_text","num_hidden_layers":12,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":256,"sliding_window":512,"sliding_window_pattern":6}}"#,
        );
        assert_eq!(form.get("layer_types"), "slidingx5,full,slidingx5,full");
        assert_eq!(form.get("window"), "512");
        let (form, _) = apply(
            r#"{"model_type":"deepseek_v3","num_hidden_layers":61,"num_attention_heads":128,"num_key_value_heads":128,"kv_lora_rank":512,"qk_rope_head_dim":64,"v_head_dim":128,"hidden_size":7168}"#,
        );
        assert_eq!(form.get("kv_lora_rank"), "512");
        assert_eq!(crate::compute(&form.validate().unwrap()).unwrap().per_token_bytes, 61 * 576 * 2);
        let (form, _) = apply(
            r#"{"num_hidden_layers":4,"num_attention_heads":8,"num_key_value_heads":[2,2,4,4],"head_dim":64,"sliding_window":128,"layer_types":["sliding_attention","full_attention","sliding_attention","full_attention"]}"#,
        );
        assert_eq!(form.get("layer_kv_heads"), "2x2,4x2");
        assert!(form.validate().is_ok());
    }

    #[test]
    fn bad_configs_name_the_problem() {
        assert!(import(b"{").unwrap_err().to_string().contains("not valid JSON"));
        assert!(import(b"[]").unwrap_err().to_string().contains("not a JSON object"));
        assert!(import(br#"{"num_attention_heads":8}"#).unwrap_err().to_string().contains("num_hidden_layers"));
        assert!(import(br#"{"num_hidden_layers":"x","num_attention_heads":8}"#).unwrap_err().to_string().contains("not a number"));
        let e = import(br#"{"num_hidden_layers":2,"num_attention_heads":8,"head_dim":8,"layer_types":["full_attention","linear_attention"],"sliding_window":4}"#).unwrap_err();
        assert!(e.to_string().contains("linear_attention"));
    }
}
