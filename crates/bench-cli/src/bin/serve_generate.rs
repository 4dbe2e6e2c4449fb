//! `serve-generate`: note 06's experiment natively, on the real engine.
//! Open-loop Poisson arrivals of the OOD176 prompts (cut to a prompt
//! length) with output lengths drawn from the dataset's recorded output
//! tokens per call (capped), or a trace file's arrivals (`--trace`), served by one engine whose iterations the
//! batching scheduler plans: continuous batching under a K/V budget in
//! bytes, and the ways of mixing prefills into decodes side by side
//! (prefill-first, decode-first, chunked at each token budget), at each
//! arrival rate, in one process; and, with `--layouts`, the same load on
//! two instances, colocated replicas or P/D separation (one prefills, the
//! other decodes, the K/V crossing as bytes).
//!
//! Every run steps [`serving::disaggregation::Cluster`]: each instance has
//! a clock of its own that advances by the time its steps took (measured),
//! so two instances on this one machine stand for two machines, and idle
//! time is skipped rather than slept.
//!
//! ```text
//! serve-generate --precision int8 --rates 1,2 --mixing prefill-first,decode-first,chunked:32,chunked:128
//! serve-generate --precision int8 --rates 2 --mixing prefill-first,chunked:128 --layouts single,replicas:2,pd
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bench::decode_study::{kv_timeline_svg, pd_timeline_svg, separation_lines, tradeoff_lines, tradeoff_svg, GenerationRun};
use bench::generation::{formula_bytes_per_token, RouterStepEngine};
use bench_cli::cli::{usage, Progress};
use bench_cli::{LoadFlags, LoadRun, Loaded, RouterFlags};
use clap::Parser;
use router::generate::BLOCK_TOKENS;
use router::sampling::SamplingParams;
use serving::batching::{BatchSettings, Memory, Mixing};
use serving::disaggregation::{Cluster, ClusterSettings, ClusterStep, Layout};
use serving::generation::GenSettings;
use serving::Percentiles;
use web_time::Instant;

/// Serves a generating load natively and prints each policy's figures side by side.
#[derive(Parser, Debug)]
#[command(name = "serve-generate", version)]
struct Args {
    /// How prefills mix with decodes: prefill-first, decode-first or chunked:N (tokens an iteration); comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "prefill-first,decode-first,chunked:64")]
    mixing: Vec<String>,
    /// Engine instances and their roles: single, replicas:N (colocated, round-robin) or pd (one prefills, one decodes); comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "single")]
    layouts: Vec<String>,
    /// A link between P/D instances, Gbit/s: its time for each hand-off's bytes is added to the measured copy (default: the copy alone).
    #[arg(long)]
    link_gbit: Option<f64>,
    /// What happens when K/V memory runs out: recompute (preempt the newest) or reserve (admit only what can finish).
    #[arg(long, default_value = "recompute")]
    memory: String,
    /// The engine's K/V budget, MiB (turned into pages of 16 tokens by the kv formula).
    #[arg(long, default_value_t = 64.0)]
    kv_budget_mib: f64,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 16)]
    max_running: usize,
    /// Seconds a request may wait to start before its client gives up.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Also write every run (records and iterations) as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress on stderr.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    load: LoadFlags,
    #[command(flatten)]
    router: RouterFlags,
}

fn main() -> ExitCode {
    bench_cli::exit("serve-generate", run(Args::parse()))
}

fn parse_mixing(text: &str) -> Result<Mixing> {
    Mixing::parse(text).map_err(|e| usage(format!("--mixing: {e}")))
}

