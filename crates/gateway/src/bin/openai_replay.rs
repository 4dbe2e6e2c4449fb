//! `openai-replay`: the serving run's trace, replayed against OpenAI-compatible
//! endpoints and measured at the client. The same arrivals (Poisson, from
//! the seed, or a trace file's), prompts (the OOD176 tasks cut to a prompt length by the
//! reference tokenizer) and output lengths (drawn from the dataset's
//! recorded output tokens, capped) as `serve-generate` with the same flags,
//! sent open-loop with streaming to each `--url` in turn; one table of the
//! client's figures per endpoint and rate, side by side, and note 06's TTFT
//! decomposition checked wherever the endpoint gives its own account.
//!
//! ```text
//! openai-replay --url http://127.0.0.1:8080 --url http://127.0.0.1:8081 --rates 1,2 --duration 20
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context, Result};
use bench::client_run::{ClientRun, ClientStudy};
use bench::generation::cut_to_tokens;
use bench_cli::{read, LoadFlags, DEFAULT_CHECKPOINT};
use clap::Parser;
use cli_conventions::usage;
use gateway::client::{first_model, replay, Planned, ReplaySettings};
use router::gguf::Checkpoint;
use router::tokenizer::RouterTokenizer;
use router::Conversation;
use serving::batching::{BatchSettings, Memory, Mixing};
use serving::generation::{GenOutcome, GenSettings};
use serving::Percentiles;

/// Replays a generating load against OpenAI-compatible endpoints and reports what their clients saw.
#[derive(Parser, Debug)]
#[command(name = "openai-replay", version)]
struct Args {
    /// An endpoint's base URL (its /v1/chat/completions is called); repeat to compare endpoints in one run.
    #[arg(long = "url", required = true)]
    urls: Vec<String>,
    /// The `model` to ask each endpoint for, in --url's order (default: the first model each lists).
    #[arg(long = "model")]
    models: Vec<String>,
    /// Seconds a request may wait for its first text before the client gives up (and closes its connection).
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Times a send is retried when the connection fails before any answer (each counted in the report).
    #[arg(long, default_value_t = 0)]
    retries: usize,
    /// Sampling temperature (serve-generate's).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Nucleus sampling's top_p (serve-generate's).
    #[arg(long, default_value_t = 0.95)]
    top_p: f64,
    /// Let end-of-turn tokens end answers early (by default every request asks for exactly its drawn length with `ignore_eos`, as vLLM's and llama.cpp's servers accept).
    #[arg(long)]
    stop_at_eos: bool,
    /// The GGUF whose tokenizer cuts the prompts and counts their tokens (its weights are not used).
    #[arg(long, default_value = DEFAULT_CHECKPOINT)]
    tokenizer_checkpoint: PathBuf,
    /// A bearer token for the endpoints (default: the OPENAI_API_KEY variable, else none).
    #[arg(long)]
    api_key: Option<String>,
    #[command(flatten)]
    load: LoadFlags,
    /// Also write a report (schema 5) whose `client` section holds every run, each request's client and server figures, here.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    bench_cli::exit("openai-replay", run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    let started_unix_ms = bench_cli::unix_ms_now();
    args.load.check()?;
    if args.timeout.is_nan() || args.timeout <= 0.0 {
        return Err(usage("--timeout must be positive"));
    }
    if args.models.len() > args.urls.len() {
        return Err(usage(format!("{} --model for {} --url: give at most one model per endpoint", args.models.len(), args.urls.len())));
    }
    for url in &args.urls {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(usage(format!("--url {url}: an http:// or https:// base URL")));
        }
    }
    let inputs = args.load.inputs()?;
    let (texts, lengths) = (&inputs.texts, &inputs.lengths);
    let gguf = read(&args.tokenizer_checkpoint, "--tokenizer-checkpoint")?;
    let name = args.tokenizer_checkpoint.display().to_string();
    let checkpoint = Checkpoint::parse(&gguf, &name).with_context(|| format!("--tokenizer-checkpoint {name}"))?;
    let tokenizer = RouterTokenizer::from_gguf(&checkpoint).with_context(|| format!("--tokenizer-checkpoint {name}"))?;
    let cut: Vec<&str> = texts
        .iter()
        .map(|t| cut_to_tokens(&tokenizer, t, args.load.max_prompt_tokens))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!(e))?;
    let prompt_tokens: Vec<usize> = cut
        .iter()
        .map(|t| tokenizer.encode(&Conversation::user(*t).generation_prompt(tokenizer.layout)).map(|ids| ids.len()))
        .collect::<Result<_, _>>()?;
    let api_key = args.api_key.clone().or_else(|| std::env::var("OPENAI_API_KEY").ok().filter(|k| !k.is_empty()));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
    let http = reqwest::Client::builder().build().context("the HTTP client")?;
    let mut models = Vec::new();
    for (i, url) in args.urls.iter().enumerate() {
        let model = match args.models.get(i) {
            Some(m) => m.clone(),
            None => runtime.block_on(first_model(&http, url, api_key.as_deref())).map_err(|e| anyhow!("--url {url}: {e}"))?,
        };
        models.push(model);
    }
    println!(
        "{} prompts cut at {} tokens by {} · output lengths from {} dataset rows, capped at {} · {} · {} · the client runs on this machine beside any local endpoint",
        cut.len(),
        args.load.max_prompt_tokens,
        name,
        lengths.len(),
        args.load.max_new_cap,
        if args.stop_at_eos { "answers may end at end-of-turn" } else { "every answer asks for exactly its drawn length (ignore_eos)" },
        inputs.arrivals_label(&args.load),
    );
    let settings = GenSettings {
        // The endpoint's scheduling is its own; the client knows its load only.
        batch: BatchSettings { budget_blocks: 0, max_running: 0, mixing: Mixing::PrefillFirst, memory: Memory::Recompute },
        timeout_ms: args.timeout * 1000.0,
        warmup_ms: args.load.warmup * 1000.0,
        drain_ms: args.load.drain * 1000.0,
        ttft_slo_ms: args.load.ttft_slo_ms,
        tpot_slo_ms: args.load.tpot_slo_ms,
    };
    let mut runs = Vec::new();
    for load in inputs.runs(&args.load, &prompt_tokens)? {
        let rate = load.rate_per_s;
        let plan: Vec<Planned> = load
            .requests
            .iter()
            .map(|r| Planned {
                id: r.id,
                at_ms: r.arrival_ms,
                text: cut[r.prompt].to_string(),
                prompt_tokens: r.prompt_tokens,
                max_tokens: r.max_new_tokens,
                seed: r.id,
            })
            .collect();
        for (url, model) in args.urls.iter().zip(&models) {
            eprintln!("openai-replay: {rate:.3} req/s against {url} ({} requests over {:.1} s)", plan.len(), load.duration_s);
            let replay_settings = ReplaySettings {
                model: model.clone(),
                temperature: args.temperature,
                top_p: args.top_p,
                ignore_eos: !args.stop_at_eos,
                ttft_timeout_ms: args.timeout * 1000.0,
                end_ms: load.duration_s * 1000.0 + args.load.drain * 1000.0,
                warmup_ms: args.load.warmup * 1000.0,
                retries: args.retries,
                api_key: api_key.clone(),
            };
            let records = runtime.block_on(replay(&http, url, &plan, &replay_settings));
            runs.push(ClientRun::new(url.clone(), model.clone(), rate, settings, records));
        }
    }
    print_table(&runs);
    for run in &runs {
        println!("\n{} req/s, {} ({}):", run.run.rate_per_s, run.endpoint, run.model);
        for line in run.decomposition.lines() {
            println!("  {line}");
        }
        let errors: Vec<String> =
            run.requests.iter().filter_map(|r| r.error.as_ref().map(|e| format!("#{} {:?}: {e}", r.record.id, r.record.outcome))).collect();
        let retries: usize = run.requests.iter().map(|r| r.retries).sum();
        if retries > 0 {
            println!("  {retries} sends retried after a failed connection.");
        }
        for error in errors.iter().take(5) {
            println!("  {error}");
        }
        if errors.len() > 5 {
            println!("  … and {} more errors (in --out)", errors.len() - 5);
        }
    }
    if let Some(out) = &args.out {
        // The shared report's envelope: the page reads it as any other.
        let report = bench::Report::for_study(
            bench_cli::native_environment(started_unix_ms),
            bench::Provenance { checkpoint_file: name.clone(), ..bench::Provenance::default() },
            router::LoadTimings::default(),
            args.load.prompts.display().to_string(),
            bench::report::Studies {
                client: Some(ClientStudy { requests: Vec::new(), runs, arrivals: Some(args.load.arrivals_source()) }),
                ..bench::report::Studies::default()
            },
        );
        bench_cli::write_report(out, &report)?;
        println!("\nwrote {}", out.display());
    }
    Ok(())
}

