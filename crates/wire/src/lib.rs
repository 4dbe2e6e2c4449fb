//! The messages between the router page (UI thread) and the router worker.
//!
//! Each message is one JSON text, so both sides agree by construction: the
//! same enum is compiled into the page and into the worker. The weights never
//! travel here: the worker fetches and caches the bundled checkpoint itself,
//! and a file the user picks is handed over as the browser's `File` object
//! beside the JSON (see [`FILE_FIELD`]), not through this codec.

use bench::prefix::PrefixReport;
use bench::quality::RoutedTask;
use bench::report::{Provenance, Report};
use bench::serve::{QueueSample, RunSummary, ServeSettings};
use bench::tasks::Task;
use router::{Conversation, Decision, FlopModel, GemmProbe, LoadTimings, Precision};
use serde::{Deserialize, Serialize};

/// The property of a posted object holding the JSON text.
pub const JSON_FIELD: &str = "json";
/// The property holding a user-picked `File`, when there is one.
pub const FILE_FIELD: &str = "file";

/// The checkpoints the site knows, served beside it as `models/manifest.json`:
/// the bundled one first, then any offered on request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub models: Vec<ManifestModel>,
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
    /// Load a checkpoint the site's manifest lists, from the browser's cache
    /// when it is there: the bundled one, or the on-request one whose
    /// manifest `file` this names. Nothing else is ever fetched.
    /// `precision` chooses how the weights compute (the link's
    /// `precision=`); absent, the router's default.
    LoadBundled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_request: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        precision: Option<Precision>,
    },
    /// Load the GGUF `File` attached to this message.
    LoadFile {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        precision: Option<Precision>,
    },
    Decide {
        conversation: Conversation,
        mode: Option<String>,
    },
    /// Run the cold/warm latency protocol. `encode_iterations` is how many
    /// timed `encode_and_score` calls follow the decides at each length:
    /// absent, as many as `iterations` (the page and bench-decide); the
    /// latency widget sends 0, since it shows decide only and a reader waits
    /// for every call.
    Bench {
        lengths: Vec<usize>,
        warmup: usize,
        iterations: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encode_iterations: Option<usize>,
        mode: Option<String>,
    },
    /// Run the field guide's prefix-reuse protocol (note 04) with a long
    /// conversation of `long_tokens` tokens and `iterations` timed
    /// follow-ups; Cancel stops it between calls.
    PrefixProtocol {
        long_tokens: usize,
        iterations: usize,
    },
    /// Stop a running bench or protocol after the call in progress.
    Cancel,
    /// Time the prefill's projection GEMM (`[m × k]` by a `[n × k]` weight).
    GemmProbe {
        m: usize,
        k: usize,
        n: usize,
        repeats: usize,
    },
    /// Route these tasks through `decide` in every mode: with the
    /// similarity scoring, then with the trained head in `head_json` (a
    /// head file's text) when given. One `TaskRouted` per task; Cancel
    /// stops between tasks.
    RouteTasks {
        tasks: Vec<TaskPrompt>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head_json: Option<String>,
    },
    /// The serving test (note 06): each of `runs` in turn, with open-loop
    /// arrivals of `tasks` (Poisson from each run's seed, or the `trace`
    /// file's text replayed) against this worker's one engine, in real
    /// time. Cancel stops between work units.
    Serve {
        runs: Vec<ServeSettings>,
        tasks: Vec<TaskPrompt>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// Report storage use and quota.
    Storage,
    /// Delete the cached checkpoint.
    ClearCache,
}

/// A task to route: its id (to look its outcomes up) and prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPrompt {
    pub id: String,
    pub prompt: String,
}

/// What the worker is doing when something fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    Load,
    Decide,
    Bench,
    Storage,
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
    pub on_request: Vec<(ManifestModel, bool)>,
    /// Why a figure is missing (no Cache API, not a secure context…).
    pub note: String,
}

