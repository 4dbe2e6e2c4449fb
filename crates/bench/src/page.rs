//! The router page's state in the URL fragment: `#router&mode=economy&…`.
//!
//! Like the calculator's query codec, it keeps exactly what the user typed,
//! valid or not, so a reload restores every keystroke and an invalid field is
//! named next to its input. A shared result travels as `result=r1.…` (see
//! [`crate::share`]); the fragment never reaches a server.

use kv::form::{percent_decode, percent_encode};

use crate::protocol::Protocol;

/// The page's name in the fragment.
pub const PAGE: &str = "router";

/// What the router page's inputs hold, as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterForm {
    /// Empty: the pool's default mode.
    pub mode: String,
    pub system: String,
    pub user: String,
    pub iterations: String,
    pub warmup: String,
    pub lengths: String,
    /// How the weights compute: `int8` or `f32` (`Precision::flag`);
    /// empty, the router's default.
    pub precision: String,
    /// `similarity` asks for the untrained scoring; empty, the checkpoint's
    /// trained head (where it has one).
    pub scoring: String,
    /// A shared result (`r1.…`), shown read-only instead of the live bench.
    pub result: Option<String>,
}

impl Default for RouterForm {
    fn default() -> Self {
        RouterForm {
            mode: String::new(),
            system: String::new(),
            // A real task, so the first Decide works (an empty turn cannot be routed).
            user: crate::tasks::FIRST_TASK_PROMPT.into(),
            iterations: "25".into(),
            warmup: "5".into(),
            lengths: "15,256,1024".into(),
            precision: String::new(),
            scoring: String::new(),
            result: None,
        }
    }
}

/// One invalid input: its fragment name and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub field: &'static str,
    pub message: String,
}

/// The most calls a page run may ask for per length: a typo must not queue
/// hours of work.
pub const MAX_ITERATIONS: usize = 1000;
pub const MAX_WARMUP: usize = 100;
pub const MAX_LENGTH: usize = 8192;
pub const MAX_LENGTHS: usize = 8;

/// Whether a fragment addresses the router page (`#router`, `#router&…`).
pub fn is_router_fragment(fragment: &str) -> bool {
    let f = fragment.trim_start_matches('#');
    f == PAGE || f.starts_with("router&")
}

impl RouterForm {
    /// The latency widget's protocol (`router/?embed=latency`): the page's
    /// three lengths with 2 warm-ups and 5 timed calls each, so a reader who
    /// presses *Run* waits seconds, not minutes, and the integer kernels.
    ///
    /// The widget runs int8 where the full page keeps f32 as its default
    /// (the reference the integer path is checked against): a reader of the
    /// guide wants what this browser can do, and a foreign site's page is
    /// not cross-origin isolated, so the widget runs the single-thread
    /// build, where int8 took 0.91× f32's time at 256 tokens and 0.87× at
    /// 1,024 (SIMD128 i16 dots; 0.47× and 0.46× in the threads build,
    /// `reports/peers.single-thread.json`). On the end-to-end conversations
    /// its top pick is f32's and its scores lie within 0.01 of them (only
    /// near ties may turn); `precision=f32` in the link asks for f32.
    pub fn widget_default() -> RouterForm {
        RouterForm {
            iterations: "5".into(),
            warmup: "2".into(),
            precision: router::Precision::IntegerQ8.flag().into(),
            ..RouterForm::default()
        }
    }

    /// Reads a fragment (with or without `#`). Unknown keys are reported, and
    /// everything else is kept.
    pub fn from_fragment(fragment: &str) -> (RouterForm, Vec<String>) {
        RouterForm::from_fragment_over(RouterForm::default(), fragment)
    }

