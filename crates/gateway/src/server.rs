//! The HTTP side of the endpoint, on axum: `POST /v1/chat/completions`
//! (server-sent events when `stream` is true, one JSON body otherwise),
//! `GET /v1/models`, `GET /metrics` (Prometheus text) and `GET /health`.
//! Every refusal is OpenAI's error shape with a 4xx (a body past the limit
//! is a 413, malformed JSON a 400 naming where, an unknown model a 404).
//!
//! A handler checks the request's fields (pure, at once), hands it to the
//! engine thread and awaits its acceptance, then forwards the events. The
//! response's body holds the event channel: when a client disconnects,
//! hyper drops the body, the channel closes, and the engine thread cancels
//! the request before its next iteration.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use web_time::Instant;

use crate::engine::{Accepted, EngineHandle, Event, Submission};
use crate::openai::{
    ApiError, ChatChunk, ChatCompletion, ChatRequest, Choice, ChunkChoice, Defaults, Delta, ModelCard, ModelList, ResponseMessage,
};

/// What every handler shares.
pub struct AppState {
    pub engine: EngineHandle,
    pub model_id: String,
    /// Whether `model: "auto"` is routed.
    pub routing: bool,
    /// A bearer token every request must carry, if set.
    pub api_key: Option<String>,
    pub defaults: Defaults,
    pub next_id: AtomicU64,
}

/// The model name that asks the router to choose.
pub const AUTO: &str = "auto";

/// The endpoint's routes over `state`; bodies past `body_limit` bytes are refused.
pub fn app(state: Arc<AppState>, body_limit: usize) -> axum::Router {
    axum::Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body())).into_response()
    }
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found(
        format!("no route {method} {}: this server answers POST /v1/chat/completions, GET /v1/models, GET /metrics", uri.path()),
        "unknown_url",
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError { status: 405, ..ApiError::invalid("method", format!("{method} is not allowed on {}", uri.path())) }
}

async fn models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    let card = |id: &str| ModelCard { id: id.into(), object: "model".into(), created: unix_s(), owned_by: "workbench".into() };
    let mut data = vec![card(&state.model_id)];
    if state.routing {
        data.push(card(AUTO));
    }
    Json(ModelList { object: "list".into(), data })
}

async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    ([("content-type", "text/plain; version=0.0.4")], state.engine.metrics().prometheus())
}

fn unix_s() -> u64 {
    web_time::SystemTime::now().duration_since(web_time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

async fn chat_completions(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
    let received = Instant::now();
    match serve(&state, &headers, body, received).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn serve(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    received: Instant,
) -> Result<Response, ApiError> {
    if let Some(key) = &state.api_key {
        let given = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(key.as_str()) {
            return Err(ApiError { status: 401, ..ApiError::invalid("authorization", "a bearer token this server accepts is required") }
                .with_code("invalid_api_key"));
        }
    }
    let body = body.map_err(|rejection| {
        let status = rejection.status().as_u16();
        let code = if status == 413 { "request_too_large" } else { "invalid_body" };
        ApiError { status, ..ApiError::invalid("body", format!("the request body: {}", rejection.body_text())) }.with_code(code)
    })?;
    let request: ChatRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid("body", format!("the body is not a chat-completions request: {e}")).with_code("invalid_json"))?;
    let auto = state.routing && request.model == AUTO;
    if !auto && request.model != state.model_id {
        let also = if state.routing { format!(" and '{AUTO}' (the router chooses)") } else { String::new() };
        return Err(ApiError::not_found(
            format!("the model '{}' does not exist: this server serves '{}'{also}", request.model, state.model_id),
            "model_not_found",
        ));
    }
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    let checked = request.check(state.defaults, id)?;
    let (reply, accepted) = tokio::sync::oneshot::channel();
    let (stream, include_usage) = (checked.stream, checked.include_usage);
    let submission = Submission { id, checked, auto, received, reply };
    let stopped = || ApiError::server(503, "the engine has stopped", "engine_stopped");
    if !state.engine.submit(submission) {
        return Err(stopped());
    }
    let accepted = accepted.await.map_err(|_| stopped())??;
    let mut response_headers = HeaderMap::new();
    if let (Some(routed), Some(decide_ms)) = (&accepted.routed, accepted.decide_ms) {
        // The router's choice and its cost, before a byte of the answer.
        let timing = format!("decide;dur={decide_ms:.3};desc=\"Router.decide chose {}\"", routed.candidate);
        if let Ok(value) = HeaderValue::from_str(&timing) {
            response_headers.insert("server-timing", value);
        }
        if let Ok(value) = HeaderValue::from_str(&routed.candidate) {
            response_headers.insert("x-workbench-routed-to", value);
        }
    }
    let model = state.model_id.clone();
    let completion_id = format!("chatcmpl-{id}");
    if stream {
        let events = event_stream(accepted, include_usage, completion_id, model);
        // Comments every few seconds keep proxies from closing a queued
        // request's quiet connection (clients ignore them).
        let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(5)));
        return Ok((response_headers, sse).into_response());
    }
    let whole = collect(accepted, completion_id, model).await?;
    Ok((response_headers, Json(whole)).into_response())
}

