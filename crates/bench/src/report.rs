//! The versioned latency report: environment, provenance, protocol, load
//! timings and every raw sample, cold and warm kept apart.

use router::{LoadTimings, StageTimings};
use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// Schema name and version. Bump the version on any incompatible change.
pub const SCHEMA: &str = "workbench.router-latency/1";

/// Where a measurement was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// `native` or `browser`.
    pub runtime: String,
    /// Target triple, e.g. `x86_64-unknown-linux-gnu` or `wasm32-unknown-unknown`.
    pub target: String,
    pub command_line: Vec<String>,
    /// Component versions: workbench, candle, tokenizers, rustc.
    pub versions: std::collections::BTreeMap<String, String>,
    pub git_revision: String,
    pub cpu_model: String,
    /// Threads the compute may use.
    pub threads: usize,
    pub os: String,
    /// Browser only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_concurrency: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simd128: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cross_origin_isolated: Option<bool>,
    /// When the run started, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
}

/// What was measured: the artefacts and settings behind the numbers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub checkpoint_id: String,
    pub checkpoint_file: String,
    pub pool_id: String,
    pub pool_name: String,
    /// e.g. `llama, 30 layers, hidden 576, 9 heads / 3 KV heads`.
    pub backbone: String,
    pub precision: String,
    /// Where the weights actually reside and run (`cpu`).
    pub device: String,
    pub tokenizer: String,
    pub candidates: usize,
    pub router_max_tokens: usize,
}

/// The protocol as run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolRecord {
    pub lengths: Vec<usize>,
    pub warmup: usize,
    pub iterations: usize,
    /// Where the prompts came from.
    pub prompts_source: String,
}

/// One prompt length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthResult {
    /// Tokens prefilled (the routing text after truncation).
    pub prompt_tokens: usize,
    /// Characters of the user turn.
    pub characters: usize,
    pub truncated: bool,
    /// The first `decide` at this length in this process, before any warm-up.
    pub cold_ms: f64,
    pub cold_stages: StageTimings,
    pub warmup_ms: Vec<f64>,
    /// Timed iterations of the complete `decide`.
    pub warm_ms: Vec<f64>,
    pub warm: Option<Summary>,
    /// Stage timings of every timed iteration.
    pub warm_stages: Vec<StageTimings>,
    /// Timed `encode_and_score` calls (the microbenchmark boundary), after the decide iterations.
    pub encode_and_score_ms: Vec<f64>,
    pub encode_and_score: Option<Summary>,
    /// The top candidate of the cold call, to show what was decided.
    pub top_candidate: String,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    pub environment: Environment,
    pub provenance: Provenance,
    pub protocol: ProtocolRecord,
    pub load: LoadTimings,
    pub results: Vec<LengthResult>,
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn group(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Report {
    /// The field guide's table: prompt tokens | characters | p50 warm | p95
    /// warm | min–max | first call cold.
    pub fn table(&self) -> String {
        let mut rows = vec![["prompt tokens", "characters", "p50 (warm)", "p95 (warm)", "min–max (warm)", "first call (cold)"]
            .map(String::from)
            .to_vec()];
        for r in &self.results {
            let (p50, p95, range) = match &r.warm {
                Some(s) => (ms(s.p50), ms(s.p95), format!("{} – {}", ms(s.min), ms(s.max))),
                None => ("–".into(), "–".into(), "–".into()),
            };
            rows.push(vec![group(r.prompt_tokens), group(r.characters), p50, p95, range, ms(r.cold_ms)]);
        }
        let widths: Vec<usize> = (0..6).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        rows.iter()
            .map(|r| r.iter().zip(&widths).map(|(cell, w)| format!("{cell:>w$}", w = w)).collect::<Vec<_>>().join(" | "))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The conditions line printed under the table.
    pub fn conditions(&self) -> String {
        let p = &self.provenance;
        format!(
            "Conditions: backbone {}, device {}, precision {}, {} candidates, {} iterations plus {} warm-ups, router_max_tokens {}, checkpoint {}, pool {} ({}, {}). Weight load {} and tokenizer init {}, once per process; descriptors encoded once per pool load in {}.",
            p.backbone,
            p.device,
            p.precision,
            p.candidates,
            self.protocol.iterations,
            self.protocol.warmup,
            group(p.router_max_tokens),
            p.checkpoint_id,
            p.pool_id,
            self.environment.runtime,
            self.environment.target,
            ms(self.load.weights_ms),
            ms(self.load.tokenizer_ms),
            ms(self.load.descriptors_ms),
        )
    }

    /// encode+scores next to decide, so the two boundaries are never confused.
    pub fn boundaries(&self) -> String {
        self.results
            .iter()
            .filter_map(|r| {
                let (d, e) = (r.warm?, r.encode_and_score?);
                Some(format!("{} tokens: decide p50 {} vs encode+scores p50 {}", group(r.prompt_tokens), ms(d.p50), ms(e.p50)))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}
