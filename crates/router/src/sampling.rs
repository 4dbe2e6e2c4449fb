//! What a generation request asks for, and its checks: plain data, so the
//! page's UI thread checks a form with the same rules the worker applies
//! (it compiles this crate without the engine).

use serde::{Deserialize, Serialize};

/// How tokens are chosen and when generation stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// 0 is greedy (the arg-max); otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability
    /// reaches `top_p` (nucleus sampling); 1 keeps all.
    pub top_p: f32,
    /// The sampler's seed: the same seed, prompt and model give the same tokens.
    pub seed: u64,
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// Texts that end the generation where they first appear (not shown).
    pub stop: Vec<String>,
    /// Generate past end-of-turn tokens, to exactly `max_new_tokens` (a
    /// load test's fixed output lengths, as vLLM's benchmark asks with
    /// `ignore_eos`).
    #[serde(default)]
    pub ignore_eos: bool,
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0, max_new_tokens: 128, stop: Vec::new(), ignore_eos: false }
    }
}

/// A field of a generation request, named as the form and the CLI name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    Prompt,
    Temperature,
    TopK,
    TopP,
    Seed,
    MaxNewTokens,
    Stop,
}

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Field::Prompt => "prompt",
            Field::Temperature => "temperature",
            Field::TopK => "top_k",
            Field::TopP => "top_p",
            Field::Seed => "seed",
            Field::MaxNewTokens => "max_new_tokens",
            Field::Stop => "stop",
        }
    }
}

/// A refused request: which field, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamError {
    pub field: Field,
    pub reason: String,
}

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field.name(), self.reason)
    }
}

impl std::error::Error for ParamError {}

/// The longest stop text taken: stops are searched for in the text's tail
/// at every token.
pub const MAX_STOP_BYTES: usize = 256;
/// The most stop texts taken.
pub const MAX_STOPS: usize = 8;

impl SamplingParams {
    /// Checks every field on its own (the prompt's length is checked with
    /// [`SamplingParams::check_fits`] once it is tokenized).
    pub fn check(&self) -> Result<(), ParamError> {
        let refuse = |field, reason: String| Err(ParamError { field, reason });
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return refuse(Field::Temperature, format!("{} is not a temperature: 0 (greedy) or more", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return refuse(Field::TopP, format!("{} is outside (0, 1]", self.top_p));
        }
        if self.max_new_tokens == 0 {
            return refuse(Field::MaxNewTokens, "0 tokens: ask for at least 1".into());
        }
        if self.stop.len() > MAX_STOPS {
            return refuse(Field::Stop, format!("{} stop texts; at most {MAX_STOPS}", self.stop.len()));
        }
        if let Some(empty) = self.stop.iter().position(String::is_empty) {
            return refuse(Field::Stop, format!("stop text {} is empty, which would stop before the first token", empty + 1));
        }
        if let Some(long) = self.stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
            return refuse(Field::Stop, format!("a stop text of {} bytes; at most {MAX_STOP_BYTES}", long.len()));
        }
        Ok(())
    }

    /// Checks that a prompt of `prompt_tokens` leaves room in a context of
    /// `context` positions for at least one new token, and for all of
    /// `max_new_tokens`.
    pub fn check_fits(&self, prompt_tokens: usize, context: usize) -> Result<(), ParamError> {
        if prompt_tokens == 0 {
            return Err(ParamError { field: Field::Prompt, reason: "the prompt is empty".into() });
        }
        if prompt_tokens >= context {
            return Err(ParamError {
                field: Field::Prompt,
                reason: format!("{prompt_tokens} tokens reach past the model's context of {context}, with no room for an answer"),
            });
        }
        let room = context - prompt_tokens;
        if self.max_new_tokens > room {
            return Err(ParamError {
                field: Field::MaxNewTokens,
                reason: format!(
                    "{} new tokens after a prompt of {prompt_tokens} pass the context of {context}: at most {room} fit",
                    self.max_new_tokens
                ),
            });
        }
        Ok(())
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// A generation form's fields as typed (the page keeps them as text, so
/// nothing typed is lost when one is refused).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingForm {
    pub temperature: String,
    pub top_k: String,
    pub top_p: String,
    pub seed: String,
    pub max_new_tokens: String,
    /// One stop text a line; empty lines are ignored.
    pub stop: String,
}

impl Default for SamplingForm {
    fn default() -> SamplingForm {
        let p = SamplingParams::default();
        SamplingForm {
            temperature: p.temperature.to_string(),
            top_k: p.top_k.to_string(),
            top_p: p.top_p.to_string(),
            seed: p.seed.to_string(),
            max_new_tokens: p.max_new_tokens.to_string(),
            stop: String::new(),
        }
    }
}

impl SamplingForm {
    /// The parameters, or the first field that is not a number of its kind
    /// or fails [`SamplingParams::check`].
    pub fn parse(&self) -> Result<SamplingParams, ParamError> {
        fn number<T: std::str::FromStr>(field: Field, text: &str, kind: &str) -> Result<T, ParamError> {
            text.trim().parse().map_err(|_| ParamError { field, reason: format!("{:?} is not {kind}", text.trim()) })
        }
        let params = SamplingParams {
            temperature: number(Field::Temperature, &self.temperature, "a number")?,
            top_k: number(Field::TopK, &self.top_k, "a whole number (0 keeps every token)")?,
            top_p: number(Field::TopP, &self.top_p, "a number")?,
            seed: number(Field::Seed, &self.seed, "a whole number from 0")?,
            max_new_tokens: number(Field::MaxNewTokens, &self.max_new_tokens, "a whole number")?,
            stop: self.stop.lines().filter(|l| !l.is_empty()).map(str::to_string).collect(),
            ignore_eos: false,
        };
        params.check()?;
        Ok(params)
    }
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum FinishReason {
    /// The model produced an end-of-turn or end-of-text token.
    EndOfTurn { token: u32 },
    /// A stop text appeared (it is cut from the output).
    Stop { text: String },
    /// `max_new_tokens` were produced.
    MaxTokens,
}

impl FinishReason {
    pub fn label(&self) -> String {
        match self {
            FinishReason::EndOfTurn { .. } => "the end-of-turn token".into(),
            FinishReason::Stop { text } => format!("the stop text {text:?}"),
            FinishReason::MaxTokens => "the token limit".into(),
        }
    }

