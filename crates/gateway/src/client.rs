//! The load generator: replays a serving trace against any OpenAI-compatible
//! endpoint with streaming, and measures each request at the client.
//!
//! Arrivals are open-loop: each request is sent at its planned time
//! whether or not earlier ones have been answered (a closed loop would wait
//! for answers and hide the queue). Each is bounded: it may wait
//! `ttft_timeout_ms` for its first text (then it is timed out and its
//! connection closed, which a server that cancels frees), and the run ends
//! at `end_ms` (what is still streaming then is unfinished). Connections
//! refused are retried up to `retries` times and counted. Nothing is
//! dropped: every planned request gets one [`ClientRecord`].

use std::time::Duration;

use bench::client_run::ClientRecord;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serving::generation::{GenOutcome, GenRecord};
use tokio::time::Instant;

use crate::openai::{ChatChunk, ErrorBody};

/// One request of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    pub id: u64,
    /// When to send it, ms after the run's start.
    pub at_ms: f64,
    /// The user turn (the endpoint applies its own chat template).
    pub text: String,
    /// Its prompt's length by the reference tokenizer, in the chat layout.
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    pub seed: u64,
}

/// How the requests are sent and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplaySettings {
    pub model: String,
    pub temperature: f64,
    pub top_p: f64,
    /// Ask for exactly `max_tokens` (vLLM's and llama.cpp's `ignore_eos`),
    /// so the output lengths are the trace's.
    pub ignore_eos: bool,
    /// How long a request may wait for its first text.
    pub ttft_timeout_ms: f64,
    /// When the run ends, ms after its start: the last arrival plus the drain.
    pub end_ms: f64,
    /// Requests planned before this are the warm-up.
    pub warmup_ms: f64,
    /// Sends retried when the connection fails before any answer.
    pub retries: usize,
    pub api_key: Option<String>,
}

/// Sends every planned request at its time to `base_url`'s
/// `/v1/chat/completions` and returns their records in the plan's order.
pub async fn replay(http: &reqwest::Client, base_url: &str, plan: &[Planned], settings: &ReplaySettings) -> Vec<ClientRecord> {
    let url = format!("{}/v1/chat/completions", base_url.trim_end_matches('/'));
    let start = Instant::now();
    let tasks: Vec<_> = plan
        .iter()
        .map(|planned| {
            let (http, url, planned, settings) = (http.clone(), url.clone(), planned.clone(), settings.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(start + Duration::from_secs_f64(planned.at_ms / 1000.0)).await;
                one(&http, &url, &planned, &settings, start).await
            })
        })
        .collect();
    let mut records = Vec::with_capacity(tasks.len());
    for (task, planned) in tasks.into_iter().zip(plan) {
        records.push(task.await.unwrap_or_else(|e| failed(planned, settings, format!("the client's task failed: {e}"))));
    }
    records
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

fn blank(planned: &Planned, settings: &ReplaySettings) -> ClientRecord {
    ClientRecord {
        record: GenRecord {
            id: planned.id,
            prompt_tokens: planned.prompt_tokens,
            max_new_tokens: planned.max_tokens,
            warmup: planned.at_ms < settings.warmup_ms,
            arrival_ms: planned.at_ms,
            start_ms: None,
            first_token_ms: None,
            gaps_ms: Vec::new(),
            end_ms: planned.at_ms,
            tokens_out: 0,
            prefill_chunks: 0,
            preemptions: 0,
            outcome: GenOutcome::Failed,
        },
        sent_ms: None,
        headers_ms: None,
        first_event_ms: None,
        first_event_had_content: false,
        first_content_ms: None,
        status: None,
        error: None,
        retries: 0,
        finish_reason: None,
        server: None,
    }
}

fn failed(planned: &Planned, settings: &ReplaySettings, error: String) -> ClientRecord {
    ClientRecord { error: Some(error), ..blank(planned, settings) }
}

