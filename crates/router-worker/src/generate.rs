//! The Generate job: one sequence on the loaded router, a token a step,
//! each piece of text posted as it is released, with a yield between
//! tokens so Cancel is read (a cancelled generation keeps its tokens).

use bench::generation::SingleGeneration;
use router::sampling::SamplingParams;
use router::Conversation;
use wire::desk::{Finished, JobTicket, Outcome};
use wire::{JobProgress, JobResult};

use crate::{now_ms, Loaded, RouterWorker};

impl RouterWorker {
    pub(crate) async fn generate(&self, ticket: &JobTicket, conversation: Conversation, params: SamplingParams) -> Outcome {
        let loaded = self.loaded.borrow_mut().take().ok_or("no model is loaded yet")?;
        let outcome = self.generate_with(ticket, &loaded, &conversation, params).await;
        *self.loaded.borrow_mut() = Some(loaded);
        outcome
    }

    async fn generate_with(&self, ticket: &JobTicket, loaded: &Loaded, conversation: &Conversation, params: SamplingParams) -> Outcome {
        let router = &loaded.router;
        let started = now_ms();
        let mut generation = SingleGeneration::start(router, conversation, params).map_err(|e| e.to_string())?;
        let mut cancelled = false;
        loop {
            if self.cancelled(ticket) {
                cancelled = true;
                break;
            }
            let step = generation.step(router)?;
            let tokens = generation.sequence.generated().len();
            self.progress(ticket, JobProgress::Generated { text: step.text, tokens, ms: now_ms() - started });
            if step.done {
                break;
            }
            // Let the Cancel message in. The gap it adds (a timer's
            // minimum, up to 4 ms once timers nest) is inside the
            // inter-token gaps the summary reports: they are what the page
            // shows a reader, not the engine's alone.
            gloo_timers::future::TimeoutFuture::new(0).await;
        }
        Ok(Finished { result: JobResult::Generated(Box::new(generation.summary(router, cancelled))), cancelled })
    }
}
