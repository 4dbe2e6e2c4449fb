//! The calculator's inputs as text, and their URL query codec.
//!
//! A [`Form`] holds exactly what the user typed, field by field, even when it
//! is invalid: the URL carries those raw strings, so a reload restores every
//! keystroke and an invalid parameter is reported next to its field while
//! every valid one is kept. [`Form::validate`] turns the text into
//! [`Inputs`] or into one [`FieldError`] per bad field.

use crate::calc::{GpuBudget, Inputs, PrefixSharing, ScaleOverhead};
use crate::dtype::Dtype;
use crate::error::FieldError;
use crate::model::{KindTag, LayerSpec, ModelShape, RecurrentState};
use crate::runs::{self, parse_runs};
use crate::units;

/// One input of the calculator: its URL name, label and default text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub label: &'static str,
    pub default: &'static str,
    pub help: &'static str,
}

const fn f(name: &'static str, label: &'static str, default: &'static str, help: &'static str) -> Field {
    Field { name, label, default, help }
}

/// Every field, in URL order. The defaults are the field guide's seed example.
pub const FIELDS: &[Field] = &[
    f("preset", "Preset", "", "model preset id; the fields below carry its values"),
    f("layers", "Layers L", "32", "num_hidden_layers"),
    f("kv_heads", "KV heads H_kv", "8", "num_key_value_heads (GQA: not the query-head count)"),
    f("head_dim", "Head dim d_head", "128", "head_dim, else hidden_size / num_attention_heads"),
    f(
        "layer_types",
        "Layer types",
        "",
        "e.g. slidingx5,full or linearx3,full — run-length list of full|sliding|mla|linear|mamba|none; empty: all full",
    ),
    f("window", "Sliding window", "", "tokens a sliding-window layer keeps"),
    f("layer_kv_heads", "Per-layer KV heads", "", "e.g. 3x10,4x10 — one count per layer; empty: H_kv everywhere"),
    f("kv_lora_rank", "MLA kv_lora_rank", "", "MLA latent width (DeepSeek-V3: 512)"),
    f("qk_rope_head_dim", "MLA qk_rope_head_dim", "", "MLA decoupled RoPE key width (DeepSeek-V3: 64)"),
    f("conv_state", "Recurrent conv state", "", "(conv kernel − 1) × channels per linear/mamba layer, e.g. 3x8192 (Qwen3-Next)"),
    f("ssm_state", "Recurrent SSM state", "", "heads × dims per linear/mamba layer, e.g. 32x128x128 (Qwen3-Next), 8192x16 (Mamba-1)"),
    f("state_dtype", "State dtype", "", "the recurrent state's (vLLM --mamba-cache-dtype); empty: bf16"),
    f("ssm_dtype", "SSM state dtype", "", "the SSM part only (vLLM --mamba-ssm-cache-dtype); empty: as the state dtype"),
    f("kv_dtype", "KV dtype", "bf16", "fp32 | bf16 | fp16 | fp8 | int8 | int4"),
    f("scale_bits", "Scale width (bits)", "", "8 | 16 | 32; empty: no quantization scales"),
    f("scale_group", "Scale group (elements)", "", "elements per scale"),
    f("seqs", "Sequence lengths Tᵢ", "8192x4", "e.g. 8192x4 or 2048,4096,8192x2"),
    f("block", "Block size (tokens)", "16", "paged-attention block; 1: no rounding"),
    f("tp", "Tensor-parallel degree", "1", "GPUs the KV heads are split over"),
    f("prefix", "Shared prefix (tokens)", "", "prefix P held once"),
    f("prefix_seqs", "Sequences sharing it", "", "N; empty: every sequence at least P long"),
    f("gpu_gib", "GPU memory (GiB)", "", "per GPU, e.g. 80"),
    f("reserve", "Reserve fraction", "0.1", "held back for activations and fragmentation"),
    f("params", "Weight parameters", "", "parameters of the whole model"),
    f("weight_dtype", "Weight dtype", "bf16", "precision of the weights, apart from the KV dtype"),
    f("weight_bytes", "Weight bytes (exact)", "", "the weights' bytes, e.g. a GGUF's tensors; overrides parameters × weight dtype"),
    f("vllm", "vLLM log lines", "", "paste the start-up lines for the cross-check"),
    f("lengths", "Length distribution", "", "ood176: size the built-in OOD176 example (pasted lengths never enter the link)"),
    f("embed", "Embed", "", "kv: the compact widget"),
];

