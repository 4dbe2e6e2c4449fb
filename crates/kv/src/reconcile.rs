//! The vLLM reconciler (note 03, step 3): a `/metrics` scrape read beside
//! the calculator's figures, laid out as a ledger from the logical payload
//! of the running requests (ours) to the blocks vLLM allocated, the blocks
//! its metrics say are in use, and what is free, with every difference
//! attributed and its arithmetic shown rather than called waste.
//!
//! The scrape is Prometheus text. It is read here, line by line, rather
//! than with a Prometheus crate: the page's bundle carries it (the
//! `prometheus-parse` crate brings `regex` and `chrono`), and a line that
//! does not read must be named by its number while the rest is kept.
//! Values are read as exact decimals: a block count never passes through a
//! float.

use serde::Serialize;

use crate::calc::{bytes_text, Inputs, Report};
use crate::error::KvError;
use crate::runs::total_count;
use crate::units::{self, group_digits};

/// One sample of the scrape: `name{labels} value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    /// The value as written (exact: see [`exact`]).
    pub value: String,
    pub line: usize,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A scrape: its samples and the lines it could not read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scrape {
    pub samples: Vec<Sample>,
    /// `line N: what is wrong`, for each line skipped.
    pub skipped: Vec<String>,
}

/// Reads Prometheus text exposition. Comments (`# HELP`, `# TYPE`) and
/// blank lines are passed over; a sample line that does not read is named
/// in `skipped` and the rest are kept.
pub fn parse_scrape(text: &str) -> Scrape {
    let mut samples = Vec::new();
    let mut skipped = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match sample(line, i + 1) {
            Ok(s) => samples.push(s),
            Err(why) => skipped.push(format!("line {}: {why}", i + 1)),
        }
    }
    Scrape { samples, skipped }
}

fn sample(line: &str, number: usize) -> Result<Sample, String> {
    let name_end = line.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')).unwrap_or(line.len());
    let name = &line[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("does not start with a metric name".into());
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let mut key = String::new();
        loop {
            let Some((at, c)) = chars.next() else { return Err("a `{` without its `}`".into()) };
            match c {
                '}' if key.trim().is_empty() => {
                    rest = &inner[at + 1..];
                    break;
                }
                ',' | ' ' if key.trim().is_empty() => {}
                '=' => {
                    if chars.next().map(|(_, c)| c) != Some('"') {
                        return Err(format!("label `{}` has no quoted value", key.trim()));
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next() {
                            None => return Err(format!("label `{}` has an unterminated value", key.trim())),
                            Some((_, '"')) => break,
                            Some((_, '\\')) => match chars.next() {
                                Some((_, 'n')) => value.push('\n'),
                                Some((_, c)) => value.push(c),
                                None => return Err(format!("label `{}` has an unterminated value", key.trim())),
                            },
                            Some((_, c)) => value.push(c),
                        }
                    }
                    labels.push((key.trim().to_string(), value));
                    key.clear();
                }
                c => key.push(c),
            }
        }
    }
    let value = rest.split_whitespace().next().ok_or_else(|| format!("`{name}` has no value"))?;
    if exact(value).is_none() && !matches!(value, "NaN" | "+Inf" | "-Inf") && value.parse::<f64>().is_err() {
        return Err(format!("`{name}` has the value `{value}`, not a number"));
    }
    Ok(Sample { name: name.to_string(), labels, value: value.to_string(), line: number })
}

/// A non-negative value as an exact fraction `(numerator, 10^scale)`:
/// `27000`, `27000.0`, `0.0123`, `1.2e-05`. `None` for negative values,
/// NaN, infinities and what does not fit.
pub fn exact(text: &str) -> Option<(u128, u128)> {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let mantissa = mantissa.strip_prefix('+').unwrap_or(mantissa);
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty() && frac_part.is_empty() || !(int_part.bytes().chain(frac_part.bytes()).all(|b| b.is_ascii_digit())) {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let mut numerator: u128 = digits.trim_start_matches('0').parse().unwrap_or(0);
    let mut scale = frac_part.len() as i32 - exponent;
    while scale < 0 {
        numerator = numerator.checked_mul(10)?;
        scale += 1;
    }
    if scale > 38 {
        return None;
    }
    Some((numerator, 10u128.pow(scale as u32)))
}

/// What vLLM's metrics say about its KV cache (one engine; several are summed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VllmMetrics {
    pub block_size: u64,
    pub num_gpu_blocks: u128,
    pub cache_dtype: Option<String>,
    pub prefix_caching: Option<bool>,
    /// Blocks in use: usage × blocks, rounded to the nearest block (vLLM
    /// computes usage as 1 − free ÷ total, so the product is a whole number
    /// up to float rounding).
    pub used_blocks: u128,
    /// The usage line as written, and its metric's name.
    pub usage_text: String,
    pub usage_metric: String,
    pub running: Option<u128>,
    pub waiting: Option<u128>,
    pub engines: usize,
}

