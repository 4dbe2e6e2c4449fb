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

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use bench::report::{Environment, ProtocolRecord, Provenance, Report, SCHEMA};
use bench::Protocol;
use clap::Parser;
use router::{Precision, Router, RouterAssets, RouterConfig};

const DEFAULT_CHECKPOINT: &str = "assets/SmolLM2-135M-Instruct.Q4_1.gguf";
const DEFAULT_POOL: &str = "configs/pool.coderouterbench.yaml";
const DEFAULT_PROMPTS: &str = "data/coderouterbench/ood176_sample.jsonl";

/// Times the router's complete decision: weight load, tokenizer init, the first
/// (cold) call per prompt length, warm-ups, then timed iterations.
#[derive(Parser, Debug)]
#[command(name = "bench-decide", version)]
struct Args {
    /// The pool file.
    #[arg(long, default_value = DEFAULT_POOL)]
    pool: PathBuf,
    /// A GGUF file, or a folder holding exactly one (with an optional tokenizer.json).
    #[arg(long, default_value = DEFAULT_CHECKPOINT)]
    checkpoint: PathBuf,
    /// A tokenizer.json; by default the GGUF's own metadata (or tokenizer.json beside it).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Only `cpu` exists here.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Where to write the JSON report.
    #[arg(long, default_value = "reports/router-latency.cpu.json")]
    out: PathBuf,
    /// Prompt lengths in tokens, comma-separated.
    #[arg(long, default_value = "15,256,1024", value_delimiter = ',')]
    lengths: Vec<usize>,
    #[arg(long, default_value_t = 25)]
    iterations: usize,
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Timed encode_and_score calls per length (default: as many as --iterations).
    #[arg(long)]
    encode_iterations: Option<usize>,
    /// Prompt texts: JSON lines with a `prompt` field, or plain text (one prompt per blank-line-separated block).
    #[arg(long, default_value = DEFAULT_PROMPTS)]
    prompts: PathBuf,
    /// Routing mode (default: the pool's default).
    #[arg(long)]
    mode: Option<String>,
    /// `f32`: weights dequantized once at load (default); `quantized`: candle's quantized matmul.
    #[arg(long, default_value = "f32")]
    precision: String,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-decide: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{what} {}", path.display()))
}

/// A GGUF path, or the single `.gguf` in a folder; plus a tokenizer.json beside it if present.
fn resolve_checkpoint(path: &Path) -> Result<(PathBuf, Option<PathBuf>)> {
    if path.is_dir() {
        let ggufs: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("--checkpoint {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
            .collect();
        let [one] = ggufs.as_slice() else {
            bail!("--checkpoint {}: expected exactly one .gguf file in the folder, found {}", path.display(), ggufs.len())
        };
        let tok = path.join("tokenizer.json");
        return Ok((one.clone(), tok.is_file().then_some(tok)));
    }
    Ok((path.to_path_buf(), None))
}

fn prompt_texts(path: &Path) -> Result<Vec<String>> {
    let text = String::from_utf8(read(path, "--prompts")?).with_context(|| format!("--prompts {}: not UTF-8", path.display()))?;
    let is_jsonl = path.extension().is_some_and(|x| x == "jsonl");
    let texts: Vec<String> = if is_jsonl {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                let v: serde_json::Value =
                    serde_json::from_str(l).with_context(|| format!("--prompts {} line {}: not JSON", path.display(), i + 1))?;
                v["prompt"]
                    .as_str()
                    .map(str::to_string)
                    .with_context(|| format!("--prompts {} line {}: no string field `prompt`", path.display(), i + 1))
            })
            .collect::<Result<_>>()?
    } else {
        text.split("\n\n").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
    };
    if texts.is_empty() {
        bail!("--prompts {}: no prompts", path.display());
    }
    Ok(texts)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn git_revision() -> String {
    let out = std::process::Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output();
    let rev = out
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = std::process::Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    if dirty {
        format!("{rev}-dirty")
    } else {
        rev
    }
}

