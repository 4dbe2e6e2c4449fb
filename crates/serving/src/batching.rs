//! Iteration-level scheduling of generating sequences (Orca's continuous
//! batching), under a K/V budget in blocks, with the three ways note 06
//! compares of mixing prefills into decodes.
//!
//! The [`Scheduler`] holds waiting and running sequences. Each iteration
//! [`Scheduler::plan`] decides which running sequences are fed how many
//! tokens (a decode is one token; a prefill its prompt or a chunk of it),
//! admitting waiting ones and, when memory runs out, preempting; the caller
//! runs that batch through one engine step and calls
//! [`Scheduler::retire`] to take the finished ones out. Sequences are
//! anything that implements [`Work`] (the engine's own, or a test's), so
//! the policy is tested here without a model.
//!
//! Memory is counted in blocks of K/V (`block_tokens` tokens each); the
//! caller turns a byte budget into blocks with the per-token bytes of the
//! checkpoint (the `kv` crate's formula). Two policies for running out:
//!
//! * [`Memory::Recompute`]: a sequence is admitted when its prompt fits;
//!   when a running sequence needs a block that is not free, the sequence
//!   admitted last is preempted (its blocks freed; it waits at the head of
//!   the queue and is prefilled again, prompt and generated tokens, when
//!   memory allows: vLLM's recompute preemption).
//! * [`Memory::Reserve`]: a sequence is admitted only when its longest
//!   possible length (prompt + `max_new_tokens`) fits beside every running
//!   sequence's; nothing is ever preempted, and memory sits reserved for
//!   tokens that may never come (the pre-vLLM way).
//!
//! A sequence that could not fit even alone is rejected at once under
//! both.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// What the scheduler needs to know of a sequence.
pub trait Work {
    /// Tokens waiting to be fed (the prompt's rest, or the token sampled
    /// last); 0 once finished.
    fn pending(&self) -> usize;
    /// Whether the prompt still has tokens to feed.
    fn in_prefill(&self) -> bool;
    fn finished(&self) -> bool;
    /// Blocks its K/V holds now.
    fn blocks_held(&self) -> usize;
    /// Blocks it would hold after `tokens` more are fed.
    fn blocks_after(&self, tokens: usize) -> usize;
    /// Blocks it holds at its longest: the prompt and every token it may generate.
    fn blocks_at_most(&self) -> usize;
    /// Drops its K/V, to be fed again from the start.
    fn preempt(&mut self);
    /// Its K/V now, in bytes: the calculator's payload for the tokens it
    /// holds, and what its blocks allocate (note 03: not the same).
    fn kv_bytes(&self) -> KvBytes;
}

/// K/V in bytes, two ways: the payload (the calculator's formula for the
/// tokens held, a sliding window keeping only its window) and what the
/// engine's blocks allocate for them (whole blocks, every layer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvBytes {
    pub payload: u64,
    pub allocated: u64,
}

impl std::iter::Sum for KvBytes {
    fn sum<I: Iterator<Item = KvBytes>>(iter: I) -> KvBytes {
        iter.fold(KvBytes::default(), |a, b| KvBytes { payload: a.payload + b.payload, allocated: a.allocated + b.allocated })
    }
}

/// How prefills share iterations with decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mixing {
    /// An iteration that can admit a waiting prompt prefills it whole and
    /// runs no decode (vLLM's first scheduler): a new prompt stalls every
    /// running decode for its prefill.
    PrefillFirst,
    /// Running sequences decode until all are done; only then are waiting
    /// prompts admitted (request-level batching).
    DecodeFirst,
    /// At most `token_budget` tokens an iteration: every running decode
    /// first, then chunks of prefills with what is left (Sarathi-Serve,
    /// vLLM's V1 scheduler).
    Chunked { token_budget: usize },
}

