//! The field guide's note 04 protocol for prefix reuse, on the real router:
//! shared prefixes (hits), inputs that mean the same with other tokens
//! (misses), unrelated inputs, then cache pressure that evicts, and
//! recovery. Every step is timed against a full prefill of the same
//! conversation, so a report shows reused tokens, avoided prefill time,
//! lookup overhead and `T_cached ≈ T_lookup + T_prefill(suffix | prefix)`,
//! never a bare hit rate. Then the target: a long conversation
//! extended by a short turn, decided with its prefix cached, against a
//! short decide.

use serde::{Deserialize, Serialize};

#[cfg(feature = "engine")]
use router::{CacheBudget, Conversation, Decision, Message, PrefixCache, Role, Router};

use crate::stats::Summary;

/// One decide of the protocol, with the same conversation's full prefill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefixStep {
    /// `miss`, `hit`, `truncated`, `pressure` or `recovery`.
    pub phase: String,
    /// What the step sends, e.g. "the same conversation, one more turn".
    pub label: String,
    /// Tokens prefilled by a full decide (after truncation).
    pub tokens: usize,
    pub reused_tokens: usize,
    pub prefilled_tokens: usize,
    pub lookup_ms: f64,
    /// Prefill of the suffix after the reused prefix.
    pub prefill_ms: f64,
    pub insert_ms: f64,
    pub decide_ms: f64,
    /// The same conversation decided without the cache.
    pub full_prefill_ms: f64,
    pub full_decide_ms: f64,
    /// `full_prefill_ms − prefill_ms`: prefill time the cache avoided.
    pub avoided_prefill_ms: f64,
    pub cache_tokens: usize,
    pub cache_bytes: u64,
    pub evictions_total: u64,
    /// The cache's token budget during this step (the pressure phase
    /// tightens it).
    pub budget_tokens: usize,
    /// The ranking equals the full prefill's, candidate for candidate.
    pub same_ranking: bool,
    pub max_score_difference: f32,
}

/// The long-conversation target: `extended_ms` (a cached decide of the long
/// conversation plus one short turn) against `short_ms` (a decide of that
/// many tokens from scratch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtensionTarget {
    pub prefix_tokens: usize,
    pub added_tokens: usize,
    pub short_tokens: usize,
    pub extended_ms: Vec<f64>,
    pub extended: Option<Summary>,
    pub extended_lookup_ms: Vec<f64>,
    pub extended_lookup: Option<Summary>,
    pub short_ms: Vec<f64>,
    pub short: Option<Summary>,
    /// Warm p50 of `extended` ÷ warm p50 of `short` (target ≤ 2).
    pub ratio_p50: f64,
    /// p50 of the lookup ÷ p50 of the short decide (target ≤ 1 %).
    pub lookup_share_p50: f64,
}

/// The whole protocol, as a report section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefixReport {
    pub budget_tokens: usize,
    pub budget_bytes: u64,
    /// Bytes of K/V and final hidden state one token holds in the cache.
    pub bytes_per_token: u64,
    /// Scores of a cached decide may differ from a full one by this much.
    pub score_tolerance: f32,
    pub steps: Vec<PrefixStep>,
    pub extension: ExtensionTarget,
}

/// Scores of a cached decide agree with a full prefill to this (float
/// rounding: the reused state was summed in another call).
pub const SCORE_TOLERANCE: f32 = 1e-5;

/// The conversations the protocol sends.
#[cfg(feature = "engine")]
#[derive(Debug, Clone)]
pub struct PrefixInputs {
    /// A long first conversation (system prompt and a task).
    pub long: Conversation,
    /// A conversation of about a follow-up turn's size, from scratch.
    pub short: Conversation,
    /// A different task under the same system prompt.
    pub sibling_task: String,
    /// `long`'s task with other tokens (upper case: the same request to a
    /// reader, different ids to the tokenizer).
    pub paraphrase: String,
    /// Unrelated tasks (under another system prompt), for pressure.
    pub unrelated: Vec<String>,
    /// Tokens of `long`'s routing text.
    pub long_tokens: usize,
    /// Timed follow-ups of the long conversation, and short decides.
    pub iterations: usize,
}

/// The system prompt of the protocol's conversations.
pub const SYSTEM_PROMPT: &str = "You route coding tasks to the backend most likely to resolve them.";

