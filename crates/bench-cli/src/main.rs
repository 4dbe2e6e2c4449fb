//! `bench-decide`: the field guide's "Rerun decision timing", natively.
//!
//! ```text
//! bench-decide --pool configs/pool.coderouterbench.yaml \
//!   --checkpoint assets/SmolLM2-135M-Instruct.Q4_1.gguf \
//!   --device cpu --out reports/router-latency.cpu.json
//! ```
//!
//! A thin shell: it reads the files, collects the environment, and hands bytes
//! to the `router` and `bench` crates, which do the work the browser bench
//! does too.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bench::report::{ProtocolRecord, Provenance, Report, Studies, SCHEMA};
use bench::Protocol;
use bench_cli::cli::{usage, DeviceArg, Progress};
use bench_cli::{prompt_texts, Loaded, RouterFlags, DEFAULT_PROMPTS};
use clap::Parser;

/// Times the router's complete decision: weight load, tokenizer init, the first
/// (cold) call per prompt length, warm-ups, then timed iterations.
#[derive(Parser, Debug)]
#[command(name = "bench-decide", version)]
struct Args {
    #[command(flatten)]
    router: RouterFlags,
    /// Where the backbone runs.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    device: DeviceArg,
    /// Where to write the JSON report (by default the committed report of
    /// the mode run: reports/router-latency.cpu.json, router-quality.cpu.json,
    /// router-serve.cpu.json or precision-agreement.cpu.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Prompt lengths in tokens, comma-separated.
    #[arg(long, default_value = "15,256,1024", value_delimiter = ',')]
    lengths: Vec<usize>,
    /// Timed warm decides per length, after the cold first call and the warm-ups.
    #[arg(long, default_value_t = 25)]
    iterations: usize,
    /// Untimed decides per length between the cold first call and the timed ones.
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Timed encode_and_score calls per length (default: as many as --iterations).
    #[arg(long)]
    encode_iterations: Option<usize>,
    /// Prompt texts: JSON lines with a `prompt` field, or plain text (one prompt per blank-line-separated block).
    #[arg(long, default_value = DEFAULT_PROMPTS)]
    prompts: PathBuf,
    /// Also write the prompts' routing texts (JSON), so other engines can be timed on the same texts.
    #[arg(long)]
    dump_prompts: Option<PathBuf>,
    /// Also run the field guide's prefix-reuse protocol (note 04): hits,
    /// misses, eviction under pressure and recovery, each against a full
    /// prefill, and a long conversation extended by a short turn.
    #[arg(long)]
    prefix_protocol: bool,
    /// Tokens of the protocol's long conversation: 1,000 plus a follow-up
    /// turn (16–17 tokens) stays within the default `router_max_tokens` of
    /// 1,024, so the extension is a hit, not a truncation.
    #[arg(long, default_value_t = 1000)]
    prefix_tokens: usize,
    /// The prefix cache's budget in tokens, for --prefix-protocol.
    #[arg(long, default_value_t = router::CacheBudget::default().max_tokens)]
    cache_tokens: usize,
    /// The prefix cache's budget in MiB, for --prefix-protocol.
    #[arg(long, default_value_t = router::CacheBudget::default().max_bytes >> 20)]
    cache_mib: u64,
    /// Also compare stepped truncation (--truncation-step) with plain left
    /// truncation: prefix reuse on a conversation growing past
    /// router_max_tokens, and the decisions on long task conversations.
    #[arg(long)]
    truncation_study: bool,
    /// The grid, in text tokens, a stepped cut starts on.
    #[arg(long, default_value_t = 256)]
    truncation_step: usize,
    /// Exchanges appended to the long conversation in --truncation-study.
    #[arg(long, default_value_t = 12)]
    truncation_turns: usize,
    /// Instead of the latency protocol: route every CodeRouterBench OOD176
    /// task through `decide` and report routing quality beside the
    /// baselines, with a trained head cross-validated (5 folds × 5 seeds).
    #[arg(long, conflicts_with_all = ["serve", "prefix_protocol", "truncation_study", "dump_prompts"])]
    quality: bool,
    #[command(flatten)]
    quality_flags: quality::QualityFlags,
    /// Instead of the latency protocol: route every OOD176 task at f32 and
    /// at int8 and compare the trained head's decisions (same first pick,
    /// same order, Kendall's τ, what each resolves and costs).
    #[arg(long, conflicts_with_all = ["quality", "serve", "prefix_protocol", "truncation_study", "dump_prompts"])]
    precision_agreement: bool,
    /// Instead of the latency protocol: the serving test (note 06). Open-loop
    /// arrivals of OOD176 prompts against one engine, with a bounded queue,
    /// client timeouts and chunked prefill; one record per request.
    #[arg(long, conflicts_with_all = ["prefix_protocol", "truncation_study", "dump_prompts"])]
    serve: bool,
    #[command(flatten)]
    serve_flags: serve::ServeFlags,
    /// No progress lines on stderr (errors still go there).
    #[arg(long, short)]
    quiet: bool,
    /// Print the report as JSON on stdout instead of its tables (it is written to --out either way).
    #[arg(long)]
    json: bool,
}