impl Mixing {
    /// `prefill-first`, `decode-first` or `chunked:N` (N ≥ 1 tokens an
    /// iteration), as the CLI and the page spell them.
    pub fn parse(text: &str) -> Result<Mixing, String> {
        match text.trim() {
            "prefill-first" => Ok(Mixing::PrefillFirst),
            "decode-first" => Ok(Mixing::DecodeFirst),
            other => match other.strip_prefix("chunked:").map(|n| n.trim().parse::<usize>()) {
                Some(Ok(token_budget)) if token_budget > 0 => Ok(Mixing::Chunked { token_budget }),
                _ => Err(format!("`{other}` is not a mixing: use prefill-first, decode-first or chunked:N with N ≥ 1")),
            },
        }
    }

    pub fn label(self) -> String {
        match self {
            Mixing::PrefillFirst => "prefill-first".into(),
            Mixing::DecodeFirst => "decode-first".into(),
            Mixing::Chunked { token_budget } => format!("chunked, {token_budget} tokens an iteration"),
        }
    }
}

/// What happens when K/V memory runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Memory {
    #[default]
    Recompute,
    Reserve,
}

impl Memory {
    pub fn label(self) -> &'static str {
        match self {
            Memory::Recompute => "preempt by recompute",
            Memory::Reserve => "reserve the longest length at admission",
        }
    }
}

/// The scheduler's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BatchSettings {
    /// K/V blocks the engine may hold.
    pub budget_blocks: usize,
    /// Most sequences running at once.
    pub max_running: usize,
    pub mixing: Mixing,
    pub memory: Memory,
}

/// A sequence and its id, waiting or running.
struct Entry<W> {
    id: u64,
    work: W,
}

/// One iteration's plan: who is fed how many tokens (in the running
/// order), and what happened to get there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub feeds: Vec<(u64, usize)>,
    /// Admitted from the queue this iteration.
    pub admitted: Vec<u64>,
    /// Preempted this iteration (back at the head of the queue).
    pub preempted: Vec<u64>,
    /// Blocks held once the batch has run.
    pub blocks_after: usize,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.feeds.is_empty()
    }

    /// Tokens fed this iteration.
    pub fn tokens(&self) -> usize {
        self.feeds.iter().map(|f| f.1).sum()
    }
}

/// Waiting and running sequences under one K/V budget.
pub struct Scheduler<W> {
    settings: BatchSettings,
    waiting: VecDeque<Entry<W>>,
    running: Vec<Entry<W>>,
    rejected: Vec<(u64, W)>,
    preemptions: usize,
}

impl<W: Work> Scheduler<W> {
    pub fn new(settings: BatchSettings) -> Scheduler<W> {
        Scheduler { settings, waiting: VecDeque::new(), running: Vec::new(), rejected: Vec::new(), preemptions: 0 }
    }

    pub fn settings(&self) -> &BatchSettings {
        &self.settings
    }

    /// Queues a sequence, or rejects it if it could never fit.
    pub fn submit(&mut self, id: u64, work: W) {
        if work.blocks_at_most() > self.settings.budget_blocks {
            self.rejected.push((id, work));
        } else {
            self.waiting.push_back(Entry { id, work });
        }
    }

    /// Sequences rejected since the last call: each could not fit in the budget even alone.
    pub fn take_rejected(&mut self) -> Vec<(u64, W)> {
        std::mem::take(&mut self.rejected)
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> usize {
        self.preemptions
    }

    /// Blocks the running sequences hold, or have reserved under [`Memory::Reserve`].
    pub fn blocks_in_use(&self) -> usize {
        self.running.iter().map(|e| self.charge(&e.work, 0)).sum()
    }

    /// The running sequences' K/V, summed.
    pub fn running_kv_bytes(&self) -> KvBytes {
        self.running.iter().map(|e| e.work.kv_bytes()).sum()
    }

    /// The ids waiting and running, in order.
    pub fn waiting_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.waiting.iter().map(|e| e.id)
    }

