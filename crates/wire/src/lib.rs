//! The messages between the router page (UI thread) and the router worker.
//!
//! Each message is one JSON text, so both sides agree by construction: the
//! same enum is compiled into the page and into the worker. The weights never
//! travel here: the worker fetches and caches the bundled checkpoint itself,
//! and a file the user picks is handed over as the browser's `File` object
//! beside the JSON (see [`FILE_FIELD`]), not through this codec.
//!
//! Work is a job ([`job`]): started with an id, answered with events that
//! carry it. The worker's side of that protocol is [`desk`], the page's is
//! [`session`]; both are plain data, tested natively.

pub mod deferred;
pub mod desk;
pub mod job;
pub mod session;

use bench::report::Provenance;
use bench::tasks::Task;
pub use router::ScoringChoice;
use router::{FlopModel, LoadTimings};
use serde::{Deserialize, Serialize};

pub use deferred::Deferred;
pub use job::{JobEvent, JobId, JobKind, JobProgress, JobRequest, JobResult, LoadProgress, LoadSource, LoadStage, Rejection, TaskPrompt};

/// The property of a posted object holding the JSON text.
pub const JSON_FIELD: &str = "json";
/// The property holding a user-picked `File`, when there is one.
pub const FILE_FIELD: &str = "file";

/// The checkpoints the site knows, served beside it as `models/manifest.json`:
/// the bundled one first, then any offered on request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub models: Vec<ManifestModel>,
    /// The trained heads the site serves, pinned by SHA-256, each for the
    /// backbone it was trained on.
    #[serde(default)]
    pub heads: Vec<ManifestHead>,
}

/// A trained scoring head the site serves beside a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestHead {
    /// Path relative to the site root, e.g. `head.smollm2-135m.json`.
    pub file: String,
    pub sha256: String,
    /// The checkpoint id (`gguf-…`) it was trained on: a head is used
    /// wherever that checkpoint is loaded, bundled or picked by the user.
    pub backbone_checkpoint_id: String,
    /// The backbone's name, for sentences.
    pub backbone: String,
}

impl Manifest {
    /// The head trained on this checkpoint, if the site serves one.
    pub fn head_for(&self, backbone_checkpoint_id: &str) -> Option<&ManifestHead> {
        self.heads.iter().find(|h| h.backbone_checkpoint_id == backbone_checkpoint_id)
    }
}

/// How a loaded checkpoint's decisions are scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scoring {
    /// The trained head the site pins for this checkpoint scores by default
    /// (the similarity scoring stays a choice per decision).
    Trained { head_id: String, file: String, trained_on: String, evaluation: Box<router::HeadEvaluation> },
    /// No head scores: why, and what the untrained scoring was measured to
    /// be worth on a backbone that has a head (`reference`), if any.
    Untrained {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reference: Option<Box<UntrainedReference>>,
    },
}

impl Default for Scoring {
    fn default() -> Self {
        Scoring::Untrained { reason: "the worker did not say".into(), reference: None }
    }
}

/// A backbone whose study measured the untrained scoring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UntrainedReference {
    pub backbone: String,
    pub evaluation: router::HeadEvaluation,
}

/// One bundled checkpoint, pinned by size and SHA-256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestModel {
    /// Path relative to the site root, e.g. `models/SmolLM2-135M-Instruct.Q4_1.gguf`.
    pub file: String,
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
    pub license: String,
    pub source: String,
    /// Fetched only when the user asks for it (a larger checkpoint under
    /// other terms; Gemma 3), and served only by sites built to include it.
    #[serde(default)]
    pub on_request: bool,
}

impl Manifest {
    /// The bundled checkpoint: the first one not offered on request.
    pub fn bundled(&self) -> Option<&ManifestModel> {
        self.models.iter().find(|m| !m.on_request)
    }

    /// The on-request checkpoint with this `file`, if the manifest lists one.
    pub fn on_request(&self, file: &str) -> Option<&ManifestModel> {
        self.models.iter().find(|m| m.on_request && m.file == file)
    }
}

/// Page → worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWorker {
    /// Start a job; every answer about it carries `id`.
    Start { id: JobId, job: JobRequest },
    /// Stop the job `id` after the call in progress (the long jobs check
    /// between calls); ignored when `id` is not the running job.
    Cancel { id: JobId },
    /// Report storage use and quota.
    Storage,
    /// Delete the cached checkpoint.
    ClearCache,
}