    /// [`RouterForm::from_fragment`] with other defaults for the fields the
    /// fragment leaves out (the widget's, see [`RouterForm::widget_default`]).
    pub fn from_fragment_over(defaults: RouterForm, fragment: &str) -> (RouterForm, Vec<String>) {
        let mut form = defaults;
        let mut unknown = Vec::new();
        let f = fragment.trim_start_matches('#');
        for pair in f.split('&').skip(1).filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "mode" => form.mode = value,
                "system" => form.system = value,
                "user" => form.user = value,
                "iters" => form.iterations = value,
                "warmup" => form.warmup = value,
                "lengths" => form.lengths = value,
                "precision" => form.precision = value,
                "scoring" => form.scoring = value,
                "result" => form.result = Some(value),
                other => unknown.push(format!("unknown parameter `{}` in the link (ignored)", percent_decode(other))),
            }
        }
        (form, unknown)
    }

    /// The fragment (without `#`); fields at their defaults are left out.
    pub fn to_fragment(&self) -> String {
        self.to_fragment_against(&RouterForm::default())
    }

    /// The fragment, leaving out the fields equal to `default` (the widget
    /// writes its own links against its own defaults).
    pub fn to_fragment_against(&self, default: &RouterForm) -> String {
        let mut out = String::from(PAGE);
        // A shared result first; any other field the link carried is kept
        // beside it, so opening the live bench from it loses nothing.
        if let Some(result) = &self.result {
            out.push_str("&result=");
            out.push_str(&percent_encode(result));
        }
        for (key, value, default) in [
            ("mode", &self.mode, &default.mode),
            ("system", &self.system, &default.system),
            ("user", &self.user, &default.user),
            ("iters", &self.iterations, &default.iterations),
            ("warmup", &self.warmup, &default.warmup),
            ("lengths", &self.lengths, &default.lengths),
            ("precision", &self.precision, &default.precision),
            ("scoring", &self.scoring, &default.scoring),
        ] {
            if value != default {
                out.push('&');
                out.push_str(key);
                out.push('=');
                out.push_str(&percent_encode(value));
            }
        }
        out
    }

    /// The precision the link asks for: `Ok(None)` for the router's
    /// default, an error naming the field for anything but `int8` or `f32`.
    pub fn precision(&self) -> Result<Option<router::Precision>, FieldProblem> {
        match self.precision.trim() {
            "" => Ok(None),
            text => match router::Precision::from_flag(text) {
                Some(p @ (router::Precision::IntegerQ8 | router::Precision::DequantizedF32)) => Ok(Some(p)),
                _ => Err(FieldProblem { field: "precision", message: format!("`{text}` is not a precision: use int8 or f32") }),
            },
        }
    }

    /// The scoring the link asks for: the trained head unless it says
    /// `similarity`; anything else is an error naming the field.
    pub fn scoring(&self) -> Result<router::ScoringChoice, FieldProblem> {
        match self.scoring.trim() {
            "" => Ok(router::ScoringChoice::Trained),
            text => router::ScoringChoice::from_name(text)
                .ok_or_else(|| FieldProblem { field: "scoring", message: format!("`{text}` is not a scoring: use trained or similarity") }),
        }
    }

    /// The bench protocol these inputs ask for, or one problem per bad field.
    /// `encode_iterations` follows `iterations`, as in bench-decide.
    pub fn protocol(&self) -> Result<Protocol, Vec<FieldProblem>> {
        let mut problems = Vec::new();
        let iterations =
            count(&self.iterations, 1, MAX_ITERATIONS).map_err(|m| problems.push(FieldProblem { field: "iters", message: m })).ok();
        let warmup = count(&self.warmup, 0, MAX_WARMUP).map_err(|m| problems.push(FieldProblem { field: "warmup", message: m })).ok();
        let lengths = parse_lengths(&self.lengths).map_err(|m| problems.push(FieldProblem { field: "lengths", message: m })).ok();
        match (iterations, warmup, lengths) {
            (Some(iterations), Some(warmup), Some(lengths)) => Ok(Protocol { lengths, warmup, iterations, encode_iterations: iterations }),
            _ => Err(problems),
        }
    }
}

fn count(text: &str, min: usize, max: usize) -> Result<usize, String> {
    let n: usize = text.trim().parse().map_err(|_| format!("`{}` is not a whole number", text.trim()))?;
    if n < min || n > max {
        return Err(format!("{n} is outside {min}–{max}"));
    }
    Ok(n)
}

