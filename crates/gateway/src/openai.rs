//! The OpenAI chat-completions API as this gateway speaks it: the request
//! (with the extensions vLLM and llama.cpp's server also take: `top_k`,
//! `ignore_eos`), the streamed chunk and the whole response, the error
//! shape, and the request's checks, which name the field at fault the way
//! OpenAI's `param` does. Types only: the server fills them in, the load
//! generator reads them (leniently: other engines' chunks differ in what
//! they leave out).

use router::conversation::{Message, Role};
use router::sampling::{Field, SamplingParams};
use router::Conversation;
use serde::{Deserialize, Serialize};

use bench::client_run::ServerTimings;

/// `POST /v1/chat/completions`'s body. Fields this server does not
/// implement are refused by name when they ask for something other than
/// the default (a penalty silently ignored would answer a different
/// question than the one asked); fields it has never heard of are ignored,
/// as OpenAI's own clients send many.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// vLLM's and llama.cpp's extension.
    pub top_k: Option<i64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    /// vLLM's and llama.cpp's extension: generate to exactly the token limit.
    #[serde(default)]
    pub ignore_eos: bool,
    pub n: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub logprobs: Option<bool>,
    pub tools: Option<Vec<serde_json::Value>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

/// A message's content: a string, or a list of parts of which this text
/// model reads the text ones.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    #[serde(skip)]
    pub status: u16,
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// The envelope an error travels in.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ApiError,
}

impl ApiError {
    /// A 400 about one field of the request.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError { status: 400, message: message.into(), kind: "invalid_request_error".into(), param: Some(param.into()), code: None }
    }

    pub fn with_code(mut self, code: &str) -> ApiError {
        self.code = Some(code.into());
        self
    }

    pub fn not_found(message: impl Into<String>, code: &str) -> ApiError {
        ApiError { status: 404, message: message.into(), kind: "invalid_request_error".into(), param: None, code: Some(code.into()) }
    }

    pub fn server(status: u16, message: impl Into<String>, code: &str) -> ApiError {
        ApiError { status, message: message.into(), kind: "server_error".into(), param: None, code: Some(code.into()) }
    }

    pub fn body(&self) -> ErrorBody {
        ErrorBody { error: self.clone() }
    }
}

/// What the server fills in where a request leaves a field out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Defaults {
    /// Tokens to generate when neither `max_tokens` nor `max_completion_tokens` is given.
    pub max_tokens: usize,
}

/// A checked request: the conversation, how to sample, and what was asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub conversation: Conversation,
    pub params: SamplingParams,
    /// The field the token limit came from, for errors about it.
    pub max_tokens_field: &'static str,
    /// Whether the client set the token limit (else the default, cut to
    /// what the context leaves).
    pub explicit_max_tokens: bool,
    pub stream: bool,
    pub include_usage: bool,
}

impl ChatRequest {
    /// Checks every field this server reads; `seed` is the request's
    /// number on the server when the client gives none.
    pub fn check(&self, defaults: Defaults, default_seed: u64) -> Result<Checked, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid("messages", "messages: at least one message is required"));
        }
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let role = match m.role.as_str() {
                // OpenAI's newer name for the system turn.
                "system" | "developer" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                other => {
                    return Err(ApiError::invalid(
                        format!("messages[{i}].role"),
                        format!("messages[{i}].role: '{other}' is not one of system, developer, user, assistant"),
                    ))
                }
            };
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(text)) => text.clone(),
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for (j, part) in parts.iter().enumerate() {
                        match (part.kind.as_str(), &part.text) {
                            ("text", Some(t)) => text.push_str(t),
                            (kind, _) => {
                                return Err(ApiError::invalid(
                                    format!("messages[{i}].content[{j}]"),
                                    format!("messages[{i}].content[{j}]: a part of type '{kind}' (this text model reads text parts only)"),
                                ))
                            }
                        }
                    }
                    text
                }
            };
            messages.push(Message { role, content });
        }
        let unsupported = |name: &str, what: &str| Err(ApiError::invalid(name, format!("{name}: {what} is not supported by this server")));
        if self.n.is_some_and(|n| n != 1) {
            return unsupported("n", "more than one choice");
        }
        if self.presence_penalty.is_some_and(|p| p != 0.0) {
            return unsupported("presence_penalty", "a presence penalty");
        }
        if self.frequency_penalty.is_some_and(|p| p != 0.0) {
            return unsupported("frequency_penalty", "a frequency penalty");
        }
        if self.logprobs == Some(true) {
            return unsupported("logprobs", "returning log-probabilities");
        }
        if self.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return unsupported("tools", "tool calling");
        }
        let (max_tokens_field, max_tokens) = match (self.max_completion_tokens, self.max_tokens) {
            (Some(n), _) => ("max_completion_tokens", Some(n)),
            (None, Some(n)) => ("max_tokens", Some(n)),
            (None, None) => ("max_tokens", None),
        };
        let max_new_tokens = match max_tokens {
            None => defaults.max_tokens,
            Some(n) if n < 1 => return Err(ApiError::invalid(max_tokens_field, format!("{max_tokens_field}: {n} is not at least 1"))),
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        let top_k = match self.top_k {
            None => 0,
            // vLLM's spelling of "keep all".
            Some(-1) => 0,
            Some(k) if k < 0 => {
                return Err(ApiError::invalid("top_k", format!("top_k: {k} is negative (use 0 or -1 to keep every token)")))
            }
            Some(k) => usize::try_from(k).unwrap_or(usize::MAX),
        };
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(ApiError::invalid("temperature", format!("temperature: {t} is outside [0, 2]")));
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        let params = SamplingParams {
            temperature: self.temperature.unwrap_or(1.0) as f32,
            top_k,
            top_p: self.top_p.unwrap_or(1.0) as f32,
            seed: self.seed.map_or(default_seed, |s| s as u64),
            max_new_tokens,
            stop,
            ignore_eos: self.ignore_eos,
        };
        params.check().map_err(|e| refusal(&e, max_tokens_field))?;
        Ok(Checked {
            conversation: Conversation { messages },
            params,
            max_tokens_field,
            explicit_max_tokens: max_tokens.is_some(),
            stream: self.stream,
            include_usage: self.stream_options.as_ref().is_some_and(|o| o.include_usage),
        })
    }
}

