//! Capacity from a length distribution: the field guide's note 03, step 2.
//! A budget sized by one length is sized for nobody: real requests come in
//! a spread of prompt and answer lengths, and a sequence keeps growing
//! until its answer ends. Given the lengths a workload really has, this
//! says how many sequences fit on one GPU at once if each is as long as
//! the mean, the median, the 95th or 99th percentile (or the longest) of
//! what a sequence retains at its end (prompt + answer), each rounded up to
//! whole blocks in every layer group as an engine allocates it.
//!
//! Lengths are read from CSV (a header naming the columns) or JSON (an
//! array of objects, or one object a line). Agent traces record a task's
//! totals over many model calls; with a `calls` column each row is divided
//! into its mean call, which is what one sequence holds. Rows with neither
//! input nor output tokens (failed runs, as the OOD176 data has) are
//! skipped and counted, never read as zero-length requests.

use serde::Serialize;
use thiserror::Error;

use crate::calc::{sequence_allocated_bits, Inputs};
use crate::error::KvError;
use crate::units;

/// The column names read as a sequence's prompt length, in order of preference.
pub const INPUT_COLUMNS: [&str; 6] = ["input", "input_tokens", "prompt_tokens", "in_tok", "isl", "prompt_len"];
/// The column names read as a sequence's answer length.
pub const OUTPUT_COLUMNS: [&str; 6] = ["output", "output_tokens", "completion_tokens", "out_tok", "osl", "output_len"];
/// The optional column that divides a row's totals into per-call lengths.
pub const CALLS_COLUMN: &str = "calls";
/// The one built-in distribution a link may name (`lengths=ood176`):
/// CodeRouterBench's OOD176 runs, whose file the site serves. Pasted
/// lengths are never put in a link (they can be long, and private).
pub const BUILTIN: &str = "ood176";
/// Most rows read: far more than any trace a person pastes, and a bound
/// on the work a page does for one keystroke.
pub const MAX_ROWS: usize = 1_000_000;

/// Where in the text a problem is: a line (CSV, JSON lines), an item of a
/// JSON array, or the text as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Whole,
    Line(usize),
    Item(usize),
}

/// A problem with the lengths' text, naming where it is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{}{message}", match .place { Place::Whole => String::new(), Place::Line(n) => format!("line {n}: "), Place::Item(n) => format!("item {n}: ") })]
pub struct LengthsError {
    pub place: Place,
    pub message: String,
}

impl LengthsError {
    fn at(place: Place, message: impl Into<String>) -> LengthsError {
        LengthsError { place, message: message.into() }
    }
}

/// One sequence's lengths, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LengthSample {
    pub input: u64,
    pub output: u64,
}

impl LengthSample {
    /// What the sequence holds when its answer ends: the prompt and every
    /// generated token (the last one's K/V is written too).
    pub fn retained(self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// The lengths read, and what was left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lengths {
    pub samples: Vec<LengthSample>,
    /// Rows with no tokens at all (failed runs): not sequences.
    pub skipped_empty: usize,
    /// Whether rows were divided by a `calls` column.
    pub per_call: bool,
}

/// Reads lengths from CSV or JSON (the first non-blank character decides).
pub fn parse_lengths(text: &str) -> Result<Lengths, LengthsError> {
    match text.trim_start().chars().next() {
        None => Err(LengthsError::at(Place::Whole, "no lengths: paste CSV with a header (input,output) or JSON objects")),
        Some('[') | Some('{') => parse_json(text),
        Some(_) => parse_csv(text),
    }
}

/// Which of `names` a header or an object has, if any.
fn find<'a>(mut has: impl FnMut(&str) -> bool, names: &[&'a str]) -> Option<&'a str> {
    names.iter().copied().find(|n| has(n))
}

fn missing_columns(place: Place) -> LengthsError {
    LengthsError::at(
        place,
        format!("needs an input column ({}) and an output column ({})", INPUT_COLUMNS.join(", "), OUTPUT_COLUMNS.join(", ")),
    )
}

