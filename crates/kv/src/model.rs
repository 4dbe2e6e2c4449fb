//! The KV-relevant shape of a model: its layers, grouped by what each layer
//! keeps per token, or, for a recurrent layer, per sequence.

use serde::Serialize;

use crate::error::FieldError;
use crate::runs::{total_count, Run};

/// Which recurrent mixer a layer runs: the label of its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateFamily {
    /// Linear attention with the gated delta rule (Qwen3-Next's, Qwen3.5's
    /// `linear_attention` layers).
    Linear,
    /// A Mamba (selective state-space) layer: Jamba's Mamba-1, Granite
    /// 4.0-H's and Nemotron-H's Mamba-2.
    Mamba,
}

impl StateFamily {
    pub fn name(self) -> &'static str {
        match self {
            StateFamily::Linear => "linear attention (gated delta rule)",
            StateFamily::Mamba => "Mamba",
        }
    }
}

/// One recurrent layer's state for one sequence, in elements. It is the
/// same size after one token or a million: a short causal convolution keeps
/// its last `conv_rows` inputs (`conv kernel − 1`) over `conv_channels`
/// channels, and the recurrence keeps an `ssm_heads × ssm_rows × ssm_cols`
/// matrix (a delta-rule layer: value heads × value dim × key dim; Mamba-2:
/// heads × head dim × state size; Mamba-1: channels × state size × 1).
/// Tensor parallelism splits the conv channels and the SSM heads, as vLLM's
/// `MambaStateShapeCalculator` does. Each size is a `u32`, so every
/// product below fits `u128` without a check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RecurrentState {
    pub conv_rows: u32,
    pub conv_channels: u32,
    pub ssm_heads: u32,
    pub ssm_rows: u32,
    pub ssm_cols: u32,
}

impl RecurrentState {
    pub fn conv_elements(&self) -> u128 {
        self.conv_rows as u128 * self.conv_channels as u128
    }

    pub fn ssm_elements(&self) -> u128 {
        self.ssm_heads as u128 * self.ssm_rows as u128 * self.ssm_cols as u128
    }

    /// The state one GPU of a `tp`-way group holds, or what does not split.
    pub fn shard(&self, tp: u32) -> Result<RecurrentState, String> {
        if !self.conv_channels.is_multiple_of(tp) || !self.ssm_heads.is_multiple_of(tp) {
            return Err(format!(
                "TP {tp} does not divide the recurrent state ({} conv channels, {} SSM heads); engines refuse this split",
                self.conv_channels, self.ssm_heads
            ));
        }
        Ok(RecurrentState { conv_channels: self.conv_channels / tp, ssm_heads: self.ssm_heads / tp, ..*self })
    }
}

/// What one layer retains: per token for attention, per sequence for a
/// recurrent layer, nothing for a layer without a mixer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LayerKind {
    /// Keeps K and V for every token: `2 × H_kv × d_head` elements per token.
    Full,
    /// Keeps K and V for the last `window` tokens only.
    Sliding { window: u64 },
    /// Multi-head latent attention (DeepSeek-V2/V3): one compressed latent of
    /// `kv_lora_rank` plus a shared RoPE key of `qk_rope_head_dim` per token;
    /// no factor 2 and no KV heads.
    Mla { kv_lora_rank: u32, qk_rope_head_dim: u32 },
    /// A recurrent layer (linear attention, Mamba): a state of constant size
    /// per sequence and nothing per token.
    Recurrent { family: StateFamily, state: RecurrentState },
    /// A layer that keeps nothing between tokens (Nemotron-H's MLP-only
    /// and MoE-only layers).
    Stateless,
}

impl LayerKind {
    /// Whether the layer keeps K and V per token (full or sliding attention).
    pub fn is_attention(&self) -> bool {
        matches!(self, LayerKind::Full | LayerKind::Sliding { .. })
    }
}

/// The spelling of a layer kind in `layer_types` (the window, MLA and state
/// sizes come from their own fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindTag {
    Full,
    Sliding,
    Mla,
    Linear,
    Mamba,
    None,
}

