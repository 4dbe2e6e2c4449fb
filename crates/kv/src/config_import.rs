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
                // Granite 4.0-H spells full attention `attention`.
                Some("full_attention" | "attention") => "full",
                Some("sliding_attention") => "sliding",
                Some("linear_attention") => "linear",
                Some("mamba") => "mamba",
                Some(other) => {
                    return Err(err(format!(
                        "`layer_types` has \"{other}\", which this calculator cannot size (supported: full_attention, attention, sliding_attention, linear_attention, mamba)"
                    )))
                }
                None => return Err(err(format!("`layer_types` has {v}, not a string"))),
            });
        }
        notes.push("layer kinds taken from `layer_types`".into());
    } else if let Some(pattern) = cfg.get("hybrid_override_pattern").and_then(Value::as_str) {
        // Nemotron-H: one character a layer.
        if pattern.chars().count() as u64 != layers {
            return Err(err(format!("`hybrid_override_pattern` has {} layers but num_hidden_layers = {layers}", pattern.chars().count())));
        }
        for c in pattern.chars() {
            types.push(match c {
                'M' => "mamba",
                '*' => "full",
                '-' | 'E' => "none",
                other => {
                    return Err(err(format!("`hybrid_override_pattern` has '{other}' (supported: M Mamba, * attention, - MLP, E MoE)")))
                }
            });
        }
        notes.push("layer kinds from `hybrid_override_pattern`: M Mamba-2, * attention, - and E MLP or MoE (no state)".into());
    } else if let (Some(period), Some(offset)) = (uint(&cfg, "attn_layer_period")?, uint(&cfg, "attn_layer_offset")?) {
        // Jamba: attention once every `period` layers, the rest Mamba.
        if period == 0 || offset >= period {
            return Err(err(format!("`attn_layer_offset` {offset} must be below `attn_layer_period` {period}")));
        }
        types = (0..layers).map(|i| if i % period == offset { "full" } else { "mamba" }).collect();
        notes.push(format!("`attn_layer_period` {period}, `attn_layer_offset` {offset}: layer i attends when i mod {period} = {offset}, the others are Mamba"));
    } else if model == "qwen3_next" || cfg.contains_key("full_attention_interval") {
        let interval = uint(&cfg, "full_attention_interval")?.unwrap_or(4).max(1);
        types = (0..layers).map(|i| if (i + 1) % interval == 0 { "full" } else { "linear" }).collect();
        notes.push(format!(
            "`full_attention_interval` {interval}: every {interval}th layer is full attention, the others linear (gated delta rule)"
        ));
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
        return Err(err("MLA together with sliding-window or recurrent layers is not supported"));
    }
    let has_sliding = types.contains(&"sliding");
    let recurrent = types.iter().find(|t| matches!(**t, "linear" | "mamba")).copied();
    let type_runs: Vec<Run<&str>> = types.iter().map(|t| Run { value: *t, count: 1 }).collect();
    let mixed = types.iter().any(|t| *t != "full");
    patch.push(("layer_types", if mixed { format_runs(&type_runs, |t| t.to_string()) } else { String::new() }));
    patch.push(("window", if has_sliding { window.map(|w| w.to_string()).unwrap_or_default() } else { String::new() }));
    if has_sliding && window.is_none() {
        return Err(err("`layer_types` has sliding layers but `sliding_window` is missing"));
    }
    let (conv_state, ssm_state) = match recurrent {
        Some(kind) => recurrent_state(&cfg, kind, &model, &mut notes)?,
        None => (String::new(), String::new()),
    };
    patch.push(("conv_state", conv_state));
    patch.push(("ssm_state", ssm_state));
    if recurrent.is_some() {
        match cfg.get("mamba_ssm_dtype").and_then(Value::as_str) {
            Some(text) => match Dtype::parse(text) {
                Some(d) => {
                    patch.push(("ssm_dtype", d.name().to_string()));
                    notes.push(format!("SSM state in {} from `mamba_ssm_dtype` (vLLM keeps it so)", d.name()));
                }
                None => notes.push(format!("`mamba_ssm_dtype` is {text}: SSM state dtype left as it was")),
            },
            None => notes.push("the recurrent state's dtype is the model's (vLLM's `auto`): bf16 unless you set state_dtype".into()),
        }
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
    patch.push(("weight_bytes", String::new()));
    let estimate = if recurrent.is_some() { None } else { estimate_params(&cfg, layers, heads, kv_heads, head_dim, !mla_rank.is_empty()) };
    match estimate {
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

/// A recurrent layer's state in the form's spelling, from the family's keys,
/// with the arithmetic as a note (the shapes vLLM's
/// `MambaStateShapeCalculator` allocates).
fn recurrent_state(cfg: &Map<String, Value>, kind: &str, model: &str, notes: &mut Vec<String>) -> Result<(String, String), KvError> {
    let need = |key: &str| -> Result<u64, KvError> {
        uint(cfg, key)?.ok_or_else(|| err(format!("`{key}` is missing: it sizes the {kind} layers' state")))
    };
    // Each factor is checked to fit the form's u32 first, so that the
    // products below (at most 2^66) cannot overflow u128; then each product
    // is checked the same way.
    let fits = |what: &str, v: u128| -> Result<u64, KvError> {
        if v == 0 || v > u32::MAX as u128 {
            Err(err(format!("{what} = {v} is out of range (1 to {})", u32::MAX)))
        } else {
            Ok(v as u64)
        }
    };
    let w = |v: u64| v as u128;
    let kernel = |key: &str| -> Result<u64, KvError> {
        let k = uint(cfg, key)?.unwrap_or(4);
        if k == 0 || k - 1 > u32::MAX as u64 {
            return Err(err(format!("`{key}` = {k} is out of range (1 to {})", u32::MAX as u64 + 1)));
        }
        Ok(k - 1)
    };
    if kind == "linear" {
        // Gated delta rule (Qwen3-Next, Qwen3.5).
        let rows = kernel("linear_conv_kernel_dim")?;
        let factor = |key: &str| -> Result<u64, KvError> { fits(key, w(need(key)?)) };
        let (nk, dk) = (factor("linear_num_key_heads")?, factor("linear_key_head_dim")?);
        let (nv, dv) = (factor("linear_num_value_heads")?, factor("linear_value_head_dim")?);
        let channels = fits("conv channels", 2 * w(nk) * w(dk) + w(nv) * w(dv))?;
        notes.push(format!(
            "linear-attention state: conv (linear_conv_kernel_dim − 1 = {rows}) × (2 × {nk} key heads × {dk} + {nv} value heads × {dv} = {channels}); delta-rule state {nv} value heads × {dv} × {dk}"
        ));
        return Ok((format!("{rows}x{channels}"), format!("{nv}x{dv}x{dk}")));
    }
    let hidden = uint(cfg, "hidden_size")?;
    if let Some(heads) = uint(cfg, "mamba_num_heads")?.or(uint(cfg, "mamba_n_heads")?) {
        // Mamba-2: Nemotron-H's keys, then Granite 4.0-H's.
        let nemotron = cfg.contains_key("mamba_num_heads");
        let heads = fits("Mamba heads", w(heads))?;
        let state = fits("state size", w(if nemotron { need("ssm_state_size")? } else { need("mamba_d_state")? }))?;
        let groups = fits("groups", w(if nemotron { uint(cfg, "n_groups")? } else { uint(cfg, "mamba_n_groups")? }.unwrap_or(1)))?;
        let rows = if nemotron { kernel("conv_kernel")? } else { kernel("mamba_d_conv")? };
        let head_dim = match if nemotron { uint(cfg, "mamba_head_dim")? } else { uint(cfg, "mamba_d_head")? } {
            Some(d) => fits("Mamba head size", w(d))?,
            None => {
                let expand = fits("mamba_expand", w(uint(cfg, "mamba_expand")?.unwrap_or(2)))?;
                let hidden =
                    fits("hidden_size", w(hidden.ok_or_else(|| err("`hidden_size` is missing: the Mamba head size derives from it"))?))?;
                fits("mamba_expand × hidden_size ÷ heads", w(expand) * w(hidden) / w(heads))?
            }
        };
        let channels = fits("conv channels", w(heads) * w(head_dim) + 2 * w(groups) * w(state))?;
        notes.push(format!(
            "Mamba-2 state: conv (kernel − 1 = {rows}) × ({heads} heads × {head_dim} + 2 × {groups} groups × {state} = {channels}); SSM {heads} heads × {head_dim} × {state}. Under a TP degree that does not divide the {groups} groups vLLM replicates groups into each GPU's conv state, which this form does not add"
        ));
        return Ok((format!("{rows}x{channels}"), format!("{heads}x{head_dim}x{state}")));
    }
    // Mamba-1 (Jamba): one state row per channel.
    let expand = fits("mamba_expand", w(uint(cfg, "mamba_expand")?.unwrap_or(2)))?;
    let hidden =
        fits("hidden_size", w(hidden.ok_or_else(|| err("`hidden_size` is missing: the Mamba width is mamba_expand × hidden_size"))?))?;
    let inner = fits("mamba_expand × hidden_size", w(expand) * w(hidden))?;
    let state = fits("mamba_d_state", w(need("mamba_d_state")?))?;
    let rows = kernel("mamba_d_conv")?;
    notes.push(format!(
        "Mamba-1 state ({model}): d_inner = mamba_expand {expand} × hidden {hidden} = {inner}; conv (mamba_d_conv − 1 = {rows}) × {inner}; SSM {inner} × mamba_d_state {state}"
    ));
    Ok((format!("{rows}x{inner}"), format!("{inner}x{state}")))
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
        let e =
            import(br#"{"num_hidden_layers":2,"num_attention_heads":8,"head_dim":8,"layer_types":["full_attention","cross_attention"]}"#)
                .unwrap_err();
        assert!(e.to_string().contains("\"cross_attention\""), "{e}");
        // A linear-attention layer without the keys that size its state.
        let e =
            import(br#"{"num_hidden_layers":2,"num_attention_heads":8,"head_dim":8,"layer_types":["full_attention","linear_attention"]}"#)
                .unwrap_err();
        assert!(e.to_string().contains("`linear_num_key_heads` is missing: it sizes the linear layers' state"), "{e}");
    }

    /// Qwen3-Next-80B-A3B's published config (the keys that size the cache;
    /// no `layer_types`, so `full_attention_interval` decides) imports to
    /// exactly the preset's fields.
    #[test]
    fn qwen3_next_imports_as_its_preset() {
        let (form, imported) = apply(
            r#"{"architectures":["Qwen3NextForCausalLM"],"model_type":"qwen3_next","hidden_size":2048,"num_hidden_layers":48,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"full_attention_interval":4,"linear_conv_kernel_dim":4,"linear_key_head_dim":128,"linear_value_head_dim":128,"linear_num_key_heads":16,"linear_num_value_heads":32,"torch_dtype":"bfloat16","vocab_size":151936,"intermediate_size":5120,"num_experts":512}"#,
        );
        let preset = crate::presets::find("qwen3-next-80b-a3b").unwrap();
        for (name, value) in preset.patch() {
            if !matches!(name, "preset" | "params") {
                assert_eq!(form.get(name), value, "{name}");
            }
        }
        assert!(imported.notes.iter().any(|n| n.contains("2 × 16 key heads × 128 + 32 value heads × 128 = 8192")), "{:?}", imported.notes);
        // No parameter estimate: the shapes formula knows no recurrent layers.
        assert_eq!(form.get("params"), "");
    }

    #[test]
    fn jamba_granite_and_nemotron_h_state_shapes() {
        let (form, _) = apply(
            r#"{"model_type":"jamba","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"attn_layer_period":8,"attn_layer_offset":4,"mamba_d_state":16,"mamba_d_conv":4,"mamba_expand":2}"#,
        );
        let preset = crate::presets::find("jamba-v0.1").unwrap();
        for name in ["layer_types", "conv_state", "ssm_state", "kv_heads", "head_dim"] {
            assert_eq!(form.get(name), preset.patch().iter().find(|(n, _)| *n == name).unwrap().1, "{name}");
        }
        // Granite 4.0-H's spelling: layer_types mamba/attention, Mamba-2 keys.
        let (form, imported) = apply(
            r#"{"model_type":"granitemoehybrid","hidden_size":4096,"num_hidden_layers":4,"num_attention_heads":32,"num_key_value_heads":8,"layer_types":["mamba","mamba","mamba","attention"],"mamba_n_heads":128,"mamba_d_head":64,"mamba_d_state":128,"mamba_n_groups":1,"mamba_d_conv":4,"mamba_expand":2}"#,
        );
        assert_eq!(form.get("layer_types"), "mambax3,full");
        assert_eq!(form.get("conv_state"), "3x8448", "(d_conv − 1) × (128 × 64 + 2 × 1 × 128)");
        assert_eq!(form.get("ssm_state"), "128x64x128");
        assert!(imported.notes.iter().any(|n| n.contains("replicates groups")));
        // Nemotron-H: one character a layer; MLP layers keep nothing.
        let (form, _) = apply(
            r#"{"model_type":"nemotron_h","hidden_size":4096,"num_hidden_layers":6,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"hybrid_override_pattern":"M-M*-E","mamba_num_heads":128,"mamba_head_dim":64,"ssm_state_size":128,"n_groups":8,"conv_kernel":4}"#,
        );
        assert_eq!(form.get("layer_types"), "mamba,none,mamba,full,nonex2");
        assert_eq!(form.get("conv_state"), "3x10240", "(4 − 1) × (128 × 64 + 2 × 8 × 128)");
        let report = crate::compute(&form.validate().unwrap()).unwrap();
        assert!(report.logical.terms.iter().any(|t| t.label.starts_with("no mixer state · 3 layers") && t.bits == 0));
        // Qwen3.5 keeps its SSM state in fp32, and says so.
        let (form, _) = apply(
            r#"{"model_type":"qwen3_5_text","num_hidden_layers":4,"num_attention_heads":16,"num_key_value_heads":4,"head_dim":256,"layer_types":["linear_attention","linear_attention","linear_attention","full_attention"],"linear_conv_kernel_dim":4,"linear_key_head_dim":128,"linear_num_key_heads":16,"linear_num_value_heads":32,"linear_value_head_dim":128,"mamba_ssm_dtype":"float32"}"#,
        );
        assert_eq!(form.get("ssm_dtype"), "fp32");
        let inputs = form.validate().unwrap();
        let report = crate::compute(&inputs).unwrap();
        let per_layer = 3 * 8192 * 2 + 32 * 128 * 128 * 4;
        assert_eq!(report.logical.terms[0].bits, 3 * per_layer * 8 * 4, "3 layers × one sequence of 4 tokens");
    }

    #[test]
    fn hostile_state_sizes_are_refused_by_name() {
        let e = import(br#"{"model_type":"qwen3_next","num_hidden_layers":4,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"linear_conv_kernel_dim":4,"linear_key_head_dim":18446744073709551615,"linear_num_key_heads":18446744073709551615,"linear_num_value_heads":32,"linear_value_head_dim":128}"#).unwrap_err();
        assert!(e.to_string().contains("linear_num_key_heads = 18446744073709551615 is out of range"), "{e}");
        let e = import(br#"{"model_type":"qwen3_next","num_hidden_layers":4,"num_attention_heads":16,"num_key_value_heads":2,"head_dim":256,"linear_key_head_dim":4294967295,"linear_num_key_heads":4294967295,"linear_num_value_heads":32,"linear_value_head_dim":128}"#).unwrap_err();
        assert!(e.to_string().contains("conv channels = 36893488130239238146"), "{e}");
        let e = import(br#"{"model_type":"jamba","hidden_size":4096,"num_hidden_layers":8,"num_attention_heads":32,"attn_layer_period":8,"attn_layer_offset":9,"mamba_d_state":16}"#).unwrap_err();
        assert!(e.to_string().contains("`attn_layer_offset` 9 must be below `attn_layer_period` 8"), "{e}");
        let e = import(br#"{"num_hidden_layers":3,"num_attention_heads":8,"head_dim":8,"hybrid_override_pattern":"M*?"}"#).unwrap_err();
        assert!(e.to_string().contains("'?'"), "{e}");
        let e = import(br#"{"num_hidden_layers":3,"num_attention_heads":8,"head_dim":8,"hybrid_override_pattern":"M*"}"#).unwrap_err();
        assert!(e.to_string().contains("has 2 layers but num_hidden_layers = 3"), "{e}");
    }
}