/// One row's numbers to a sample (or `None` for a row with no tokens).
fn sample(place: Place, input: f64, output: f64, calls: Option<f64>) -> Result<Option<LengthSample>, LengthsError> {
    for (name, v) in [("input", input), ("output", output)] {
        if !(v.is_finite() && v >= 0.0 && v <= u64::MAX as f64) {
            return Err(LengthsError::at(place, format!("{name} = {v} is not a token count")));
        }
    }
    if input == 0.0 && output == 0.0 {
        return Ok(None);
    }
    let calls = match calls {
        None => 1.0,
        Some(c) if c.is_finite() && c >= 1.0 => c,
        Some(c) => return Err(LengthsError::at(place, format!("calls = {c} is not a positive count"))),
    };
    // A mean call of a multi-call row: whole tokens, at least one of each
    // kind that the row has.
    let per_call = |v: f64| if v == 0.0 { 0 } else { ((v / calls).round() as u64).max(1) };
    Ok(Some(LengthSample { input: per_call(input), output: per_call(output) }))
}

fn parse_csv(text: &str) -> Result<Lengths, LengthsError> {
    let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(text.as_bytes());
    let headers = reader.headers().map_err(|e| LengthsError::at(Place::Line(1), e.to_string()))?.clone();
    let names: Vec<String> = headers.iter().map(|h| h.trim().to_ascii_lowercase()).collect();
    let column = |wanted: &[&str]| find(|n| names.iter().any(|h| h == n), wanted).and_then(|n| names.iter().position(|h| h == n));
    let (Some(input), Some(output)) = (column(&INPUT_COLUMNS), column(&OUTPUT_COLUMNS)) else {
        return Err(missing_columns(Place::Line(1)));
    };
    let calls = column(&[CALLS_COLUMN]);
    let mut lengths = Lengths { samples: Vec::new(), skipped_empty: 0, per_call: calls.is_some() };
    for record in reader.records() {
        let record =
            record.map_err(|e| LengthsError::at(e.position().map_or(Place::Whole, |p| Place::Line(p.line() as usize)), e.to_string()))?;
        let line = record.position().map_or(Place::Whole, |p| Place::Line(p.line() as usize));
        let number = |i: usize, name: &str| -> Result<f64, LengthsError> {
            let cell = record.get(i).unwrap_or("").trim();
            cell.parse::<f64>().map_err(|_| LengthsError::at(line, format!("{name} `{cell}` is not a number")))
        };
        let calls = calls.map(|i| number(i, CALLS_COLUMN)).transpose()?;
        push(&mut lengths, line, sample(line, number(input, &names[input])?, number(output, &names[output])?, calls)?)?;
    }
    finish(lengths)
}

fn parse_json(text: &str) -> Result<Lengths, LengthsError> {
    // An array is one value; anything else is one object a line.
    let rows: Vec<(Place, serde_json::Value)> = if text.trim_start().starts_with('[') {
        let value: Vec<serde_json::Value> =
            serde_json::from_str(text).map_err(|e| LengthsError::at(Place::Line(e.line()), e.to_string()))?;
        value.into_iter().enumerate().map(|(i, v)| (Place::Item(i + 1), v)).collect()
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map(|v| (Place::Line(i + 1), v)).map_err(|e| LengthsError::at(Place::Line(i + 1), e.to_string()))
            })
            .collect::<Result<_, _>>()?
    };
    let mut lengths = Lengths { samples: Vec::new(), skipped_empty: 0, per_call: false };
    for (line, row) in rows {
        let object = row.as_object().ok_or_else(|| LengthsError::at(line, "not an object with input and output lengths"))?;
        let (Some(input), Some(output)) =
            (find(|n| object.contains_key(n), &INPUT_COLUMNS), find(|n| object.contains_key(n), &OUTPUT_COLUMNS))
        else {
            return Err(missing_columns(line));
        };
        let number = |name: &str| {
            object.get(name).and_then(serde_json::Value::as_f64).ok_or_else(|| LengthsError::at(line, format!("{name} is not a number")))
        };
        let calls = object.contains_key(CALLS_COLUMN).then(|| number(CALLS_COLUMN)).transpose()?;
        lengths.per_call |= calls.is_some();
        push(&mut lengths, line, sample(line, number(input)?, number(output)?, calls)?)?;
    }
    finish(lengths)
}

fn push(lengths: &mut Lengths, line: Place, sample: Option<LengthSample>) -> Result<(), LengthsError> {
    match sample {
        Some(_) if lengths.samples.len() >= MAX_ROWS => Err(LengthsError::at(line, format!("more than {MAX_ROWS} rows"))),
        Some(s) => {
            lengths.samples.push(s);
            Ok(())
        }
        None => {
            lengths.skipped_empty += 1;
            Ok(())
        }
    }
}