impl KindTag {
    pub fn parse(text: &str) -> Result<KindTag, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "full" | "full_attention" | "global" => Ok(KindTag::Full),
            "sliding" | "sliding_attention" | "local" => Ok(KindTag::Sliding),
            "mla" => Ok(KindTag::Mla),
            "linear" | "linear_attention" => Ok(KindTag::Linear),
            "mamba" | "mamba2" => Ok(KindTag::Mamba),
            "none" | "mlp" | "moe" => Ok(KindTag::None),
            other => Err(format!("`{other}` is not a layer type (use full, sliding, mla, linear, mamba or none)")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KindTag::Full => "full",
            KindTag::Sliding => "sliding",
            KindTag::Mla => "mla",
            KindTag::Linear => "linear",
            KindTag::Mamba => "mamba",
            KindTag::None => "none",
        }
    }
}

/// Consecutive layers with the same kind and KV-head shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerRun {
    pub kind: LayerKind,
    pub count: u64,
    pub kv_heads: u32,
    pub head_dim: u32,
}

impl LayerRun {
    /// Elements stored per token in one such layer.
    pub fn elements_per_token(&self) -> u128 {
        match self.kind {
            LayerKind::Full | LayerKind::Sliding { .. } => 2 * self.kv_heads as u128 * self.head_dim as u128,
            LayerKind::Mla { kv_lora_rank, qk_rope_head_dim } => kv_lora_rank as u128 + qk_rope_head_dim as u128,
            LayerKind::Recurrent { .. } | LayerKind::Stateless => 0,
        }
    }

    /// Tokens a layer of this kind retains for a sequence of `tokens`.
    pub fn retained(&self, tokens: u64) -> u64 {
        match self.kind {
            LayerKind::Sliding { window } => tokens.min(window),
            LayerKind::Full | LayerKind::Mla { .. } => tokens,
            LayerKind::Recurrent { .. } | LayerKind::Stateless => 0,
        }
    }
}

/// All layers of a model, in order, run-length encoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelShape {
    /// `L`.
    pub layers: u32,
    /// `H_kv` of the plain formula (per-layer counts may differ).
    pub kv_heads: u32,
    /// `d_head`.
    pub head_dim: u32,
    /// The layers, in order. Their counts sum to `layers`.
    pub runs: Vec<LayerRun>,
}

/// The optional parts of a model description, as the form parsed them.
#[derive(Debug, Clone, Default)]
pub struct LayerSpec {
    pub layer_types: Option<Vec<Run<KindTag>>>,
    pub window: Option<u64>,
    pub layer_kv_heads: Option<Vec<Run<u32>>>,
    pub mla: Option<(u32, u32)>,
    pub state: Option<RecurrentState>,
}

impl ModelShape {
    /// A conventional model: every layer full attention with the same shape.
    pub fn uniform(layers: u32, kv_heads: u32, head_dim: u32) -> ModelShape {
        ModelShape { layers, kv_heads, head_dim, runs: vec![LayerRun { kind: LayerKind::Full, count: layers as u64, kv_heads, head_dim }] }
    }