fn run(args: Args) -> Result<()> {
    if args.device != "cpu" {
        bail!("--device {}: only `cpu` is available (the backbone runs on candle's CPU backend)", args.device);
    }
    let precision = match args.precision.as_str() {
        "f32" => Precision::DequantizedF32,
        "quantized" => Precision::Quantized,
        other => bail!("--precision {other}: use f32 or quantized"),
    };
    let max_tokens = match std::env::var("ENTHALPY_ROUTER_MAX_TOKENS") {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("ENTHALPY_ROUTER_MAX_TOKENS={v}: not a positive whole number"))?,
        Err(_) => router::router::DEFAULT_MAX_TOKENS,
    };
    if args.lengths.is_empty() || args.lengths.contains(&0) {
        bail!("--lengths: give positive token counts, e.g. 15,256,1024");
    }
    let (gguf_path, tokenizer_beside) = resolve_checkpoint(&args.checkpoint)?;
    let tokenizer_path = args.tokenizer.clone().or(tokenizer_beside);
    let gguf = read(&gguf_path, "--checkpoint")?;
    let tokenizer = tokenizer_path.as_ref().map(|p| read(p, "--tokenizer")).transpose()?;
    let pool = read(&args.pool, "--pool")?;
    let texts = prompt_texts(&args.prompts)?;

    let started_unix_ms = web_time::SystemTime::now().duration_since(web_time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    let gguf_name = gguf_path.display().to_string();
    let tok_name = tokenizer_path.as_ref().map(|p| p.display().to_string());
    let pool_name = args.pool.display().to_string();
    let assets = RouterAssets {
        gguf: &gguf,
        gguf_name: &gguf_name,
        tokenizer_json: tokenizer.as_deref().zip(tok_name.as_deref()),
        pool_yaml: &pool,
        pool_name: &pool_name,
    };
    eprintln!("bench-decide: loading {gguf_name}");
    let router = Router::load(&assets, RouterConfig { max_tokens, precision, ..RouterConfig::default() })?;
    let prompts = args
        .lengths
        .iter()
        .map(|&n| {
            router::prompts::exact_prompt(&router.tokenizer, &texts, n)
                .with_context(|| format!("--lengths {n}: --prompts {}", args.prompts.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let protocol = Protocol {
        lengths: args.lengths.clone(),
        warmup: args.warmup,
        iterations: args.iterations,
        encode_iterations: args.encode_iterations.unwrap_or(args.iterations),
    };
    let mut last = String::new();
    let mut progress = |tokens: usize, phase: &str, _done: usize, _total: usize| {
        let now = format!("{tokens} tokens: {phase}");
        if now != last {
            eprintln!("bench-decide: {now}");
            last = now;
        }
        true
    };
    let results = bench::run(&router, &prompts, &protocol, args.mode.as_deref(), &mut progress)?;

    let h = &router.backbone.hparams;
    let mut versions = std::collections::BTreeMap::new();
    versions.insert("workbench".into(), env!("CARGO_PKG_VERSION").to_string());
    versions.insert("candle-core".into(), "0.11.1".into());
    versions.insert("tokenizers".into(), "0.23.1".into());
    versions.insert("rustc".into(), env!("BENCH_RUSTC_VERSION").to_string());
    let report = Report {
        schema: SCHEMA.into(),
        environment: Environment {
            runtime: "native".into(),
            target: env!("BENCH_TARGET").into(),
            command_line: std::env::args().collect(),
            versions,
            git_revision: git_revision(),
            cpu_model: cpu_model(),
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            os: std::env::consts::OS.into(),
            started_unix_ms,
            ..Environment::default()
        },
        provenance: Provenance {
            checkpoint_id: router.checkpoint_id.clone(),
            checkpoint_file: gguf_name.clone(),
            pool_id: router.pool.id.clone(),
            pool_name: router.pool.name.clone(),
            backbone: format!(
                "{:?} ({} layers, hidden {}, {} heads / {} KV heads)",
                h.architecture, h.layers, h.hidden, h.heads, h.kv_heads
            )
            .to_lowercase(),
            precision: router.precision_label(),
            device: "cpu".into(),
            tokenizer: router.tokenizer.source.clone(),
            candidates: router.pool.candidates.len(),
            router_max_tokens: max_tokens,
        },
        protocol: ProtocolRecord {
            lengths: args.lengths,
            warmup: args.warmup,
            iterations: args.iterations,
            prompts_source: args.prompts.display().to_string(),
        },
        load: router.load_timings,
        results,
    };
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("--out {}", args.out.display()))?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?).with_context(|| format!("--out {}", args.out.display()))?;
    println!("{}\n\n{}\n{}\n\nwrote {}", report.table(), report.conditions(), report.boundaries(), args.out.display());
    Ok(())
}