/// What failed outside any job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Concern {
    /// The browser's storage (the cache, its quota).
    Storage,
    /// A message the worker could not read.
    Message,
}

/// How the build running in the worker was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildInfo {
    pub version: String,
    pub git_revision: String,
    pub rustc: String,
    pub simd128: bool,
    /// Compute threads in this build.
    pub threads: usize,
    pub cross_origin_isolated: bool,
}

/// A routing mode the loaded pool offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModeInfo {
    pub name: String,
    pub cost_weight: f64,
    pub description: String,
}

/// Where the loaded weights came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The bundled checkpoint, downloaded from this site now.
    Downloaded,
    /// The bundled checkpoint, read from the browser's cache.
    Cached,
    /// A file the user picked.
    UserFile,
}

/// A loaded router, as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub provenance: Provenance,
    pub source: Source,
    pub bytes: u64,
    /// Full SHA-256 of the checkpoint bytes.
    pub sha256: String,
    /// Whether it was checked against the manifest (bundled files only).
    pub sha256_checked: bool,
    /// Reading the bytes (network, cache or disk).
    pub read_ms: f64,
    /// The SHA-256: for a site's checkpoint, the wait for the digest left
    /// after the weight load (WebCrypto computes it beside that load); for
    /// a user's file, hashing it before the load (its digest names it).
    pub verify_ms: f64,
    pub load: LoadTimings,
    /// The worker's wasm linear memory once the router is built: its
    /// high-water mark, since wasm memory never shrinks (what a second
    /// checkpoint costs is read here; wasm32 caps it at 4 GiB).
    #[serde(default)]
    pub wasm_memory_bytes: u64,
    /// The backbone's prefill FLOPs, for the bench's duration estimate.
    pub flop_model: FlopModel,
    pub modes: Vec<ModeInfo>,
    pub default_mode: String,
    pub candidates: Vec<String>,
    /// How its decisions are scored by default (deferred: the latency
    /// widget, which shares this message, never reads it, and the study's
    /// figures inside would cost its first load their decoder).
    pub scoring: Deferred<Scoring>,
}

/// Storage the site uses in this browser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StorageInfo {
    pub usage_bytes: Option<f64>,
    pub quota_bytes: Option<f64>,
    /// Whether the bundled checkpoint is in the cache.
    pub model_cached: bool,
    /// The checkpoints offered on request, each with whether it is cached.
    #[serde(default)]
    pub on_request: Vec<OfferedModel>,
    /// Why a figure is missing (no Cache API, not a secure context…).
    pub note: String,
}

/// A checkpoint the site offers on request, and whether this browser has
/// it cached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OfferedModel {
    pub model: ManifestModel,
    pub cached: bool,
}

/// Worker → page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromWorker {
    /// Sent once the worker runs: the task prompts to start from and the build.
    Hello {
        tasks: Vec<Task>,
        build: BuildInfo,
    },
    /// About the job `id`.
    Job {
        id: JobId,
        event: JobEvent,
    },
    Storage {
        storage: StorageInfo,
    },
    /// Something outside any job went wrong (a load that succeeded but
    /// could not be kept in the cache, an unreadable message).
    Problem {
        during: Concern,
        message: String,
    },
    /// The worker panicked; the page must replace it.
    Panicked {
        message: String,
    },
}

impl ToWorker {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("messages always serialise")
    }

    pub fn from_json(text: &str) -> Result<ToWorker, String> {
        serde_json::from_str(text).map_err(|e| format!("unreadable message to the worker: {e}"))
    }
}

