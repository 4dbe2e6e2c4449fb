//! `bench-decide --serve`: the shell around `bench::serve`. It reads the
//! task file (and a trace file when given), builds each run's arrivals,
//! steps the server in real time (sleeping until the next arrival when the
//! engine is idle), and writes every run's records in the shared report.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use bench::report::{Provenance, Report, Studies};
use bench::serve::engine::{user_turn, RouterEngine};
use bench::serve::{self, ServeStudy};
use bench_cli::cli::{usage, ChunkArg, PolicyArg, Progress};
use bench_cli::{read, Loaded, RouterFlags};
use serving::{NamedConversation, Policy, ServeRun, ServeSettings, Step};
use web_time::Instant;

#[derive(clap::Args, Debug)]
pub struct ServeFlags {
    /// Poisson arrival rates, requests per second: one run each (no chunking, FCFS unless --chunk/--policy say otherwise).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    rate: Vec<f64>,
    /// Seconds of arrivals per run.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Seconds at the start whose arrivals are the warm-up (`--warmup` is the latency protocol's count).
    #[arg(long, default_value_t = 5.0)]
    warmup_s: f64,
    /// Seconds after the last arrival before the run stops (default: the timeout).
    #[arg(long)]
    drain: Option<f64>,
    /// Seed of the Poisson arrivals (the same seed, the same arrival times).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Prefill chunks in tokens (`whole`: one prefill), for the runs at --rate: the first; at --chunk-rates: each.
    #[arg(long, value_delimiter = ',', default_value = "whole", value_parser = ChunkArg::parse)]
    chunk: Vec<ChunkArg>,
    /// Scheduling between requests and chunks (the runs at --chunk-rates try each).
    #[arg(long, value_delimiter = ',', value_enum, default_value = "fcfs")]
    policy: Vec<PolicyArg>,
    /// Also run every --chunk × --policy at these rates: the chunking trade-off.
    #[arg(long, value_delimiter = ',')]
    chunk_rates: Vec<f64>,
    /// The client's timeout, ms.
    #[arg(long, default_value_t = 15_000.0)]
    timeout_ms: f64,
    /// Requests in the system beyond which an arrival is rejected.
    #[arg(long, default_value_t = 16)]
    queue_limit: usize,
    /// The service level: served within this many ms, arrival to decision.
    #[arg(long, default_value_t = 4_000.0)]
    slo_ms: f64,
    /// Replay this trace (JSON lines: `at_ms` and a `task` id or a `conversation`) instead of Poisson arrivals.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// The prompts the arrivals draw from (JSON lines with `task_id` and `prompt`).
    #[arg(long, default_value = "data/coderouterbench/ood176_tasks.jsonl")]
    serve_tasks: PathBuf,
    /// What else ran on the machine, recorded in the report.
    #[arg(long, default_value = "")]
    note: String,
    /// Run nothing: read the report at --out, derive each run's queue series
    /// and figures again from its records (this build's definitions),
    /// rewrite it, print its table and verdicts and write its figures.
    #[arg(long)]
    render: bool,
}

/// The runs the flags ask for, in order, each named.
fn plan(flags: &ServeFlags) -> Result<Vec<ServeSettings>> {
    let chunks: Vec<Option<usize>> = flags.chunk.iter().map(|c| c.tokens()).collect();
    let policies: Vec<Policy> = flags.policy.iter().map(|&p| p.into()).collect();
    if chunks.is_empty() || policies.is_empty() || flags.rate.is_empty() {
        return Err(usage("--rate, --chunk and --policy each need a value"));
    }
    let base = ServeSettings {
        duration_s: flags.duration,
        warmup_s: flags.warmup_s,
        drain_s: flags.drain.unwrap_or(flags.timeout_ms / 1000.0),
        seed: flags.seed,
        timeout_ms: flags.timeout_ms,
        queue_limit: flags.queue_limit,
        slo_ms: flags.slo_ms,
        ..ServeSettings::default()
    };
    let mut runs: Vec<ServeSettings> = Vec::new();
    let mut add = |s: ServeSettings| {
        if !runs.contains(&s) {
            runs.push(s);
        }
    };
    for &rate in &flags.rate {
        add(ServeSettings { rate_per_s: rate, chunk: chunks[0], policy: policies[0], ..base.clone() });
    }
    for &rate in &flags.chunk_rates {
        for &chunk in &chunks {
            for &policy in &policies {
                add(ServeSettings { rate_per_s: rate, chunk, policy, ..base.clone() });
            }
        }
    }
    for s in &runs {
        s.check().map_err(|e| usage(format!("--{e}")))?;
    }
    Ok(runs)
}

