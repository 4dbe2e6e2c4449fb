//! `router-generate`: generates natively from a user turn on the router's
//! checkpoint (in its chat layout), streaming the text to stdout as it is
//! released, the same library code the page's Generate card runs in its
//! worker; then the engine's timings and the K/V it held, on stderr, or
//! the whole summary as JSON with `--json`.
//!
//! With `--decode-speed` it measures decode instead (`bench::decode_speed`:
//! one sequence's tokens a second per context, the aggregate per batch
//! size, each step's parts and the bytes it reads against this machine's
//! memory bandwidth), printed side by side, the run as JSON with `--out`.
//!
//! ```text
//! router-generate --prompt "Explain a KV cache." --max-new-tokens 64
//! router-generate --prompt "Tell a story." --temperature 0.8 --top-p 0.95 --seed 7 --json
//! router-generate --decode-speed --precision int8 --contexts 256,1024 --batches 1,4,8,16 --out decode.json
//! ```

use std::io::Write;
use std::process::ExitCode;

use anyhow::{anyhow, Result};
use bench::generation::SingleGeneration;
use bench_cli::cli::usage;
use bench_cli::{Loaded, RouterFlags};
use clap::Parser;
use router::sampling::SamplingParams;
use router::Conversation;

/// Generates the assistant's answer to one user turn.
#[derive(Parser, Debug)]
#[command(name = "router-generate", version)]
struct Args {
    /// The user turn.
    #[arg(long, required_unless_present = "decode_speed")]
    prompt: Option<String>,
    /// 0 is greedy; otherwise the logits are divided by it.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Keep the k likeliest tokens (0 keeps all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Keep the likeliest tokens whose probability reaches p.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// The sampler's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    /// A text that ends the answer where it appears (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Print the summary as JSON on stdout instead of streaming the text.
    #[arg(long)]
    json: bool,
    /// Instead of one answer: measure decode speed (one sequence per
    /// --contexts, the aggregate per --batches) and print it side by side.
    #[arg(long, conflicts_with_all = ["json", "prompt"])]
    decode_speed: bool,
    /// Contexts (tokens held) of the one-sequence decode rows.
    #[arg(long, value_delimiter = ',', default_values_t = [256, 1024], requires = "decode_speed")]
    contexts: Vec<usize>,
    /// Batch sizes of the aggregate decode rows.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 4, 8, 16], requires = "decode_speed")]
    batches: Vec<usize>,
    /// The context of every sequence in the batch rows.
    #[arg(long, default_value_t = 256, requires = "decode_speed")]
    batch_context: usize,
    /// Timed decode steps a row (after --warmup untimed ones).
    #[arg(long, default_value_t = 32, requires = "decode_speed")]
    steps: usize,
    /// Untimed decode steps a row before the timed ones.
    #[arg(long, default_value_t = 4, requires = "decode_speed")]
    warmup: usize,
    /// MiB streamed by the memory-bandwidth probe (0: skip it).
    #[arg(long, default_value_t = 256, requires = "decode_speed")]
    bandwidth_mib: usize,
    /// Task texts the decode rows' prompts are cut from (as bench-decide's --prompts).
    #[arg(long, default_value = bench_cli::DEFAULT_PROMPTS, requires = "decode_speed")]
    prompts: std::path::PathBuf,
    /// Write the decode-speed run as JSON.
    #[arg(long, requires = "decode_speed")]
    out: Option<std::path::PathBuf>,
    #[command(flatten)]
    router: RouterFlags,
}

fn main() -> ExitCode {
    bench_cli::exit("router-generate", run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    let params = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
        max_new_tokens: args.max_new_tokens,
        stop: args.stop.clone(),
        ignore_eos: false,
    };
    // Refused before the checkpoint is read: a bad flag is a usage error.
    params.check().map_err(|e| usage(format!("--{}", e.to_string().replace('_', "-"))))?;
    if args.decode_speed {
        return decode_speed(&args);
    }
    let Loaded { router, .. } = args.router.load()?;
    let prompt = args.prompt.clone().unwrap_or_default();
    let mut generation = SingleGeneration::start(&router, &Conversation::user(prompt), params)
        .map_err(|e| usage(format!("--{}", e.to_string().replace('_', "-"))))?;
    let mut out = std::io::stdout().lock();
    loop {
        let step = generation.step(&router).map_err(|e| anyhow!(e))?;
        if !args.json {
            write!(out, "{}", step.text)?;
            out.flush()?;
        }
        if step.done {
            break;
        }
    }
    let summary = generation.summary(&router, false);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    writeln!(out)?;
    let gaps = bench::Summary::of(&summary.gaps_ms);
    eprintln!(
        "{} tokens after a {}-token prompt, ended by {}; first token {:.1} ms; gaps p50 {} ms, p95 {} ms ({:.1} tokens/s); K/V {} bytes by the formula, {} allocated ({})",
        summary.tokens.len(),
        summary.prompt_tokens,
        summary.finish.as_ref().map(|f| f.label()).unwrap_or_default(),
        summary.first_token_ms,
        gaps.as_ref().map_or("–".into(), |g| format!("{:.1}", g.p50)),
        gaps.as_ref().map_or("–".into(), |g| format!("{:.1}", g.p95)),
        summary.decode_tokens_per_s(),
        summary.payload_kv_bytes,
        summary.allocated_kv_bytes,
        summary.precision,
    );
    Ok(())
}

/// `--decode-speed`: the plan checked before the checkpoint loads (a bad
/// flag is a usage error), the bandwidth probe, then each row as it ends.
fn decode_speed(args: &Args) -> Result<()> {
    use bench::decode_speed::DecodePlan;
    let plan = DecodePlan {
        contexts: args.contexts.clone(),
        batches: args.batches.clone(),
        batch_context: args.batch_context,
        warmup: args.warmup,
        steps: args.steps,
    };
    plan.check().map_err(|e| usage(format!("--decode-speed: {e}")))?;
    let texts = bench_cli::prompt_texts(&args.prompts)?;
    let Loaded { router, .. } = args.router.load()?;
    let bandwidth = (args.bandwidth_mib > 0).then(|| router::probe::memory_bandwidth(args.bandwidth_mib << 20, 5));
    let speed = bench::decode_speed::run(&router, &texts, &plan, bandwidth, |row| {
        eprintln!("router-generate: context {} × {}: {:.1} tokens/s", row.context, row.batch, row.tokens_per_s)
    })?;
    for line in speed.lines() {
        println!("{line}");
    }
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string_pretty(&speed)?).map_err(|e| anyhow!("--out {}: {e}", out.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_flag_is_documented() {
        bench_cli::cli::assert_documented(&super::Args::command());
    }
}