fn finish(lengths: Lengths) -> Result<Lengths, LengthsError> {
    if lengths.samples.is_empty() {
        return Err(LengthsError::at(
            Place::Whole,
            format!("no row has any tokens ({} rows without tokens skipped)", lengths.skipped_empty),
        ));
    }
    Ok(lengths)
}

/// One line of the capacity table: a statistic of the retained length and
/// how many sequences of that size fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CapacityRow {
    /// `mean`, `p50`, `p95`, `p99` or `max`.
    pub label: String,
    /// Retained tokens a sequence holds (for the mean: the mean, rounded up).
    pub retained_tokens: u64,
    /// Bytes one sequence is allocated on one GPU (for the mean: the mean
    /// of every sample's allocation, rounded up).
    pub bytes_per_sequence: u128,
    /// Sequences that fit in the GPU's K/V budget at once.
    pub sequences: u128,
}

/// Capacity against the percentile of retained length, for the plot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CurvePoint {
    pub percentile: u32,
    pub retained_tokens: u64,
    pub sequences: u128,
}

/// The distribution's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DistributionReport {
    pub samples: usize,
    pub skipped_empty: usize,
    pub per_call: bool,
    /// The K/V budget of one GPU it divides (the calculator's inversion).
    pub kv_budget_bytes_per_gpu: u128,
    pub mean_input: u64,
    pub mean_output: u64,
    pub rows: Vec<CapacityRow>,
    /// Percentiles 50 to 100.
    pub curve: Vec<CurvePoint>,
}