/// Finds the KV-cache metrics in a scrape, or says which is missing.
pub fn vllm_metrics(scrape: &Scrape) -> Result<VllmMetrics, String> {
    fn find<'a>(scrape: &'a Scrape, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        scrape.samples.iter().filter(move |s| s.name == name)
    }
    let config = find(scrape, "vllm:cache_config_info")
        .next()
        .ok_or("no `vllm:cache_config_info` line: it carries block_size and num_gpu_blocks (vLLM prints it on /metrics from start-up)")?;
    let label_number = |key: &str| -> Result<u128, String> {
        let text = config.label(key).ok_or_else(|| format!("line {}: `vllm:cache_config_info` has no {key} label", config.line))?;
        match exact(text) {
            Some((n, 1)) => Ok(n),
            _ => Err(format!("line {}: {key}=\"{text}\" is not a whole number", config.line)),
        }
    };
    // Far beyond any real engine, and small enough that every product of
    // the ledger fits: refused by name rather than wrapped.
    let block_size = label_number("block_size")?.max(1);
    if block_size > 1 << 20 {
        return Err(format!("line {}: block_size {block_size} is beyond any real engine", config.line));
    }
    let block_size = block_size as u64;
    let num_gpu_blocks = label_number("num_gpu_blocks")?;
    if num_gpu_blocks > 1 << 40 {
        return Err(format!("line {}: num_gpu_blocks {num_gpu_blocks} is beyond any real engine", config.line));
    }
    // v1 names it kv_cache_usage_perc; v0 gpu_cache_usage_perc. Both are a fraction.
    let usage_metric = ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"];
    let usage: Vec<&Sample> = usage_metric.iter().flat_map(|m| find(scrape, m)).collect();
    let first = usage.first().ok_or("no `vllm:kv_cache_usage_perc` (or v0's `vllm:gpu_cache_usage_perc`) line")?;
    let mut used_blocks = 0u128;
    for s in &usage {
        let (n, d) = exact(&s.value).ok_or_else(|| format!("line {}: usage `{}` is not a fraction from 0 to 1", s.line, s.value))?;
        if n > d {
            return Err(format!("line {}: usage {} is above 1", s.line, s.value));
        }
        // Nearest whole block: (n × blocks + d/2) ÷ d, exactly.
        // Past 24 decimals (a float has 17 significant digits) the fraction
        // is cut to 24, so that n × blocks (≤ 10^24 × 2^40) fits; the cut
        // moves the product by under 10^-12 of a block.
        let limit = 10u128.pow(24);
        let (n, d) = if d > limit { (n / (d / limit), limit) } else { (n, d) };
        used_blocks += (n * num_gpu_blocks + d / 2) / d;
    }
    let sum = |name: &str| -> Option<u128> {
        let values: Vec<u128> = find(scrape, name).filter_map(|s| exact(&s.value)).map(|(n, d)| n / d).collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    Ok(VllmMetrics {
        block_size,
        num_gpu_blocks: num_gpu_blocks * usage.len().max(1) as u128,
        cache_dtype: config.label("cache_dtype").map(str::to_string),
        prefix_caching: config.label("enable_prefix_caching").map(|v| v.eq_ignore_ascii_case("true")),
        used_blocks,
        usage_text: first.value.clone(),
        usage_metric: first.name.clone(),
        running: sum("vllm:num_requests_running"),
        waiting: sum("vllm:num_requests_waiting"),
        engines: usage.len(),
    })
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerRow {
    pub label: String,
    pub blocks: Option<i128>,
    pub bytes: i128,
    /// The arithmetic, with the numbers used.
    pub arithmetic: String,
    /// Whose figure: `ours`, `vLLM metrics`, `vLLM log`, or the difference's attribution.
    pub source: String,
}

/// The reconciliation: rows in order, and notes on what could not be matched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ledger {
    pub rows: Vec<LedgerRow>,
    pub notes: Vec<String>,
}

fn times(a: u128, b: u128) -> Result<u128, KvError> {
    a.checked_mul(b).ok_or(KvError::Overflow { what: "vLLM ledger" })
}

