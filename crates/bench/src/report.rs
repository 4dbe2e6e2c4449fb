//! The versioned report: an envelope (environment, provenance, load
//! timings) around the latency study (protocol and every raw sample, cold
//! and warm kept apart) and the other studies' typed sections, each type
//! owned by its study's module.
//!
//! The envelope is generic over its sections: [`Report`] carries every
//! study's; [`LatencyReport`] carries none, and is what the latency widget
//! reads (shared links, its worker's bench), so its bundle links no other
//! study's decoder. Both read the same JSON: a section a type does not
//! hold is skipped.

use std::collections::BTreeMap;

use router::{LoadTimings, StageTimings};
use serde::{Deserialize, Serialize};

pub use crate::fmt::format_ms;
use crate::stats::Summary;

/// Schema name and version. Bump the version on any incompatible change.
/// Version 2 added the prefix-reuse protocol (`prefix`) and the cache's
/// `lookup_ms` and `insert_ms` stages; a version-1 report reads as a
/// version-2 one without them. Version 3 added the routing-quality study
/// (`quality`); older reports read as version 3 without it. Version 4
/// added the serving test (`serve`); older reports read without it.
/// Version 5 added the whole request at the client (`client`: the page's
/// routed requests, the load generator's runs); older reports read
/// without it.
pub const SCHEMA: &str = "workbench.router-latency/5";

/// Every schema a report may be read from.
pub const SCHEMAS_READ: [&str; 5] =
    ["workbench.router-latency/1", "workbench.router-latency/2", "workbench.router-latency/3", "workbench.router-latency/4", SCHEMA];

/// Where a measurement was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// `native` or `browser`.
    pub runtime: String,
    /// Target triple, e.g. `x86_64-unknown-linux-gnu` or `wasm32-unknown-unknown`.
    pub target: String,
    pub command_line: Vec<String>,
    /// Component versions: workbench, candle, tokenizers, rustc.
    pub versions: BTreeMap<String, String>,
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

/// A report: the envelope, the latency study's protocol and results (empty
/// for a report of another study), and the sections `S`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<S> {
    pub schema: String,
    pub environment: Environment,
    pub provenance: Provenance,
    pub protocol: ProtocolRecord,
    pub load: LoadTimings,
    pub results: Vec<LengthResult>,
    #[serde(flatten)]
    pub studies: S,
}

/// A report with every study's section.
pub type Report = Envelope<Studies>;

/// A report read for its latency study alone (the latency widget's).
pub type LatencyReport = Envelope<NoStudies>;

/// No section beyond the latency study.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NoStudies {}

/// The studies a report may carry beside the latency protocol, each typed
/// by its own module.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Studies {
    /// The prefix-reuse protocol (`bench-decide --prefix-protocol`), when run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<crate::prefix::PrefixReport>,
    /// Stepped against plain left truncation (`bench-decide --truncation-study`), when run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncation: Option<crate::truncation::TruncationStudy>,
    /// Routing quality on CodeRouterBench OOD176 (`bench-decide --quality`), when run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<crate::quality::QualityStudy>,
    /// The serving test (`bench-decide --serve`, or the page's Serving panel), when run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<crate::serve::ServeStudy>,
    /// A cheaper precision's decisions against f32's through the same
    /// trained head (`bench-decide --precision-agreement`), when run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<crate::quality::agreement::PrecisionAgreement>,
    /// The whole request at the client (the page's routed requests), when run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<crate::client_run::ClientStudy>,
}

impl<S> Envelope<S> {
    /// The same envelope and latency study with other sections.
    pub fn with_studies<T>(self, studies: T) -> Envelope<T> {
        Envelope {
            schema: self.schema,
            environment: self.environment,
            provenance: self.provenance,
            protocol: self.protocol,
            load: self.load,
            results: self.results,
            studies,
        }
    }
}

impl<S> Envelope<S> {
    /// A report that carries a study (quality, serving) and no latency
    /// protocol: `studies` holds its section.
    pub fn for_study(
        environment: Environment,
        provenance: Provenance,
        load: LoadTimings,
        prompts_source: String,
        studies: S,
    ) -> Envelope<S> {
        Envelope {
            schema: SCHEMA.into(),
            environment,
            provenance,
            protocol: ProtocolRecord { lengths: Vec::new(), warmup: 0, iterations: 0, prompts_source },
            load,
            results: Vec::new(),
            studies,
        }
    }
}

