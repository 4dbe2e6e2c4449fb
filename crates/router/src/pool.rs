//! The candidate pool: who can be routed to, what each costs, and the modes
//! that weigh cost against match. Read from YAML bytes (the documented
//! format is in `configs/pool.coderouterbench.yaml` and ARCHITECTURE.md).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Result, RouterError};

/// One model the router can pick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    pub id: String,
    #[serde(default)]
    pub provider: String,
    /// The text the backbone encodes to represent this candidate.
    pub descriptor: String,
    pub price_per_1m_input: f64,
    pub price_per_1m_output: f64,
    pub expected_output_tokens: u64,
    pub context_window: u64,
}

/// A routing mode: how much estimated cost counts against the match score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mode {
    pub cost_weight: f64,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFile {
    name: String,
    #[serde(default)]
    source: String,
    default_mode: String,
    modes: std::collections::BTreeMap<String, Mode>,
    candidates: Vec<Candidate>,
}

/// A validated pool.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    pub source: String,
    pub default_mode: String,
    pub modes: std::collections::BTreeMap<String, Mode>,
    pub candidates: Vec<Candidate>,
    /// Short hash of the pool file's bytes.
    pub id: String,
}

impl Pool {
    /// Parses and checks a pool file; `file` names it in errors.
    pub fn from_yaml(bytes: &[u8], file: &str) -> Result<Pool> {
        let bad = |reason: String| RouterError::Pool { file: file.to_string(), reason };
        let text = std::str::from_utf8(bytes).map_err(|_| bad("is not UTF-8 text".into()))?;
        let parsed: PoolFile = serde_yaml_ng::from_str(text).map_err(|e| bad(e.to_string()))?;
        if parsed.candidates.is_empty() {
            return Err(bad("has no candidates".into()));
        }
        for (i, c) in parsed.candidates.iter().enumerate() {
            let at = format!("candidate {} (`{}`)", i + 1, c.id);
            if c.id.trim().is_empty() {
                return Err(bad(format!("candidate {} has an empty id", i + 1)));
            }
            if parsed.candidates[..i].iter().any(|o| o.id == c.id) {
                return Err(bad(format!("{at}: the id appears twice")));
            }
            if c.descriptor.trim().is_empty() {
                return Err(bad(format!("{at}: descriptor is empty")));
            }
            for (name, v) in [("price_per_1m_input", c.price_per_1m_input), ("price_per_1m_output", c.price_per_1m_output)] {
                if !v.is_finite() || v < 0.0 {
                    return Err(bad(format!("{at}: {name} is {v}, not a price")));
                }
            }
            if c.context_window == 0 {
                return Err(bad(format!("{at}: context_window is 0")));
            }
        }
        for (name, m) in &parsed.modes {
            if !m.cost_weight.is_finite() || m.cost_weight < 0.0 {
                return Err(bad(format!("mode `{name}`: cost_weight is {}, must be ≥ 0", m.cost_weight)));
            }
        }
        if !parsed.modes.contains_key(&parsed.default_mode) {
            return Err(bad(format!(
                "default_mode `{}` is not one of the modes ({})",
                parsed.default_mode,
                parsed.modes.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(Pool {
            name: parsed.name,
            source: parsed.source,
            default_mode: parsed.default_mode,
            modes: parsed.modes,
            candidates: parsed.candidates,
            id: pool_id(bytes),
        })
    }
}

/// The first 8 hex digits of the SHA-256 of the pool file's bytes.
pub fn pool_id(bytes: &[u8]) -> String {
    crate::gguf::hex(&Sha256::digest(bytes))[..8].to_string()
}
