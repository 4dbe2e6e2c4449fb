//! `router-decide`: runs `Router.decide` natively on conversations from a
//! JSON file and prints the decisions as JSON, so the browser's answers can be
//! checked against the native ones on the same checkpoint and pool.
//!
//! ```text
//! router-decide --conversations cases.json --mode balanced > decisions.json
//! ```
//! `cases.json` is a JSON array of conversations:
//! `[{"messages": [{"role": "user", "content": "Fix the flaky test"}]}]`.

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
    let decisions = conversations
        .iter()
        .enumerate()
        .map(|(i, c)| router.decide(c, args.router.mode.as_deref()).with_context(|| format!("conversation {}", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    println!("{}", serde_json::to_string_pretty(&decisions)?);
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
