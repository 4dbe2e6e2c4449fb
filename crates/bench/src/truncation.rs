//! Stepped truncation against plain left truncation: what keeping the kept
//! window's start on a grid buys in prefix reuse, and what it costs in the
//! decisions.
//!
//! Past `router_max_tokens`, plain left truncation moves the kept window's
//! start with every new token, so no cached prefix matches and every turn
//! is a full prefill. With `RouterConfig::truncation_step = S`, the start
//! moves in steps of S text tokens: while a conversation grows within a
//! step, its kept tokens extend the previous turn's and the cache holds
//! their prefix. The price is a window of between `max − S + 1` and `max`
//! tokens instead of exactly `max`. Two measurements, on the same router:
//!
//! - **latency**: one long conversation (the prefix protocol's) grows turn
//!   by turn past `router_max_tokens`; each policy decides every turn with
//!   its own cache: reused and prefilled tokens and decide time per turn.
//! - **decisions**: conversations from every task text, each long enough to
//!   be cut, decided under both policies without a cache: whether the top
//!   candidate and the whole ranking stay the same, and the largest score
//!   difference. Plain left truncation sees more of the text; agreement
//!   with it is what can be measured without routing labels (routing
//!   quality against outcomes is the quality issue's).

use serde::{Deserialize, Serialize};

#[cfg(feature = "engine")]
use router::{CacheBudget, Conversation, Decision, Message, PrefixCache, Role, Router};

#[cfg(feature = "engine")]
use crate::prefix::{follow_up, PrefixInputs, SYSTEM_PROMPT};

/// One policy's decide of one turn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PolicyCall {
    /// Tokens the backbone saw (after truncation).
    pub tokens_used: usize,
    pub reused_tokens: usize,
    pub prefilled_tokens: usize,
    pub decide_ms: f64,
}

/// One turn of the growing conversation, under both policies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrowthTurn {
    /// Turns appended to the long conversation.
    pub turn: usize,
    /// Tokens of the whole routing text, before truncation.
    pub tokens_total: usize,
    pub left: PolicyCall,
    pub stepped: PolicyCall,
    pub same_top: bool,
}

/// One long task conversation decided under both policies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionComparison {
    pub tokens_total: usize,
    pub left_tokens: usize,
    pub stepped_tokens: usize,
    pub left_top: String,
    pub stepped_top: String,
    pub same_ranking: bool,
    pub max_score_difference: f32,
}

/// The study, as a report section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TruncationStudy {
    pub max_tokens: usize,
    pub step: usize,
    pub growth: Vec<GrowthTurn>,
    pub decisions: Vec<DecisionComparison>,
}

/// The growing conversation's turn `k`: `k` exchanges after the long one.
#[cfg(feature = "engine")]
fn grown(long: &Conversation, k: usize) -> Conversation {
    let mut c = long.clone();
    for i in 1..=k {
        c.messages.push(Message { role: Role::Assistant, content: format!("Looked at case {i}; the fix is in the parser.") });
        c.messages.push(Message { role: Role::User, content: follow_up(i) });
    }
    c
}

/// Long conversations from the task texts: each starts at one task and
/// adds the next ones as further user turns until its routing text passes
/// `max_tokens + step`, so both policies cut it.
#[cfg(feature = "engine")]
fn long_task_conversations(router: &Router, texts: &[String], step: usize) -> router::Result<Vec<Conversation>> {
    let limit = router.config().max_tokens + step;
    let mut conversations = Vec::new();
    for start in 0..texts.len() {
        let mut c = Conversation::user(texts[start].clone()).with_system(SYSTEM_PROMPT);
        let mut next = start + 1;
        while router.tokenizer.encode(&c.routing_text(router.tokenizer.layout))?.len() <= limit {
            c.messages.push(Message { role: Role::Assistant, content: "Looking at it.".into() });
            c.messages.push(Message { role: Role::User, content: texts[next % texts.len()].clone() });
            next += 1;
        }
        conversations.push(c);
    }
    Ok(conversations)
}

#[cfg(feature = "engine")]
fn call(d: &Decision) -> PolicyCall {
    let reuse = d.prefix.unwrap_or_default();
    PolicyCall {
        tokens_used: d.tokens_used,
        reused_tokens: reuse.reused_tokens,
        prefilled_tokens: reuse.prefilled_tokens,
        decide_ms: d.timings.total_ms,
    }
}

/// Runs both measurements with `step`, then puts the router's own
/// truncation step back. `turns` exchanges are appended to the long
/// conversation of `inputs`.
#[cfg(feature = "engine")]
pub fn run(router: &mut Router, inputs: &PrefixInputs, texts: &[String], step: usize, turns: usize) -> router::Result<TruncationStudy> {
    let own = router.config().truncation_step;
    let outcome = run_with(router, inputs, texts, step, turns);
    router.set_truncation_step(own)?;
    outcome
}

