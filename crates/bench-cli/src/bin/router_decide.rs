//! `router-decide`: runs `Router.decide` natively on conversations from a
//! JSON file and prints the decisions as JSON, so the browser's answers can be
//! checked against the native ones on the same checkpoint and pool.
//!
//! ```text
//! router-decide --conversations cases.json --mode balanced > decisions.json
//! ```
//! `cases.json` is a JSON array of conversations:
//! `[{"messages": [{"role": "user", "content": "Fix the flaky test"}]}]`.
//!
//! With `--roofline`, each conversation is decided twice (the second,
//! warm call is the one read), this machine's ceilings are measured
//! (`bench::roofline::measure`, the probes the page's roofline runs) and
//! the output is `{"ceilings", "decisions", "rooflines"}`; each decide's
//! parts against their ceilings and the verdict go to stderr.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bench_cli::{read, Loaded, RouterFlags};
use clap::Parser;
use router::Conversation;

/// Decides each conversation in a file and prints the ranked candidates.
#[derive(Parser, Debug)]
#[command(name = "router-decide", version)]
struct Args {
    /// A JSON array of conversations.
    #[arg(long)]
    conversations: PathBuf,
    /// Also measure this machine's ceilings and print each (warm) decide's roofline.
    #[arg(long)]
    roofline: bool,
    #[command(flatten)]
    router: RouterFlags,
}

fn main() -> ExitCode {
    bench_cli::exit("router-decide", run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    let text = read(&args.conversations, "--conversations")?;
    let conversations: Vec<Conversation> = serde_json::from_slice(&text)
        .with_context(|| format!("--conversations {}: not a JSON array of conversations", args.conversations.display()))?;
    let Loaded { router, .. } = args.router.load()?;
    let decide =
        |i: usize, c: &Conversation| router.decide(c, args.router.mode.as_deref()).with_context(|| format!("conversation {}", i + 1));
    if !args.roofline {
        let decisions = conversations.iter().enumerate().map(|(i, c)| decide(i, c)).collect::<Result<Vec<_>>>()?;
        println!("{}", serde_json::to_string_pretty(&decisions)?);
        return Ok(());
    }
    let decisions = conversations.iter().enumerate().map(|(i, c)| decide(i, c).and_then(|_| decide(i, c))).collect::<Result<Vec<_>>>()?;
    let ceilings = bench::roofline::measure(&router)?;
    eprintln!(
        "ceilings ({} threads): f32 GEMM {:.1} GFLOP/s, int8 GEMM {:.1} GOP/s ({}), memory {:.1} GB/s; projections {} of {} integer, {:.1} MiB of weights",
        ceilings.threads,
        ceilings.f32.gflops,
        ceilings.int8.gflops,
        ceilings.int8.kernel,
        ceilings.bandwidth.gb_per_s,
        ceilings.integer_projections,
        ceilings.projections,
        ceilings.projection_bytes as f64 / (1u64 << 20) as f64
    );
    let flops = router.backbone.hparams.flop_model();
    let mut rooflines = Vec::new();
    for (i, decision) in decisions.iter().enumerate() {
        let roofline = bench::roofline::Roofline::of(&ceilings, &flops, decision).with_context(|| format!("conversation {}", i + 1))?;
        eprintln!("conversation {}: {} tokens prefilled, decide {:.1} ms", i + 1, roofline.prefilled_tokens, roofline.decide_ms);
        for part in &roofline.parts {
            eprintln!(
                "  {:<12} {:>9.1} ms  {:>6.1} GFLOP/s of {:>6.1} ({:?}: {})  {:>3.0} %  floor {:.1} ms",
                part.part.name(),
                part.ms,
                part.achieved_gflops,
                part.ceiling_gflops,
                part.bound,
                part.ceiling_source,
                100.0 * part.share(),
                part.floor_ms
            );
        }
        eprintln!("  {:<12} {:>9.1} ms  (no ceiling)\n  {}", "rest", roofline.rest_ms, roofline.verdict());
        rooflines.push(roofline);
    }
    let out = serde_json::json!({ "ceilings": ceilings, "decisions": decisions, "rooflines": rooflines });
    println!("{}", serde_json::to_string_pretty(&out)?);
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