/// The `i`-th follow-up turn: each differs in one letter, so each timed
/// extension is new to the cache, and all have the same length (16 tokens
/// with the chat template under the bundled tokenizer; a number would grow
/// a token at 10).
pub fn follow_up(i: usize) -> String {
    let letter = char::from(b'A' + (i % 26) as u8);
    format!("Also check case {letter}, and tell me why.")
}

#[cfg(feature = "engine")]
impl PrefixInputs {
    /// The protocol's conversations from task texts (both shells use this):
    /// a task under [`SYSTEM_PROMPT`] whose routing text is `long_tokens`
    /// tokens, the next task as its sibling, the same task in upper case,
    /// six unrelated tasks, and a 16-token one-turn prompt as the short
    /// decide. Keep `long_tokens` + a follow-up (≈ 16) within
    /// `router_max_tokens`, or left truncation makes every extension a miss.
    pub fn from_texts(router: &Router, texts: &[String], long_tokens: usize, iterations: usize) -> router::Result<PrefixInputs> {
        let count = |c: &Conversation| router.tokenizer.encode(&c.routing_text(router.tokenizer.layout)).map(|ids| ids.len());
        let system = count(&Conversation::user("").with_system(SYSTEM_PROMPT))? - count(&Conversation::user(""))?;
        let task = router::prompts::exact_prompt(&router.tokenizer, texts, long_tokens.saturating_sub(system))?;
        let long = task.conversation.with_system(SYSTEM_PROMPT);
        let short = router::prompts::exact_prompt(&router.tokenizer, texts, 16)?.conversation;
        let text = |i: usize| texts.get(i % texts.len().max(1)).map(|t| t.chars().take(400).collect::<String>()).unwrap_or_default();
        let paraphrase = long.messages.last().map(|m| m.content.to_uppercase()).unwrap_or_default();
        let long_tokens = count(&long)?;
        Ok(PrefixInputs {
            long,
            short,
            sibling_task: text(1),
            paraphrase,
            unrelated: (2..8).map(text).collect(),
            long_tokens,
            iterations: iterations.max(1),
        })
    }
}

#[cfg(feature = "engine")]
fn with_turns(base: &Conversation, turns: &[(Role, &str)]) -> Conversation {
    let mut c = base.clone();
    c.messages.extend(turns.iter().map(|(role, text)| Message { role: *role, content: text.to_string() }));
    c
}

#[cfg(feature = "engine")]
fn replace_last(base: &Conversation, text: &str) -> Conversation {
    let mut c = base.clone();
    if let Some(last) = c.messages.last_mut() {
        last.content = text.to_string();
    }
    c
}

/// One call (or pair of calls) of the protocol.
#[cfg(feature = "engine")]
enum Action {
    /// A full decide and a cached one of the same conversation.
    Step { phase: &'static str, label: String, conversation: Conversation },
    /// The cache's token budget from now on (evicting at once what no longer fits).
    Budget(usize),
    /// The target's own cache: decide the long conversation into it.
    Prime,
    /// A cached decide of the long conversation plus follow-up `i`.
    Extend(usize),
    /// A decide of the short conversation from scratch.
    Short,
}

/// The protocol stepped one action at a time, so a worker can yield to its
/// event loop (and read a Cancel) between calls; [`run`] loops over it.
#[cfg(feature = "engine")]
pub struct PrefixSession {
    actions: std::collections::VecDeque<Action>,
    total: usize,
    budget: CacheBudget,
    cache: PrefixCache,
    target_cache: PrefixCache,
    steps: Vec<PrefixStep>,
    prefix_tokens: usize,
    added_tokens: usize,
    short_tokens: usize,
    extended_ms: Vec<f64>,
    lookup_ms: Vec<f64>,
    short_ms: Vec<f64>,
}

#[cfg(feature = "engine")]
impl PrefixSession {
    pub fn new(inputs: &PrefixInputs, budget: CacheBudget) -> PrefixSession {
        let long = &inputs.long;
        let one_more = with_turns(long, &[(Role::User, &follow_up(0))]);
        let two_more = with_turns(long, &[(Role::Assistant, "Looking at it."), (Role::User, &follow_up(0))]);
        let step = |phase, label: &str, conversation: Conversation| Action::Step { phase, label: label.to_string(), conversation };
        let mut actions = std::collections::VecDeque::from(vec![
            step("miss", "first conversation (nothing held)", long.clone()),
            step("hit", "the same conversation, one more turn", one_more.clone()),
            step("hit", "the same system prompt, another task", replace_last(long, &inputs.sibling_task)),
            step("miss", "the same task in other words (other tokens)", replace_last(long, &inputs.paraphrase)),
            // Past router_max_tokens the kept window starts later: nothing
            // held matches (when the long conversation is that long).
            step("truncated", "two more turns (past router_max_tokens when the conversation is long: the kept window moves)", two_more),
        ]);
        let unrelated = Conversation::user("").with_system("Route this request.");
        for (i, task) in inputs.unrelated.iter().enumerate() {
            if i == 1 {
                // Pressure: a budget of half the long conversation evicts it,
                // least recently used first, and keeps evicting as tasks come.
                actions.push_back(Action::Budget((inputs.long_tokens / 2).max(1)));
            }
            let phase = if i == 0 { "miss" } else { "pressure" };
            actions.push_back(step(phase, &format!("unrelated task {}", i + 1), replace_last(&unrelated, task)));
        }
        actions.push_back(Action::Budget(budget.max_tokens));
        actions.push_back(step("recovery", "the one-more-turn conversation again (evicted: a miss)", one_more.clone()));
        actions.push_back(step("recovery", "and once more (held again: a hit)", one_more));
        actions.push_back(Action::Prime);
        actions.extend((1..=inputs.iterations).map(Action::Extend));
        // One untimed short decide first: the timed ones are warm.
        actions.extend((0..=inputs.iterations).map(|_| Action::Short));
        let total = actions.len();
        PrefixSession {
            actions,
            total,
            budget,
            cache: PrefixCache::new(budget),
            target_cache: PrefixCache::new(budget),
            steps: Vec::new(),
            prefix_tokens: 0,
            added_tokens: 0,
            short_tokens: 0,
            extended_ms: Vec::new(),
            lookup_ms: Vec::new(),
            short_ms: Vec::new(),
        }
    }