/// The nearest-rank percentile of sorted values (`p` in 1..=100).
fn percentile(sorted: &[u64], p: u32) -> u64 {
    let rank = (sorted.len() * p as usize).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Sizes `lengths` with the model of `inputs` against one GPU's K/V
/// budget (the calculator's inversion: the GPU's memory less reserve and
/// weights). Lengths without a sequence are refused, as the reader does.
pub fn capacity(inputs: &Inputs, kv_budget_bytes_per_gpu: u128, lengths: &Lengths) -> Result<DistributionReport, KvError> {
    if lengths.samples.is_empty() {
        return Err(crate::FieldError::new("lengths", "no sequence to size").into());
    }
    let budget_bits = kv_budget_bytes_per_gpu.checked_mul(8).ok_or(KvError::Overflow { what: "K/V budget" })?;
    let fit = |bits: u128| budget_bits.checked_div(bits).unwrap_or(0);
    let mut retained: Vec<u64> = lengths.samples.iter().map(|s| s.retained()).collect();
    retained.sort_unstable();
    let n = lengths.samples.len() as u128;
    // Each sample's own allocation (a sliding window or a block boundary
    // makes bytes not proportional to tokens, so the mean is of bytes).
    let mut total_bits = 0u128;
    for s in &lengths.samples {
        let bits = sequence_allocated_bits(inputs, s.retained())?;
        total_bits = total_bits.checked_add(bits).ok_or(KvError::Overflow { what: "the samples' allocation" })?;
    }
    let mean_bits = total_bits.div_ceil(n);
    let sum = |f: fn(&LengthSample) -> u64| lengths.samples.iter().map(|s| f(s) as u128).sum::<u128>();
    let mut rows = vec![CapacityRow {
        label: "mean".into(),
        retained_tokens: retained.iter().map(|&t| t as u128).sum::<u128>().div_ceil(n) as u64,
        bytes_per_sequence: units::bits_to_bytes(mean_bits),
        sequences: fit(mean_bits),
    }];
    for (label, p) in [("p50", 50), ("p95", 95), ("p99", 99), ("max", 100)] {
        let tokens = percentile(&retained, p);
        let bits = sequence_allocated_bits(inputs, tokens)?;
        rows.push(CapacityRow {
            label: label.into(),
            retained_tokens: tokens,
            bytes_per_sequence: units::bits_to_bytes(bits),
            sequences: fit(bits),
        });
    }
    let curve = (50..=100)
        .map(|p| {
            let tokens = percentile(&retained, p);
            Ok(CurvePoint { percentile: p, retained_tokens: tokens, sequences: fit(sequence_allocated_bits(inputs, tokens)?) })
        })
        .collect::<Result<Vec<_>, KvError>>()?;
    Ok(DistributionReport {
        samples: lengths.samples.len(),
        skipped_empty: lengths.skipped_empty,
        per_call: lengths.per_call,
        kv_budget_bytes_per_gpu,
        mean_input: sum(|s| s.input).div_ceil(n) as u64,
        mean_output: sum(|s| s.output).div_ceil(n) as u64,
        rows,
        curve,
    })
}

impl DistributionReport {
    /// The answer in sentences, for the page and the command line.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "{} sequence{}{}{}: mean prompt {} and answer {} tokens; each sized at its end (prompt + answer), in whole blocks, on one GPU's K/V budget of {}.",
            units::group_digits(self.samples as u128),
            if self.samples == 1 { "" } else { "s" },
            if self.per_call { " (each row's mean call: totals ÷ calls)" } else { "" },
            if self.skipped_empty > 0 { format!(", {} rows without tokens skipped (failed runs)", self.skipped_empty) } else { String::new() },
            units::group_digits(self.mean_input as u128),
            units::group_digits(self.mean_output as u128),
            units::binary(self.kv_budget_bytes_per_gpu),
        )];
        let at = |label: &str| self.rows.iter().find(|r| r.label == label);
        if let (Some(mean), Some(p99)) = (at("mean"), at("p99")) {
            lines.push(format!(
                "Sized by the mean, {} sequences fit at once; if every sequence were as long as the 99th percentile ({} tokens), {} would: the mean promises {}× the tail's concurrency.",
                units::group_digits(mean.sequences),
                units::group_digits(p99.retained_tokens as u128),
                units::group_digits(p99.sequences),
                units::decimal_ratio(mean.sequences, p99.sequences.max(1)),
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calc::Inputs;
    use crate::model::ModelShape;

    #[test]
    fn csv_and_json_read_the_same_lengths() {
        let csv = "id,prompt_tokens,completion_tokens\na,100,20\nb,300,50\n";
        let json = r#"[{"input": 100, "output": 20}, {"input": 300, "output": 50}]"#;
        let lines = "{\"isl\": 100, \"osl\": 20}\n\n{\"isl\": 300, \"osl\": 50}\n";
        let want = vec![LengthSample { input: 100, output: 20 }, LengthSample { input: 300, output: 50 }];
        for text in [csv, json, lines] {
            let read = parse_lengths(text).unwrap();
            assert_eq!((read.samples.clone(), read.skipped_empty, read.per_call), (want.clone(), 0, false), "{text}");
        }
    }

    /// OOD176's shape: totals over many calls, and failed runs with no tokens.
    #[test]
    fn calls_divide_rows_and_empty_rows_are_skipped() {
        let csv = "task_id,in_tok,out_tok,calls\n\"a, quoted\",205845,3128,17\nb,0,0,0\nc,1000,0,1\n";
        let read = parse_lengths(csv).unwrap();
        assert_eq!(read.samples, [LengthSample { input: 12109, output: 184 }, LengthSample { input: 1000, output: 0 }]);
        assert_eq!((read.skipped_empty, read.per_call), (1, true));
    }

    /// A link may name the built-in example, and nothing else.
    #[test]
    fn a_link_names_the_builtin_example_or_nothing() {
        assert!(crate::Form::from_query("lengths=ood176").0.validate().is_ok());
        let errors = crate::Form::from_query("lengths=my-trace.csv").0.validate().unwrap_err();
        assert_eq!(
            errors.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            ["lengths: `my-trace.csv` is not a built-in distribution (use lengths=ood176, or paste lengths on the page)"]
        );
    }

    #[test]
    fn bad_lengths_name_their_line() {
        let e = |text: &str| parse_lengths(text).unwrap_err().to_string();
        assert_eq!(e(""), "no lengths: paste CSV with a header (input,output) or JSON objects");
        assert!(e("a,b\n1,2\n").starts_with("line 1: needs an input column (input, input_tokens"), "{}", e("a,b\n1,2\n"));
        assert_eq!(e("input,output\n5,6\n7,x\n"), "line 3: output `x` is not a number");
        assert_eq!(e("input,output\n-5,6\n"), "line 2: input = -5 is not a token count");
        assert_eq!(e("input,output,calls\n5,6,0\n"), "line 2: calls = 0 is not a positive count");
        assert!(e("{\"input\": 1, \"output\": 2}\n{\"input\": 1}\n").starts_with("line 2: needs an input column"));
        assert!(e("[{\"input\": 1, \"output\": 2}, 7]").starts_with("item 2: not an object"));
        assert_eq!(e("input,output\n0,0\n"), "no row has any tokens (1 rows without tokens skipped)");
        assert!(e("input,output\n1,2,3\n").starts_with("line 2:"), "{}", e("input,output\n1,2,3\n"));
    }

    fn seed_with_budget() -> (Inputs, u128) {
        // 32 layers × 8 KV heads × 128 × bf16: 128 KiB a token; blocks of 16.
        (Inputs { model: ModelShape::uniform(32, 8, 128), ..Inputs::seed() }, 64 << 30)
    }

    #[test]
    fn capacity_is_exact_in_blocks_and_counts_the_answer() {
        let (inputs, budget) = seed_with_budget();
        let lengths = Lengths {
            samples: (1..=100).map(|i| LengthSample { input: 1000 * i, output: 10 }).collect(),
            skipped_empty: 0,
            per_call: false,
        };
        let report = capacity(&inputs, budget, &lengths).unwrap();
        let row = |label: &str| report.rows.iter().find(|r| r.label == label).unwrap().clone();
        // p99 of 1,010 … 100,010 is 99,010 retained tokens, 6,189 blocks of 16.
        let p99 = row("p99");
        assert_eq!(p99.retained_tokens, 99_010);
        assert_eq!(p99.bytes_per_sequence, 6_189 * 16 * 128 * 1024);
        assert_eq!(p99.sequences, (64u128 << 30) / (6_189 * 16 * 128 * 1024));
        assert_eq!(row("max").retained_tokens, 100_010);
        assert_eq!(row("p50").retained_tokens, 50_010);
        // The mean is of each sample's allocation: Σ ⌈(1000 i + 10) / 16⌉ × 16 tokens ÷ 100.
        let blocks: u128 = (1..=100u128).map(|i| (1000 * i + 10).div_ceil(16)).sum();
        assert_eq!(row("mean").bytes_per_sequence, (blocks * 16 * 128 * 1024).div_ceil(100));
        assert_eq!(report.curve.len(), 51);
        assert!(report.curve.windows(2).all(|w| w[0].sequences >= w[1].sequences));
        assert!(report.lines()[1].starts_with("Sized by the mean, "), "{:?}", report.lines());
    }

    /// A sliding window caps what its layers keep: the long tail costs
    /// those layers nothing more.
    #[test]
    fn sliding_layers_keep_their_window_at_every_percentile() {
        let spec = crate::model::LayerSpec {
            layer_types: Some(crate::runs::parse_runs("slidingx5,full", crate::model::KindTag::parse).unwrap()),
            window: Some(512),
            ..Default::default()
        };
        let inputs = Inputs { model: ModelShape::build(6, 1, 256, &spec).unwrap(), block: 1, ..Inputs::seed() };
        let long = sequence_allocated_bits(&inputs, 10_000).unwrap();
        // 5 sliding layers keep 512, the full one 10,000: 2 × 1 × 256 × 16 bits each.
        assert_eq!(long, (5 * 512 + 10_000) * 2 * 256 * 16);
    }

    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        /// More of the tail never fits more sequences, and the mean's
        /// count lies between the shortest's and the longest's.
        #[test]
        fn capacity_falls_with_the_percentile(raw in proptest::collection::vec((1u64..200_000, 0u64..8_000), 1..60), block in 1u64..64) {
            let (inputs, budget) = seed_with_budget();
            let inputs = Inputs { block, ..inputs };
            let lengths = Lengths { samples: raw.iter().map(|&(input, output)| LengthSample { input, output }).collect(), skipped_empty: 0, per_call: false };
            let report = capacity(&inputs, budget, &lengths).unwrap();
            proptest::prop_assert!(report.curve.windows(2).all(|w| w[0].sequences >= w[1].sequences && w[0].retained_tokens <= w[1].retained_tokens));
            let shortest = lengths.samples.iter().map(|s| s.retained()).min().unwrap();
            let most = budget * 8 / sequence_allocated_bits(&inputs, shortest).unwrap();
            let mean = report.rows[0].sequences;
            proptest::prop_assert!(mean <= most && mean >= report.rows.last().unwrap().sequences);
        }
    }
}
