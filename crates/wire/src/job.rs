//! The one job protocol: every piece of work the worker does for the page
//! (loading a checkpoint, a decide, the GEMM probe, the bench, the prefix
//! protocol, routing tasks, the serving test, and generation next) is
//! started as [`ToWorker::Start`](crate::ToWorker::Start) with an id the
//! page chose, and every answer is a [`JobEvent`] carrying that id:
//! `Started`, any number of `Progress`, then exactly one of `Finished`,
//! `Rejected` or `Failed`.
//!
//! One shape for every job is what lets the page keep one session
//! ([`crate::session::Session`]) instead of a flag per job, and lets the
//! worker refuse work while busy with a typed [`Rejection`] the page can tell
//! from a failure (a Load refused during a Decide is not a failed load).

use bench::client_run::RequestAccount;
use bench::decode_speed::{DecodePlan, DecodeRow, DecodeSpeed};
use bench::decode_study::{GenerationPlan, GenerationRun};
use bench::prefix::PrefixReport;
use bench::quality::RoutedTask;
use bench::report::LatencyReport;
use bench::roofline::DeviceCeilings;
use bench::serve::ServeStudy;
use router::sampling::{GenerationSummary, SamplingParams};
use router::{BuildStage, Conversation, Decision, GemmProbe, Neighbour, Precision};
use serde::{Deserialize, Serialize};
use serving::{QueueSample, RunSummary, ServeSettings};

use crate::{Deferred, ModelInfo, ScoringChoice};

/// Names one job for its whole life: the page picks it (counting up), the
/// worker repeats it in every event, and Cancel names it, so an answer to an
/// earlier job, or to a worker since replaced, is never taken for the
/// running one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u32);

/// What kind of work a job is: what the page dispatches events on, and
/// what a busy worker says it is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    Load,
    Decide,
    GemmProbe,
    Bench,
    Prefix,
    Route,
    Serve,
    Generate,
    ServeGenerate,
    Request,
    DecodeSpeed,
    Roofline,
}

impl JobKind {
    /// The job in a few words, for a sentence such as "busy with …".
    pub fn phrase(self) -> &'static str {
        match self {
            JobKind::Load => "loading a checkpoint",
            JobKind::Decide => "a decide",
            JobKind::GemmProbe => "the matmul speed probe",
            JobKind::Bench => "the latency bench",
            JobKind::Prefix => "the prefix protocol",
            JobKind::Route => "routing the evaluation tasks",
            JobKind::Serve => "the serving test",
            JobKind::Generate => "a generation",
            JobKind::ServeGenerate => "the serving test with generation",
            JobKind::Request => "a routed request",
            JobKind::DecodeSpeed => "the decode-speed bench",
            JobKind::Roofline => "measuring this device's ceilings",
        }
    }

    /// Whether Cancel means anything: the long jobs check it between
    /// calls; a load, a decide and the probe are each one call.
    pub fn cancellable(self) -> bool {
        matches!(
            self,
            JobKind::Bench
                | JobKind::Prefix
                | JobKind::Route
                | JobKind::Serve
                | JobKind::Generate
                | JobKind::ServeGenerate
                | JobKind::Request
                | JobKind::DecodeSpeed
        )
    }
}

/// Which checkpoint a load reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum LoadSource {
    /// A checkpoint the site's manifest lists, from the browser's cache when
    /// it is there: the bundled one (`on_request` absent), or the on-request
    /// one whose manifest `file` this names. Nothing else is ever fetched.
    Site {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_request: Option<String>,
    },
    /// The GGUF `File` attached beside the message (see [`crate::FILE_FIELD`]).
    File { name: String },
}