/// A byte or block count as a ledger amount (which may be negative).
fn signed(v: u128) -> Result<i128, KvError> {
    i128::try_from(v).map_err(|_| KvError::Overflow { what: "vLLM ledger" })
}

/// Lays out the ledger for the form's sequences (the running requests'
/// retained tokens) against the metrics, on one GPU.
pub fn reconcile(inputs: &Inputs, report: &Report, metrics: &VllmMetrics) -> Result<Ledger, KvError> {
    let mut notes = Vec::new();
    if metrics.block_size != report.block {
        notes.push(format!(
            "vLLM's blocks hold {} tokens and the form's {}: the ledger counts vLLM's; set the block size to {} for the rest of the page to match",
            metrics.block_size, report.block, metrics.block_size
        ));
    }
    let kinds = inputs.model.groups();
    if kinds.iter().any(|g| g.kind != kinds[0].kind) {
        notes.push("This model has more than one kind of layer: vLLM keeps a block table per layer group, so its block counts are per group; the ledger compares bytes, which do not depend on the grouping.".into());
    }
    let block = metrics.block_size as u128;
    // One token in every layer of one GPU, as vLLM sizes a block.
    let token_bytes = units::bits_to_bytes(report.per_gpu_token_bits);
    let block_bytes = times(token_bytes, block)?;
    let sequences = total_count(&inputs.seqs);
    let need_blocks = inputs.seqs.iter().try_fold(0u128, |sum, s| {
        sum.checked_add(times((s.value as u128).div_ceil(block), s.count as u128)?).ok_or(KvError::Overflow { what: "vLLM ledger" })
    })?;
    let logical = signed(report.tensor_parallel.per_gpu_logical_bytes)?;
    let need_bytes = signed(times(need_blocks, block_bytes)?)?;
    // v1 (kv_cache_usage_perc) takes block 0 out of the free list at
    // start-up and counts it as used; v0 (gpu_cache_usage_perc) has none.
    let reserved = if metrics.usage_metric == "vllm:kv_cache_usage_perc" { metrics.engines.max(1) as u128 } else { 0 };
    let expected = need_blocks.checked_add(reserved).ok_or(KvError::Overflow { what: "vLLM ledger" })?;
    let used = metrics.used_blocks;
    // Both are below 2^127 once `signed` passes them: the difference fits.
    let difference = signed(used)? - signed(expected)?;
    let mut rows = vec![
        LedgerRow {
            label: format!("logical payload of the {} running requests you gave", group_digits(sequences)),
            blocks: None,
            bytes: logical,
            arithmetic: format!(
                "the calculator's per-GPU payload for seqs = {}",
                crate::runs::format_runs(&inputs.seqs, |v| v.to_string())
            ),
            source: "ours".into(),
        },
        LedgerRow {
            label: format!("+ rounding each request up to whole {block}-token blocks"),
            blocks: None,
            bytes: need_bytes - logical,
            arithmetic: format!(
                "Σ ⌈Tᵢ ÷ {block}⌉ = {} blocks × {} bytes − the payload",
                group_digits(need_blocks),
                group_digits(block_bytes)
            ),
            source: "block rounding".into(),
        },
        LedgerRow {
            label: "= blocks those requests need".into(),
            blocks: Some(signed(need_blocks)?),
            bytes: need_bytes,
            arithmetic: format!(
                "{} blocks × {block} tokens × {} bytes a token (all layers, one GPU)",
                group_digits(need_blocks),
                group_digits(token_bytes)
            ),
            source: "ours".into(),
        },
        LedgerRow {
            label: "+ the null block vLLM reserves at start-up".into(),
            blocks: Some(signed(reserved)?),
            bytes: signed(times(reserved, block_bytes)?)?,
            arithmetic: "block 0 is never handed out and counts as used".into(),
            source: "reservation".into(),
        },
    ];
    if reserved == 0 {
        rows.pop();
    }
    if difference != 0 {
        let blocks = difference.unsigned_abs();
        let (label, source) = if difference < 0 && metrics.prefix_caching == Some(true) {
            (
                format!("− blocks held once for several requests: {} tokens of shared prefix", group_digits(times(blocks, block)?)),
                "prefix sharing",
            )
        } else if difference < 0 {
            ("− blocks the lengths you gave need but vLLM does not use (prefix caching is off: are the lengths right, or did requests finish?)".to_string(), "unattributed")
        } else {
            (
                "+ blocks in use beyond the lengths you gave (tokens scheduled past them: a prefill chunk, speculative tokens; or longer requests)".to_string(),
                "unattributed",
            )
        };
        rows.push(LedgerRow {
            label,
            blocks: Some(difference),
            bytes: difference.checked_mul(signed(block_bytes)?).ok_or(KvError::Overflow { what: "vLLM ledger" })?,
            arithmetic: format!("{} in use − {} expected", group_digits(used), group_digits(expected)),
            source: source.into(),
        });
    }
    rows.push(LedgerRow {
        label: "= blocks in use, by the metrics".into(),
        blocks: Some(signed(used)?),
        bytes: signed(times(used, block_bytes)?)?,
        arithmetic: format!(
            "{} {} × {} blocks = {} (nearest block)",
            metrics.usage_metric,
            metrics.usage_text,
            group_digits(metrics.num_gpu_blocks),
            group_digits(used)
        ),
        source: "vLLM metrics".into(),
    });
    let free = metrics.num_gpu_blocks.saturating_sub(used);
    rows.push(LedgerRow {
        label: if metrics.prefix_caching == Some(true) {
            "+ free blocks (with prefix caching, finished requests' cached blocks among them, evicted as needed)".into()
        } else {
            "+ free blocks".into()
        },
        blocks: Some(signed(free)?),
        bytes: signed(times(free, block_bytes)?)?,
        arithmetic: format!(
            "{} − {} = {} blocks, room for {} more tokens",
            group_digits(metrics.num_gpu_blocks),
            group_digits(used),
            group_digits(free),
            group_digits(times(free, block)?)
        ),
        source: "vLLM metrics".into(),
    });
    rows.push(LedgerRow {
        label: "= the block pool vLLM allocated".into(),
        blocks: Some(signed(metrics.num_gpu_blocks)?),
        bytes: signed(times(metrics.num_gpu_blocks, block_bytes)?)?,
        arithmetic: format!("num_gpu_blocks {} × {} bytes a block", group_digits(metrics.num_gpu_blocks), group_digits(block_bytes)),
        source: "vLLM metrics".into(),
    });
    if let Some(memory) = inputs.vllm.as_ref().and_then(|v| v.kv_memory_bytes) {
        let pool = times(metrics.num_gpu_blocks, block_bytes)?;
        rows.push(LedgerRow {
            label: "memory the log gave the cache, beyond the pool".into(),
            blocks: None,
            bytes: signed(memory)? - signed(pool)?,
            arithmetic: format!(
                "{} bytes available − {} in blocks (vLLM makes as many whole blocks as fit)",
                bytes_text(memory * 8),
                group_digits(pool)
            ),
            source: "vLLM log".into(),
        });
    }
    if let Some(running) = metrics.running {
        if running != sequences {
            notes.push(format!(
                "The metrics count {} running requests and the form {} sequences: set the sequence lengths to the running requests' retained tokens (prompt + generated so far).",
                group_digits(running),
                group_digits(sequences)
            ));
        }
    }
    if let Some(waiting) = metrics.waiting.filter(|w| *w > 0) {
        notes.push(format!("{} requests are waiting: they hold no blocks yet.", group_digits(waiting)));
    }
    if metrics.engines > 1 {
        notes.push(format!("The scrape has {} engines; their blocks are summed.", metrics.engines));
    }
    Ok(Ledger { rows, notes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::form::Form;

    /// A v1 scrape as vLLM writes it (HELP and TYPE lines, labels, floats
    /// in Python's repr), four running requests on Llama 3.1 8B.
    fn scrape(usage: &str, prefix_caching: &str) -> String {
        format!(
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
             # TYPE vllm:cache_config_info gauge\n\
             vllm:cache_config_info{{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"{prefix_caching}\",gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"None\",num_gpu_blocks=\"27000\"}} 1.0\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"}} 4.0\n\
             vllm:num_requests_waiting{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"}} 2.0\n\
             vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"}} {usage}\n\
             vllm:prompt_tokens_total{{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\"}} 1.2e+05\n"
        )
    }

    fn ledger(text: &str, seqs: &str) -> Ledger {
        let mut form = Form::default();
        form.apply(&crate::presets::find("llama-3.1-8b").unwrap().patch());
        form.set("seqs", seqs);
        let inputs = form.validate().unwrap();
        let report = crate::compute(&inputs).unwrap();
        let metrics = vllm_metrics(&parse_scrape(text)).unwrap();
        reconcile(&inputs, &report, &metrics).unwrap()
    }

    /// 1,000 + 2,000 + 3,000 + 4,000 tokens need 63 + 125 + 188 + 250 =
    /// 626 blocks; with the null block 627 of 27,000 are in use, which is
    /// what a usage of 627 ÷ 27,000 says: the ledger closes with no
    /// unattributed row.
    #[test]
    fn a_scrape_that_matches_closes_the_ledger() {
        let l = ledger(&scrape("0.02322222222222222", "True"), "1000,2000,3000,4000");
        let labels: Vec<&str> = l.rows.iter().map(|r| r.label.as_str()).collect();
        assert!(!l.rows.iter().any(|r| r.source == "unattributed" || r.source == "prefix sharing"), "{labels:?}");
        let need = l.rows.iter().find(|r| r.label == "= blocks those requests need").unwrap();
        assert_eq!(need.blocks, Some(626));
        // One block of Llama 3.1 8B: 16 tokens × 131,072 bytes.
        assert_eq!(need.bytes, 626 * 16 * 131_072);
        let used = l.rows.iter().find(|r| r.label == "= blocks in use, by the metrics").unwrap();
        assert_eq!(used.blocks, Some(627));
        let pool = l.rows.last().unwrap();
        assert_eq!(pool.blocks, Some(27_000));
        // The running sum holds: each "=" row is the rows above it.
        let payload = l.rows[0].bytes;
        assert_eq!(payload + l.rows[1].bytes, need.bytes);
        assert!(l.notes.iter().any(|n| n.contains("2 requests are waiting")), "{:?}", l.notes);
    }

    /// 27 blocks fewer than the lengths need, with prefix caching on: 432
    /// tokens held once.
    #[test]
    fn fewer_blocks_with_prefix_caching_are_the_shared_prefix() {
        let l = ledger(&scrape("0.0222222222", "True"), "1000,2000,3000,4000");
        let shared = l.rows.iter().find(|r| r.source == "prefix sharing").unwrap();
        assert_eq!(shared.blocks, Some(-27));
        assert!(shared.label.contains("432 tokens of shared prefix"), "{}", shared.label);
        // Prefix caching off: the same gap is not explained away.
        let l = ledger(&scrape("0.0222222222", "False"), "1000,2000,3000,4000");
        assert!(l.rows.iter().any(|r| r.source == "unattributed" && r.blocks == Some(-27)));
        // Three sequences given, four running: said.
        let l = ledger(&scrape("0.0222222222", "True"), "1000,2000,3000");
        assert!(l.notes.iter().any(|n| n.contains("4 running requests and the form 3 sequences")), "{:?}", l.notes);
    }

    #[test]
    fn bad_lines_are_named_and_the_rest_kept() {
        let text = format!(
            "{}vllm:num_requests_running{{engine=\"0\" 4\nnot a metric line\nvllm:kv_cache_usage_perc banana\n",
            scrape("0.5", "True")
        );
        let s = parse_scrape(&text);
        assert_eq!(
            s.skipped,
            vec![
                "line 9: a `{` without its `}`".to_string(),
                "line 10: `not` has the value `a`, not a number".to_string(),
                "line 11: `vllm:kv_cache_usage_perc` has the value `banana`, not a number".to_string(),
            ]
        );
        // The good lines are kept and still reconcile.
        assert_eq!(vllm_metrics(&s).unwrap().used_blocks, 13_500);
        let e = vllm_metrics(&parse_scrape("vllm:kv_cache_usage_perc 0.5\n")).unwrap_err();
        assert!(e.contains("vllm:cache_config_info"), "{e}");
        let e =
            vllm_metrics(&parse_scrape("vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"x\"} 1.0\nvllm:kv_cache_usage_perc 0.5"))
                .unwrap_err();
        assert_eq!(e, "line 1: num_gpu_blocks=\"x\" is not a whole number");
        let e = vllm_metrics(&parse_scrape(
            "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"10\"} 1.0\nvllm:kv_cache_usage_perc 1.5",
        ))
        .unwrap_err();
        assert_eq!(e, "line 2: usage 1.5 is above 1");
    }

    #[test]
    fn values_are_exact() {
        assert_eq!(exact("27000"), Some((27000, 1)));
        assert_eq!(exact("27000.0"), Some((270000, 10)));
        assert_eq!(exact("1.2e-05"), Some((12, 1_000_000)));
        assert_eq!(exact("1.2e+05"), Some((120000, 1)));
        assert_eq!(exact("-1"), None);
        assert_eq!(exact("NaN"), None);
        assert_eq!(exact("1e400"), None);
    }
}