/// `15, 256,1024` → `[15, 256, 1024]`; each a positive token count.
pub fn parse_lengths(text: &str) -> Result<Vec<usize>, String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return Err("give at least one prompt length in tokens, e.g. 15,256,1024".into());
    }
    if parts.len() > MAX_LENGTHS {
        return Err(format!("at most {MAX_LENGTHS} lengths"));
    }
    parts
        .iter()
        .map(|p| {
            let n: usize = p.parse().map_err(|_| format!("`{p}` is not a token count"))?;
            if n == 0 || n > MAX_LENGTH {
                return Err(format!("{n} tokens is outside 1–{MAX_LENGTH}"));
            }
            Ok(n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_a_bare_page_name_and_validate_to_the_seed_protocol() {
        let form = RouterForm::default();
        assert_eq!(form.to_fragment(), "router");
        assert_eq!(form.protocol().unwrap(), Protocol::default());
        assert!(is_router_fragment("#router") && is_router_fragment("router&iters=2"));
        assert!(!is_router_fragment("#routers") && !is_router_fragment(""));
    }

    #[test]
    fn invalid_fields_are_named_and_kept() {
        let (form, unknown) = RouterForm::from_fragment("#router&iters=two&warmup=500&lengths=15,,0&colour=red");
        assert_eq!(unknown, vec!["unknown parameter `colour` in the link (ignored)"]);
        let problems = form.protocol().unwrap_err();
        let named: Vec<(&str, &str)> = problems.iter().map(|p| (p.field, p.message.as_str())).collect();
        assert_eq!(
            named,
            vec![("iters", "`two` is not a whole number"), ("warmup", "500 is outside 0–100"), ("lengths", "0 tokens is outside 1–8192")]
        );
        assert_eq!(RouterForm::from_fragment(&form.to_fragment()).0, form);
    }

    #[test]
    fn precision_is_int8_f32_or_the_default_and_names_its_field() {
        let (form, _) = RouterForm::from_fragment("#router&precision=f32");
        assert_eq!(form.precision(), Ok(Some(router::Precision::DequantizedF32)));
        assert_eq!(form.to_fragment(), "router&precision=f32");
        assert_eq!(RouterForm::from_fragment("#router&precision=int8").0.precision(), Ok(Some(router::Precision::IntegerQ8)));
        assert_eq!(RouterForm::default().precision(), Ok(None));
        // candle's quantized matmul is a CLI choice only: far too slow for a page.
        for bad in ["f16", "quantized"] {
            let problem = RouterForm { precision: bad.into(), ..RouterForm::default() }.precision().unwrap_err();
            assert_eq!((problem.field, problem.message), ("precision", format!("`{bad}` is not a precision: use int8 or f32")));
        }
    }

    #[test]
    fn scoring_is_the_trained_head_unless_the_link_asks_for_similarity() {
        assert_eq!(RouterForm::default().scoring(), Ok(router::ScoringChoice::Trained));
        let (form, unknown) = RouterForm::from_fragment("#router&scoring=similarity");
        assert!(unknown.is_empty());
        assert_eq!(form.scoring(), Ok(router::ScoringChoice::Similarity));
        assert_eq!(form.to_fragment(), "router&scoring=similarity");
        let problem = RouterForm { scoring: "cosine".into(), ..RouterForm::default() }.scoring().unwrap_err();
        assert_eq!((problem.field, problem.message.as_str()), ("scoring", "`cosine` is not a scoring: use trained or similarity"));
    }

    /// Text biased to what a URL codec can get wrong (separators, escapes,
    /// quotes, multi-byte characters), now and then any character at all.
    #[cfg(not(target_arch = "wasm32"))]
    fn awkward_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let awkward: Vec<char> = "a Z0&=#%+?/,:*~\n\t\"'<>éß中😀|^".chars().collect();
        let char = prop_oneof![4 => proptest::sample::select(awkward), 1 => any::<char>()];
        proptest::collection::vec(char, 0..12).prop_map(String::from_iter)
    }

    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]
        /// Any text in any field survives the round trip.
        #[test]
        fn any_text_round_trips(
            mode in awkward_text(), system in awkward_text(), user in awkward_text(), iterations in awkward_text(),
            warmup in awkward_text(), lengths in awkward_text(), precision in awkward_text(), scoring in awkward_text(),
        ) {
            let form = RouterForm { mode, system, user, iterations, warmup, lengths, precision, scoring, result: None };
            proptest::prop_assert_eq!(RouterForm::from_fragment(&form.to_fragment()).0, form);
        }
    }

    #[test]
    fn widget_links_and_shared_results_round_trip() {
        let widget = RouterForm::widget_default();
        for form in [RouterForm { lengths: "15,64".into(), ..widget.clone() }, RouterForm { iterations: "25".into(), ..widget.clone() }] {
            let fragment = form.to_fragment_against(&widget);
            assert_eq!(RouterForm::from_fragment_over(widget.clone(), &fragment).0, form, "{fragment}");
        }
        assert_eq!(widget.to_fragment_against(&widget), "router");
        assert_eq!(widget.to_fragment(), "router&iters=5&warmup=2&precision=int8", "the full page's link states the widget's protocol");
        assert_eq!(widget.precision(), Ok(Some(router::Precision::IntegerQ8)));
        // A widget link asking for the router's default keeps asking for it.
        let f32_default = RouterForm { precision: String::new(), ..widget.clone() };
        assert_eq!(RouterForm::from_fragment_over(widget.clone(), &f32_default.to_fragment_against(&widget)).0, f32_default);
        // Found by the `router_fragment` fuzz target: a link with a result
        // and other fields lost the other fields when written back.
        let (mixed, _) =
            RouterForm::from_fragment("router&mode=economy&iters=2525&lengths=15,2router&result=r1.ab.c-_ute.&user=Fix%20the%20te");
        assert_eq!(RouterForm::from_fragment(&mixed.to_fragment()).0, mixed);
        let shared = RouterForm { result: Some("r1.abc-_".into()), ..RouterForm::default() };
        assert_eq!(shared.to_fragment(), "router&result=r1.abc-_");
        assert_eq!(RouterForm::from_fragment(&shared.to_fragment()).0, shared);
    }
}