    pub fn running_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.running.iter().map(|e| e.id)
    }

    /// Blocks `work` counts against the budget after `tokens` more are fed.
    fn charge(&self, work: &W, tokens: usize) -> usize {
        match self.settings.memory {
            Memory::Recompute => work.blocks_after(tokens),
            Memory::Reserve => work.blocks_at_most(),
        }
    }

    /// Plans the next iteration. Empty when nothing can run.
    pub fn plan(&mut self) -> Plan {
        let mut plan = Plan::default();
        let budget = self.settings.budget_blocks;
        let decoding = self.running.iter().any(|e| !e.work.in_prefill() && e.work.pending() > 0);
        let waiting = !self.waiting.is_empty();
        let (decodes, prefills, admit) = match self.settings.mixing {
            // Prefill whenever a prompt waits (or one is mid-prefill after a
            // preemption); decode only when none does.
            Mixing::PrefillFirst => {
                let prefilling = self.running.iter().any(|e| e.work.in_prefill());
                if waiting && self.can_admit_next() || prefilling {
                    (false, true, true)
                } else {
                    (true, false, false)
                }
            }
            Mixing::DecodeFirst => {
                if decoding {
                    (true, false, false)
                } else {
                    (false, true, true)
                }
            }
            Mixing::Chunked { .. } => (true, true, true),
        };
        let mut tokens_left = match self.settings.mixing {
            Mixing::Chunked { token_budget } => token_budget.max(1),
            _ => usize::MAX,
        };
        let mut feeds: Vec<(usize, usize)> = Vec::new();
        if decodes {
            let mut i = 0;
            while i < self.running.len() {
                let work = &self.running[i].work;
                if work.in_prefill() || work.pending() == 0 || tokens_left == 0 {
                    i += 1;
                    continue;
                }
                let n = work.pending().min(tokens_left);
                if !self.make_room(i, n, &feeds, &mut plan) {
                    // `i` itself was preempted: the entries after it moved down.
                    continue;
                }
                feeds.push((i, n));
                tokens_left -= n;
                i += 1;
            }
        }
        if prefills {
            for i in 0..self.running.len() {
                let work = &self.running[i].work;
                if !work.in_prefill() || tokens_left == 0 {
                    continue;
                }
                let n = work.pending().min(tokens_left);
                if self.used(&feeds) - self.charge(work, 0) + self.charge(work, n) > budget {
                    continue;
                }
                feeds.push((i, n));
                tokens_left -= n;
            }
        }
        if admit {
            while tokens_left > 0 && self.running.len() < self.settings.max_running.max(1) {
                let Some(next) = self.waiting.front() else { break };
                let n = next.work.pending().min(tokens_left);
                if self.used(&feeds) + self.charge(&next.work, n) > budget {
                    break;
                }
                let entry = self.waiting.pop_front().expect("front exists");
                plan.admitted.push(entry.id);
                self.running.push(entry);
                feeds.push((self.running.len() - 1, n));
                tokens_left -= n;
            }
        }
        feeds.sort_unstable();
        plan.feeds = feeds.iter().map(|&(i, n)| (self.running[i].id, n)).collect();
        plan.blocks_after = self.used(&feeds);
        debug_assert!(plan.blocks_after <= budget, "{} blocks planned in a budget of {budget}", plan.blocks_after);
        plan
    }

    /// Whether the queue's head could be admitted now with no decode fed.
    fn can_admit_next(&self) -> bool {
        let Some(next) = self.waiting.front() else { return false };
        self.running.len() < self.settings.max_running.max(1)
            && self.blocks_in_use() + self.charge(&next.work, next.work.pending()) <= self.settings.budget_blocks
    }

    /// Blocks in use once `feeds` (running index, tokens) have run.
    fn used(&self, feeds: &[(usize, usize)]) -> usize {
        self.running.iter().enumerate().map(|(i, e)| self.charge(&e.work, feeds.iter().find(|f| f.0 == i).map_or(0, |f| f.1))).sum()
    }

    /// Frees memory for running entry `index` to take `tokens` more, by
    /// preempting the entries admitted last (never one already in
    /// `feeds`). Returns false when `index` itself had to go.
    fn make_room(&mut self, index: usize, tokens: usize, feeds: &[(usize, usize)], plan: &mut Plan) -> bool {
        loop {
            let need = self.used(feeds) - self.charge(&self.running[index].work, 0) + self.charge(&self.running[index].work, tokens);
            if need <= self.settings.budget_blocks {
                return true;
            }
            // The last admitted not yet fed this iteration; `feeds` holds
            // indices below `index` only (decodes are planned in order).
            let victim = self.running.len() - 1;
            debug_assert!(feeds.iter().all(|f| f.0 < victim || victim == index));
            let mut entry = self.running.remove(victim);
            entry.work.preempt();
            self.preemptions += 1;
            plan.preempted.push(entry.id);
            self.waiting.push_front(entry);
            if victim == index {
                return false;
            }
        }
    }

    /// The running sequences the plan feeds, with their token counts, for the engine's step.
    pub fn batch_mut(&mut self, plan: &Plan) -> Vec<(u64, &mut W, usize)> {
        self.running.iter_mut().filter_map(|e| plan.feeds.iter().find(|f| f.0 == e.id).map(|&(id, n)| (id, &mut e.work, n))).collect()
    }

    /// Takes the finished sequences out.
    pub fn retire(&mut self) -> Vec<(u64, W)> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].work.finished() {
                let e = self.running.remove(i);
                done.push((e.id, e.work));
            } else {
                i += 1;
            }
        }
        done
    }

    /// Takes one sequence out, waiting or running (its client left, or its step failed).
    pub fn withdraw(&mut self, id: u64) -> Option<W> {
        if let Some(at) = self.waiting.iter().position(|e| e.id == id) {
            return self.waiting.remove(at).map(|e| e.work);
        }
        let at = self.running.iter().position(|e| e.id == id)?;
        Some(self.running.remove(at).work)
    }

    /// Takes every sequence out, waiting and running (a run's end).
    pub fn drain(&mut self) -> Vec<(u64, W)> {
        self.running.drain(..).chain(self.waiting.drain(..)).map(|e| (e.id, e.work)).collect()
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::testing::{CountingSeq as Fake, COUNTING_BLOCK as BLOCK};

    fn mixing() -> impl Strategy<Value = Mixing> {
        prop_oneof![
            Just(Mixing::PrefillFirst),
            Just(Mixing::DecodeFirst),
            (1usize..64).prop_map(|token_budget| Mixing::Chunked { token_budget })
        ]
    }

    /// Runs requests arriving one every `gap` iterations to the end.
    fn run(settings: BatchSettings, requests: &[(usize, usize)], gap: usize) -> (Vec<(u64, Fake)>, Vec<u64>, usize) {
        let mut s = Scheduler::new(settings);
        let (mut finished, mut rejected) = (Vec::new(), Vec::new());
        let mut next = 0;
        let mut iterations = 0;
        while next < requests.len() || !s.is_idle() {
            if next < requests.len() && iterations >= next * gap {
                let (prompt, max_new) = requests[next];
                s.submit(next as u64, Fake::new(prompt, max_new));
                next += 1;
                continue;
            }
            rejected.extend(s.take_rejected().into_iter().map(|r| r.0));
            let plan = s.plan();
            // The budget holds after every plan, and on the engine's side.
            assert!(plan.blocks_after <= settings.budget_blocks);
            for (_, work, n) in s.batch_mut(&plan) {
                work.feed(n);
            }
            let held: usize = s.running.iter().map(|e| e.work.blocks_held()).sum();
            assert!(held <= settings.budget_blocks, "{held} blocks held in a budget of {}", settings.budget_blocks);
            if let Mixing::Chunked { token_budget } = settings.mixing {
                assert!(plan.tokens() <= token_budget);
            }
            finished.extend(s.retire());
            iterations += 1;
            // Something always runs while anything is admitted or waiting
            // (no deadlock); idle iterations happen only between arrivals.
            if plan.is_empty() && next >= requests.len() {
                assert!(s.is_idle(), "stuck: {} waiting, {} running", s.waiting(), s.running());
            }
            assert!(iterations < 100_000, "no progress");
        }
        rejected.extend(s.take_rejected().into_iter().map(|r| r.0));
        (finished, rejected, s.preemptions())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// No request is lost; every admitted one finishes with all its
        /// tokens; the K/V budget is never exceeded; only a request
        /// that could never fit is rejected; reservation never preempts.
        #[test]
        fn every_request_finishes_or_is_rejected_within_the_budget(
            requests in prop::collection::vec((1usize..40, 1usize..24), 1..24),
            budget_blocks in 4usize..40,
            max_running in 1usize..8,
            mixing in mixing(),
            reserve in any::<bool>(),
            gap in 0usize..6,
        ) {
            let memory = if reserve { Memory::Reserve } else { Memory::Recompute };
            let settings = BatchSettings { budget_blocks, max_running, mixing, memory };
            let (finished, rejected, preemptions) = run(settings, &requests, gap);
            let mut ids: Vec<u64> = finished.iter().map(|f| f.0).chain(rejected.iter().copied()).collect();
            ids.sort_unstable();
            prop_assert_eq!(ids, (0..requests.len() as u64).collect::<Vec<_>>());
            for (id, work) in &finished {
                prop_assert_eq!(work.generated, requests[*id as usize].1);
            }
            for id in &rejected {
                let (prompt, max_new) = requests[*id as usize];
                prop_assert!((prompt + max_new - 1).div_ceil(BLOCK) > budget_blocks);
            }
            let counted: usize = finished.iter().map(|f| f.1.preempted).sum();
            prop_assert_eq!(counted, preemptions);
            if reserve {
                prop_assert_eq!(preemptions, 0);
            }
        }
    }

    /// A tight budget under recompute preempts, and the preempted request still finishes.
    #[test]
    fn a_tight_budget_preempts_and_everyone_finishes() {
        let settings =
            BatchSettings { budget_blocks: 6, max_running: 4, mixing: Mixing::Chunked { token_budget: 16 }, memory: Memory::Recompute };
        let (finished, rejected, preemptions) = run(settings, &[(8, 12), (8, 12), (8, 12)], 0);
        assert!(rejected.is_empty() && finished.len() == 3);
        assert!(preemptions > 0, "three sequences of 20 tokens in 24 tokens of blocks did not preempt");
    }

    #[test]
    fn mixing_names_parse_and_bad_ones_are_refused() {
        assert_eq!(Mixing::parse("chunked:64"), Ok(Mixing::Chunked { token_budget: 64 }));
        assert_eq!(Mixing::parse(" prefill-first "), Ok(Mixing::PrefillFirst));
        assert_eq!(Mixing::parse("decode-first"), Ok(Mixing::DecodeFirst));
        assert!(Mixing::parse("chunked:0").is_err() && Mixing::parse("fast").is_err());
    }

    /// Prefill-first stalls decodes for a new prompt; chunked keeps them going.
    #[test]
    fn prefill_first_stalls_decodes_and_chunked_does_not() {
        let plan_with_one_decoding = |mixing| {
            let settings = BatchSettings { budget_blocks: 100, max_running: 4, mixing, memory: Memory::Recompute };
            let mut s = Scheduler::new(settings);
            s.submit(0, Fake::new(4, 10));
            let first = s.plan();
            for (_, w, n) in s.batch_mut(&first) {
                w.feed(n);
            }
            s.submit(1, Fake::new(30, 10));
            s.plan()
        };
        assert_eq!(plan_with_one_decoding(Mixing::PrefillFirst).feeds, vec![(1, 30)]);
        assert_eq!(plan_with_one_decoding(Mixing::DecodeFirst).feeds, vec![(0, 1)]);
        assert_eq!(plan_with_one_decoding(Mixing::Chunked { token_budget: 8 }).feeds, vec![(0, 1), (1, 7)]);
    }
}