    /// `(done, total)` actions.
    pub fn progress(&self) -> (usize, usize) {
        (self.total - self.actions.len(), self.total)
    }

    pub fn is_finished(&self) -> bool {
        self.actions.is_empty()
    }

    /// Runs the next action; returns its label, or `None` when finished.
    pub fn step(&mut self, router: &Router, inputs: &PrefixInputs) -> router::Result<Option<String>> {
        let Some(action) = self.actions.pop_front() else { return Ok(None) };
        Ok(Some(match action {
            Action::Step { phase, label, conversation } => {
                let full = router.decide(&conversation, None)?;
                let cached = router.decide_with_cache(&conversation, None, &mut self.cache)?;
                // A shorter long conversation stays inside the window: then
                // this step is an ordinary hit, and says so.
                let phase = if phase == "truncated" && !full.truncated { "hit" } else { phase };
                self.steps.push(step_record(phase, &label, &full, &cached, self.cache.budget().max_tokens));
                label
            }
            Action::Budget(max_tokens) => {
                self.cache.set_budget(CacheBudget { max_tokens, ..self.budget });
                format!("cache budget set to {max_tokens} tokens")
            }
            Action::Prime => {
                self.prefix_tokens = router.decide_with_cache(&inputs.long, None, &mut self.target_cache)?.tokens_used;
                "the long conversation, into a fresh cache".into()
            }
            Action::Extend(i) => {
                let next = with_turns(&inputs.long, &[(Role::User, &follow_up(i))]);
                let d = router.decide_with_cache(&next, None, &mut self.target_cache)?;
                self.added_tokens = d.tokens_used - self.prefix_tokens;
                self.extended_ms.push(d.timings.total_ms);
                self.lookup_ms.push(d.timings.lookup_ms);
                format!("follow-up {i} of the long conversation")
            }
            Action::Short => {
                let d = router.decide(&inputs.short, None)?;
                if self.short_tokens == 0 {
                    self.short_tokens = d.tokens_used;
                } else {
                    self.short_ms.push(d.timings.total_ms);
                }
                "a short decide from scratch".into()
            }
        }))
    }

