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
use bench_cli::{load_router, max_tokens_from_env, precision, read, Loaded, DEFAULT_CHECKPOINT, DEFAULT_POOL};
use clap::Parser;
use router::{Conversation, RouterConfig};

/// Decides each conversation in a file and prints the ranked candidates.
#[derive(Parser, Debug)]
#[command(name = "router-decide", version)]
struct Args {
    /// A JSON array of conversations.
    #[arg(long)]
    conversations: PathBuf,
    #[arg(long, default_value = DEFAULT_POOL)]
    pool: PathBuf,
    #[arg(long, default_value = DEFAULT_CHECKPOINT)]
    checkpoint: PathBuf,
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Routing mode (default: the pool's default).
    #[arg(long)]
    mode: Option<String>,
    #[arg(long, default_value = "f32")]
    precision: String,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("router-decide: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<()> {
    let text = read(&args.conversations, "--conversations")?;
    let conversations: Vec<Conversation> = serde_json::from_slice(&text)
        .with_context(|| format!("--conversations {}: not a JSON array of conversations", args.conversations.display()))?;
    let config = RouterConfig { max_tokens: max_tokens_from_env()?, precision: precision(&args.precision)?, ..RouterConfig::default() };
    let Loaded { router, .. } = load_router(&args.checkpoint, args.tokenizer.as_deref(), &args.pool, config)?;
    let decisions = conversations
        .iter()
        .enumerate()
        .map(|(i, c)| router.decide(c, args.mode.as_deref()).with_context(|| format!("conversation {}", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    println!("{}", serde_json::to_string_pretty(&decisions)?);
    Ok(())
}
