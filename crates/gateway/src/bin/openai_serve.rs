//! `openai-serve`: the engine behind an OpenAI-compatible endpoint.
//! `POST /v1/chat/completions` (streamed as server-sent events when asked),
//! `GET /v1/models`, `GET /metrics`; the same continuous-batching
//! scheduler `serve-generate` measures, with its K/V budget, mixing policy
//! and queue timeout. With `--route`, `model: "auto"` runs `Router.decide`
//! first (the `Server-Timing` header and the last event say what it chose
//! and how long deciding took; every candidate is served by this one model).
//!
//! ```text
//! openai-serve --precision int8 --port 8080 --route
//! curl -N localhost:8080/v1/chat/completions -d '{"model":"auto","stream":true,"messages":[{"role":"user","content":"Hi"}]}'
//! ```

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

use anyhow::{Context, Result};
use bench::generation::formula_bytes_per_token;
use bench_cli::{Loaded, RouterFlags};
use clap::Parser;
use cli_conventions::usage;
use gateway::engine::EngineConfig;
use gateway::openai::Defaults;
use gateway::ListenOptions;
use router::generate::BLOCK_TOKENS;
use serving::batching::{BatchSettings, Memory, Mixing};
use serving::generation::GenSettings;

/// Serves the router's model over an OpenAI-compatible HTTP API.
#[derive(Parser, Debug)]
#[command(name = "openai-serve", version)]
struct Args {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// The port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The name clients ask for in `model` (default: the checkpoint file's stem).
    #[arg(long)]
    model_name: Option<String>,
    /// Route `model: "auto"` with Router.decide before generating (in --mode, or the pool's default mode).
    #[arg(long)]
    route: bool,
    /// How prefills mix with decodes: prefill-first, decode-first or chunked:N (tokens an iteration).
    #[arg(long, default_value = "chunked:128")]
    mixing: String,
    /// What happens when K/V memory runs out: recompute (preempt the newest) or reserve (admit only what can finish).
    #[arg(long, default_value = "recompute")]
    memory: String,
    /// The engine's K/V budget, MiB (turned into pages of 16 tokens by the kv formula).
    #[arg(long, default_value_t = 256.0)]
    kv_budget_mib: f64,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 16)]
    max_running: usize,
    /// Seconds a request may wait to start before it is given up (an error event tells its client).
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Tokens to generate when a request sets no max_tokens (cut to what the context leaves).
    #[arg(long, default_value_t = 512)]
    default_max_tokens: usize,
    /// Request bodies past this many KiB are refused (413).
    #[arg(long, default_value_t = 1024)]
    max_body_kib: usize,
    /// A bearer token every request must carry (default: the OPENAI_SERVE_API_KEY variable, else none).
    #[arg(long)]
    api_key: Option<String>,
    #[command(flatten)]
    router: RouterFlags,
}

fn main() -> ExitCode {
    bench_cli::exit("openai-serve", run(Args::parse()))
}

fn run(args: Args) -> Result<()> {
    let mixing = Mixing::parse(&args.mixing).map_err(|e| usage(format!("--mixing: {e}")))?;
    let memory = match args.memory.as_str() {
        "recompute" => Memory::Recompute,
        "reserve" => Memory::Reserve,
        other => return Err(usage(format!("--memory {other}: use recompute or reserve"))),
    };
    if !(args.kv_budget_mib.is_finite() && args.kv_budget_mib > 0.0) {
        return Err(usage(format!("--kv-budget-mib: {} is not a positive size", args.kv_budget_mib)));
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(usage(format!("--timeout: {} is not a positive number of seconds", args.timeout)));
    }
    if args.default_max_tokens == 0 || args.max_running == 0 || args.max_body_kib == 0 {
        return Err(usage("--default-max-tokens, --max-running and --max-body-kib must be at least 1"));
    }
    let Loaded { router, checkpoint_file } = args.router.load()?;
    let model_id = args.model_name.clone().unwrap_or_else(|| {
        std::path::Path::new(&checkpoint_file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or(checkpoint_file.clone())
    });
    let per_token = formula_bytes_per_token(&router.backbone.hparams);
    let budget_blocks = ((args.kv_budget_mib * 1024.0 * 1024.0) as u64 / (per_token * BLOCK_TOKENS as u64)) as usize;
    let gen = GenSettings {
        batch: BatchSettings { budget_blocks, max_running: args.max_running, mixing, memory },
        timeout_ms: args.timeout * 1000.0,
        warmup_ms: 0.0,
        drain_ms: f64::INFINITY,
        // The server reports times; SLOs are the client's to judge.
        ttft_slo_ms: f64::INFINITY,
        tpot_slo_ms: f64::INFINITY,
    };
    let routing = args.route.then(|| args.router.mode.clone());
    println!(
        "{} · {} · K/V budget {:.0} MiB = {budget_blocks} pages of {BLOCK_TOKENS} tokens · {} · {} · at most {} running{}",
        router.checkpoint_id(),
        router.backbone.precision.label(&router.weight_type),
        args.kv_budget_mib,
        mixing.label(),
        memory.label(),
        args.max_running,
        if args.route { " · model \"auto\" is routed by Router.decide (every candidate is served by this model)" } else { "" },
    );
    let config = EngineConfig { gen, model_id: model_id.clone(), routing };
    let options = ListenOptions {
        addr: SocketAddr::new(args.host, args.port),
        body_limit: args.max_body_kib * 1024,
        api_key: args.api_key.clone().or_else(|| std::env::var("OPENAI_SERVE_API_KEY").ok().filter(|k| !k.is_empty())),
        defaults: Defaults { max_tokens: args.default_max_tokens },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let endpoint =
            gateway::listen(router, config, options).await.with_context(|| format!("listening on {}:{}", args.host, args.port))?;
        // The line scripts and tests wait for.
        println!("listening on http://{} (model \"{model_id}\")", endpoint.addr);
        tokio::select! {
            served = endpoint.serving => served.context("the server task")?.context("serving"),
            _ = tokio::signal::ctrl_c() => {
                println!("stopping");
                Ok(())
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_flag_is_documented() {
        bench_cli::cli::assert_documented(&super::Args::command());
    }
}