    /// OpenAI's `finish_reason`: `length` at the token limit, else `stop`.
    pub fn openai(&self) -> &'static str {
        match self {
            FinishReason::MaxTokens => "length",
            FinishReason::EndOfTurn { .. } | FinishReason::Stop { .. } => "stop",
        }
    }
}

/// One finished (or cancelled) generation, as the page and the CLI report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationSummary {
    pub checkpoint_id: String,
    /// The precision line: what computes with the weights.
    pub precision: String,
    pub params: SamplingParams,
    pub prompt_tokens: usize,
    /// The tokens generated (an end-of-turn token included).
    pub tokens: Vec<u32>,
    pub text: String,
    /// `None` when cancelled.
    pub finish: Option<FinishReason>,
    /// From the request to the first token, at the engine (the prefill and
    /// one LM-head product): the engine's share of a TTFT.
    pub first_token_ms: f64,
    /// The gap before each later token.
    pub gaps_ms: Vec<f64>,
    /// K/V bytes the sequence's tokens hold by the calculator's formula
    /// (`kv` crate, f32, sliding layers keeping their window).
    pub payload_kv_bytes: u64,
    /// K/V bytes the engine allocated for them (whole blocks, every layer
    /// keeping every token).
    pub allocated_kv_bytes: u64,
    pub block_tokens: usize,
}

impl GenerationSummary {
    /// Decode tokens a second over the gaps (the first token's prefill left out).
    pub fn decode_tokens_per_s(&self) -> f64 {
        let total: f64 = self.gaps_ms.iter().sum();
        if total > 0.0 {
            self.gaps_ms.len() as f64 * 1000.0 / total
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bad_field_is_named() {
        let bad = |p: SamplingParams| p.check().unwrap_err().field;
        let ok = SamplingParams::default();
        assert_eq!(ok.check(), Ok(()));
        assert_eq!(bad(SamplingParams { temperature: -0.1, ..ok.clone() }), Field::Temperature);
        assert_eq!(bad(SamplingParams { temperature: f32::NAN, ..ok.clone() }), Field::Temperature);
        assert_eq!(bad(SamplingParams { top_p: 0.0, ..ok.clone() }), Field::TopP);
        assert_eq!(bad(SamplingParams { top_p: 1.01, ..ok.clone() }), Field::TopP);
        assert_eq!(bad(SamplingParams { max_new_tokens: 0, ..ok.clone() }), Field::MaxNewTokens);
        assert_eq!(bad(SamplingParams { stop: vec!["".into()], ..ok.clone() }), Field::Stop);
        assert!(SamplingParams { top_p: 1.0, temperature: 0.7, ..ok.clone() }.check().is_ok());
        assert_eq!(ok.check_fits(0, 100).unwrap_err().field, Field::Prompt);
        assert_eq!(ok.check_fits(100, 100).unwrap_err().field, Field::Prompt);
        let fits = SamplingParams { max_new_tokens: 10, ..ok };
        assert_eq!(fits.check_fits(90, 100), Ok(()));
        let err = fits.check_fits(91, 100).unwrap_err();
        assert_eq!(err.field, Field::MaxNewTokens);
        assert!(err.to_string().contains("at most 9 fit"), "{err}");
    }

    #[test]
    fn the_form_names_the_field_it_cannot_read() {
        let form = SamplingForm::default();
        assert_eq!(form.parse().unwrap(), SamplingParams::default());
        let field = |f: SamplingForm| f.parse().unwrap_err().field;
        assert_eq!(field(SamplingForm { temperature: "warm".into(), ..form.clone() }), Field::Temperature);
        assert_eq!(field(SamplingForm { top_k: "-3".into(), ..form.clone() }), Field::TopK);
        assert_eq!(field(SamplingForm { seed: "1.5".into(), ..form.clone() }), Field::Seed);
        assert_eq!(field(SamplingForm { max_new_tokens: "0".into(), ..form.clone() }), Field::MaxNewTokens);
        assert_eq!(field(SamplingForm { top_p: "2".into(), ..form.clone() }), Field::TopP);
        let stops = SamplingForm { stop: "END\n\n###".into(), ..form }.parse().unwrap().stop;
        assert_eq!(stops, ["END", "###"]);
    }
}
