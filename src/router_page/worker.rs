//! The router page's one worker session: the client that talks to the
//! worker, the pure [`Session`] that knows what it holds and does, and the
//! dispatch of each job's events to the card that started it.
//!
//! Provided as context by the live page; a card reads the session to enable
//! its buttons ([`Worker::can_start`]), starts its jobs through
//! [`Worker::start`], and registers one handler for the kinds it owns
//! ([`Worker::on_job`]). A worker that crashes, or does not honour Cancel in
//! time, is terminated and replaced here; the inputs live in the cards, so
//! nothing the user typed is lost, and the model is loaded again when it had
//! loaded before.

use std::collections::HashMap;
use std::rc::Rc;

use bench::page::RouterForm;
use bench::tasks::Task;
use leptos::prelude::*;
use wire::session::{Applied, Refusal, Session, WorkerError};
use wire::{FromWorker, JobEvent, JobKind, JobRequest, LoadSource, ModelInfo, StorageInfo, ToWorker};

use crate::worker_client::WorkerClient;

use super::{Alert, PageForm};

/// What was loaded last, to load it again after the worker is replaced.
#[derive(Clone)]
pub enum LoadRequest {
    Bundled,
    /// A checkpoint the manifest offers on request, by its manifest `file`.
    OnRequest(String),
    File(web_sys::File),
}

type JobHandler = Rc<dyn Fn(JobEvent)>;

/// The page's handle on its worker (`Copy`: every handler captures it).
#[derive(Clone, Copy)]
pub struct Worker {
    pub session: RwSignal<Session>,
    /// The loaded model's facts, when one is ready: changes only when the
    /// model does, not with every event the session takes.
    pub model: Memo<Option<ModelInfo>>,
    /// The job running now, if any (likewise).
    pub running: Memo<Option<JobKind>>,
    /// The task prompts the worker offers to start from (from its hello).
    pub tasks: RwSignal<Vec<Task>>,
    pub storage: RwSignal<Option<StorageInfo>>,
    client: StoredValue<Option<WorkerClient>, LocalStorage>,
    last_load: StoredValue<Option<LoadRequest>, LocalStorage>,
    handlers: StoredValue<HashMap<JobKind, JobHandler>, LocalStorage>,
    form: PageForm,
    alert: Alert,
}

impl Worker {
    /// Creates the session and spawns the worker.
    pub fn start_session(form: PageForm, alert: Alert) -> Worker {
        let session = RwSignal::new(Session::new());
        let worker = Worker {
            session,
            model: Memo::new(move |_| session.with(|s| s.ready_model().cloned())),
            running: Memo::new(move |_| session.with(Session::running)),
            tasks: RwSignal::new(Vec::new()),
            storage: RwSignal::new(None),
            client: StoredValue::new_local(None),
            last_load: StoredValue::new_local(None),
            handlers: StoredValue::new_local(HashMap::new()),
            form,
            alert,
        };
        worker.spawn();
        worker
    }

    /// The card that owns `kind` hears its events here (a card shown again
    /// replaces its handler).
    pub fn on_job(self, kind: JobKind, handler: impl Fn(JobEvent) + 'static) {
        self.handlers.update_value(|h| {
            h.insert(kind, Rc::new(handler));
        });
    }

    /// Whether a job of this kind may start now (tracks the session).
    pub fn can_start(self, kind: JobKind) -> bool {
        self.session.with(|s| s.can_start(kind).is_ok())
    }

    fn spawn(self) {
        let generation = self.session.try_update(Session::spawned).unwrap_or_default();
        let on_message = move |message: Result<FromWorker, String>| match message {
            Ok(message) => self.on_message(message),
            Err(e) => self.alert.show(e),
        };
        let on_error = move |message: String| match self.session.try_update(|s| s.worker_error(generation)) {
            Some(WorkerError::Replace) => {
                let reload = if self.session.with_untracked(|s| s.ready_model().is_some()) { " and the model reloads" } else { "" };
                self.replace(format!(
                    "The router worker stopped with an error ({message}). It was restarted; your inputs are kept{reload}."
                ));
            }
            Some(WorkerError::NeverStarted) => {
                self.client.set_value(None);
                self.alert.show(format!("The router worker could not start: {message}. The calculator and shared results still work."));
            }
            Some(WorkerError::Stale) | None => {}
        };
        match WorkerClient::spawn(on_message, on_error) {
            Ok(client) => self.client.set_value(Some(client)),
            Err(e) => self.alert.show(e),
        }
    }

    /// Replaces the worker, keeping every input; the model loads again if
    /// one was loaded.
    fn replace(self, reason: String) {
        self.client.set_value(None);
        self.session.update(Session::lost);
        self.alert.show(reason);
        self.spawn();
    }