impl FromWorker {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("messages always serialise")
    }

    pub fn from_json(text: &str) -> Result<FromWorker, String> {
        serde_json::from_str(text).map_err(|e| format!("unreadable message from the worker: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let bench =
            JobRequest::Bench { lengths: vec![15, 256], warmup: 1, iterations: 2, encode_iterations: None, mode: Some("economy".into()) };
        let to = ToWorker::Start { id: JobId(3), job: bench };
        assert_eq!(ToWorker::from_json(&to.to_json()).unwrap(), to);
        let widget = JobRequest::Bench { lengths: vec![15], warmup: 0, iterations: 1, encode_iterations: Some(0), mode: None };
        let to = ToWorker::Start { id: JobId(4), job: widget };
        assert_eq!(ToWorker::from_json(&to.to_json()).unwrap(), to);
        let from = FromWorker::Job { id: JobId(4), event: JobEvent::Failed { message: "x.gguf: not a valid GGUF checkpoint".into() } };
        assert_eq!(FromWorker::from_json(&from.to_json()).unwrap(), from);
        let busy = FromWorker::Job { id: JobId(5), event: JobEvent::Rejected(Rejection::Busy { running: JobKind::Decide }) };
        assert_eq!(FromWorker::from_json(&busy.to_json()).unwrap(), busy);
        assert!(ToWorker::from_json("{\"type\":\"launch\"}").unwrap_err().starts_with("unreadable message to the worker"));
        let bundled = ToWorker::from_json(r#"{"type":"start","id":1,"job":{"job":"load","source":{"from":"site"}}}"#).unwrap();
        assert_eq!(
            bundled,
            ToWorker::Start { id: JobId(1), job: JobRequest::Load { source: LoadSource::Site { on_request: None }, precision: None } }
        );
        let load =
            JobRequest::Load { source: LoadSource::File { name: "m.gguf".into() }, precision: Some(router::Precision::DequantizedF32) };
        let to = ToWorker::Start { id: JobId(2), job: load };
        assert_eq!(ToWorker::from_json(&to.to_json()).unwrap(), to);
        let serve = JobRequest::Serve {
            runs: vec![serving::ServeSettings { chunk: Some(128), ..Default::default() }],
            tasks: vec![TaskPrompt { id: "t".into(), prompt: "fix it".into() }],
            trace: None,
            mode: None,
        };
        assert_eq!(serve.kind(), JobKind::Serve);
        let to = ToWorker::Start { id: JobId(6), job: serve };
        assert_eq!(ToWorker::from_json(&to.to_json()).unwrap(), to);
        let stage = LoadProgress { stage: LoadStage::Build(router::BuildStage::Descriptors), done: 2, total: Some(8) };
        assert_eq!(stage.label(), "encoding candidate descriptors (3/8)");
        assert!(!stage.stage.counts_bytes() && LoadStage::Downloading.counts_bytes());
        let progress = FromWorker::Job { id: JobId(1), event: JobEvent::Progress(JobProgress::Load(stage)) };
        assert_eq!(FromWorker::from_json(&progress.to_json()).unwrap(), progress);
        // The generating studies' deferred plan and runs, inside the tagged messages.
        let (plan, _) = bench::decode_study::GenerationForm::default().parse().unwrap();
        let to =
            ToWorker::Start { id: JobId(7), job: JobRequest::ServeGenerate { plan: Deferred::encode(&plan), output_lengths: vec![8, 16] } };
        let back = ToWorker::from_json(&to.to_json()).unwrap();
        assert_eq!(back, to);
        let ToWorker::Start { job: JobRequest::ServeGenerate { plan: sent, .. }, .. } = back else { unreachable!() };
        assert_eq!(sent.decode().unwrap(), plan);
        let runs: Vec<bench::decode_study::GenerationRun> = Vec::new();
        let result =
            JobResult::ServedGeneration { checkpoint_id: "gguf-1".into(), precision: "int8".into(), runs: Deferred::encode(&runs) };
        let from = FromWorker::Job { id: JobId(7), event: JobEvent::Finished { result, cancelled: false } };
        assert_eq!(FromWorker::from_json(&from.to_json()).unwrap(), from);
        // The decode-speed bench's plan and rows, deferred the same way.
        let plan = bench::decode_speed::DecodePlan::default();
        let to = ToWorker::Start { id: JobId(9), job: JobRequest::DecodeSpeed { plan: Deferred::encode(&plan) } };
        let back = ToWorker::from_json(&to.to_json()).unwrap();
        let ToWorker::Start { job: JobRequest::DecodeSpeed { plan: sent }, .. } = back else { unreachable!() };
        assert_eq!(sent.decode().unwrap(), plan);
        let row = bench::decode_speed::DecodeRow {
            context: 256,
            batch: 8,
            step_ms: bench::Summary { n: 1, p50: 30.0, p95: 30.0, min: 30.0, max: 30.0, mean: 30.0 },
            projections_ms: 15.0,
            attention_ms: 8.0,
            lm_head_ms: 7.0,
            tokens_per_s: 266.7,
            bytes_per_step: 264_000_000,
        };
        let progress = FromWorker::Job {
            id: JobId(9),
            event: JobEvent::Progress(JobProgress::DecodeRow { done: 1, total: 5, row: Deferred::encode(&row) }),
        };
        assert_eq!(FromWorker::from_json(&progress.to_json()).unwrap(), progress);
        // A decide asking for the untrained scoring says so; the default
        // (the trained head) is left out of the message.
        let decide = |scoring| JobRequest::Decide { conversation: router::Conversation::user("fix it"), mode: None, scoring };
        let to = ToWorker::Start { id: JobId(8), job: decide(ScoringChoice::Similarity) };
        assert!(to.to_json().contains(r#""scoring":"similarity""#));
        assert_eq!(ToWorker::from_json(&to.to_json()).unwrap(), to);
        let to = ToWorker::Start { id: JobId(9), job: decide(ScoringChoice::Trained) };
        assert!(!to.to_json().contains("scoring"));
        assert_eq!(ToWorker::from_json(&to.to_json()).unwrap(), to);
        // A model that runs untrained, with the reason and a reference.
        let mut info = testing::model_info();
        let untrained = Scoring::Untrained {
            reason: "the site serves no trained head for checkpoint gguf-0".into(),
            reference: Some(Box::new(UntrainedReference { backbone: "SmolLM2".into(), evaluation: router::HeadEvaluation::default() })),
        };
        info.scoring = Deferred::encode(&untrained);
        let loaded =
            FromWorker::Job { id: JobId(1), event: JobEvent::Finished { result: JobResult::Loaded(Box::new(info)), cancelled: false } };
        assert_eq!(FromWorker::from_json(&loaded.to_json()).unwrap(), loaded);
    }

    #[test]
    fn the_site_manifest_has_the_bundled_checkpoint_first_and_gemma_on_request() {
        let manifest: Manifest = serde_json::from_str(include_str!("../../../www/models/manifest.json")).unwrap();
        assert_eq!(manifest.bundled().unwrap().file, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
        let gemma = manifest.on_request("models/gemma-3-270m-q4_k_m.gguf").unwrap();
        assert!(gemma.sha256.starts_with("a5fd3b62") && gemma.license.contains("Gemma"));
        // The bundled file is not loadable as an on-request one, and no other path is.
        assert!(manifest.on_request("models/SmolLM2-135M-Instruct.Q4_1.gguf").is_none());
        assert!(manifest.on_request("https://example.com/x.gguf").is_none());
        // Each bundled backbone's head is pinned, found by the checkpoint id
        // (`gguf-` and the GGUF's first 8 hex digits) it was trained on.
        for model in &manifest.models {
            let id = format!("gguf-{}", &model.sha256[..8]);
            let head = manifest.head_for(&id).unwrap_or_else(|| panic!("no head for {}", model.file));
            assert_eq!(head.sha256.len(), 64);
            assert!(!head.file.contains('/') && head.file.starts_with("head.") && head.file.ends_with(".json"));
        }
        assert!(manifest.head_for("gguf-00000000").is_none());
    }
}

/// Values for the tests of this crate's modules.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub fn build_info() -> BuildInfo {
        BuildInfo {
            version: "0".into(),
            git_revision: "test".into(),
            rustc: "rustc".into(),
            simd128: true,
            threads: 1,
            cross_origin_isolated: false,
        }
    }

    pub fn model_info() -> ModelInfo {
        ModelInfo {
            provenance: Provenance::default(),
            source: Source::Cached,
            bytes: 1,
            sha256: "00".into(),
            sha256_checked: true,
            read_ms: 1.0,
            verify_ms: 1.0,
            load: LoadTimings::default(),
            wasm_memory_bytes: 0,
            flop_model: FlopModel::default(),
            modes: Vec::new(),
            default_mode: "balanced".into(),
            candidates: Vec::new(),
            scoring: Deferred::encode(&Scoring::default()),
        }
    }
}