/// A whole answer, for a request that did not stream.
async fn collect(mut accepted: Accepted, id: String, model: String) -> Result<ChatCompletion, ApiError> {
    let mut text = String::new();
    while let Some(event) = accepted.events.recv().await {
        match event {
            Event::Token(piece) => text.push_str(&piece),
            Event::Done { finish_reason, usage, timings } => {
                return Ok(ChatCompletion {
                    id,
                    object: "chat.completion".into(),
                    created: unix_s(),
                    model,
                    choices: vec![Choice {
                        index: 0,
                        message: ResponseMessage { role: "assistant".into(), content: text },
                        finish_reason: Some(finish_reason.into()),
                    }],
                    usage,
                    workbench: Some(timings),
                })
            }
            Event::Failed(e) => return Err(e),
        }
    }
    Err(stopped_mid_request())
}

fn stopped_mid_request() -> ApiError {
    ApiError::server(503, "the engine stopped mid-request", "engine_stopped")
}

/// The engine's events as OpenAI's chunks: the role header with the first
/// token, a chunk for each token that released text, the finish reason
/// with this server's account, the usage if asked, then `[DONE]`.
fn event_stream(accepted: Accepted, include_usage: bool, id: String, model: String) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let chunk = move |delta: Delta, finish_reason: Option<String>| ChatChunk {
        id: id.clone(),
        object: "chat.completion.chunk".into(),
        created: unix_s(),
        model: model.clone(),
        choices: vec![ChunkChoice { index: 0, delta, finish_reason }],
        usage: None,
        workbench: None,
        error: None,
    };
    let data = |c: &ChatChunk| SseEvent::default().data(serde_json::to_string(c).unwrap_or_default());
    let state = (accepted.events, false, false);
    stream::unfold(state, move |(mut events, mut opened, ended)| {
        let chunk = chunk.clone();
        async move {
            if ended {
                return None;
            }
            let mut out = Vec::new();
            // A channel closed without its last event: the engine stopped.
            let event = events.recv().await.unwrap_or_else(|| Event::Failed(stopped_mid_request()));
            let finished = match event {
                Event::Token(text) => {
                    if !opened {
                        opened = true;
                        out.push(data(&chunk(Delta { role: Some("assistant".into()), content: Some(String::new()) }, None)));
                    }
                    if !text.is_empty() {
                        out.push(data(&chunk(Delta { role: None, content: Some(text) }, None)));
                    }
                    false
                }
                Event::Done { finish_reason, usage, timings } => {
                    let mut last = chunk(Delta::default(), Some(finish_reason.into()));
                    last.workbench = Some(timings);
                    out.push(data(&last));
                    if include_usage {
                        let mut usage_chunk = chunk(Delta::default(), None);
                        usage_chunk.choices.clear();
                        usage_chunk.usage = Some(usage);
                        out.push(data(&usage_chunk));
                    }
                    true
                }
                Event::Failed(error) => {
                    let mut failed = chunk(Delta::default(), None);
                    failed.choices.clear();
                    failed.error = Some(error);
                    out.push(data(&failed));
                    true
                }
            };
            if finished {
                out.push(SseEvent::default().data("[DONE]"));
            }
            Some((stream::iter(out.into_iter().map(Ok)), (events, opened, finished)))
        }
    })
    .flatten()
}