mod quality;
mod serve;

/// What the study modes print, as the flags ask.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    /// No progress lines.
    pub quiet: bool,
    /// The report as JSON on stdout instead of tables.
    pub json: bool,
}

fn main() -> ExitCode {
    bench_cli::exit("bench-decide", run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    let DeviceArg::Cpu = args.device;
    if args.lengths.is_empty() || args.lengths.contains(&0) {
        return Err(usage("--lengths: give positive token counts, e.g. 15,256,1024"));
    }
    let output = Output { quiet: args.quiet, json: args.json };
    // Each mode writes its own report by default, so a quick run of one
    // never overwrites another's committed file.
    let out_or = |default: &str| args.out.clone().unwrap_or_else(|| PathBuf::from(default));
    if args.quality {
        return quality::run(&args.router, &args.quality_flags, &out_or("reports/router-quality.cpu.json"), output);
    }
    if args.precision_agreement {
        return quality::run_agreement(&args.router, &args.quality_flags, &out_or("reports/precision-agreement.cpu.json"), output);
    }
    if args.serve {
        return serve::run(&args.router, &args.serve_flags, &out_or("reports/router-serve.cpu.json"), output);
    }
    let out = out_or("reports/router-latency.cpu.json");
    let texts = prompt_texts(&args.prompts)?;
    let started_unix_ms = bench_cli::unix_ms_now();
    // One step per length, weighted by its tokens (a prefill's time grows at least with them).
    let mut log = Progress::new("bench-decide", args.lengths.iter().map(|&n| n as f64).collect(), args.quiet);
    log.note(&format!("loading {}", args.router.checkpoint.display()));
    let Loaded { mut router, checkpoint_file } = args.router.load()?;
    let prompts = args
        .lengths
        .iter()
        .map(|&n| {
            router::prompts::exact_prompt(&router.tokenizer, &texts, n)
                .with_context(|| format!("--lengths {n}: --prompts {}", args.prompts.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    if let Some(path) = &args.dump_prompts {
        let texts: Vec<serde_json::Value> = prompts
            .iter()
            .map(|p| serde_json::json!({ "tokens": p.tokens, "characters": p.characters, "routing_text": p.conversation.routing_text(router.tokenizer.layout) }))
            .collect();
        std::fs::write(path, serde_json::to_string_pretty(&texts)?).with_context(|| format!("--dump-prompts {}", path.display()))?;
    }
    let protocol = Protocol {
        lengths: args.lengths.clone(),
        warmup: args.warmup,
        iterations: args.iterations,
        encode_iterations: args.encode_iterations.unwrap_or(args.iterations),
    };
    let (mut length, mut phase) = (0, String::new());
    let mut progress = |tokens: usize, now: &str, _done: usize, _total: usize| {
        if tokens != length {
            log.step(&format!("{tokens} tokens"));
            length = tokens;
        }
        if now != phase {
            log.note(&format!("{tokens} tokens: {now}"));
            phase = now.to_string();
        }
        true
    };
    let results = bench::run(&router, &prompts, &protocol, args.router.mode.as_deref(), &mut progress)?;
    let prefix = if args.prefix_protocol {
        log.note("prefix-reuse protocol");
        let inputs = bench::prefix::PrefixInputs::from_texts(&router, &texts, args.prefix_tokens, args.iterations)?;
        let budget = router::CacheBudget { max_tokens: args.cache_tokens, max_bytes: args.cache_mib << 20 };
        Some(bench::prefix::run(&router, &inputs, budget)?)
    } else {
        None
    };
    let truncation = if args.truncation_study {
        log.note(&format!("truncation study (step {})", args.truncation_step));
        let inputs = bench::prefix::PrefixInputs::from_texts(&router, &texts, args.prefix_tokens, args.iterations)?;
        Some(
            bench::truncation::run(&mut router, &inputs, &texts, args.truncation_step, args.truncation_turns)
                .context("--truncation-step")?,
        )
    } else {
        None
    };

    let report = Report {
        schema: SCHEMA.into(),
        environment: bench_cli::native_environment(started_unix_ms),
        provenance: Provenance::of(&router, &checkpoint_file),
        protocol: ProtocolRecord {
            lengths: args.lengths,
            warmup: args.warmup,
            iterations: args.iterations,
            prompts_source: args.prompts.display().to_string(),
        },
        load: router.load_timings,
        results,
        studies: Studies { prefix, truncation, ..Studies::default() },
    };
    bench_cli::write_report(&out, &report)?;
    drop(log);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}\n\n{}\n{}\n", report.table(), report.conditions(), report.boundaries());
    println!("Where a warm decide's prefill goes (median per part):");
    for result in &report.results {
        println!("{}", bench::figures::Breakdown::of(result).prefill_parts_line(result.prompt_tokens));
    }
    println!();
    if let Some(prefix) = &report.studies.prefix {
        println!(
            "Prefix reuse (note 04), cache budget {} tokens / {} MiB:\n\n{}",
            prefix.budget_tokens,
            prefix.budget_bytes >> 20,
            prefix.table()
        );
    }
    if let Some(study) = &report.studies.truncation {
        println!("Stepped truncation (prefix reuse past router_max_tokens):\n\n{}", study.table());
    }
    println!("wrote {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Args;
    use clap::{CommandFactory, Parser};

    #[test]
    fn every_flag_is_documented() {
        bench_cli::cli::assert_documented(&Args::command());
    }

    #[test]
    fn modes_that_exclude_each_other_are_refused_by_the_parser() {
        let parse = |flags: &[&str]| Args::try_parse_from([&["bench-decide"], flags].concat());
        for flags in [
            &["--quality", "--serve"][..],
            &["--quality", "--prefix-protocol"],
            &["--serve", "--truncation-study"],
            &["--precision-agreement", "--quality"],
            &["--precision-agreement", "--serve"],
        ] {
            let err = parse(flags).unwrap_err();
            assert_eq!((err.kind(), err.exit_code()), (clap::error::ErrorKind::ArgumentConflict, 2), "{flags:?}");
        }
        for flags in [&["--device", "gpu"][..], &["--precision", "f16"], &["--policy", "lifo"]] {
            let err = parse(flags).unwrap_err();
            assert_eq!((err.kind(), err.exit_code()), (clap::error::ErrorKind::InvalidValue, 2), "{flags:?}");
        }
        let err = parse(&["--chunk", "0"]).unwrap_err();
        assert_eq!((err.kind(), err.exit_code()), (clap::error::ErrorKind::ValueValidation, 2));
        assert!(parse(&["--serve", "--chunk", "whole,256", "--policy", "fcfs,shortest-first"]).is_ok());
    }
}
