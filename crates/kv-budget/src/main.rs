//! `kv-budget`: the KV-cache calculator for scripts and CI.
//!
//! A thin shell over the `kv` crate: it reads flags and files, builds the same
//! [`kv::Form`] the page builds from its URL, and prints the same figures.
//!
//! ```text
//! kv-budget --query 'layers=32&kv_heads=8&head_dim=128&kv_dtype=bf16&seqs=8192x4' --json
//! kv-budget --config config.json --seqs 4096x1 --kv-dtype bf16 --json
//! kv-budget --preset llama-3.1-8b --set gpu_gib=80 --lengths requests.csv
//! kv-budget --gguf model.gguf --seqs 8192x4 --set gpu_gib=24
//! kv-budget --preset llama-3.1-8b --seqs 1000,2000,3000,4000 --metrics scrape.txt
//! ```

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use cli_conventions::usage;
use kv::{units, Form};
use serde::Serialize;

/// KV-cache capacity from a URL query, a preset, a Hugging Face config.json or a GGUF header.
#[derive(Parser, Debug)]
#[command(name = "kv-budget", version)]
struct Args {
    /// A workbench URL query (`layers=32&kv_heads=8&…`), with or without `?`.
    #[arg(long)]
    query: Option<String>,
    /// A model preset id (see --list-presets).
    #[arg(long)]
    preset: Option<String>,
    /// A Hugging Face config.json to import.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// A GGUF checkpoint: the model fields from its header alone (the first bytes of the file, never its weights).
    #[arg(long, conflicts_with = "config")]
    gguf: Option<std::path::PathBuf>,
    /// Sequence lengths, e.g. 8192x4 or 2048,4096,8192x2.
    #[arg(long)]
    seqs: Option<String>,
    /// KV dtype: fp32|bf16|fp16|fp8|int8|int4.
    #[arg(long = "kv-dtype")]
    kv_dtype: Option<String>,
    /// Any other field as name=value (repeatable), e.g. --set tp=4.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// A length distribution (CSV with input/output columns, optional calls; or JSON objects): sequences that fit at the mean, p50, p95, p99 and max of retained length. Needs a GPU budget (--set gpu_gib=80).
    #[arg(long)]
    lengths: Option<std::path::PathBuf>,
    /// A vLLM /metrics scrape (Prometheus text): the ledger from the payload of the running requests (--seqs: their retained tokens) to the blocks vLLM allocated, uses and has free, each difference attributed.
    #[arg(long)]
    metrics: Option<std::path::PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// List the presets and exit.
    #[arg(long)]
    list_presets: bool,
}

#[derive(Serialize)]
struct Output<'a> {
    query: String,
    logical_bytes: u128,
    per_token_bytes: u128,
    allocated_bytes: u128,
    logical: String,
    per_token: String,
    per_sequence: String,
    allocated: String,
    import_notes: &'a [String],
    report: &'a kv::Report,
    #[serde(skip_serializing_if = "Option::is_none")]
    distribution: Option<&'a kv::distribution::DistributionReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ledger: Option<&'a kv::reconcile::Ledger>,
}

/// Exit code 2 when the command line is wrong (clap's own parse errors and
/// `usage` errors: an invalid field, an unknown preset), 1 when something
/// failed while running (a file that cannot be read or imported).
fn main() -> ExitCode {
    cli_conventions::exit("kv-budget", run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    if args.list_presets {
        for p in kv::presets::PRESETS {
            println!("{:<16} {:<20} {}", p.id, p.name, p.source);
        }
        return Ok(());
    }
    let (mut form, warnings) = Form::from_query(args.query.as_deref().unwrap_or(""));
    for w in warnings {
        eprintln!("kv-budget: warning: {w}");
    }
    if let Some(id) = &args.preset {
        let preset = kv::presets::find(id).ok_or_else(|| usage(format!("--preset: no preset `{id}` (see --list-presets)")))?;
        form.apply(&preset.patch());
    }
    let mut notes = Vec::new();
    if let Some(path) = &args.config {
        let bytes = std::fs::read(path).with_context(|| format!("--config: cannot read {}", path.display()))?;
        let imported = kv::config_import::import(&bytes).with_context(|| format!("--config {}", path.display()))?;
        form.apply(&imported.patch);
        notes = imported.notes;
    }
    if let Some(path) = &args.gguf {
        let (imported, read, len) = import_gguf(path).with_context(|| format!("--gguf {}", path.display()))?;
        form.apply(&imported.patch);
        notes = imported.notes;
        notes.insert(0, format!("read the header of {}: {read} of {len} bytes", imported.model));
    }
    if let Some(s) = args.seqs {
        form.set("seqs", s);
    }
    if let Some(d) = args.kv_dtype {
        form.set("kv_dtype", d);
    }
    for pair in &args.set {
        let Some((name, value)) = pair.split_once('=') else { return Err(usage(format!("--set `{pair}`: expected NAME=VALUE"))) };
        let Some(field) = kv::form::field(name) else { return Err(usage(format!("--set: unknown field `{name}`"))) };
        form.set(field.name, value);
    }
    let inputs = form.validate().map_err(|errors| usage(errors.iter().map(|e| format!("invalid {}", e)).collect::<Vec<_>>().join("; ")))?;
    let report = kv::compute(&inputs)?;
    let distribution = match &args.lengths {
        None if form.get("lengths") == kv::distribution::BUILTIN => {
            return Err(usage(format!(
                "lengths={} names the page's built-in example: pass its file, --lengths data/coderouterbench/ood176_results_long.csv",
                kv::distribution::BUILTIN
            )))
        }
        None => None,
        Some(path) => {
            let budget =
                report.budget.as_ref().ok_or_else(|| usage("--lengths: give a GPU budget too (--set gpu_gib=80): capacity divides it"))?;
            let text = std::fs::read_to_string(path).with_context(|| format!("--lengths: cannot read {}", path.display()))?;
            let lengths = kv::distribution::parse_lengths(&text).with_context(|| format!("--lengths {}", path.display()))?;
            Some(kv::distribution::capacity(&inputs, budget.kv_budget_bytes_per_gpu, &lengths)?)
        }
    };
    let ledger = match &args.metrics {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("--metrics: cannot read {}", path.display()))?;
            let scrape = kv::reconcile::parse_scrape(&text);
            for skipped in &scrape.skipped {
                eprintln!("kv-budget: --metrics {}: {skipped} (skipped)", path.display());
            }
            let metrics = kv::reconcile::vllm_metrics(&scrape).map_err(|e| anyhow::anyhow!("--metrics {}: {e}", path.display()))?;
            Some(kv::reconcile::reconcile(&inputs, &report, &metrics)?)
        }
    };
    if args.json {
        let out = Output {
            query: form.to_query(),
            logical_bytes: report.logical_bytes,
            per_token_bytes: report.per_token_bytes,
            allocated_bytes: report.allocated_bytes,
            logical: units::binary(report.logical_bytes),
            per_token: units::binary(report.per_token_bytes),
            per_sequence: report.per_sequence_text.clone(),
            allocated: units::binary(report.allocated_bytes),
            import_notes: &notes,
            report: &report,
            distribution: distribution.as_ref(),
            ledger: ledger.as_ref(),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_text(&report, &notes);
        if let Some(d) = &distribution {
            print_distribution(d);
        }
        if let Some(l) = &ledger {
            print_ledger(l);
        }
    }
    Ok(())
}