/// A job's inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "job", rename_all = "snake_case")]
pub enum JobRequest {
    /// Load a checkpoint; `precision` chooses how the weights compute (the
    /// link's `precision=`); absent, the router's default.
    Load {
        source: LoadSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        precision: Option<Precision>,
    },
    Decide {
        conversation: Conversation,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
        /// The untrained similarity instead of the checkpoint's head.
        #[serde(default, skip_serializing_if = "ScoringChoice::is_trained")]
        scoring: ScoringChoice,
    },
    /// Time the prefill's projection GEMM (`[m × k]` by a `[n × k]` weight).
    GemmProbe { m: usize, k: usize, n: usize, repeats: usize },
    /// The cold/warm latency protocol. `encode_iterations` is how many timed
    /// `encode_and_score` calls follow the decides at each length: absent,
    /// as many as `iterations` (the page and bench-decide); the latency
    /// widget sends 0, since it shows decide only and a reader waits for
    /// every call.
    Bench {
        lengths: Vec<usize>,
        warmup: usize,
        iterations: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encode_iterations: Option<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// The field guide's prefix-reuse protocol (note 04) with a long
    /// conversation of `long_tokens` tokens and `iterations` timed follow-ups.
    Prefix { long_tokens: usize, iterations: usize },
    /// Route these tasks through `decide` in every mode: with the similarity
    /// scoring, then with the trained head in `head_json` (a head file's
    /// text) when given.
    Route {
        tasks: Vec<TaskPrompt>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head_json: Option<String>,
    },
    /// The serving test (note 06): each of `runs` in turn, with open-loop
    /// arrivals of `tasks` (Poisson from each run's seed, or the `trace`
    /// file's text replayed) against this worker's one engine, in real time.
    Serve {
        runs: Vec<ServeSettings>,
        tasks: Vec<TaskPrompt>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// Generate the assistant's answer to `conversation` (in the loaded
    /// checkpoint's chat layout), streaming each piece of text as a
    /// [`JobProgress::Generated`].
    Generate { conversation: Conversation, params: SamplingParams },
    /// Note 06's generating experiment: each run of `plan` in real time on
    /// this worker's engine, requests drawn from the worker's task prompts
    /// with output lengths drawn from `output_lengths`.
    ServeGenerate { plan: Deferred<GenerationPlan>, output_lengths: Vec<usize> },
    /// The whole request (the field guide's third boundary): `decide`
    /// routes `conversation` (in `mode`, or the pool's default), then this
    /// worker's engine, standing in for the chosen candidate, generates and
    /// streams the answer ([`JobProgress::Routed`], then
    /// [`JobProgress::Generated`] a token).
    Request {
        conversation: Conversation,
        params: SamplingParams,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<String>,
    },
    /// Decode speed on this worker's engine (`bench::decode_speed`): the
    /// plan's rows one at a time, each posted as it ends
    /// ([`JobProgress::DecodeRow`]), prompts cut from the worker's tasks.
    DecodeSpeed { plan: Deferred<DecodePlan> },
    /// This device's ceilings for the loaded backbone
    /// (`bench::roofline::measure`): the f32 and integer GEMM at its FFN
    /// shape and memory bandwidth, for the roofline of the page's last
    /// decide.
    Roofline,
}

impl JobRequest {
    pub fn kind(&self) -> JobKind {
        match self {
            JobRequest::Load { .. } => JobKind::Load,
            JobRequest::Decide { .. } => JobKind::Decide,
            JobRequest::GemmProbe { .. } => JobKind::GemmProbe,
            JobRequest::Bench { .. } => JobKind::Bench,
            JobRequest::Prefix { .. } => JobKind::Prefix,
            JobRequest::Route { .. } => JobKind::Route,
            JobRequest::Serve { .. } => JobKind::Serve,
            JobRequest::Generate { .. } => JobKind::Generate,
            JobRequest::ServeGenerate { .. } => JobKind::ServeGenerate,
            JobRequest::Request { .. } => JobKind::Request,
            JobRequest::DecodeSpeed { .. } => JobKind::DecodeSpeed,
            JobRequest::Roofline => JobKind::Roofline,
        }
    }
}

/// A task to route: its id (to look its outcomes up) and prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPrompt {
    pub id: String,
    pub prompt: String,
}

/// One answer about one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobEvent {
    /// The worker took the job; from here the running job is this one.
    Started,
    Progress(JobProgress),
    /// The job ended with its result; `cancelled` results are partial and
    /// say so.
    Finished {
        result: JobResult,
        cancelled: bool,
    },
    /// The worker did not take the job; nothing it held changed.
    Rejected(Rejection),
    /// The job was taken and failed; `message` names what was wrong.
    Failed {
        message: String,
    },
}

impl JobEvent {
    /// Whether this ends the job (no further event carries its id).
    pub fn is_terminal(&self) -> bool {
        matches!(self, JobEvent::Finished { .. } | JobEvent::Rejected(_) | JobEvent::Failed { .. })
    }
}