fn print_table(runs: &[ClientRun]) {
    // "–": the percentile falls on a request never served.
    let one = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
    let p = |x: &Percentiles| format!("{:>6} {:>6} {:>6}", one(x.p50), one(x.p95), one(x.p99));
    println!(
        "\n{:>5}  {:<32} {:>9}  {:>20}  {:>13}  {:>20}  {:>20}  {:>7}  {:>6}  {:>7}",
        "req/s",
        "endpoint",
        "served",
        "TTFT p50 p95 p99 ms",
        "TTFC p50 p95",
        "ITL p50 p95 p99 ms",
        "done p50 p95 p99 ms",
        "tok/req",
        "tok/s",
        "good/s"
    );
    for run in runs {
        let s = &run.run.summary;
        let ttfc =
            Percentiles::of(run.requests.iter().filter(|r| !r.record.warmup).map(|r| r.first_content_ms.map(|c| c - r.record.arrival_ms)));
        // Tokens an answer had: an endpoint that ignores `ignore_eos` ends some early.
        let served: Vec<usize> =
            run.run.records.iter().filter(|r| !r.warmup && r.outcome == GenOutcome::Served).map(|r| r.tokens_out).collect();
        let per_request = served.iter().sum::<usize>() as f64 / served.len().max(1) as f64;
        println!(
            "{:>5}  {:<32} {:>4}/{:<4}  {}  {:>6} {:>6}  {}  {}  {:>7.1}  {:>6.1}  {:>7.2}{}",
            run.run.rate_per_s,
            run.endpoint,
            s.served,
            s.measured,
            p(&s.ttft_ms),
            one(ttfc.p50),
            one(ttfc.p95),
            p(&s.itl_ms),
            p(&s.completion_ms),
            per_request,
            s.tokens_per_s,
            s.goodput_per_s,
            s.losses().map(|l| format!("  ({l})")).unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_flag_is_documented() {
        bench_cli::cli::assert_documented(&super::Args::command());
    }
}
