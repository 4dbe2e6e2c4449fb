//! A run's settings: arrival rate, duration and warm-up, client timeout,
//! queue limit, SLO, chunked prefill and the policy between chunks.

use serde::{Deserialize, Serialize};

/// Which waiting request gets the engine when it is free (between
/// requests, and between chunks when prefill is chunked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// First come, first served: the earliest arrival. With chunks, a
    /// started request keeps the engine (it arrived before anyone waiting),
    /// so chunking only adds overhead and lets timeouts act between chunks.
    #[default]
    Fcfs,
    /// The fewest kept tokens left to prefill: a short request that arrives
    /// during a long prompt's prefill runs between its chunks.
    ShortestFirst,
}

impl Policy {
    pub const ALL: [Policy; 2] = [Policy::Fcfs, Policy::ShortestFirst];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fcfs => "fcfs",
            Policy::ShortestFirst => "shortest_first",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Policy::Fcfs => "FCFS",
            Policy::ShortestFirst => "shortest first",
        }
    }

    pub fn parse(text: &str) -> Result<Policy, ServeError> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == text.trim() || p.label().eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| ServeError::Setting { field: "policy", reason: format!("`{text}` is not fcfs or shortest_first") })
    }
}

/// One load run's settings. Times in milliseconds unless named otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeSettings {
    /// Poisson arrival rate, requests per second (ignored for a trace file).
    pub rate_per_s: f64,
    /// Arrivals come during this many seconds.
    pub duration_s: f64,
    /// Arrivals in the first `warmup_s` seconds are the warm-up (cold
    /// caches, an empty queue): reported, kept apart from the measurement.
    pub warmup_s: f64,
    /// After the last arrival the run goes on for at most this long, so
    /// queued requests finish or time out; whatever is left then is
    /// reported as unfinished.
    pub drain_s: f64,
    pub seed: u64,
    /// Prefill chunk in tokens; `None` prefills a prompt in one call.
    pub chunk: Option<usize>,
    pub policy: Policy,
    /// The client gives up this long after it sent the request: a waiting
    /// request is dropped, a started one abandoned between chunks, and one
    /// that finishes later counts as timed out.
    pub timeout_ms: f64,
    /// Requests in the system (waiting or started) beyond which an arrival
    /// is rejected at once.
    pub queue_limit: usize,
    /// The service level: served with end-to-end latency (arrival →
    /// decision) at most this.
    pub slo_ms: f64,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            rate_per_s: 1.0,
            duration_s: 30.0,
            warmup_s: 5.0,
            drain_s: 15.0,
            seed: 0,
            chunk: None,
            policy: Policy::Fcfs,
            timeout_ms: 15_000.0,
            queue_limit: 16,
            slo_ms: 4_000.0,
        }
    }
}

/// What is wrong with a setting or a trace, naming it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeError {
    #[error("{field}: {reason}")]
    Setting { field: &'static str, reason: String },
    #[error("trace line {line}: {reason}")]
    Trace { line: usize, reason: String },
}

impl ServeSettings {
    /// Checks every field; the first bad one is named.
    pub fn check(&self) -> Result<(), ServeError> {
        let bad = |field: &'static str, reason: &str| Err(ServeError::Setting { field, reason: reason.to_string() });
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if !positive(self.rate_per_s) || self.rate_per_s > 1_000.0 {
            return bad("rate", "must be a number of requests per second above 0 and at most 1000");
        }
        if !positive(self.duration_s) || self.duration_s > 3_600.0 {
            return bad("duration", "must be above 0 and at most 3600 seconds");
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0 && self.warmup_s < self.duration_s) {
            return bad("warmup", "must be at least 0 and shorter than the duration");
        }
        if !(self.drain_s.is_finite() && self.drain_s >= 0.0 && self.drain_s <= 3_600.0) {
            return bad("drain", "must be between 0 and 3600 seconds");
        }
        if self.chunk == Some(0) {
            return bad("chunk", "must be at least 1 token (or absent: no chunking)");
        }
        if !positive(self.timeout_ms) {
            return bad("timeout", "must be above 0 ms");
        }
        if self.queue_limit == 0 {
            return bad("queue limit", "must be at least 1");
        }
        if !positive(self.slo_ms) {
            return bad("SLO", "must be above 0 ms");
        }
        Ok(())
    }

    /// When the measurement interval ends and the drain begins (ms).
    pub fn end_ms(&self) -> f64 {
        self.duration_s * 1000.0
    }

    /// The chunk as a label: `1024` or `whole`.
    pub fn chunk_label(&self) -> String {
        self.chunk.map_or_else(|| "whole".to_string(), |c| c.to_string())
    }
}