    fn post(self, message: &ToWorker, file: Option<&web_sys::File>) -> bool {
        let sent = self.client.with_value(|c| c.as_ref().map(|c| c.send(message, file)));
        match sent {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                self.alert.show(e);
                false
            }
            None => {
                self.alert.show(Refusal::WorkerNotRunning.to_string());
                false
            }
        }
    }

    /// Starts a job (with a user's file beside it for a load); false, with
    /// the reason shown, when it cannot start.
    pub fn start(self, job: JobRequest, file: Option<&web_sys::File>) -> bool {
        let id = match self.session.try_update(|s| s.start(job.kind())) {
            Some(Ok(id)) => id,
            Some(Err(refusal)) => {
                self.alert.show(format!("{}.", first_upper(&refusal.to_string())));
                return false;
            }
            None => return false,
        };
        if self.post(&ToWorker::Start { id, job }, file) {
            true
        } else {
            self.session.update(|s| s.not_sent(id));
            false
        }
    }

    /// Asks the worker for its storage figures (they arrive on their own).
    pub fn ask(self, message: ToWorker) {
        self.post(&message, None);
    }

    /// Loads what the user asked for; the last alert is dismissed.
    pub fn load(self, request: LoadRequest) {
        self.alert.clear();
        self.load_again(request);
    }

    /// Loads without touching the alert: after a replacement, the reason
    /// stays on screen while the model comes back.
    fn load_again(self, request: LoadRequest) {
        // A bad `precision=` in the link is named, kept, and loads nothing.
        let precision = match self.form.0.with_untracked(RouterForm::precision) {
            Ok(precision) => precision,
            Err(problem) => return self.alert.show(format!("{}: {}", problem.field, problem.message)),
        };
        let (source, file) = match &request {
            LoadRequest::Bundled => (LoadSource::Site { on_request: None }, None),
            LoadRequest::OnRequest(file) => (LoadSource::Site { on_request: Some(file.clone()) }, None),
            LoadRequest::File(file) => (LoadSource::File { name: file.name() }, Some(file.clone())),
        };
        self.last_load.set_value(Some(request));
        self.start(JobRequest::Load { source, precision }, file.as_ref());
    }

    /// Cancel for the running job; if it has not ended within its grace,
    /// the worker is replaced.
    pub fn cancel(self) {
        let Some((id, timer)) = self.session.try_update(Session::request_cancel).flatten() else { return };
        self.post(&ToWorker::Cancel { id }, None);
        gloo_timers::callback::Timeout::new(timer.grace_ms, move || {
            if self.session.with_untracked(|s| s.cancel_overdue(timer)) {
                self.replace(format!(
                    "The call in progress did not end within {:.0} s of Cancel, so the worker was stopped and restarted (the model is reloading). No result was kept.",
                    f64::from(timer.grace_ms) / 1000.0
                ));
            }
        })
        .forget();
    }

    fn on_message(self, message: FromWorker) {
        // Most of a long job's events change nothing in the session: its
        // readers (every card's buttons) hear only of those that do.
        let taken = self.session.try_update_untracked(|s| {
            let before = s.revision();
            let applied = s.apply(message);
            (applied, s.revision() != before)
        });
        let Some((applied, changed)) = taken else { return };
        if changed {
            self.session.notify();
        }
        match applied {
            Applied::Hello { message: FromWorker::Hello { tasks, .. }, reload } => {
                self.tasks.set(tasks);
                self.ask(ToWorker::Storage);
                if reload {
                    if let Some(request) = self.last_load.get_value() {
                        self.load_again(request);
                    }
                }
            }
            Applied::Hello { .. } | Applied::Stale => {}
            Applied::Job { kind, event } => {
                match &event {
                    JobEvent::Rejected(why) => self.alert.show(format!("{}.", first_upper(&why.to_string()))),
                    JobEvent::Failed { message } => self.alert.show(message.clone()),
                    _ => {}
                }
                if let Some(handler) = self.handlers.with_value(|h| h.get(&kind).cloned()) {
                    handler(event);
                }
            }
            Applied::Replace(message) => {
                self.replace(format!("The router worker crashed ({message}). It was restarted; your inputs are kept."))
            }
            Applied::Other(FromWorker::Storage { storage }) => self.storage.set(Some(storage)),
            Applied::Other(FromWorker::Problem { message, .. }) => self.alert.show(message),
            Applied::Other(_) => {}
        }
    }
}

fn first_upper(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}

/// A running job's progress bar, what it is doing, and its Cancel button
/// (`{id}-progress`, `{id}-stage`, `{id}-cancel`).
#[component]
pub fn JobProgress(id: &'static str, label: &'static str, value: f64, max: f64, text: String) -> impl IntoView {
    let worker = expect_context::<Worker>();
    let asked = move || worker.session.with(|s| s.job().is_some_and(|j| j.cancel_asked));
    view! {
        <div class="progress-line">
            <progress data-testid=format!("{id}-progress") aria-label=label max=max value=value></progress>
            <span data-testid=format!("{id}-stage")>{text}</span>
            <button type="button" data-testid=format!("{id}-cancel") disabled=asked on:click=move |_| worker.cancel()>
                {move || if asked() { "Cancelling…" } else { "Cancel" }}
            </button>
        </div>
    }
}