    /// Builds the layer runs, checking that the lists agree with `layers` and
    /// that every kind used has its sizes. Errors name the field at fault.
    pub fn build(layers: u32, kv_heads: u32, head_dim: u32, spec: &LayerSpec) -> Result<ModelShape, FieldError> {
        let types = match &spec.layer_types {
            Some(t) => {
                let n = total_count(t);
                if n != layers as u128 {
                    return Err(FieldError::new("layer_types", format!("lists {n} layers but layers = {layers}")));
                }
                t.clone()
            }
            // With MLA sizes and no list, every layer is MLA (as in DeepSeek-V3).
            None if spec.mla.is_some() => vec![Run { value: KindTag::Mla, count: layers as u64 }],
            None => vec![Run { value: KindTag::Full, count: layers as u64 }],
        };
        let heads = match &spec.layer_kv_heads {
            Some(h) => {
                let n = total_count(h);
                if n != layers as u128 {
                    return Err(FieldError::new("layer_kv_heads", format!("lists {n} layers but layers = {layers}")));
                }
                h.clone()
            }
            None => vec![Run { value: kv_heads, count: layers as u64 }],
        };
        let uses = |tag| types.iter().any(|r| r.value == tag);
        if uses(KindTag::Sliding) && spec.window.is_none() {
            return Err(FieldError::new("window", "is required when layer_types has sliding layers"));
        }
        if uses(KindTag::Mla) && spec.mla.is_none() {
            return Err(FieldError::new("kv_lora_rank", "and qk_rope_head_dim are required when layer_types has mla layers"));
        }
        if (uses(KindTag::Linear) || uses(KindTag::Mamba)) && spec.state.is_none() {
            return Err(FieldError::new("ssm_state", "and conv_state are required when layer_types has linear or mamba layers"));
        }
        if spec.state.is_some() && !(uses(KindTag::Linear) || uses(KindTag::Mamba)) {
            return Err(FieldError::new("layer_types", "has no linear or mamba layer to hold the state in conv_state and ssm_state"));
        }
        let kind_of = |tag: KindTag| match tag {
            KindTag::Full => LayerKind::Full,
            KindTag::Sliding => LayerKind::Sliding { window: spec.window.unwrap_or(0) },
            KindTag::Mla => {
                let (r, p) = spec.mla.unwrap_or((0, 0));
                LayerKind::Mla { kv_lora_rank: r, qk_rope_head_dim: p }
            }
            KindTag::Linear | KindTag::Mamba => LayerKind::Recurrent {
                family: if tag == KindTag::Linear { StateFamily::Linear } else { StateFamily::Mamba },
                state: spec.state.unwrap_or_default(),
            },
            KindTag::None => LayerKind::Stateless,
        };
        // Walk both run lists together, cutting at every boundary of either.
        let mut runs: Vec<LayerRun> = Vec::new();
        let (mut ti, mut hi) = (0usize, 0usize);
        let (mut t_left, mut h_left) = (types[0].count, heads[0].count);
        loop {
            let take = t_left.min(h_left);
            let run = LayerRun { kind: kind_of(types[ti].value), count: take, kv_heads: heads[hi].value, head_dim };
            match runs.last_mut() {
                Some(last) if last.kind == run.kind && last.kv_heads == run.kv_heads => last.count += take,
                _ => runs.push(run),
            }
            t_left -= take;
            h_left -= take;
            if t_left == 0 {
                ti += 1;
                if ti == types.len() {
                    break;
                }
                t_left = types[ti].count;
            }
            if h_left == 0 {
                hi += 1;
                h_left = heads[hi].count;
            }
        }
        Ok(ModelShape { layers, kv_heads, head_dim, runs })
    }

    /// Layers merged by identical kind and shape, in order of first
    /// appearance: one display line each.
    pub fn groups(&self) -> Vec<LayerRun> {
        let mut groups: Vec<LayerRun> = Vec::new();
        for run in &self.runs {
            match groups.iter_mut().find(|g| g.kind == run.kind && g.kv_heads == run.kv_heads && g.head_dim == run.head_dim) {
                Some(g) => g.count += run.count,
                None => groups.push(run.clone()),
            }
        }
        groups
    }

    /// Whether the plain full-attention formula describes this model exactly.
    pub fn is_plain(&self) -> bool {
        self.runs.iter().all(|r| r.kind == LayerKind::Full && r.kv_heads == self.kv_heads && r.head_dim == self.head_dim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::parse_runs;

    #[test]
    fn interleaves_types_and_heads() {
        let spec = LayerSpec {
            layer_types: Some(parse_runs("slidingx2,full,slidingx2,full", KindTag::parse).unwrap()),
            window: Some(128),
            layer_kv_heads: Some(parse_runs("4x3,8x3", |s| s.parse::<u32>().map_err(|e| e.to_string())).unwrap()),
            mla: None,
            state: None,
        };
        let m = ModelShape::build(6, 8, 64, &spec).unwrap();
        assert_eq!(m.runs.len(), 4);
        let g = m.groups();
        assert_eq!(g.len(), 4);
        assert_eq!(g.iter().map(|g| g.count).sum::<u64>(), 6);
        assert!(!m.is_plain());
    }

    #[test]
    fn errors_name_the_field() {
        let spec = LayerSpec { layer_types: Some(parse_runs("fullx3", KindTag::parse).unwrap()), ..Default::default() };
        assert_eq!(ModelShape::build(4, 8, 64, &spec).unwrap_err().field, "layer_types");
        let spec = LayerSpec { layer_types: Some(parse_runs("sliding,full", KindTag::parse).unwrap()), ..Default::default() };
        assert_eq!(ModelShape::build(2, 8, 64, &spec).unwrap_err().field, "window");
        let spec = LayerSpec { mla: Some((512, 64)), ..Default::default() };
        let m = ModelShape::build(61, 128, 128, &spec).unwrap();
        assert_eq!(m.runs[0].elements_per_token(), 576);
    }
}
