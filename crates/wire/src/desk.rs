//! The worker's side of the job protocol: which job runs, whether Cancel
//! was asked for it, and the framing of its events, behind an [`Outbox`] so
//! it is tested natively with a recording one (the worker's posts to the
//! page through `postMessage`).
//!
//! A [`JobTicket`] is the only way to report on a job and is consumed by
//! [`JobDesk::finish`]: every job the desk takes ends with exactly one
//! terminal event, and a second job is refused (`Rejected(Busy)`) until it
//! does, without touching what the running one holds.

use std::cell::Cell;

use crate::job::{JobEvent, JobId, JobKind, JobProgress, JobResult, Rejection};
use crate::FromWorker;

/// Where the worker's messages go.
pub trait Outbox {
    fn post(&self, message: &FromWorker);
}

/// The running job, as the desk hands it to the code doing the work. Not
/// `Clone`: finishing consumes it.
#[derive(Debug, PartialEq, Eq)]
pub struct JobTicket {
    id: JobId,
    kind: JobKind,
}

impl JobTicket {
    pub fn id(&self) -> JobId {
        self.id
    }

    pub fn kind(&self) -> JobKind {
        self.kind
    }
}

/// How a job the desk took ended.
pub type Outcome = Result<Finished, String>;

/// A finished job's result, and whether Cancel cut it short.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub result: JobResult,
    pub cancelled: bool,
}

impl Finished {
    pub fn complete(result: JobResult) -> Finished {
        Finished { result, cancelled: false }
    }
}

/// One job at a time.
#[derive(Debug, Default)]
pub struct JobDesk {
    running: Cell<Option<(JobId, JobKind)>>,
    cancel_requested: Cell<bool>,
}

impl JobDesk {
    pub fn new() -> JobDesk {
        JobDesk::default()
    }

    /// Takes the job and says `Started`, or says `Rejected(Busy)` and
    /// returns `None` while another runs.
    pub fn accept(&self, id: JobId, kind: JobKind, out: &impl Outbox) -> Option<JobTicket> {
        if let Some((_, running)) = self.running.get() {
            out.post(&FromWorker::Job { id, event: JobEvent::Rejected(Rejection::Busy { running }) });
            return None;
        }
        self.running.set(Some((id, kind)));
        self.cancel_requested.set(false);
        out.post(&FromWorker::Job { id, event: JobEvent::Started });
        Some(JobTicket { id, kind })
    }

    /// Cancel asked for `id`: honoured only if `id` runs now (a Cancel that
    /// crossed its job's end must not cancel the next one).
    pub fn cancel(&self, id: JobId) {
        if self.running.get().is_some_and(|(running, _)| running == id) {
            self.cancel_requested.set(true);
        }
    }

    /// Whether Cancel was asked for this ticket's job; long jobs read it
    /// between calls.
    pub fn cancel_requested(&self, ticket: &JobTicket) -> bool {
        self.running.get().is_some_and(|(id, _)| id == ticket.id) && self.cancel_requested.get()
    }

    /// The kind of job running, if one is.
    pub fn running(&self) -> Option<JobKind> {
        self.running.get().map(|(_, kind)| kind)
    }

    pub fn progress(&self, ticket: &JobTicket, progress: JobProgress, out: &impl Outbox) {
        out.post(&FromWorker::Job { id: ticket.id, event: JobEvent::Progress(progress) });
    }

    /// Ends the job with its result or its failure, and frees the desk.
    pub fn finish(&self, ticket: JobTicket, outcome: Outcome, out: &impl Outbox) {
        debug_assert!(
            outcome.as_ref().map_or(true, |f| f.result.kind() == ticket.kind),
            "a {:?} job finished with another kind's result",
            ticket.kind
        );
        self.running.set(None);
        self.cancel_requested.set(false);
        let event = match outcome {
            Ok(Finished { result, cancelled }) => JobEvent::Finished { result, cancelled },
            Err(message) => JobEvent::Failed { message },
        };
        out.post(&FromWorker::Job { id: ticket.id, event });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Default)]
    struct Recorded(RefCell<Vec<FromWorker>>);

    impl Outbox for Recorded {
        fn post(&self, message: &FromWorker) {
            // Through the codec, as the real outbox sends them.
            self.0.borrow_mut().push(FromWorker::from_json(&message.to_json()).unwrap());
        }
    }

    impl Recorded {
        fn take(&self) -> Vec<FromWorker> {
            std::mem::take(&mut self.0.borrow_mut())
        }
    }

    fn event(id: u32, event: JobEvent) -> FromWorker {
        FromWorker::Job { id: JobId(id), event }
    }

    fn probe() -> JobResult {
        JobResult::GemmProbed(router::GemmProbe {
            m: 1,
            k: 1,
            n: 1,
            repeats: 1,
            best_ms: 1.0,
            median_ms: 1.0,
            gflops: 0.5,
            kernel: "f32".into(),
        })
    }

    #[test]
    fn a_job_starts_and_ends_once_and_a_second_is_refused_while_it_runs() {
        let (desk, out) = (JobDesk::new(), Recorded::default());
        let ticket = desk.accept(JobId(1), JobKind::GemmProbe, &out).unwrap();
        assert_eq!(desk.accept(JobId(2), JobKind::Load, &out), None);
        assert_eq!(desk.running(), Some(JobKind::GemmProbe));
        desk.finish(ticket, Ok(Finished::complete(probe())), &out);
        assert_eq!(
            out.take(),
            vec![
                event(1, JobEvent::Started),
                event(2, JobEvent::Rejected(Rejection::Busy { running: JobKind::GemmProbe })),
                event(1, JobEvent::Finished { result: probe(), cancelled: false }),
            ]
        );
        // Free again: the next job is taken.
        let ticket = desk.accept(JobId(3), JobKind::Decide, &out).unwrap();
        desk.finish(ticket, Err("no model is loaded yet".into()), &out);
        assert_eq!(out.take(), vec![event(3, JobEvent::Started), event(3, JobEvent::Failed { message: "no model is loaded yet".into() })]);
        assert_eq!(desk.running(), None);
    }

    #[test]
    fn cancel_reaches_only_the_job_it_names() {
        let (desk, out) = (JobDesk::new(), Recorded::default());
        // A Cancel for a job that is not running is dropped, before and during.
        desk.cancel(JobId(7));
        let ticket = desk.accept(JobId(8), JobKind::Route, &out).unwrap();
        assert!(!desk.cancel_requested(&ticket));
        desk.cancel(JobId(7));
        assert!(!desk.cancel_requested(&ticket));
        desk.cancel(JobId(8));
        assert!(desk.cancel_requested(&ticket));
        let routed = JobResult::Routed { checkpoint_id: "c".into(), head_id: None };
        desk.finish(ticket, Ok(Finished { result: routed.clone(), cancelled: true }), &out);
        assert_eq!(out.take().last(), Some(&event(8, JobEvent::Finished { result: routed, cancelled: true })));
        // A new job starts uncancelled.
        let ticket = desk.accept(JobId(9), JobKind::Bench, &out).unwrap();
        assert!(!desk.cancel_requested(&ticket));
    }
}