fn group(n: usize) -> String {
    kv::units::group_digits(n as u128)
}

/// The versions a report records; `rustc` comes from the caller's build script.
pub fn component_versions(rustc: &str) -> BTreeMap<String, String> {
    let mut versions = BTreeMap::new();
    versions.insert("workbench".into(), env!("CARGO_PKG_VERSION").to_string());
    versions.insert("candle-core".into(), CANDLE_VERSION.into());
    versions.insert("tokenizers".into(), TOKENIZERS_VERSION.into());
    versions.insert("rustc".into(), rustc.to_string());
    versions
}

/// The versions Cargo.lock resolves; a test below fails when they drift.
pub const CANDLE_VERSION: &str = "0.11.1";
pub const TOKENIZERS_VERSION: &str = "0.23.2";

#[cfg(feature = "engine")]
impl Provenance {
    /// What a loaded router was built from. `checkpoint_file` is the name
    /// the user knows the file by (a path natively, a file name in the page).
    pub fn of(router: &router::Router, checkpoint_file: &str) -> Provenance {
        let h = &router.backbone.hparams;
        Provenance {
            checkpoint_id: router.checkpoint_id().to_string(),
            checkpoint_file: checkpoint_file.to_string(),
            pool_id: router.pool.id.clone(),
            pool_name: router.pool.name.clone(),
            backbone: format!(
                "{} ({} layers, hidden {}, {} heads / {} KV heads)",
                h.architecture.name, h.layers, h.hidden, h.heads, h.kv_heads
            )
            .to_lowercase(),
            precision: router.precision_label(),
            device: "cpu".into(),
            tokenizer: router.tokenizer.source.clone(),
            candidates: router.pool.candidates.len(),
            router_max_tokens: router.config().max_tokens,
        }
    }
}

/// The columns of the field guide's latency table.
pub const TABLE_HEADER: [&str; 6] = ["prompt tokens", "characters", "p50 (warm)", "p95 (warm)", "min–max (warm)", "first call (cold)"];

impl<S> Envelope<S> {
    /// The table's cells, one row per length, in [`TABLE_HEADER`] order.
    pub fn rows(&self) -> Vec<[String; 6]> {
        self.results
            .iter()
            .map(|r| {
                let (p50, p95, range) = match &r.warm {
                    Some(s) => (format_ms(s.p50), format_ms(s.p95), format!("{} – {}", format_ms(s.min), format_ms(s.max))),
                    None => ("–".into(), "–".into(), "–".into()),
                };
                [group(r.prompt_tokens), group(r.characters), p50, p95, range, format_ms(r.cold_ms)]
            })
            .collect()
    }

    /// The field guide's table: prompt tokens | characters | p50 warm | p95
    /// warm | min–max | first call cold.
    pub fn table(&self) -> String {
        let mut rows = vec![TABLE_HEADER.map(String::from)];
        rows.extend(self.rows());
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
            format_ms(self.load.weights_ms),
            format_ms(self.load.tokenizer_ms),
            format_ms(self.load.descriptors_ms),
        )
    }

    /// encode+scores next to decide, so the two boundaries are never confused.
    pub fn boundaries(&self) -> String {
        self.results
            .iter()
            .filter_map(|r| {
                let (d, e) = (r.warm?, r.encode_and_score?);
                Some(format!(
                    "{} tokens: decide p50 {} vs encode+scores p50 {}",
                    group(r.prompt_tokens),
                    format_ms(d.p50),
                    format_ms(e.p50)
                ))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The versions every report records are the ones actually built.
    #[test]
    fn recorded_versions_are_the_locked_ones() {
        let lock = include_str!("../../../Cargo.lock");
        for (name, version) in [("candle-core", CANDLE_VERSION), ("tokenizers", TOKENIZERS_VERSION)] {
            let entry = format!("name = \"{name}\"\nversion = \"{version}\"\n");
            assert!(lock.contains(&entry), "Cargo.lock does not lock {name} {version}");
        }
    }
}