/// Looks a field up by URL name.
pub fn field(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

/// The raw text of every field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    values: Vec<String>,
}

impl Default for Form {
    fn default() -> Self {
        Form { values: FIELDS.iter().map(|f| f.default.to_string()).collect() }
    }
}

fn index(name: &str) -> usize {
    FIELDS.iter().position(|f| f.name == name).unwrap_or_else(|| panic!("no field named {name}"))
}

impl Form {
    /// Whether the form still holds exactly `preset`'s model fields (the
    /// page marks a preset modified otherwise).
    pub fn holds_preset(&self, preset: &crate::presets::Preset) -> bool {
        preset.patch().iter().filter(|(name, _)| *name != "preset").all(|(name, value)| self.get(name) == value)
    }

    /// The text of a field. Panics on a name not in [`FIELDS`]: that is a
    /// programming error, never user input.
    pub fn get(&self, name: &str) -> &str {
        &self.values[index(name)]
    }

    pub fn set(&mut self, name: &str, value: impl Into<String>) {
        let i = index(name);
        self.values[i] = value.into();
    }

    /// Parses a URL query (with or without the leading `?`). Unknown or
    /// repeated parameters are reported as warnings; the field texts are kept
    /// as they are, valid or not.
    pub fn from_query(query: &str) -> (Form, Vec<String>) {
        let mut form = Form::default();
        let mut warnings = Vec::new();
        let mut seen = Vec::new();
        for pair in query.trim_start_matches('?').split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = percent_decode(name);
            let value = percent_decode(value);
            match field(&name) {
                Some(f) => {
                    if seen.contains(&f.name) {
                        warnings.push(format!("parameter `{}` appears more than once; the last value is used", f.name));
                    }
                    seen.push(f.name);
                    form.set(f.name, value);
                }
                None => warnings.push(format!("unknown parameter `{name}` was ignored")),
            }
        }
        // A short link may name only a preset: its model fields fill in what
        // the link does not spell out, and what it does spell out wins.
        let preset = form.get("preset").to_string();
        if !preset.is_empty() {
            match crate::presets::find(&preset) {
                Some(p) => {
                    let missing: Vec<_> = p.patch().into_iter().filter(|(name, _)| !seen.contains(name)).collect();
                    form.apply(&missing);
                }
                None => warnings.push(format!("preset `{preset}` is not known; the fields in the link are used as they are")),
            }
        }
        (form, warnings)
    }

    /// The query string (without `?`): every field that is not empty by
    /// default, in a fixed order, so the same inputs always give the same
    /// link and a cleared field stays cleared.
    pub fn to_query(&self) -> String {
        // An empty field is written when a reload would otherwise refill it:
        // from its default, or from the preset the link names.
        let preset_fields: Vec<&'static str> =
            crate::presets::find(self.get("preset")).map(|p| p.patch().into_iter().map(|(name, _)| name).collect()).unwrap_or_default();
        FIELDS
            .iter()
            .zip(&self.values)
            .filter(|(f, v)| !v.is_empty() || !f.default.is_empty() || preset_fields.contains(&f.name))
            .map(|(f, v)| format!("{}={}", f.name, percent_encode(v)))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// Applies a set of field values (from a preset or a config import).
    pub fn apply(&mut self, patch: &[(&'static str, String)]) {
        for (name, value) in patch {
            self.set(name, value.clone());
        }
    }

    /// Whether the page should render as the compact widget.
    pub fn is_embed(&self) -> bool {
        self.get("embed") == "kv"
    }

    /// Turns the text into inputs, or names every field that is wrong.
    pub fn validate(&self) -> Result<Inputs, Vec<FieldError>> {
        let mut errors = Vec::new();

        let layers = keep(&mut errors, self.required_u32("layers", 1));
        let kv_heads = keep(&mut errors, self.required_u32("kv_heads", 1));
        let head_dim = keep(&mut errors, self.required_u32("head_dim", 1));
        let layer_types = keep(&mut errors, self.optional("layer_types", |t| parse_runs(t, KindTag::parse)));
        let window = keep(&mut errors, self.optional("window", |t| at_least(runs::parse_u64(t)?, 1)));
        let layer_kv_heads =
            keep(&mut errors, self.optional("layer_kv_heads", |t| parse_runs(t, |x| at_least(to_u32(runs::parse_u64(x)?)?, 1))));
        let rank = keep(&mut errors, self.optional("kv_lora_rank", |t| at_least(to_u32(runs::parse_u64(t)?)?, 1)));
        let rope = keep(&mut errors, self.optional("qk_rope_head_dim", |t| to_u32(runs::parse_u64(t)?)));
        let kv_dtype = keep(&mut errors, self.dtype("kv_dtype"));
        let conv_state = keep(&mut errors, self.optional("conv_state", |t| shape(t, 2, 2)));
        let ssm_state = keep(&mut errors, self.optional("ssm_state", |t| shape(t, 2, 3)));
        let state_dtype = keep(&mut errors, self.optional_dtype("state_dtype"));
        let ssm_dtype = keep(&mut errors, self.optional_dtype("ssm_dtype"));
        let scale_bits = keep(
            &mut errors,
            self.optional("scale_bits", |t| match runs::parse_u64(t)? {
                b @ (8 | 16 | 32) => Ok(b as u32),
                b => Err(format!("{b} is not a scale width (use 8, 16 or 32)")),
            }),
        );
        let scale_group = keep(&mut errors, self.optional("scale_group", |t| at_least(to_u32(runs::parse_u64(t)?)?, 1)));
        let seqs = keep(&mut errors, self.parsed("seqs", |t| parse_runs(t, |x| at_least(runs::parse_u64(x)?, 1))));
        let block = keep(&mut errors, self.parsed("block", |t| at_least(runs::parse_u64(t)?, 1)));
        let tp = keep(&mut errors, self.parsed("tp", |t| at_least(to_u32(runs::parse_u64(t)?)?, 1)));
        let prefix = keep(&mut errors, self.optional("prefix", runs::parse_u64));
        let prefix_seqs = keep(&mut errors, self.optional("prefix_seqs", |t| at_least(runs::parse_u64(t)?, 1)));
        let gpu_gib = keep(
            &mut errors,
            self.optional("gpu_gib", |t| {
                let d = units::parse_decimal(t)?;
                match d.times_floor(1 << 30) {
                    Some(0) => Err("must be more than 0".to_string()),
                    Some(bytes) => Ok(bytes),
                    None => Err("is too large".to_string()),
                }
            }),
        );
        let reserve = keep(
            &mut errors,
            self.optional("reserve", |t| {
                let d = units::parse_decimal(t)?;
                if d.below_one() {
                    Ok(d)
                } else {
                    Err(format!("{t} must be below 1 (a fraction such as 0.1)"))
                }
            }),
        );
        let params = keep(&mut errors, self.optional("params", runs::parse_u64));
        let weight_dtype = keep(&mut errors, self.dtype("weight_dtype"));
        let weight_bytes = keep(&mut errors, self.optional("weight_bytes", runs::parse_u64));
        let lengths = self.get("lengths");
        if !matches!(lengths, "" | crate::distribution::BUILTIN) {
            errors.push(FieldError::new(
                "lengths",
                format!(
                    "`{lengths}` is not a built-in distribution (use lengths={}, or paste lengths on the page)",
                    crate::distribution::BUILTIN
                ),
            ));
        }
        let embed = self.get("embed");
        if !matches!(embed, "" | "kv") {
            errors.push(FieldError::new("embed", format!("`{embed}` is not a widget (use embed=kv)")));
        }

        // Cross-field checks need their parts to have parsed.
        let mut model = None;
        let state = together(&mut errors, ("conv_state", conv_state), ("ssm_state", ssm_state), "").map(|pair| {
            pair.map(|(conv, ssm)| RecurrentState {
                conv_rows: conv[0],
                conv_channels: conv[1],
                ssm_heads: ssm[0],
                ssm_rows: ssm[1],
                ssm_cols: ssm.get(2).copied().unwrap_or(1),
            })
        });
        let mla = together(&mut errors, ("kv_lora_rank", rank), ("qk_rope_head_dim", rope), " (MLA)");
        if let (Some(l), Some(h), Some(d), Some(types), Some(window), Some(lkv), Some(mla), Some(state)) =
            (layers, kv_heads, head_dim, layer_types.clone(), window, layer_kv_heads.clone(), mla, state)
        {
            let spec = LayerSpec { layer_types: types, window, layer_kv_heads: lkv, mla, state };
            match ModelShape::build(l, h, d, &spec) {
                Ok(m) => model = Some(m),
                Err(e) => errors.push(e),
            }
        }
        let scale = together(&mut errors, ("scale_bits", scale_bits), ("scale_group", scale_group), "")
            .flatten()
            .map(|(bits, group)| ScaleOverhead { bits, group });
        let mut prefix_sharing = None;
        if let (Some(Some(p)), Some(n), Some(seqs)) = (prefix, prefix_seqs, seqs.as_ref()) {
            let eligible: u128 = seqs.iter().filter(|r| r.value >= p).map(|r| r.count as u128).sum();
            let n = n.map(|n| n as u128).unwrap_or(eligible);
            if n > eligible {
                errors.push(FieldError::new(
                    "prefix_seqs",
                    format!("{n} sequences cannot share {p} tokens: only {eligible} are at least {p} tokens long"),
                ));
            } else {
                prefix_sharing = Some(PrefixSharing { tokens: p, sequences: n as u64 });
            }
        } else if matches!(prefix, Some(None)) && matches!(prefix_seqs, Some(Some(_))) {
            errors.push(FieldError::new("prefix", "is required with prefix_seqs"));
        }
        let vllm = match self.get("vllm").trim() {
            "" => None,
            text => match crate::vllm::parse(text, block.unwrap_or(16)) {
                Ok(o) => Some(o),
                Err(m) => {
                    errors.push(FieldError::new("vllm", m));
                    None
                }
            },
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        let budget = gpu_gib.flatten().map(|gpu_bytes| GpuBudget {
            gpu_bytes,
            reserve: reserve.flatten().unwrap_or(units::Decimal { numerator: 0, scale: 0 }),
            params: params.flatten().unwrap_or(0),
            weight_dtype: weight_dtype.unwrap_or(Dtype::Bf16),
            weight_bytes: weight_bytes.flatten().map(u128::from),
        });
        Ok(Inputs {
            model: model.expect("model parsed when no errors"),
            kv_dtype: kv_dtype.expect("checked"),
            state_dtype: state_dtype.flatten().unwrap_or(Dtype::Bf16),
            ssm_dtype: ssm_dtype.flatten().or(state_dtype.flatten()).unwrap_or(Dtype::Bf16),
            scale,
            seqs: seqs.expect("checked"),
            block: block.expect("checked"),
            tp: tp.expect("checked"),
            prefix: prefix_sharing,
            budget,
            vllm,
        })
    }

    fn parsed<T>(&self, name: &'static str, parse: impl Fn(&str) -> Result<T, String>) -> Result<T, FieldError> {
        let text = self.get(name);
        if text.trim().is_empty() {
            return Err(FieldError::new(name, "is required"));
        }
        parse(text).map_err(|m| FieldError::new(name, m))
    }

    fn optional<T>(&self, name: &'static str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Option<T>, FieldError> {
        let text = self.get(name);
        if text.trim().is_empty() {
            return Ok(None);
        }
        parse(text).map(Some).map_err(|m| FieldError::new(name, m))
    }

    fn required_u32(&self, name: &'static str, min: u32) -> Result<u32, FieldError> {
        self.parsed(name, |t| at_least(to_u32(runs::parse_u64(t)?)?, min))
    }

    fn dtype(&self, name: &'static str) -> Result<Dtype, FieldError> {
        self.parsed(name, parse_dtype)
    }

    fn optional_dtype(&self, name: &'static str) -> Result<Option<Dtype>, FieldError> {
        self.optional(name, parse_dtype)
    }
}

fn parse_dtype(text: &str) -> Result<Dtype, String> {
    Dtype::parse(text).ok_or_else(|| format!("`{text}` is not one of fp32, bf16, fp16, fp8, int8, int4"))
}

/// A tensor shape written as factors, `3x8192` or `32×128×128`: between
/// `min` and `max` whole numbers, each at most `u32::MAX`.
fn shape(text: &str, min: usize, max: usize) -> Result<Vec<u32>, String> {
    let factors = text.split(['x', 'X', '×', '*']).map(|f| to_u32(runs::parse_u64(f.trim())?)).collect::<Result<Vec<_>, _>>()?;
    if factors.len() < min || factors.len() > max {
        let want = if min == max { format!("{min}") } else { format!("{min} or {max}") };
        return Err(format!("`{}` has {} factors; write {want} separated by x", text.trim(), factors.len()));
    }
    Ok(factors)
}

/// Two optional fields that only mean something together (MLA's sizes, a
/// state's two parts, a scale's width and group): both, or neither. The
/// one missing is named, with `what` after the message. `None` when either
/// did not parse or one is missing; `Some(None)` when both are empty.
fn together<A, B>(
    errors: &mut Vec<FieldError>,
    (a_name, a): (&'static str, Option<Option<A>>),
    (b_name, b): (&'static str, Option<Option<B>>),
    what: &str,
) -> Option<Option<(A, B)>> {
    match (a?, b?) {
        (Some(a), Some(b)) => Some(Some((a, b))),
        (None, None) => Some(None),
        (Some(_), None) => {
            errors.push(FieldError::new(b_name, format!("is required with {a_name}{what}")));
            None
        }
        (None, Some(_)) => {
            errors.push(FieldError::new(a_name, format!("is required with {b_name}{what}")));
            None
        }
    }
}

/// Keeps a parsed value, or records its error and yields nothing.
fn keep<T>(errors: &mut Vec<FieldError>, parsed: Result<T, FieldError>) -> Option<T> {
    parsed.map_err(|e| errors.push(e)).ok()
}

fn to_u32(v: u64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{v} is larger than 4294967295"))
}

fn at_least<T: PartialOrd + std::fmt::Display>(v: T, min: T) -> Result<T, String> {
    if v < min {
        Err(format!("{v} is out of range: must be at least {min}"))
    } else {
        Ok(v)
    }
}

/// Percent-encodes a query value. Characters that read well and mean nothing
/// special in a query value (`,` `:` `*` `/`) stay as they are; `+` is encoded
/// because form decoding reads it as a space.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b',' | b':' | b'*' | b'/' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Decodes `%XX` and `+` (a space, as browsers' form encoding writes it).
/// Malformed escapes are kept literally rather than rejected: the text is the
/// user's, and validation will name the field if it matters.
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calc::compute;

    #[test]
    fn default_is_the_seed() {
        let r = compute(&Form::default().validate().unwrap()).unwrap();
        assert_eq!(r.logical_bytes, 4_294_967_296);
    }

    #[test]
    fn round_trip_keeps_every_character() {
        let mut form = Form::default();
        form.set("seqs", "2048,4096,8192x2");
        form.set("vllm", "GPU KV cache size: 491,008 tokens & 100% + more = ok #1");
        form.set("layers", "thirty");
        let q = form.to_query();
        assert!(q.contains("seqs=2048,4096,8192x2"), "{q}");
        let (back, warnings) = Form::from_query(&q);
        assert_eq!(back, form);
        assert!(warnings.is_empty());
    }

    #[test]
    fn invalid_parameter_is_named_and_the_rest_kept() {
        let (form, warnings) = Form::from_query("?layers=0&kv_heads=4&kv_dtype=fp7&seqs=100&bogus=1");
        assert_eq!(warnings, vec!["unknown parameter `bogus` was ignored".to_string()]);
        assert_eq!(form.get("kv_heads"), "4");
        let errors = form.validate().unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field).collect();
        assert_eq!(fields, vec!["layers", "kv_dtype"]);
        assert!(errors[0].message.contains("out of range"));
    }

    #[test]
    fn preset_fills_what_the_link_omits() {
        let (form, warnings) = Form::from_query("preset=deepseek-v3&seqs=32768x1&layers=60");
        assert!(warnings.is_empty());
        assert_eq!(form.get("kv_lora_rank"), "512");
        assert_eq!(form.get("layers"), "60", "an explicit field wins over the preset");
        let (_, warnings) = Form::from_query("preset=nope");
        assert!(warnings[0].contains("`nope`"));
        // A full link round-trips unchanged, a cleared preset field included.
        let mut form = form;
        form.set("window", "");
        form.set("layer_types", "");
        let (again, _) = Form::from_query(&form.to_query());
        assert_eq!(again, form);
        let (gemma, _) = Form::from_query("preset=gemma-3-27b");
        let mut cleared = gemma.clone();
        cleared.set("layer_types", "");
        cleared.set("window", "");
        assert_eq!(Form::from_query(&cleared.to_query()).0, cleared);
    }

    #[test]
    fn decode_is_lenient() {
        assert_eq!(percent_decode("a%2Cb+c%zz%4"), "a,b c%zz%4");
        assert_eq!(percent_decode("%E2%86%92"), "→");
    }

    #[test]
    fn recurrent_state_fields_name_what_is_wrong() {
        let fields = |q: &str| Form::from_query(q).0.validate().unwrap_err().into_iter().map(|e| e.field).collect::<Vec<_>>();
        assert_eq!(fields("layers=2&layer_types=linear,full&conv_state=3x8"), vec!["ssm_state"]);
        assert_eq!(fields("layers=2&layer_types=linear,full"), vec!["ssm_state"]);
        assert_eq!(fields("layers=2&conv_state=3x8&ssm_state=4x8x8"), vec!["layer_types"]);
        assert_eq!(
            fields("layers=2&layer_types=mamba,full&conv_state=3x&ssm_state=4x8x8x8&ssm_dtype=fp7"),
            vec!["conv_state", "ssm_state", "ssm_dtype"]
        );
        let (form, _) = Form::from_query("layers=2&layer_types=mamba,full&conv_state=3×8&ssm_state=8x16&state_dtype=fp32");
        let inputs = form.validate().unwrap();
        assert_eq!((inputs.state_dtype, inputs.ssm_dtype), (Dtype::Fp32, Dtype::Fp32), "the SSM part follows the state dtype");
        // The link keeps them as typed.
        assert_eq!(Form::from_query(&form.to_query()).0, form);
    }

    #[test]
    fn prefix_checks() {
        let (form, _) = Form::from_query("seqs=100x2,10&prefix=50&prefix_seqs=3");
        let e = form.validate().unwrap_err();
        assert_eq!(e[0].field, "prefix_seqs");
        let (form, _) = Form::from_query("seqs=100x2,10&prefix=50");
        assert_eq!(form.validate().unwrap().prefix.unwrap().sequences, 2);
    }
}