pub fn run(flags: &RouterFlags, s: &ServeFlags, out: &Path, output: crate::Output) -> Result<()> {
    if s.render {
        let text = String::from_utf8(read(out, "--out")?).context("--out: not UTF-8")?;
        let mut report: Report = serde_json::from_str(&text).with_context(|| format!("--out {}: not a report", out.display()))?;
        let study = report.studies.serve.as_mut().with_context(|| format!("--out {}: no serve section", out.display()))?;
        study.runs = study.runs.iter().map(ServeRun::derived_again).collect();
        bench_cli::write_report(out, &report)?;
        present(&report, out, output)?;
        if !output.json {
            println!("derived again from the records: {}", out.display());
        }
        return Ok(());
    }
    let started_unix_ms = bench_cli::unix_ms_now();
    let plan = plan(s)?;
    let tasks_text = String::from_utf8(read(&s.serve_tasks, "--serve-tasks")?).context("--serve-tasks: not UTF-8")?;
    let tasks = bench::tasks::parse_jsonl(&tasks_text, &s.serve_tasks.display().to_string()).map_err(anyhow::Error::msg)?;
    let named: Vec<NamedConversation> =
        tasks.iter().map(|t| NamedConversation { name: t.id.clone(), conversation: user_turn(&t.prompt) }).collect();
    let (named, replay, arrivals_name) = match &s.trace {
        Some(path) => {
            let text = String::from_utf8(read(path, "--trace")?).context("--trace: not UTF-8")?;
            let lines = serving::parse_trace(&text).with_context(|| format!("--trace {}", path.display()))?;
            let replay = serving::trace_arrivals(&lines, &named).with_context(|| format!("--trace {}", path.display()))?;
            (replay.conversations, Some(replay.arrivals), path.display().to_string())
        }
        None => (named, None, "poisson".to_string()),
    };

    // One step per run, weighted by its longest possible time: arrivals, then the drain.
    let mut log = Progress::new("bench-decide --serve", plan.iter().map(|p| p.duration_s + p.drain_s).collect(), output.quiet);
    let Loaded { router, checkpoint_file } = flags.load()?;
    log.note(&format!("measuring {} prompts' kept lengths", named.len()));
    let (mut engine, prompts) = RouterEngine::new(&router, named, flags.mode.clone()).map_err(anyhow::Error::msg)?;
    let unloaded_heaviest_ms = engine.warm_up(&prompts).map_err(anyhow::Error::msg)?;
    log.note(&format!("one decide of the heaviest prompt, nothing queued: {unloaded_heaviest_ms:.0} ms"));

    let mut runs: Vec<ServeRun> = Vec::new();
    for mut settings in plan {
        let arrivals = match &replay {
            Some(arrivals) => {
                serving::fit_to_trace(&mut settings, arrivals);
                arrivals.clone()
            }
            None => serving::poisson_trace(settings.rate_per_s, settings.duration_s, settings.seed, prompts.len()),
        };
        let label = serving::run_label(&settings);
        log.step(&format!("{label}: {} arrivals over {} s", arrivals.len(), settings.duration_s));
        let mut server = serving::Server::new(settings, prompts.clone(), arrivals).map_err(anyhow::Error::msg)?;
        let start = Instant::now();
        let mut clock = || start.elapsed().as_secs_f64() * 1000.0;
        loop {
            match server.step(&mut engine, &mut clock) {
                Step::Worked => {}
                Step::IdleUntil(t) => {
                    let wait = t - clock();
                    if wait > 0.0 {
                        std::thread::sleep(Duration::from_secs_f64(wait / 1000.0));
                    }
                }
                Step::Done => break,
            }
        }
        let run = server.finish(label);
        if !output.json {
            println!("{}", run.summary_line());
        }
        runs.push(run);
    }

    let study = ServeStudy {
        prompt_set: s.serve_tasks.display().to_string(),
        prompts,
        router_max_tokens: router.config().max_tokens,
        arrivals: arrivals_name,
        runs,
        note: s.note.clone(),
        unloaded_heaviest_ms: Some(unloaded_heaviest_ms),
    };
    let report = Report::for_study(
        bench_cli::native_environment(started_unix_ms),
        Provenance::of(&router, &checkpoint_file),
        router.load_timings,
        s.serve_tasks.display().to_string(),
        Studies { serve: Some(study), ..Studies::default() },
    );
    bench_cli::write_report(out, &report)?;
    drop(log);
    // Printed from the report as written, so what is shown is what was stored.
    present(&report, out, output)?;
    if !output.json {
        println!("wrote {}", out.display());
    }
    Ok(())
}

/// Prints a serving report's table and verdicts and writes its figures
/// beside `out`.
fn present(report: &Report, out: &Path, output: crate::Output) -> Result<()> {
    let study = report.studies.serve.as_ref().with_context(|| format!("{}: no serve section", out.display()))?;
    if output.json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        println!("\n{}", study.table());
        for verdict in study.verdicts() {
            println!("- {verdict}");
        }
    }
    let figure = |suffix: &str, svg: String| -> Result<PathBuf> {
        let path = out.with_extension(suffix);
        std::fs::write(&path, svg).with_context(|| format!("{}", path.display()))?;
        Ok(path)
    };
    let mut figures = vec![figure("load.svg", serve::plot::load_svg(study))?];
    if !study.chunk_rates().is_empty() {
        figures.push(figure("chunks.svg", serve::plot::chunks_svg(study))?);
    }
    if let Some(run) = study.runs.last() {
        figures.push(figure("timeline.svg", serve::plot::timeline_svg(run))?);
    }
    if !output.json {
        println!("figures: {}", figures.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "));
    }
    Ok(())
}