fn run(args: Args) -> Result<()> {
    let mixings = args.mixing.iter().map(|m| parse_mixing(m)).collect::<Result<Vec<_>>>()?;
    let layouts =
        args.layouts.iter().map(|l| Layout::parse(l).map_err(|e| usage(format!("--layouts: {e}")))).collect::<Result<Vec<_>>>()?;
    if let Some(bad) = args.link_gbit.filter(|g| !(g.is_finite() && *g > 0.0)) {
        return Err(usage(format!("--link-gbit: {bad} is not a positive rate")));
    }
    let memory = match args.memory.as_str() {
        "recompute" => Memory::Recompute,
        "reserve" => Memory::Reserve,
        other => return Err(usage(format!("--memory {other}: use recompute or reserve"))),
    };
    args.load.check()?;
    let inputs = args.load.inputs()?;
    let (texts, lengths) = (&inputs.texts, &inputs.lengths);
    let Loaded { router, .. } = args.router.load()?;
    let h = &router.backbone.hparams;
    // The calculator's per-token bytes for this checkpoint, every layer
    // keeping every token (what this engine allocates), in f32.
    let per_token = formula_bytes_per_token(h);
    let engine_per_token = router.backbone.kv_layout().kv_bytes_per_token();
    let block_bytes = per_token * BLOCK_TOKENS as u64;
    let budget_blocks = ((args.kv_budget_mib * 1024.0 * 1024.0) as u64 / block_bytes) as usize;
    let engine = RouterStepEngine::new(
        &router,
        texts,
        args.load.max_prompt_tokens,
        SamplingParams { temperature: 0.8, top_p: 0.95, ..SamplingParams::default() },
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let prompt_tokens: Vec<usize> = engine.prompts.iter().map(Vec::len).collect();
    let mean_prompt = prompt_tokens.iter().sum::<usize>() as f64 / prompt_tokens.len().max(1) as f64;
    let mean_out = lengths.iter().sum::<usize>() as f64 / lengths.len() as f64;
    let loads = inputs.runs(&args.load, &prompt_tokens)?;
    println!(
        "{} · {} · K/V {per_token} B a token by the formula (the engine's pages: {engine_per_token} B a token), budget {:.0} MiB = {budget_blocks} pages of {BLOCK_TOKENS} tokens · {} prompts, mean {mean_prompt:.0} tokens (cut at {}) · output lengths from {} dataset rows (tokens per call, capped at {}), mean {mean_out:.1} · {} · at most {} running · {}",
        router.checkpoint_id(),
        router.backbone.precision.label(&router.weight_type),
        args.kv_budget_mib,
        texts.len(),
        args.load.max_prompt_tokens,
        lengths.len(),
        args.load.max_new_cap,
        memory.label(),
        args.max_running,
        inputs.arrivals_label(&args.load),
    );
    let mut plan: Vec<(&LoadRun, Mixing, Layout)> = Vec::new();
    for load in &loads {
        for &mixing in &mixings {
            plan.extend(layouts.iter().map(|&layout| (load, mixing, layout)));
        }
    }
    let mut progress =
        Progress::new("serve-generate", plan.iter().map(|(load, ..)| load.duration_s + args.load.drain / 4.0).collect(), args.quiet);
    let mut runs = Vec::new();
    for &(load, mixing, layout) in &plan {
        let rate = load.rate_per_s;
        progress.step(&format!("{rate:.3} req/s, {}, {}", mixing.label(), layout.label()));
        let settings = GenSettings {
            batch: BatchSettings { budget_blocks, max_running: args.max_running, mixing, memory },
            timeout_ms: args.timeout * 1000.0,
            warmup_ms: args.load.warmup * 1000.0,
            drain_ms: args.load.drain * 1000.0,
            ttft_slo_ms: args.load.ttft_slo_ms,
            tpot_slo_ms: args.load.tpot_slo_ms,
        };
        // Every instance holds the same weights: one loaded router serves them all.
        let engines = (0..layout.instances()).map(|_| engine.clone()).collect();
        let cluster_settings = ClusterSettings { layout, link_gbit_per_s: args.link_gbit };
        let mut cluster = Cluster::new(cluster_settings, settings, load.requests.clone(), load.duration_s * 1000.0, engines)
            .map_err(|e| anyhow::anyhow!(e))?;
        let started = Instant::now();
        let mut stopwatch = || started.elapsed().as_secs_f64() * 1000.0;
        while cluster.step(&mut stopwatch) != ClusterStep::Done {}
        runs.push(GenerationRun::from_cluster(rate, &cluster, block_bytes));
    }
    print_table(&runs);
    println!();
    for line in tradeoff_lines(&runs) {
        println!("{line}");
    }
    // P/D against colocated, when a run was disaggregated.
    let separation = separation_lines(&runs);
    if !separation.is_empty() {
        println!();
        for line in separation {
            println!("{line}");
        }
    }
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_string(&runs)?).with_context(|| format!("--out {}", out.display()))?;
        // The figures beside it: the trade-off, and each run's timeline and K/V over time.
        let stem = out.with_extension("");
        let figure = |suffix: &str| PathBuf::from(format!("{}.{suffix}.svg", stem.display()));
        std::fs::write(figure("tradeoff"), tradeoff_svg(&runs))?;
        for (i, run) in runs.iter().enumerate() {
            std::fs::write(figure(&format!("timeline-{}", i + 1)), pd_timeline_svg(run))?;
            if let Some(kv) = kv_timeline_svg(run) {
                std::fs::write(figure(&format!("kv-{}", i + 1)), kv)?;
            }
        }
        println!("wrote {} and its figures ({}, {}…)", out.display(), figure("tradeoff").display(), figure("timeline-1").display());
    }
    Ok(())
}

fn print_table(runs: &[GenerationRun]) {
    // "–": the percentile falls on a request never served.
    let one = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
    let p = |x: &Percentiles| format!("{:>6} {:>6} {:>6}", one(x.p50), one(x.p95), one(x.p99));
    println!(
        "\n{:>5}  {:<60} {:>9}  {:>20}  {:>20}  {:>20}  {:>6}  {:>7}  {:>7}  {:>10}",
        "req/s",
        "mixing",
        "served",
        "TTFT p50 p95 p99 ms",
        "ITL p50 p95 p99 ms",
        "done p50 p95 p99 ms",
        "tok/s",
        "good/s",
        "preempt",
        "decode rows"
    );
    for run in runs {
        let s = &run.summary;
        let decode_rows: Vec<usize> = run.iterations.iter().map(|it| it.feeds.iter().filter(|f| !f.prefill).count()).collect();
        let mean_rows = decode_rows.iter().sum::<usize>() as f64 / decode_rows.len().max(1) as f64;
        println!(
            "{:>5}  {:<60} {:>4}/{:<4}  {}  {}  {}  {:>6.1}  {:>7.2}  {:>7}  {:>10.2}{}",
            run.rate_per_s,
            run.policy(),
            s.served,
            s.measured,
            p(&s.ttft_ms),
            p(&s.itl_ms),
            p(&s.completion_ms),
            s.tokens_per_s,
            s.goodput_per_s,
            s.preemptions,
            mean_rows,
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
