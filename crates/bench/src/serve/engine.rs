//! The real engine for the serving test: `decide` on a loaded [`Router`],
//! begun, prefilled chunk by chunk and finished through
//! [`Router::begin_decide`], [`Router::prefill_chunk`] and
//! [`Router::finish_decide`], each call timed with `web-time`. The native
//! CLI and the browser worker both use it.

use router::{elapsed_ms, Conversation, Message, PendingDecide, Role, Router};
use web_time::Instant;

use serving::{Engine, Finished, NamedConversation, TracePrompt};

/// `decide` on `router` over a fixed set of conversations (the trace's
/// prompts), in one mode.
pub struct RouterEngine<'a> {
    pub router: &'a Router,
    pub conversations: Vec<Conversation>,
    pub mode: Option<String>,
}

/// A task prompt as the conversation a client sends: one user turn.
pub fn user_turn(text: &str) -> Conversation {
    Conversation { messages: vec![Message { role: Role::User, content: text.to_string() }] }
}

impl<'a> RouterEngine<'a> {
    /// The engine over `named` conversations, and the prompt set a trace
    /// draws from: each conversation's kept length, found by tokenising
    /// and truncating it once before the run (no prefill).
    pub fn new(
        router: &'a Router,
        named: Vec<NamedConversation>,
        mode: Option<String>,
    ) -> Result<(RouterEngine<'a>, Vec<TracePrompt>), String> {
        let mut prompts = Vec::with_capacity(named.len());
        let mut conversations = Vec::with_capacity(named.len());
        for NamedConversation { name, conversation } in named {
            let job = router.begin_decide(&conversation, mode.as_deref()).map_err(|e| format!("{name}: {e}"))?;
            prompts.push(TracePrompt { task: name, tokens: job.tokens_kept() });
            conversations.push(conversation);
        }
        Ok((RouterEngine { router, conversations, mode }, prompts))
    }

    /// One whole decide of the heaviest of `prompts` (the set
    /// [`RouterEngine::new`] returned: most kept tokens, then the most
    /// text, since every prompt is tokenised whole before the cut), timed
    /// (ms). Run before the first load run so that run's warm-up is not
    /// also the process's first touch of the weights, and so the study can
    /// state the slowest unloaded request beside its SLO; a run's steps are
    /// no longer than this by much (a noisy machine varies by tens of per
    /// cent), so the page sizes its Cancel grace from it.
    pub fn warm_up(&mut self, prompts: &[TracePrompt]) -> Result<f64, String> {
        let text = |i: usize| self.conversations[i].messages.iter().map(|m| m.content.len()).sum::<usize>();
        let heaviest = (0..prompts.len()).max_by_key(|&i| (prompts[i].tokens, text(i))).ok_or("no prompts to serve")?;
        let started = Instant::now();
        let (mut job, _) = self.begin(heaviest)?;
        self.prefill(&mut job, usize::MAX)?;
        self.finish(job)?;
        Ok(elapsed_ms(started))
    }
}

impl Engine for RouterEngine<'_> {
    type Job = PendingDecide;

    fn begin(&mut self, prompt: usize) -> Result<(PendingDecide, f64), String> {
        let started = Instant::now();
        let job = self.router.begin_decide(&self.conversations[prompt], self.mode.as_deref()).map_err(|e| e.to_string())?;
        Ok((job, elapsed_ms(started)))
    }

    fn remaining(&self, job: &PendingDecide) -> usize {
        job.remaining()
    }

    fn prefill(&mut self, job: &mut PendingDecide, max_tokens: usize) -> Result<f64, String> {
        let started = Instant::now();
        self.router.prefill_chunk(job, max_tokens).map_err(|e| e.to_string())?;
        Ok(elapsed_ms(started))
    }

    fn finish(&mut self, job: PendingDecide) -> Result<Finished, String> {
        let started = Instant::now();
        let decision = self.router.finish_decide(job).map_err(|e| e.to_string())?;
        let top = decision.ranked.first().map(|r| r.id.clone()).unwrap_or_default();
        Ok(Finished { top, other_ms: elapsed_ms(started) })
    }
}