/// Why a job was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// Another job runs; the worker does one at a time.
    Busy { running: JobKind },
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Busy { running } => {
                write!(f, "the worker is busy with {}; wait for it to finish or cancel it", running.phrase())
            }
        }
    }
}

/// Where a load is: the step, and bytes or items done of a total when known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadProgress {
    pub stage: LoadStage,
    pub done: u64,
    pub total: Option<u64>,
}

/// The steps of a load, in the order they happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadStage {
    /// The load was taken; nothing read yet.
    Starting,
    ReadingManifest,
    Downloading,
    ReadingCache,
    ReadingFile,
    /// Hashing a user's file before the load (its digest names it).
    HashingFile,
    /// A site's checkpoint: the weights are prepared while its SHA-256 is
    /// checked against the manifest.
    PreparingWhileVerifying,
    /// The router's own build steps.
    Build(BuildStage),
    /// Fetching and checking the trained head the site pins for it.
    ReadingHead,
}

impl LoadStage {
    /// Whether its `done` and `total` are bytes (a read), not items.
    pub fn counts_bytes(self) -> bool {
        matches!(self, LoadStage::Downloading | LoadStage::ReadingCache | LoadStage::ReadingFile)
    }
}

impl LoadProgress {
    /// The stage as the page prints it (the descriptors count up from 1).
    pub fn label(&self) -> String {
        match self.stage {
            LoadStage::Starting => "starting".into(),
            LoadStage::ReadingManifest => "reading the model manifest".into(),
            LoadStage::Downloading => "downloading the checkpoint".into(),
            LoadStage::ReadingCache => "reading the cached checkpoint".into(),
            LoadStage::ReadingFile => "reading the file".into(),
            LoadStage::HashingFile => "hashing the file".into(),
            LoadStage::PreparingWhileVerifying => "preparing the weights while SHA-256 is checked against the manifest".into(),
            LoadStage::Build(BuildStage::Weights) => "parsing the GGUF and preparing the weights".into(),
            LoadStage::Build(BuildStage::Tokenizer) => "building the tokenizer from the GGUF metadata".into(),
            LoadStage::ReadingHead => "reading the trained head for this checkpoint".into(),
            LoadStage::Build(BuildStage::Descriptors) => {
                format!("encoding candidate descriptors ({}/{})", self.done + 1, self.total.unwrap_or(0))
            }
        }
    }
}

/// What a running job has done so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobProgress {
    Load(LoadProgress),
    /// The bench reloaded the router so its first call is cold: the loaded
    /// model's facts (its load timings) are new.
    Reloaded(Box<ModelInfo>),
    /// The bench's prompts are ready: their sizes (tokens, characters), and
    /// the calls in all.
    BenchPrompts {
        prompts: Vec<PromptSize>,
        reloaded: bool,
        overall: usize,
    },
    BenchStep(BenchStep),
    /// The prefix protocol ran one more step.
    PrefixStep {
        done: usize,
        total: usize,
        label: String,
    },
    /// One more task was routed.
    TaskRouted {
        done: usize,
        total: usize,
        routed: Deferred<RoutedTask>,
    },
    /// The serving test warmed up: the prompt set's size, the runs, and how
    /// long one whole decide of the heaviest prompt took with nothing queued
    /// (no step of the test should take much longer, so the page sizes its
    /// Cancel grace from it).
    ServeWarmedUp {
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
    /// One run of a serving test ended (`cancelled` runs stop early and say
    /// so in their label): its figures only (every record arrives in the
    /// finished report), deferred like every study's section below.
    ServeRunDone {
        index: usize,
        label: String,
        settings: ServeSettings,
        summary: Deferred<RunSummary>,
    },
    /// A generation chose one more token: the text it releases (empty
    /// while a character or a possible stop text is incomplete), the
    /// tokens so far, and the milliseconds since the job started.
    Generated {
        text: String,
        tokens: usize,
        ms: f64,
    },
    /// The generating serving test's state, at most every 100 ms.
    GenerationTick(GenerationTick),
    /// A routed request's decide is done: the candidate chosen, which
    /// model stands in for it here, and the decide's wall time.
    Routed {
        candidate: String,
        served_by: String,
        decide_ms: f64,
    },
    /// The decode-speed bench measured row `done` of `total`.
    DecodeRow {
        done: usize,
        total: usize,
        row: Deferred<DecodeRow>,
    },
}