/// Worker → page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromWorker {
    /// Sent once the worker runs: the task prompts to start from and the build.
    Started {
        tasks: Vec<Task>,
        build: BuildInfo,
    },
    /// Loading progress: `stage` names the step; bytes or items when known.
    LoadProgress {
        stage: String,
        done: u64,
        total: Option<u64>,
    },
    Loaded {
        model: Box<ModelInfo>,
    },
    Storage {
        storage: StorageInfo,
    },
    Decided {
        decision: Decision,
        /// The worker's wasm memory after the decision (its high-water
        /// mark: wasm memory never shrinks), so a long session can see it
        /// stays bounded.
        #[serde(default)]
        wasm_memory_bytes: u64,
    },
    GemmProbed {
        probe: GemmProbe,
    },
    /// A bench started; the prompts' sizes, and whether the router was
    /// reloaded first so the first call is cold.
    BenchStarted {
        prompts: Vec<(usize, usize)>,
        reloaded: bool,
        overall: usize,
    },
    BenchStep {
        prompt_tokens: usize,
        phase: String,
        ms: f64,
        done: usize,
        per_length: usize,
        overall_done: usize,
        overall: usize,
    },
    /// The report of what was measured (partial when cancelled).
    BenchDone {
        report: Box<Report>,
        cancelled: bool,
    },
    /// The prefix protocol ran one more step.
    PrefixStep {
        done: usize,
        total: usize,
        label: String,
    },
    /// What the prefix protocol measured (partial when cancelled).
    PrefixDone {
        report: Box<PrefixReport>,
        cancelled: bool,
    },
    /// One more task of a `RouteTasks` was routed.
    TaskRouted {
        done: usize,
        total: usize,
        routed: RoutedTask,
    },
    /// A `RouteTasks` ended (early when cancelled); the ids name the
    /// checkpoint and head its decisions came from.
    RouteDone {
        checkpoint_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head_id: Option<String>,
        cancelled: bool,
    },
    /// A serving test began: the prompt set's size, the runs, and how long
    /// one whole decide of the heaviest prompt took with nothing queued
    /// (the worker's warm-up; no step of the test should take much longer,
    /// so the page sizes its Cancel grace from it).
    ServeStarted {
        prompts: usize,
        runs: usize,
        unloaded_heaviest_ms: f64,
    },
    /// The running serving run's state, at most every 100 ms and at each
    /// idle wait: what the live queue chart draws.
    ServeTick {
        run: usize,
        sample: QueueSample,
        finished: usize,
        arrivals: usize,
    },
    /// One run of a serving test ended (`cancelled` runs stop early and
    /// say so in their label): its figures only; every record arrives in
    /// `ServeDone`'s report, so the embedded widget, which shares this
    /// type, does not carry a decoder for them.
    ServeRunDone {
        index: usize,
        label: String,
        settings: ServeSettings,
        summary: Box<RunSummary>,
    },
    /// The serving test ended: the report with its `serve` section.
    ServeDone {
        report: Box<Report>,
        cancelled: bool,
    },
    Failed {
        during: Activity,
        message: String,
    },
    /// The worker panicked; the page must restart it.
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
        let to =
            ToWorker::Bench { lengths: vec![15, 256], warmup: 1, iterations: 2, encode_iterations: None, mode: Some("economy".into()) };
        assert_eq!(ToWorker::from_json(&to.to_json()).unwrap(), to);
        let widget = ToWorker::Bench { lengths: vec![15], warmup: 0, iterations: 1, encode_iterations: Some(0), mode: None };
        assert_eq!(ToWorker::from_json(&widget.to_json()).unwrap(), widget);
        let from = FromWorker::Failed { during: Activity::Load, message: "x.gguf: not a valid GGUF checkpoint".into() };
        assert_eq!(FromWorker::from_json(&from.to_json()).unwrap(), from);
        assert!(ToWorker::from_json("{\"type\":\"launch\"}").unwrap_err().starts_with("unreadable message to the worker"));
        assert_eq!(
            ToWorker::from_json("{\"type\":\"load_bundled\"}").unwrap(),
            ToWorker::LoadBundled { on_request: None, precision: None }
        );
        let load = ToWorker::LoadFile { name: "m.gguf".into(), precision: Some(router::Precision::DequantizedF32) };
        assert_eq!(ToWorker::from_json(&load.to_json()).unwrap(), load);
        let serve = ToWorker::Serve {
            runs: vec![bench::serve::ServeSettings { chunk: Some(128), ..Default::default() }],
            tasks: vec![TaskPrompt { id: "t".into(), prompt: "fix it".into() }],
            trace: None,
            mode: None,
        };
        assert_eq!(ToWorker::from_json(&serve.to_json()).unwrap(), serve);
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
    }
}