/// One request, start to end, at the client.
async fn one(http: &reqwest::Client, url: &str, planned: &Planned, settings: &ReplaySettings, start: Instant) -> ClientRecord {
    let mut out = blank(planned, settings);
    let body = serde_json::json!({
        "model": settings.model,
        "messages": [{"role": "user", "content": planned.text}],
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": planned.max_tokens,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "seed": planned.seed,
        "ignore_eos": settings.ignore_eos,
    });
    let run_end = start + Duration::from_secs_f64(settings.end_ms.max(0.0) / 1000.0);
    let sent = ms_since(start);
    out.sent_ms = Some(sent);
    let first_text_by = (start + Duration::from_secs_f64((sent + settings.ttft_timeout_ms) / 1000.0)).min(run_end);
    let response = loop {
        let mut request = http.post(url).json(&body);
        if let Some(key) = &settings.api_key {
            request = request.bearer_auth(key);
        }
        match tokio::time::timeout_at(first_text_by, request.send()).await {
            Err(_) => return end(out, start, GenOutcome::TimedOut, Some("no response before the timeout".into())),
            Ok(Ok(response)) => break response,
            Ok(Err(e)) if e.is_connect() && out.retries < settings.retries => out.retries += 1,
            Ok(Err(e)) => return end(out, start, GenOutcome::Failed, Some(format!("sending: {e}"))),
        }
    };
    out.headers_ms = Some(ms_since(start));
    let status = response.status();
    out.status = Some(status.as_u16());
    if !status.is_success() {
        let text = tokio::time::timeout_at(run_end, response.text()).await.ok().and_then(Result::ok).unwrap_or_default();
        let message = serde_json::from_str::<ErrorBody>(&text).map(|b| b.error.message).unwrap_or(text);
        // The endpoint refused it (a 4xx, 429 among them); a 5xx failed.
        let outcome = if status.is_client_error() { GenOutcome::Rejected } else { GenOutcome::Failed };
        return end(out, start, outcome, Some(format!("HTTP {}: {message}", status.as_u16())));
    }
    let mut events = response.bytes_stream().eventsource();
    let mut last_token_ms = 0.0;
    let mut text_chunks = 0usize;
    let mut completion_tokens = None;
    loop {
        let deadline = if out.first_content_ms.is_none() { first_text_by } else { run_end };
        let next = match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(next) => next,
            Err(_) => {
                // Dropping the stream closes the connection: the server may free the request.
                let outcome = if out.first_content_ms.is_none() { GenOutcome::TimedOut } else { GenOutcome::Unfinished };
                let why = if outcome == GenOutcome::TimedOut { "no text before the timeout" } else { "still streaming when the run ended" };
                return end(out, start, outcome, Some(why.into()));
            }
        };
        let event = match next {
            None if out.finish_reason.is_some() => break,
            None => return end(out, start, GenOutcome::Failed, Some("the stream ended without a finish reason".into())),
            Some(Err(e)) => return end(out, start, GenOutcome::Failed, Some(format!("reading the stream: {e}"))),
            Some(Ok(event)) => event,
        };
        let now = ms_since(start);
        if event.data.trim() == "[DONE]" {
            break;
        }
        let chunk: ChatChunk = match serde_json::from_str(&event.data) {
            Ok(chunk) => chunk,
            Err(e) => return end(out, start, GenOutcome::Failed, Some(format!("an event that is not a chunk ({e}): {}", event.data))),
        };
        let text: String = chunk.choices.iter().filter_map(|c| c.delta.content.as_deref()).collect();
        if out.first_event_ms.is_none() {
            out.first_event_ms = Some(now);
            out.first_event_had_content = !text.trim().is_empty();
        }
        if let Some(error) = chunk.error {
            let outcome = if error.code.as_deref() == Some("queue_timeout") { GenOutcome::TimedOut } else { GenOutcome::Failed };
            return end(out, start, outcome, Some(error.message));
        }
        if !text.is_empty() {
            // A token's event: the first sets the time to first token, the rest the gaps.
            match out.record.first_token_ms {
                None => out.record.first_token_ms = Some(now),
                Some(_) => out.record.gaps_ms.push(now - last_token_ms),
            }
            last_token_ms = now;
            text_chunks += 1;
            if !text.trim().is_empty() {
                out.first_content_ms.get_or_insert(now);
            }
        }
        if let Some(reason) = chunk.choices.iter().find_map(|c| c.finish_reason.clone()) {
            out.finish_reason = Some(reason);
        }
        if let Some(usage) = chunk.usage {
            completion_tokens = Some(usage.completion_tokens);
        }
        if let Some(timings) = chunk.workbench {
            out.server = Some(timings);
        }
    }
    out.record.tokens_out = completion_tokens.unwrap_or(text_chunks);
    if let (Some(server), Some(sent)) = (&out.server, out.sent_ms) {
        // The server's first iteration for it, placed on the client's clock.
        out.record.start_ms = Some(sent + server.queue_ms);
        out.record.prefill_chunks = server.prefill_chunks;
        out.record.preemptions = server.preemptions;
    }
    let outcome = if out.finish_reason.is_some() { GenOutcome::Served } else { GenOutcome::Failed };
    let error = (outcome == GenOutcome::Failed).then(|| "the stream ended without a finish reason".to_string());
    end(out, start, outcome, error)
}

fn end(mut out: ClientRecord, start: Instant, outcome: GenOutcome, error: Option<String>) -> ClientRecord {
    out.record.end_ms = ms_since(start);
    out.record.outcome = outcome;
    out.error = error;
    out
}

/// The first model an endpoint lists (`GET /v1/models`), for a run that
/// names none.
pub async fn first_model(http: &reqwest::Client, base_url: &str, api_key: Option<&str>) -> Result<String, String> {
    let url = format!("{}/v1/models", base_url.trim_end_matches('/'));
    let mut request = http.get(&url);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let status = response.status();
    let list: crate::openai::ModelList = response.json().await.map_err(|e| format!("GET {url} (HTTP {status}): {e}"))?;
    list.data.into_iter().map(|m| m.id).next().ok_or_else(|| format!("GET {url}: the endpoint lists no model"))
}
