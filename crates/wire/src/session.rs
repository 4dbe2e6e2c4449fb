//! The page's side of the job protocol: one state machine for what the
//! worker holds and does, as the page knows it.
//!
//! The page keeps one [`Session`] and asks it everything a card used to
//! read from its own flags: whether a job may start ([`Session::can_start`]),
//! what the worker's answer changes ([`Session::apply`]), whether Cancel
//! applies and how long it may take ([`Session::request_cancel`]), and
//! whether a worker that errs is to be replaced. It is plain data, no
//! signals and no browser, so every transition is tested natively below
//! (the tests are half this file's length, kept beside what they pin);
//! the page holds it in one signal and acts on what it returns.

use crate::job::{JobEvent, JobId, JobKind, JobProgress, JobResult, LoadProgress, LoadStage, Rejection};
use crate::{FromWorker, ModelInfo};

/// Milliseconds a running call may take to honour Cancel before the worker
/// is replaced. A serving test's steps can be a whole long prefill, slower
/// than this on a slow machine: its grace is [`serve_cancel_grace_ms`].
pub const CANCEL_GRACE_MS: u32 = 3000;

/// The Cancel grace during a serving test before the worker has timed its
/// heaviest prompt: its warm-up is that whole decide, after tokenising every
/// prompt.
pub const SERVE_WARMUP_GRACE_MS: u32 = 60_000;

/// The Cancel grace during a serving test: the worker checks Cancel between
/// steps, and a step is about as long as one whole decide of the heaviest
/// prompt (most kept tokens, most text to tokenise) at most, which the
/// worker timed (with nothing queued) before the first run. Half as much
/// again and a second cover a noisy machine (the native study measured
/// prefills somewhat longer than that warm-up).
pub fn serve_cancel_grace_ms(unloaded_heaviest_ms: f64) -> u32 {
    (unloaded_heaviest_ms * 1.5 + 1000.0).clamp(CANCEL_GRACE_MS as f64, 120_000.0) as u32
}

/// Whether the worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerState {
    /// Spawned; its hello has not arrived.
    Starting,
    Running,
    /// It failed before its hello (its script missing, wasm refused): it
    /// would fail again, so it is not replaced.
    Unavailable,
}

/// The checkpoint the worker holds, as the page knows it.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelState {
    NotLoaded,
    Loading(LoadProgress),
    Ready(Box<ModelInfo>),
    Failed,
}

impl ModelState {
    pub fn text(&self) -> &'static str {
        match self {
            ModelState::NotLoaded => "not loaded",
            ModelState::Loading(_) => "loading",
            ModelState::Ready(_) => "ready",
            ModelState::Failed => "failed",
        }
    }
}

/// The job the page started and has not yet heard the end of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunningJob {
    pub id: JobId,
    pub kind: JobKind,
    /// The worker said `Started` (until then it may still refuse).
    pub accepted: bool,
    pub cancel_asked: bool,
    /// How long Cancel may take before the worker is replaced.
    pub cancel_grace_ms: u32,
}

/// Why a job cannot start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    WorkerNotRunning,
    Busy(JobKind),
    NoModel,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::WorkerNotRunning => write!(f, "the router worker is not running; reload the page to start it"),
            Refusal::Busy(kind) => Rejection::Busy { running: *kind }.fmt(f),
            Refusal::NoModel => write!(f, "load the model first (card 1)"),
        }
    }
}

/// What a message from the worker asks of the page, once the session has
/// taken what it needs from it.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// The worker started (its hello is passed on); `reload`: load again
    /// what was loaded before the worker was replaced.
    Hello { message: FromWorker, reload: bool },
    /// An event of the running job, for the card that owns its kind. Its
    /// end is already applied: the session is free for the next job.
    Job { kind: JobKind, event: JobEvent },
    /// An answer to a job that is not the running one (an earlier
    /// worker's, or one the page gave up on): ignored.
    Stale,
    /// The worker panicked: replace it (the message says why).
    Replace(String),
    /// Not about a job (storage, a problem outside any job).
    Other(FromWorker),
}

/// A Cancel sent, and the deadline by which the job must have ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancelTimer {
    generation: u32,
    id: JobId,
    pub grace_ms: u32,
}

/// What to do about an error the worker raised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerError {
    /// From a worker since replaced.
    Stale,
    /// It ran and stopped: replace it.
    Replace,
    /// It never started: say so, and do not loop on replacing it.
    NeverStarted,
}