/// Where a generating serving test is: which run of how many, the
/// milliseconds into it (on the clock of the instance that stepped last),
/// its requests finished, where the others are instance by instance
/// (running and waiting; summed, the run's), so a reader sees which wait,
/// and the running batch's K/V (note 03's payload against allocated
/// bytes, live) beside what the scheduler counts of the budget, every
/// instance summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationTick {
    pub run: usize,
    pub runs: usize,
    pub t_ms: f64,
    pub finished: usize,
    pub layout: serving::disaggregation::Layout,
    /// In the layout's order (the prefill instance first when disaggregated).
    pub instances: Vec<serving::disaggregation::InstanceQueue>,
    pub kv: serving::batching::KvBytes,
    /// Blocks in use at the block's bytes (reservations included).
    pub counted_kv_bytes: u64,
    pub budget_kv_bytes: u64,
}

/// One exact-length bench prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptSize {
    pub tokens: usize,
    pub characters: usize,
}

/// One timed bench call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchStep {
    pub prompt_tokens: usize,
    pub phase: String,
    pub ms: f64,
    pub done: usize,
    pub per_length: usize,
    pub overall_done: usize,
    pub overall: usize,
}

/// What a finished job produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobResult {
    Loaded(Box<ModelInfo>),
    Decided {
        decision: Box<Decision>,
        /// The training tasks nearest to this one, with what each backend
        /// did on them (a trained head's decision only, else empty), looked
        /// up after decide's clock stopped; deferred, as the latency widget
        /// shows none.
        neighbours: Deferred<Vec<Neighbour>>,
        /// The worker's wasm memory after the decision (its high-water mark:
        /// wasm memory never shrinks), so a long session can see it stays
        /// bounded.
        wasm_memory_bytes: u64,
    },
    GemmProbed(GemmProbe),
    /// The latency report (partial when cancelled).
    Bench(Box<LatencyReport>),
    Prefix(Deferred<PrefixReport>),
    /// The routing ended; the ids name the checkpoint and head its
    /// decisions came from.
    Routed {
        checkpoint_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head_id: Option<String>,
    },
    /// The serving study, and the report's envelope to carry it (the page
    /// puts the one in the other). The studies' sections, the routed tasks
    /// and the prefix report cross deferred: the latency widget shares this
    /// type and receives none of them, and their decoders were 20 KB of
    /// its first load (gzipped), which the roofline readout needed.
    Served {
        report: Box<LatencyReport>,
        study: Deferred<ServeStudy>,
    },
    /// The generation (cancelled: the tokens so far, no finish reason).
    Generated(Deferred<GenerationSummary>),
    /// Every run of the generating serving test (cancelled: those that ran,
    /// the last one cut short).
    ServedGeneration {
        checkpoint_id: String,
        precision: String,
        runs: Deferred<Vec<GenerationRun>>,
    },
    /// A routed request ended (cancelled: the tokens so far, no finish
    /// reason): the report's envelope for this page and the worker's
    /// account of the request.
    Requested {
        report: Box<LatencyReport>,
        account: Deferred<RequestAccount>,
    },
    /// The decode-speed run (cancelled: the rows measured so far).
    DecodeSpeed(Deferred<DecodeSpeed>),
    Roofline(DeviceCeilings),
}

impl JobResult {
    /// The kind of job that gives this result.
    pub fn kind(&self) -> JobKind {
        match self {
            JobResult::Loaded(_) => JobKind::Load,
            JobResult::Decided { .. } => JobKind::Decide,
            JobResult::GemmProbed(_) => JobKind::GemmProbe,
            JobResult::Bench(_) => JobKind::Bench,
            JobResult::Prefix(_) => JobKind::Prefix,
            JobResult::Routed { .. } => JobKind::Route,
            JobResult::Served { .. } => JobKind::Serve,
            JobResult::Generated(_) => JobKind::Generate,
            JobResult::ServedGeneration { .. } => JobKind::ServeGenerate,
            JobResult::Requested { .. } => JobKind::Request,
            JobResult::DecodeSpeed(_) => JobKind::DecodeSpeed,
            JobResult::Roofline(_) => JobKind::Roofline,
        }
    }
}