#[cfg(feature = "engine")]
fn run_with(router: &mut Router, inputs: &PrefixInputs, texts: &[String], step: usize, turns: usize) -> router::Result<TruncationStudy> {
    // Refused here, before any decide, if the router would refuse it.
    router.set_truncation_step(step)?;
    let conversations: Vec<Conversation> = (0..=turns).map(|k| grown(&inputs.long, k)).collect();
    let policy = |router: &mut Router, step: usize| -> router::Result<Vec<Decision>> {
        router.set_truncation_step(step)?;
        let mut cache = PrefixCache::new(CacheBudget::default());
        conversations.iter().map(|c| router.decide_with_cache(c, None, &mut cache)).collect()
    };
    let left = policy(router, 1)?;
    let stepped = policy(router, step)?;
    let growth = left
        .iter()
        .zip(&stepped)
        .enumerate()
        .map(|(turn, (l, s))| GrowthTurn {
            turn,
            tokens_total: l.tokens_total,
            left: call(l),
            stepped: call(s),
            same_top: l.ranked.first().map(|r| &r.id) == s.ranked.first().map(|r| &r.id),
        })
        .collect();

    let tasks = long_task_conversations(router, texts, step)?;
    let mut decisions = Vec::with_capacity(tasks.len());
    for c in &tasks {
        router.set_truncation_step(1)?;
        let l = router.decide(c, None)?;
        router.set_truncation_step(step)?;
        let s = router.decide(c, None)?;
        let (same_ranking, max_score_difference) = crate::prefix::compare_rankings(&l, &s);
        decisions.push(DecisionComparison {
            tokens_total: l.tokens_total,
            left_tokens: l.tokens_used,
            stepped_tokens: s.tokens_used,
            left_top: l.ranked.first().map(|r| r.id.clone()).unwrap_or_default(),
            stepped_top: s.ranked.first().map(|r| r.id.clone()).unwrap_or_default(),
            same_ranking,
            max_score_difference,
        });
    }
    Ok(TruncationStudy { max_tokens: router.config().max_tokens, step, growth, decisions })
}

impl TruncationStudy {
    /// Both measurements as tables, then their sums, for a terminal.
    pub fn table(&self) -> String {
        let mut out = format!(
            "Growing conversation, router_max_tokens {}: plain left truncation (step 1) vs step {}\n\n| turn | tokens | left: kept / reused / prefilled | left decide | step {}: kept / reused / prefilled | step decide | same top |\n|---|---|---|---|---|---|---|\n",
            self.max_tokens, self.step, self.step
        );
        for t in &self.growth {
            out.push_str(&format!(
                "| {} | {} | {} / {} / {} | {:.1} ms | {} / {} / {} | {:.1} ms | {} |\n",
                t.turn,
                t.tokens_total,
                t.left.tokens_used,
                t.left.reused_tokens,
                t.left.prefilled_tokens,
                t.left.decide_ms,
                t.stepped.tokens_used,
                t.stepped.reused_tokens,
                t.stepped.prefilled_tokens,
                t.stepped.decide_ms,
                if t.same_top { "yes" } else { "NO" },
            ));
        }
        let s = self.summary();
        out.push_str(&format!(
            "\nTurns past the limit ({}): prefilled {} tokens with step 1 vs {} with step {}; mean decide {:.1} ms vs {:.1} ms; same top candidate {} of {}.\n",
            s.turns_cut, s.left_prefilled, s.stepped_prefilled, self.step, s.left_mean_ms, s.stepped_mean_ms, s.turns_same_top, s.turns_cut
        ));
        out.push_str(&format!(
            "Long task conversations ({}), no cache: same top candidate {} of {}, same ranking {} of {}; tokens seen mean {:.0} (step 1) vs {:.0} (step {}); largest score difference {:.4}.\n",
            self.decisions.len(),
            s.tasks_same_top,
            self.decisions.len(),
            s.tasks_same_ranking,
            self.decisions.len(),
            s.left_tokens_mean,
            s.stepped_tokens_mean,
            self.step,
            s.max_score_difference,
        ));
        out
    }

    /// The sums the closing lines print.
    pub fn summary(&self) -> TruncationSummary {
        let cut: Vec<&GrowthTurn> = self.growth.iter().filter(|t| t.tokens_total > self.max_tokens).collect();
        let mean = |xs: &[f64]| if xs.is_empty() { f64::NAN } else { xs.iter().sum::<f64>() / xs.len() as f64 };
        let n = self.decisions.len().max(1) as f64;
        TruncationSummary {
            turns_cut: cut.len(),
            left_prefilled: cut.iter().map(|t| t.left.prefilled_tokens).sum(),
            stepped_prefilled: cut.iter().map(|t| t.stepped.prefilled_tokens).sum(),
            left_mean_ms: mean(&cut.iter().map(|t| t.left.decide_ms).collect::<Vec<_>>()),
            stepped_mean_ms: mean(&cut.iter().map(|t| t.stepped.decide_ms).collect::<Vec<_>>()),
            turns_same_top: cut.iter().filter(|t| t.same_top).count(),
            tasks_same_top: self.decisions.iter().filter(|d| d.left_top == d.stepped_top).count(),
            tasks_same_ranking: self.decisions.iter().filter(|d| d.same_ranking).count(),
            left_tokens_mean: self.decisions.iter().map(|d| d.left_tokens as f64).sum::<f64>() / n,
            stepped_tokens_mean: self.decisions.iter().map(|d| d.stepped_tokens as f64).sum::<f64>() / n,
            max_score_difference: self.decisions.iter().map(|d| d.max_score_difference).fold(0.0, f32::max),
        }
    }
}

/// What [`TruncationStudy::table`] sums up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TruncationSummary {
    /// Turns of the growing conversation past `router_max_tokens`.
    pub turns_cut: usize,
    pub left_prefilled: usize,
    pub stepped_prefilled: usize,
    pub left_mean_ms: f64,
    pub stepped_mean_ms: f64,
    pub turns_same_top: usize,
    pub tasks_same_top: usize,
    pub tasks_same_ranking: usize,
    pub left_tokens_mean: f64,
    pub stepped_tokens_mean: f64,
    pub max_score_difference: f32,
}