/// The page's worker session.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Counts workers, so a timer or error of a replaced one is ignored.
    generation: u32,
    worker: WorkerState,
    model: ModelState,
    job: Option<RunningJob>,
    last_id: u32,
    /// A model was loaded when the worker was replaced: load it again once
    /// the new one says hello.
    reload_when_started: bool,
    /// The model as it was before a load the worker has not yet taken: the
    /// page shows the load at once, and a refused load puts this back.
    before_load: Option<ModelState>,
    /// Counts the messages that changed the session: most of a long job's
    /// events (a serving tick every 100 ms, each bench call) change nothing
    /// here, and the page tells the session's readers only when this moves.
    revision: u64,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    pub fn new() -> Session {
        Session {
            generation: 0,
            worker: WorkerState::Starting,
            model: ModelState::NotLoaded,
            job: None,
            last_id: 0,
            reload_when_started: false,
            before_load: None,
            revision: 0,
        }
    }

    pub fn worker(&self) -> WorkerState {
        self.worker
    }

    pub fn model(&self) -> &ModelState {
        &self.model
    }

    /// The loaded model's facts, when one is ready.
    pub fn ready_model(&self) -> Option<&ModelInfo> {
        match &self.model {
            ModelState::Ready(model) => Some(model),
            _ => None,
        }
    }

    pub fn job(&self) -> Option<RunningJob> {
        self.job
    }

    /// The kind of job running (or sent and not yet answered).
    pub fn running(&self) -> Option<JobKind> {
        self.job.map(|j| j.kind)
    }

    /// Whether the worker is doing (or was just asked to do) anything.
    pub fn busy(&self) -> bool {
        self.job.is_some() || self.worker != WorkerState::Running
    }

    /// See the field: it moves whenever [`Session::apply`] changed anything.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Whether a job of this kind may start now: one job at a time, on a
    /// running worker, and every job but a load needs a ready model.
    pub fn can_start(&self, kind: JobKind) -> Result<(), Refusal> {
        if self.worker != WorkerState::Running {
            return Err(Refusal::WorkerNotRunning);
        }
        if let Some(job) = self.job {
            return Err(Refusal::Busy(job.kind));
        }
        if kind != JobKind::Load && self.ready_model().is_none() {
            return Err(Refusal::NoModel);
        }
        Ok(())
    }

    /// Starts a job of this kind: its id, to send with the request. A load
    /// shows as loading at once; until the worker takes it, the model it
    /// replaces is kept aside, and put back if the worker refuses the load
    /// (the worker still holds it).
    pub fn start(&mut self, kind: JobKind) -> Result<JobId, Refusal> {
        self.can_start(kind)?;
        self.last_id += 1;
        let id = JobId(self.last_id);
        // A serving test's step may be long (the generating one's prefill-first
        // iterations prefill whole prompts together): the longer grace.
        let cancel_grace_ms = if matches!(kind, JobKind::Serve | JobKind::ServeGenerate) { SERVE_WARMUP_GRACE_MS } else { CANCEL_GRACE_MS };
        self.job = Some(RunningJob { id, kind, accepted: false, cancel_asked: false, cancel_grace_ms });
        if kind == JobKind::Load {
            let starting = ModelState::Loading(LoadProgress { stage: LoadStage::Starting, done: 0, total: None });
            self.before_load = Some(std::mem::replace(&mut self.model, starting));
        }
        Ok(id)
    }

    /// The request for `id` could not be posted: forget it.
    pub fn not_sent(&mut self, id: JobId) {
        if self.job.is_some_and(|j| j.id == id) {
            self.job = None;
            if let Some(model) = self.before_load.take() {
                self.model = model;
            }
        }
    }

    /// Takes what the session needs from a worker message and says what the
    /// page is to do with the rest.
    pub fn apply(&mut self, message: FromWorker) -> Applied {
        match message {
            FromWorker::Hello { .. } => {
                self.revision += 1;
                self.worker = WorkerState::Running;
                let reload = std::mem::take(&mut self.reload_when_started);
                Applied::Hello { message, reload }
            }
            FromWorker::Job { id, event } => {
                let Some(job) = self.job.as_mut().filter(|j| j.id == id) else { return Applied::Stale };
                let kind = job.kind;
                let mut changed = match &event {
                    JobEvent::Started => {
                        job.accepted = true;
                        true
                    }
                    JobEvent::Progress(JobProgress::ServeWarmedUp { unloaded_heaviest_ms, .. }) => {
                        job.cancel_grace_ms = serve_cancel_grace_ms(*unloaded_heaviest_ms);
                        true
                    }
                    _ => false,
                };
                if event.is_terminal() {
                    self.job = None;
                    changed = true;
                }
                if self.apply_to_model(kind, &event) || changed {
                    self.revision += 1;
                }
                Applied::Job { kind, event }
            }
            FromWorker::Panicked { message } => Applied::Replace(message),
            other @ (FromWorker::Storage { .. } | FromWorker::Problem { .. }) => Applied::Other(other),
        }
    }

    /// What an event says about the held checkpoint. A load replaces the
    /// model from its `Started` on (the worker drops the old one first); a
    /// load refused as busy puts the model back as it was; a bench's reload
    /// renews it. Whether anything changed.
    fn apply_to_model(&mut self, kind: JobKind, event: &JobEvent) -> bool {
        match (kind, event) {
            (JobKind::Load, JobEvent::Started) => self.before_load = None,
            (JobKind::Load, JobEvent::Rejected(_)) => {
                if let Some(model) = self.before_load.take() {
                    self.model = model;
                }
            }
            (JobKind::Load, JobEvent::Progress(JobProgress::Load(progress))) => self.model = ModelState::Loading(*progress),
            (JobKind::Load, JobEvent::Finished { result: JobResult::Loaded(model), .. }) => self.model = ModelState::Ready(model.clone()),
            (JobKind::Load, JobEvent::Failed { .. }) => self.model = ModelState::Failed,
            (_, JobEvent::Progress(JobProgress::Reloaded(model))) => self.model = ModelState::Ready(model.clone()),
            _ => return false,
        }
        true
    }

    /// Cancel for the running job, when it is a cancellable one the worker
    /// took and Cancel was not already asked: the job to name, and the timer
    /// to set for [`Session::cancel_overdue`].
    pub fn request_cancel(&mut self) -> Option<(JobId, CancelTimer)> {
        let generation = self.generation;
        let job = self.job.as_mut().filter(|j| j.kind.cancellable() && !j.cancel_asked)?;
        job.cancel_asked = true;
        Some((job.id, CancelTimer { generation, id: job.id, grace_ms: job.cancel_grace_ms }))
    }

    /// The timer fired: whether the job it was set for still runs on the
    /// same worker, so the worker must be replaced. A timer from before a
    /// replacement, or for a job that has ended, is stale.
    pub fn cancel_overdue(&self, timer: CancelTimer) -> bool {
        timer.generation == self.generation && self.job.is_some_and(|j| j.id == timer.id && j.cancel_asked)
    }

    /// A new worker is being spawned (the first, or a replacement): its
    /// generation, for its error handler.
    pub fn spawned(&mut self) -> u32 {
        self.generation += 1;
        self.worker = WorkerState::Starting;
        self.generation
    }

    /// The worker was lost (crashed, hung past Cancel's grace): every job is
    /// gone with it and so is the model; it is reloaded once the next worker
    /// starts when it had loaded (a file that crashes the worker while
    /// loading would crash it again). Call [`Session::spawned`] next.
    pub fn lost(&mut self) {
        self.reload_when_started = matches!(self.model, ModelState::Ready(_));
        self.model = ModelState::NotLoaded;
        self.job = None;
        self.before_load = None;
    }

    /// What to do about an error the worker of `generation` raised.
    pub fn worker_error(&mut self, generation: u32) -> WorkerError {
        if generation != self.generation {
            return WorkerError::Stale;
        }
        match self.worker {
            WorkerState::Running => WorkerError::Replace,
            WorkerState::Starting | WorkerState::Unavailable => {
                self.worker = WorkerState::Unavailable;
                self.job = None;
                WorkerError::NeverStarted
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::model_info;

    fn hello() -> FromWorker {
        FromWorker::Hello { tasks: Vec::new(), build: crate::testing::build_info() }
    }

    fn job(id: JobId, event: JobEvent) -> FromWorker {
        FromWorker::Job { id, event }
    }

    /// A session whose worker said hello and loaded a model.
    fn ready() -> Session {
        let mut session = Session::new();
        session.spawned();
        session.apply(hello());
        let id = session.start(JobKind::Load).unwrap();
        session.apply(job(id, JobEvent::Started));
        session.apply(job(id, JobEvent::Finished { result: JobResult::Loaded(Box::new(model_info())), cancelled: false }));
        assert!(session.ready_model().is_some());
        session
    }

    #[test]
    fn nothing_starts_before_the_hello_and_only_a_load_without_a_model() {
        let mut session = Session::new();
        session.spawned();
        assert_eq!(session.can_start(JobKind::Load), Err(Refusal::WorkerNotRunning));
        assert!(matches!(session.apply(hello()), Applied::Hello { reload: false, .. }));
        assert_eq!(session.can_start(JobKind::Load), Ok(()));
        for kind in [
            JobKind::Decide,
            JobKind::GemmProbe,
            JobKind::Bench,
            JobKind::Prefix,
            JobKind::Route,
            JobKind::Serve,
            JobKind::Generate,
            JobKind::ServeGenerate,
            JobKind::Request,
            JobKind::DecodeSpeed,
            JobKind::Roofline,
        ] {
            assert_eq!(session.can_start(kind), Err(Refusal::NoModel), "{kind:?}");
        }
    }

    #[test]
    fn every_job_waits_for_the_running_one_whatever_its_kind() {
        let mut session = ready();
        let id = session.start(JobKind::Decide).unwrap();
        // The cards' enable checks all read this: the model card too.
        for kind in [JobKind::Load, JobKind::Decide, JobKind::GemmProbe, JobKind::Bench, JobKind::Serve] {
            assert_eq!(session.can_start(kind), Err(Refusal::Busy(JobKind::Decide)));
        }
        session.apply(job(id, JobEvent::Started));
        session.apply(job(id, JobEvent::Failed { message: "no".into() }));
        assert_eq!(session.can_start(JobKind::Bench), Ok(()));
        // A failed decide leaves the model loaded.
        assert!(session.ready_model().is_some());
    }

    #[test]
    fn a_load_the_busy_worker_refuses_keeps_the_model_it_still_holds() {
        // The Load-during-Decide defect: the worker answered "busy" as a
        // failed load, and the page forgot the model the worker kept.
        let mut session = ready();
        // A page that believed the worker idle (the race a message in flight makes).
        let load = session.start(JobKind::Load).unwrap();
        assert_eq!(session.model().text(), "loading", "the page shows the load at once");
        let applied = session.apply(job(load, JobEvent::Rejected(Rejection::Busy { running: JobKind::Decide })));
        assert_eq!(applied, Applied::Job { kind: JobKind::Load, event: JobEvent::Rejected(Rejection::Busy { running: JobKind::Decide }) });
        assert_eq!(session.model().text(), "ready");
        assert_eq!(session.job(), None);
        // A load shows at once; the worker takes it and replaces the model; a failed one leaves none.
        let load = session.start(JobKind::Load).unwrap();
        assert_eq!(session.model().text(), "loading");
        session.apply(job(load, JobEvent::Started));
        assert_eq!(session.model().text(), "loading");
        let stage = LoadProgress { stage: LoadStage::Downloading, done: 5, total: Some(10) };
        session.apply(job(load, JobEvent::Progress(JobProgress::Load(stage))));
        assert_eq!(session.model(), &ModelState::Loading(stage));
        session.apply(job(load, JobEvent::Failed { message: "x.gguf: not a GGUF".into() }));
        assert_eq!(session.model(), &ModelState::Failed);
        assert_eq!(session.can_start(JobKind::Decide), Err(Refusal::NoModel));
    }

    #[test]
    fn cancel_applies_to_the_long_jobs_once_and_its_timer_fires_only_for_the_job_still_running() {
        for kind in [JobKind::Load, JobKind::Decide, JobKind::GemmProbe, JobKind::Roofline] {
            let mut session = ready();
            session.start(kind).unwrap();
            assert_eq!(session.request_cancel(), None, "{kind:?} is one call: nothing to cancel");
        }
        for kind in [
            JobKind::Bench,
            JobKind::Prefix,
            JobKind::Route,
            JobKind::Serve,
            JobKind::Generate,
            JobKind::ServeGenerate,
            JobKind::Request,
            JobKind::DecodeSpeed,
        ] {
            let mut session = ready();
            let id = session.start(kind).unwrap();
            session.apply(job(id, JobEvent::Started));
            let (named, timer) = session.request_cancel().unwrap();
            assert_eq!(named, id);
            assert_eq!(session.request_cancel(), None, "asked once");
            assert!(session.cancel_overdue(timer), "{kind:?}: still running at the deadline");
            // (The session does not read the result; any will do.)
            let result = JobResult::Routed { checkpoint_id: String::new(), head_id: None };
            // Ended within the grace: the timer finds nothing to do.
            session.apply(job(id, JobEvent::Finished { result, cancelled: true }));
            assert!(!session.cancel_overdue(timer), "{kind:?}");
            assert_eq!(session.can_start(kind), Ok(()));
        }
    }

    #[test]
    fn the_serving_test_s_grace_follows_its_warm_up() {
        let mut session = ready();
        let id = session.start(JobKind::Serve).unwrap();
        assert_eq!(session.job().unwrap().cancel_grace_ms, SERVE_WARMUP_GRACE_MS);
        session.apply(job(id, JobEvent::Started));
        let warmed = JobProgress::ServeWarmedUp { prompts: 176, runs: 1, unloaded_heaviest_ms: 4000.0 };
        session.apply(job(id, JobEvent::Progress(warmed)));
        let (_, timer) = session.request_cancel().unwrap();
        assert_eq!(timer.grace_ms, 7000);
        assert_eq!(serve_cancel_grace_ms(10.0), CANCEL_GRACE_MS);
        assert_eq!(serve_cancel_grace_ms(1e9), 120_000);
    }

    #[test]
    fn a_worker_that_dies_mid_job_is_replaced_and_its_model_reloaded_and_its_timer_and_answers_go_stale() {
        let mut session = ready();
        let generation = session.generation();
        let id = session.start(JobKind::Bench).unwrap();
        session.apply(job(id, JobEvent::Started));
        let (_, timer) = session.request_cancel().unwrap();
        assert_eq!(session.apply(FromWorker::Panicked { message: "unreachable".into() }), Applied::Replace("unreachable".into()));
        assert_eq!(session.worker_error(generation), WorkerError::Replace);
        session.lost();
        let next = session.spawned();
        assert_ne!(next, generation);
        assert_eq!(session.job(), None);
        assert_eq!(session.model(), &ModelState::NotLoaded);
        // The old worker's timer and errors, and any late answer, change nothing.
        assert!(!session.cancel_overdue(timer));
        assert_eq!(session.worker_error(generation), WorkerError::Stale);
        assert_eq!(
            session.apply(job(
                id,
                JobEvent::Finished { result: JobResult::Routed { checkpoint_id: String::new(), head_id: None }, cancelled: true }
            )),
            Applied::Stale
        );
        assert_eq!(session.can_start(JobKind::Load), Err(Refusal::WorkerNotRunning));
        // The new worker's hello asks for the reload, once.
        assert!(matches!(session.apply(hello()), Applied::Hello { reload: true, .. }));
        session.lost();
        session.spawned();
        assert!(matches!(session.apply(hello()), Applied::Hello { reload: false, .. }), "no model had loaded on that worker");
    }

    #[test]
    fn only_a_message_that_changes_the_session_moves_its_revision() {
        let mut session = ready();
        let id = session.start(JobKind::Serve).unwrap();
        let moved = |session: &mut Session, event: JobEvent| {
            let before = session.revision();
            session.apply(job(id, event));
            session.revision() != before
        };
        assert!(moved(&mut session, JobEvent::Started));
        let warmed = JobProgress::ServeWarmedUp { prompts: 1, runs: 1, unloaded_heaviest_ms: 10.0 };
        assert!(moved(&mut session, JobEvent::Progress(warmed)));
        let tick = JobProgress::ServeTick {
            run: 0,
            sample: serving::QueueSample { t_ms: 5.0, in_system: 1, waiting: 0 },
            finished: 0,
            arrivals: 1,
        };
        assert!(!moved(&mut session, JobEvent::Progress(tick.clone())), "a tick changes nothing here");
        let routed = JobResult::Routed { checkpoint_id: String::new(), head_id: None };
        assert!(moved(&mut session, JobEvent::Finished { result: routed, cancelled: false }));
        assert!(!moved(&mut session, JobEvent::Progress(tick)), "an answer about an ended job is stale");
    }

    #[test]
    fn a_worker_that_never_starts_is_not_replaced_in_a_loop() {
        let mut session = Session::new();
        let generation = session.spawned();
        assert_eq!(session.worker_error(generation), WorkerError::NeverStarted);
        assert_eq!(session.worker(), WorkerState::Unavailable);
        assert_eq!(session.can_start(JobKind::Load), Err(Refusal::WorkerNotRunning));
    }

    #[test]
    fn a_bench_reload_renews_the_model_and_an_unsent_job_is_forgotten() {
        let mut session = ready();
        let id = session.start(JobKind::Bench).unwrap();
        session.apply(job(id, JobEvent::Started));
        let mut renewed = model_info();
        renewed.read_ms = 42.0;
        session.apply(job(id, JobEvent::Progress(JobProgress::Reloaded(Box::new(renewed.clone())))));
        assert_eq!(session.ready_model(), Some(&renewed));
        session.apply(job(id, JobEvent::Failed { message: "x".into() }));
        let id = session.start(JobKind::Prefix).unwrap();
        session.not_sent(id);
        assert_eq!(session.job(), None);
        // A load that could not be posted leaves the model as it was.
        let id = session.start(JobKind::Load).unwrap();
        session.not_sent(id);
        assert_eq!(session.ready_model(), Some(&renewed));
    }
}