/// The header of a GGUF file, read a slice at a time as the page reads it:
/// the import, the bytes read and the file's length.
fn import_gguf(path: &std::path::Path) -> Result<(kv::config_import::Imported, u64, u64)> {
    use std::io::Read;
    let len = std::fs::metadata(path).context("cannot read it")?.len();
    let (header, read) = gguf::read_header_from(len, kv::gguf_import::FIRST_READ, kv::gguf_import::HEADER_LIMIT, |n| {
        let mut bytes = Vec::new();
        std::fs::File::open(path)?.take(n).read_to_end(&mut bytes)?;
        Ok::<_, std::io::Error>(bytes)
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((kv::gguf_import::import(&header)?, read, len))
}

fn print_text(r: &kv::Report, notes: &[String]) {
    for n in notes {
        println!("note: {n}");
    }
    println!("{}", r.formula);
    println!("logical KV payload  {:>14}  ({} bytes)", units::binary(r.logical_bytes), units::group_digits(r.logical_bytes));
    println!("per token (all layers) {:>11}", units::binary(r.per_token_bytes));
    println!("per sequence{}  {:>14}", if r.per_sequence_is_mean { " (mean)" } else { "" }, r.per_sequence_text);
    for t in &r.logical.terms {
        println!("  {}{:<60} {:>20} B   {}", if t.negative { "−" } else { "+" }, t.label, t.bytes_text(), t.expression);
    }
    println!(
        "allocated (block {}) {:>14}  (+{} bytes rounding)",
        r.block,
        units::binary(r.allocated_bytes),
        units::group_digits(r.rounding_bytes)
    );
    if let Some(page) = &r.hybrid_page {
        println!("  {}", page.explanation());
    }
    for n in &r.notes {
        println!("  note: {n}");
    }
    let tp = &r.tensor_parallel;
    println!(
        "per GPU at TP {}: {} logical, {} allocated",
        tp.degree,
        units::binary(tp.per_gpu_logical_bytes),
        units::binary(tp.per_gpu_allocated_bytes)
    );
    if let Some(b) = &r.budget {
        println!(
            "budget: {} KV per GPU → max {} retained tokens, max {} sequences of this mix",
            units::binary(b.kv_budget_bytes_per_gpu),
            units::group_digits(b.max_retained_tokens),
            units::group_digits(b.max_sequences)
        );
    }
}

fn print_ledger(l: &kv::reconcile::Ledger) {
    println!();
    println!("{:<78} {:>10} {:>18}  {:<16} arithmetic", "ledger (one GPU)", "blocks", "bytes", "whose figure");
    for r in &l.rows {
        let blocks = r.blocks.map(|b| b.to_string()).unwrap_or_default();
        println!("{:<78} {:>10} {:>18}  {:<16} {}", r.label, blocks, r.bytes, r.source, r.arithmetic);
    }
    for n in &l.notes {
        println!("note: {n}");
    }
}

fn print_distribution(d: &kv::distribution::DistributionReport) {
    println!();
    for line in d.lines() {
        println!("{line}");
    }
    println!("{:<6} {:>16} {:>14} {:>12}", "length", "retained tokens", "per sequence", "sequences");
    for row in &d.rows {
        println!(
            "{:<6} {:>16} {:>14} {:>12}",
            row.label,
            units::group_digits(row.retained_tokens as u128),
            units::binary(row.bytes_per_sequence),
            units::group_digits(row.sequences)
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_flag_is_documented() {
        cli_conventions::assert_documented(&super::Args::command());
    }
}
