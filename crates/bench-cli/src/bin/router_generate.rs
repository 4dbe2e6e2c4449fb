//! `router-generate`: generates natively from a user turn on the router's
//! checkpoint (in its chat layout), streaming the text to stdout as it is
//! released, the same library code the page's Generate card runs in its
//! worker; then the engine's timings and the K/V it held, on stderr, or
//! the whole summary as JSON with `--json`.
//!
//! ```text
//! router-generate --prompt "Explain a KV cache." --max-new-tokens 64
//! router-generate --prompt "Tell a story." --temperature 0.8 --top-p 0.95 --seed 7 --json
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
    #[arg(long)]
    prompt: String,
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
    /// Instead of one answer: time decode steps of this many sequences at once (comma-separated, e.g. 1,4,8,16), each after a prefill of the prompt, and print ms a step and aggregate tokens/s side by side.
    #[arg(long, value_delimiter = ',', conflicts_with = "json")]
    decode_sweep: Vec<usize>,
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
    let Loaded { router, .. } = args.router.load()?;
    if !args.decode_sweep.is_empty() {
        return decode_sweep(&router, &args.prompt, &args.decode_sweep);
    }
    let mut generation = SingleGeneration::start(&router, &Conversation::user(args.prompt.clone()), params)
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

/// Decode steps timed at each batch size: every sequence holds the same
/// prefilled prompt, then 30 steps of one token each (after 3 untimed).
fn decode_sweep(router: &router::Router, prompt: &str, sizes: &[usize]) -> Result<()> {
    use router::generate::{step, Sequence};
    const STEPS: usize = 30;
    if let Some(bad) = sizes.iter().find(|&&b| b == 0) {
        return Err(usage(format!("--decode-sweep: {bad} sequences")));
    }
    let ids = router.tokenizer.encode(&Conversation::user(prompt).generation_prompt(router.tokenizer.layout))?;
    let params = SamplingParams { max_new_tokens: STEPS + 8, ignore_eos: true, ..SamplingParams::default() };
    println!("{} · {} · {}-token prompt", router.checkpoint_id(), router.backbone.precision.label(&router.weight_type), ids.len());
    println!("{:>4}  {:>9}  {:>10}  {:>9}  {:>13}  {:>10}", "B", "ms/step", "forward", "LM head", "tokens/s (all)", "× B = 1");
    let mut single = None;
    for &b in sizes {
        let mut seqs = (0..b)
            .map(|_| Sequence::new(&router.backbone, ids.clone(), router::segment::KvState::default(), params.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| usage(e.to_string()))?;
        for seq in seqs.iter_mut() {
            let n = seq.pending();
            step(&router.backbone, &router.tokenizer, &mut [(seq, n)])?;
        }
        let (mut total, mut forward, mut head) = (0.0, 0.0, 0.0);
        for i in 0..STEPS + 3 {
            let mut batch: Vec<_> = seqs.iter_mut().map(|s| (s, 1)).collect();
            let started = web_time::Instant::now();
            let report = step(&router.backbone, &router.tokenizer, &mut batch)?;
            if i >= 3 {
                total += router::elapsed_ms(started);
                forward += report.forward_ms;
                head += report.lm_head_ms;
            }
        }
        let per_step = total / STEPS as f64;
        let rate = b as f64 * 1000.0 / per_step;
        let base = *single.get_or_insert(rate);
        println!(
            "{b:>4}  {per_step:>9.1}  {:>10.1}  {:>9.1}  {rate:>13.1}  {:>10.2}",
            forward / STEPS as f64,
            head / STEPS as f64,
            rate / base
        );
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