/// A refused sampling field as a 400 naming it as the request does.
pub fn refusal(e: &router::sampling::ParamError, max_tokens_field: &'static str) -> ApiError {
    let param = param_name(e.field, max_tokens_field);
    ApiError::invalid(param, format!("{param}: {}", e.reason))
}

/// A sampling field as the OpenAI request names it.
pub fn param_name(field: Field, max_tokens_field: &'static str) -> &'static str {
    match field {
        Field::Prompt => "messages",
        Field::MaxNewTokens => max_tokens_field,
        other => other.name(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// One streamed event (`chat.completion.chunk`). `workbench` is this
/// server's account of the request, in the last chunk only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunk {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workbench: Option<ServerTimings>,
    /// An error after the stream began (a timeout in the queue, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseMessage {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub index: u32,
    pub message: ResponseMessage,
    pub finish_reason: Option<String>,
}

/// The whole response of a request that did not stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<Choice>,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workbench: Option<ServerTimings>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    #[serde(default)]
    pub object: String,
    pub data: Vec<ModelCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    #[serde(default)]
    pub object: String,
    /// Left out by some servers (llama-cpp-python's).
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub owned_by: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULTS: Defaults = Defaults { max_tokens: 64 };

    fn request(json: &str) -> ChatRequest {
        serde_json::from_str(json).expect("a request that parses")
    }

    fn refused(json: &str) -> ApiError {
        request(json).check(DEFAULTS, 0).expect_err("a refusal")
    }

    #[test]
    fn a_plain_request_takes_the_defaults() {
        let c = request(r#"{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"stream":true,"stream_options":{"include_usage":true},"user":"ignored"}"#)
            .check(DEFAULTS, 7)
            .unwrap();
        assert_eq!(c.conversation.messages.len(), 2);
        assert_eq!(c.conversation.messages[1].content, "Hi");
        assert_eq!((c.params.max_new_tokens, c.params.seed, c.params.temperature), (64, 7, 1.0));
        assert!(c.stream && c.include_usage);
    }

    /// Every bad field is refused with OpenAI's `param` naming it.
    #[test]
    fn bad_fields_are_named() {
        let cases = [
            (r#"{"model":"m","messages":[]}"#, "messages"),
            (r#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#, "messages[0].role"),
            (r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#, "messages[0].content[0]"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":-0.5}"#, "temperature"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0}"#, "top_p"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_p":1.5}"#, "top_p"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}"#, "max_tokens"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":-3}"#, "max_completion_tokens"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"top_k":-2}"#, "top_k"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}"#, "n"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"frequency_penalty":0.5}"#, "frequency_penalty"),
            (r#"{"model":"m","messages":[{"role":"user","content":"x"}],"stop":[""]}"#, "stop"),
        ];
        for (json, param) in cases {
            let e = refused(json);
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{json}: {e:?}");
            assert!(e.message.starts_with(param), "{json}: the message names the field: {}", e.message);
        }
    }

    #[test]
    fn an_error_has_openais_shape() {
        let e = ApiError::invalid("top_p", "top_p: 0 is outside (0, 1]");
        let v: serde_json::Value = serde_json::to_value(e.body()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "top_p");
        assert!(v["error"]["code"].is_null());
    }
}
