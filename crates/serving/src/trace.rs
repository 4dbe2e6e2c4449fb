//! The workload: Poisson arrivals from a seed, or a trace file replayed;
//! each arrival names a prompt of the run's set.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{ServeError, ServeSettings};

/// A prompt the trace draws from: its name and its kept length in tokens
/// (after `router_max_tokens`), known before the run so that the
/// shortest-first policy can order waiting requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracePrompt {
    pub task: String,
    pub tokens: usize,
}

/// One arrival of the workload trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    pub id: usize,
    pub at_ms: f64,
    /// Index into the run's prompts.
    pub prompt: usize,
}

/// Poisson arrivals at `rate` per second for `duration_s`, each drawing a
/// prompt uniformly from `prompts` (the real length mix), from `seed` alone.
pub fn poisson_trace(rate_per_s: f64, duration_s: f64, seed: u64, prompts: usize) -> Vec<Arrival> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut arrivals = Vec::new();
    let mut t = 0.0;
    if prompts == 0 {
        return arrivals;
    }
    loop {
        // Exponential gaps by inversion; 1 − U keeps the logarithm finite.
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / rate_per_s * 1000.0;
        if t >= duration_s * 1000.0 {
            return arrivals;
        }
        arrivals.push(Arrival { id: arrivals.len(), at_ms: t, prompt: rng.random_range(0..prompts) });
    }
}

/// One line of a trace file: an arrival time and either a task of the
/// prompt set (by id) or a conversation written out; for a generating
/// load, optionally the answer's length. One format serves both
/// experiments, so the same file replays against the prefill-only serving
/// test (which has no answer and does not read `max_tokens`) and the
/// generating one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceLine {
    pub at_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<router::Conversation>,
    /// New tokens the answer asks for (a generating load draws one from
    /// its recorded lengths where this is absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// The line of the file it was read from (blank lines count), for
    /// errors found after parsing; 0 for a line not read from a file.
    #[serde(skip)]
    pub line: usize,
}

/// The longest answer a trace line may ask for: far past any context this
/// engine holds, and small enough that no arithmetic on it overflows.
pub const TRACE_MAX_TOKENS: usize = 1 << 20;

/// Parses a trace file (JSON lines, arrival times non-decreasing and within
/// an hour); blank lines are skipped. Errors name the line.
pub fn parse_trace(text: &str) -> Result<Vec<TraceLine>, ServeError> {
    let mut lines = Vec::new();
    let mut last = 0.0;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let mut entry: TraceLine = serde_json::from_str(raw).map_err(|e| ServeError::Trace { line, reason: e.to_string() })?;
        entry.line = line;
        if !(entry.at_ms.is_finite() && (0.0..=3_600_000.0).contains(&entry.at_ms)) {
            return Err(ServeError::Trace { line, reason: format!("at_ms = {} is not between 0 and 3600000", entry.at_ms) });
        }
        if entry.at_ms < last {
            return Err(ServeError::Trace { line, reason: format!("at_ms = {} comes before the previous line's {last}", entry.at_ms) });
        }
        if let Some(bad) = entry.max_tokens.filter(|n| !(1..=TRACE_MAX_TOKENS).contains(n)) {
            return Err(ServeError::Trace { line, reason: format!("max_tokens = {bad} is not between 1 and {TRACE_MAX_TOKENS}") });
        }
        if entry.task.is_some() == entry.conversation.is_some() {
            return Err(ServeError::Trace { line, reason: "give exactly one of `task` and `conversation`".into() });
        }
        last = entry.at_ms;
        lines.push(entry);
    }
    if lines.is_empty() {
        return Err(ServeError::Trace { line: 0, reason: "the trace has no arrivals".into() });
    }
    Ok(lines)
}

/// A conversation a trace may send, by name (a task id, or
/// `trace-arrival-N` for a conversation written in the trace).
#[derive(Debug, Clone, PartialEq)]
pub struct NamedConversation {
    pub name: String,
    pub conversation: router::Conversation,
}

/// A replayed trace: the conversations it sends (the tasks it names, then
/// each inline conversation) by name, and its arrivals indexing them.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub conversations: Vec<NamedConversation>,
    pub arrivals: Vec<Arrival>,
}

/// A replayed trace over a task set. An unknown task is named with its line.
pub fn trace_arrivals(lines: &[TraceLine], tasks: &[NamedConversation]) -> Result<Replay, ServeError> {
    let mut named: Vec<NamedConversation> = Vec::new();
    let mut arrivals = Vec::with_capacity(lines.len());
    for (id, line) in lines.iter().enumerate() {
        let prompt = match (&line.task, &line.conversation) {
            (Some(task), _) => match named.iter().position(|n| &n.name == task) {
                Some(index) => index,
                None => {
                    let known = tasks
                        .iter()
                        .find(|n| &n.name == task)
                        .ok_or_else(|| ServeError::Trace { line: line.line, reason: format!("task `{task}` is not in the task file") })?;
                    named.push(known.clone());
                    named.len() - 1
                }
            },
            (None, Some(conversation)) => {
                named.push(NamedConversation { name: format!("trace-arrival-{}", id + 1), conversation: conversation.clone() });
                named.len() - 1
            }
            (None, None) => return Err(ServeError::Trace { line: line.line, reason: "no task or conversation".into() }),
        };
        arrivals.push(Arrival { id, at_ms: line.at_ms, prompt });
    }
    Ok(Replay { conversations: named, arrivals })
}

/// Fits a run's settings to a replayed trace: the arrivals last as long as
/// the trace does (at least the asked duration), and the offered rate is
/// the trace's own (arrivals per second of the run).
pub fn fit_to_trace(settings: &mut ServeSettings, arrivals: &[Arrival]) {
    let last_s = arrivals.last().map_or(0.0, |a| a.at_ms / 1000.0);
    // An arrival at the very end still falls inside the run.
    settings.duration_s = settings.duration_s.max(last_s + 0.001);
    settings.rate_per_s = arrivals.len().max(1) as f64 / settings.duration_s;
}
