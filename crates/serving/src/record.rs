//! What becomes of each request: its outcome, its times, and the queue it
//! saw.

use serde::{Deserialize, Serialize};

/// Prompt-length classes for the chunking trade-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LengthClass {
    /// At most [`SHORT_TOKENS`] kept tokens.
    Short,
    Medium,
    /// At least [`LONG_TOKENS`] kept tokens (most are cut to 1,024).
    Long,
}

pub const SHORT_TOKENS: usize = 256;
pub const LONG_TOKENS: usize = 768;

impl LengthClass {
    pub fn of(tokens: usize) -> LengthClass {
        match tokens {
            t if t <= SHORT_TOKENS => LengthClass::Short,
            t if t >= LONG_TOKENS => LengthClass::Long,
            _ => LengthClass::Medium,
        }
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A decision before the client's timeout.
    Served,
    /// The client gave up: while waiting, between chunks, or before the
    /// decision came.
    TimedOut,
    /// The queue was full on arrival.
    Rejected,
    /// The engine returned an error.
    Failed,
    /// Still in the system when the run stopped.
    Unfinished,
}

impl Outcome {
    pub const ALL: [Outcome; 5] = [Outcome::Served, Outcome::TimedOut, Outcome::Rejected, Outcome::Failed, Outcome::Unfinished];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Served => "served",
            Outcome::TimedOut => "timed out",
            Outcome::Rejected => "rejected",
            Outcome::Failed => "failed",
            Outcome::Unfinished => "unfinished",
        }
    }
}

/// One request, whatever became of it. Times are ms from the run's start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub id: usize,
    pub task: String,
    /// Kept tokens (after `router_max_tokens`).
    pub tokens: usize,
    pub class: LengthClass,
    /// Arrived inside the warm-up.
    pub warmup: bool,
    pub arrival_ms: f64,
    /// When it first got the engine; `None` if it never did.
    pub start_ms: Option<f64>,
    /// When its decision came, or when it was dropped, rejected, or the
    /// run stopped.
    pub end_ms: f64,
    pub outcome: Outcome,
    /// Waiting before it started (or until it ended, if it never did).
    pub queue_ms: f64,
    /// Engine time in the prefill (summed over chunks).
    pub prefill_ms: f64,
    /// Engine time in its other stages (mode, assembly, tokenisation,
    /// truncation, pooling, scores, cost, ranking).
    pub other_ms: f64,
    /// Time after it started during which the engine ran other requests'
    /// chunks (chunked prefill with shortest-first only).
    pub preempted_ms: f64,
    pub chunks: usize,
    /// The top candidate, when served (or finished after the timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl RequestRecord {
    /// Arrival → end, whatever the outcome.
    pub fn elapsed_ms(&self) -> f64 {
        self.end_ms - self.arrival_ms
    }

    /// Served within the SLO.
    pub fn within(&self, slo_ms: f64) -> bool {
        self.outcome == Outcome::Served && self.elapsed_ms() <= slo_ms
    }
}

/// Requests in the system at a moment (waiting + started), and how many of
/// them had started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QueueSample {
    pub t_ms: f64,
    pub in_system: usize,
    pub waiting: usize,
}