    /// The report of what has run (complete once [`Self::is_finished`]).
    pub fn report(&self, router: &Router) -> PrefixReport {
        let (extended, extended_lookup, short) =
            (Summary::of(&self.extended_ms), Summary::of(&self.lookup_ms), Summary::of(&self.short_ms));
        let p50 = |s: &Option<Summary>| s.as_ref().map_or(f64::NAN, |s| s.p50);
        PrefixReport {
            budget_tokens: self.budget.max_tokens,
            budget_bytes: self.budget.max_bytes,
            bytes_per_token: router.backbone.kv_layout().bytes_per_token(),
            score_tolerance: SCORE_TOLERANCE,
            steps: self.steps.clone(),
            extension: ExtensionTarget {
                prefix_tokens: self.prefix_tokens,
                added_tokens: self.added_tokens,
                short_tokens: self.short_tokens,
                ratio_p50: p50(&extended) / p50(&short),
                lookup_share_p50: p50(&extended_lookup) / p50(&short),
                extended_ms: self.extended_ms.clone(),
                extended,
                extended_lookup_ms: self.lookup_ms.clone(),
                extended_lookup,
                short_ms: self.short_ms.clone(),
                short,
            },
        }
    }
}

/// Runs the whole protocol on `router` with caches of `budget`.
#[cfg(feature = "engine")]
pub fn run(router: &Router, inputs: &PrefixInputs, budget: CacheBudget) -> router::Result<PrefixReport> {
    let mut session = PrefixSession::new(inputs, budget);
    while session.step(router, inputs)?.is_some() {}
    Ok(session.report(router))
}

/// Whether two decisions rank the candidates in the same order, and the
/// largest score difference of one candidate between them.
#[cfg(feature = "engine")]
pub(crate) fn compare_rankings(a: &Decision, b: &Decision) -> (bool, f32) {
    let same = a.ranked.iter().map(|r| &r.id).eq(b.ranked.iter().map(|r| &r.id));
    let max_difference = a
        .ranked
        .iter()
        .map(|x| b.ranked.iter().find(|y| y.id == x.id).map_or(f32::INFINITY, |y| (x.score - y.score).abs()))
        .fold(0.0, f32::max);
    (same, max_difference)
}

#[cfg(feature = "engine")]
fn step_record(phase: &str, label: &str, full: &Decision, cached: &Decision, budget_tokens: usize) -> PrefixStep {
    let reuse = cached.prefix.unwrap_or_default();
    let (same_ranking, max_score_difference) = compare_rankings(full, cached);
    PrefixStep {
        phase: phase.into(),
        label: label.into(),
        tokens: full.tokens_used,
        reused_tokens: reuse.reused_tokens,
        prefilled_tokens: reuse.prefilled_tokens,
        lookup_ms: cached.timings.lookup_ms,
        prefill_ms: cached.timings.prefill_ms,
        insert_ms: cached.timings.insert_ms,
        decide_ms: cached.timings.total_ms,
        full_prefill_ms: full.timings.prefill_ms,
        full_decide_ms: full.timings.total_ms,
        avoided_prefill_ms: full.timings.prefill_ms - cached.timings.prefill_ms,
        cache_tokens: reuse.cache_tokens,
        cache_bytes: reuse.cache_bytes,
        evictions_total: reuse.evictions_total,
        budget_tokens,
        same_ranking,
        max_score_difference,
    }
}

impl PrefixReport {
    /// The protocol's table, for a terminal.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| phase | step | tokens | reused | prefilled | lookup | prefill (suffix) | insert | decide | full prefill | avoided | cache tokens / budget | evictions | same ranking |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for s in &self.steps {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.3} ms | {:.1} ms | {:.3} ms | {:.1} ms | {:.1} ms | {:.1} ms | {} / {} | {} | {} |\n",
                s.phase,
                s.label,
                s.tokens,
                s.reused_tokens,
                s.prefilled_tokens,
                s.lookup_ms,
                s.prefill_ms,
                s.insert_ms,
                s.decide_ms,
                s.full_prefill_ms,
                s.avoided_prefill_ms,
                s.cache_tokens,
                s.budget_tokens,
                s.evictions_total,
                if s.same_ranking { "yes" } else { "NO" },
            ));
        }
        let e = &self.extension;
        let p50 = |s: &Option<Summary>| s.as_ref().map_or(f64::NAN, |s| s.p50);
        out.push_str(&format!(
            "\nA {}-token conversation extended by {} tokens, prefix cached: p50 {:.1} ms (lookup p50 {:.3} ms) vs a {}-token decide from scratch: p50 {:.1} ms.\nratio {:.2} (target ≤ 2) · lookup share {:.3} % (target ≤ 1 %) · {} iterations each\n",
            e.prefix_tokens,
            e.added_tokens,
            p50(&e.extended),
            p50(&e.extended_lookup),
            e.short_tokens,
            p50(&e.short),
            e.ratio_p50,
            e.lookup_share_p50 * 100.0,
            e.extended_ms.len(),
        ));
        out
    }
}
