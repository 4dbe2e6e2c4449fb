//! The file-system side of the native tools: finding and reading the
//! checkpoint, tokenizer, pool and prompt files, and describing the machine.
//! The binaries (`bench-decide`, `router-decide`) parse arguments and call
//! these, then hand bytes to the `router` and `bench` crates.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use router::{Router, RouterAssets, RouterConfig};

pub mod cli;

pub use cli::exit;

/// The flags every tool that loads a router takes, spelled once.
#[derive(clap::Args, Clone, Debug)]
pub struct RouterFlags {
    /// The pool file.
    #[arg(long, default_value = DEFAULT_POOL)]
    pub pool: PathBuf,
    /// A GGUF file, or a folder holding exactly one (with an optional tokenizer.json).
    #[arg(long, default_value = DEFAULT_CHECKPOINT)]
    pub checkpoint: PathBuf,
    /// A tokenizer.json; by default the GGUF's own metadata (or tokenizer.json beside it).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Routing mode (default: the pool's default).
    #[arg(long)]
    pub mode: Option<String>,
    /// How the projections multiply (the page's `precision=`); int8 by
    /// default, as on the page (`router::Precision::SERVED`).
    #[arg(long, value_enum, default_value_t = cli::PrecisionArg::Int8)]
    pub precision: cli::PrecisionArg,
    /// How decide scores the candidates: the trained head for this
    /// checkpoint (its file in reports/, or --head), or the untrained
    /// descriptor similarity.
    #[arg(long, value_enum, default_value_t = cli::ScoringArg::Trained)]
    pub scoring: cli::ScoringArg,
    /// A trained head file (bench-decide --quality writes them); by default
    /// the reports/head.*.json trained on this checkpoint.
    #[arg(long, conflicts_with = "scoring")]
    pub head: Option<PathBuf>,
}

/// Where the trained heads are looked for when `--head` is not given.
pub const HEADS_DIR: &str = "reports";

impl RouterFlags {
    /// Loads the router these flags name, scoring as `--scoring` says;
    /// `router_max_tokens` comes from ENTHALPY_ROUTER_MAX_TOKENS. Without a
    /// head for this checkpoint it scores by similarity and says so on
    /// stderr (with what that scoring was measured to be worth).
    pub fn load(&self) -> Result<Loaded> {
        let mut loaded = self.load_untrained()?;
        if self.scoring == cli::ScoringArg::Similarity {
            return Ok(loaded);
        }
        // A head asked for by name must fit; the one found by default may
        // not (other ENTHALPY_ROUTER_MAX_TOKENS), and then the router runs
        // untrained and says why.
        let untrained = |why: String| {
            eprintln!(
                "note: {why}; decide scores by the untrained descriptor similarity, which on SmolLM2-135M resolved fewer \
                 OOD176 tasks than random picks (README, Routing quality)"
            )
        };
        if let Some(path) = &self.head {
            let bytes = read(path, "--head")?;
            loaded.router.attach_head(&bytes, &path.display().to_string())?;
            return Ok(loaded);
        }
        match find_head(Path::new(HEADS_DIR), loaded.router.backbone_checkpoint_id())? {
            Some(path) => {
                let bytes = read(&path, "a trained head")?;
                if let Err(e) = loaded.router.attach_head(&bytes, &path.display().to_string()) {
                    untrained(e.to_string());
                }
            }
            None => untrained(format!(
                "no trained head for checkpoint {} in {HEADS_DIR}/ (bench-decide --quality trains one)",
                loaded.router.backbone_checkpoint_id()
            )),
        }
        Ok(loaded)
    }

    /// Loads the router with the untrained scoring whatever `--scoring`
    /// says: the quality study trains its own head.
    pub fn load_untrained(&self) -> Result<Loaded> {
        let config = RouterConfig { max_tokens: max_tokens_from_env()?, precision: self.precision.into(), ..RouterConfig::default() };
        load_router(&self.checkpoint, self.tokenizer.as_deref(), &self.pool, config)
    }
}

/// The head file in `dir` (`head.*.json`) trained on `backbone`, if any.
/// A file there that is not a head fails the load, naming it, rather than
/// being passed over.
pub fn find_head(dir: &Path, backbone: &str) -> Result<Option<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(None) };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("head.") && n.ends_with(".json")))
        .collect();
    paths.sort();
    for path in paths {
        let bytes = read(&path, "a trained head")?;
        let head: serde_json::Value =
            serde_json::from_slice(&bytes).with_context(|| format!("{}: not a trained head file", path.display()))?;
        let Some(trained_on) = head.get("backbone_checkpoint_id").and_then(|v| v.as_str()) else {
            bail!("{}: not a trained head file (no backbone_checkpoint_id)", path.display());
        };
        if trained_on == backbone {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// The generating load's flags, spelled once: `serve-generate` serves it
/// in-process and `openai-replay` sends it to endpoints, so one command
/// line gives both the same arrivals, prompts and output lengths.
#[derive(clap::Args, Debug)]
pub struct LoadFlags {
    /// Arrival rates to run, requests a second (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub rates: Vec<f64>,
    /// Seconds of arrivals in a run.
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Seconds of arrivals at the start left out of the statistics.
    #[arg(long, default_value_t = 5.0)]
    pub warmup: f64,
    /// Seconds after the last arrival before what is left is unfinished.
    #[arg(long, default_value_t = 60.0)]
    pub drain: f64,
    /// Prompt tokens kept of each task (its text cut before the chat layout).
    #[arg(long, default_value_t = 256)]
    pub max_prompt_tokens: usize,
    /// The cap on drawn output lengths (tokens).
    #[arg(long, default_value_t = 64)]
    pub max_new_cap: usize,
    /// Time-to-first-token SLO for goodput, ms.
    #[arg(long, default_value_t = 2000.0)]
    pub ttft_slo_ms: f64,
    /// Time-per-output-token SLO for goodput, ms.
    #[arg(long, default_value_t = 200.0)]
    pub tpot_slo_ms: f64,
    /// The arrivals' and lengths' seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The task prompts (JSONL with a `prompt` field).
    #[arg(long, default_value = DEFAULT_PROMPTS)]
    pub prompts: PathBuf,
    /// The dataset's per-model results, for the output lengths.
    #[arg(long, default_value = "data/coderouterbench/ood176_results_long.csv")]
    pub results: PathBuf,
    /// A trace to replay instead of Poisson arrivals: JSON lines {"at_ms", "task" (a task_id of --prompts) or "conversation" (one user turn), optional "max_tokens"}; the run lasts to its last arrival.
    #[arg(long, conflicts_with_all = ["rates", "duration"])]
    pub trace: Option<PathBuf>,
}

/// What a generating load sends, read: the texts, the output lengths to
/// draw from, and a trace file's arrivals when one was given.
pub struct LoadInputs {
    pub texts: Vec<String>,
    pub lengths: Vec<usize>,
    pub trace: Option<bench::generation::GenerationTrace>,
}

/// One run of the load: its rate (a trace's arrivals over its length),
/// how long arrivals come, and its requests.
pub struct LoadRun {
    pub rate_per_s: f64,
    pub duration_s: f64,
    pub requests: Vec<serving::generation::GenRequest>,
}

impl LoadInputs {
    /// The runs: one a rate from the seed, or the trace's one. A trace
    /// whose arrivals all fall inside the warm-up would measure nothing,
    /// and is refused.
    pub fn runs(&self, flags: &LoadFlags, prompt_tokens: &[usize]) -> Result<Vec<LoadRun>> {
        let Some(trace) = &self.trace else {
            return Ok(flags
                .rates
                .iter()
                .map(|&rate| LoadRun {
                    rate_per_s: rate,
                    duration_s: flags.duration,
                    requests: bench::generation::generation_requests(rate, flags.duration, flags.seed, prompt_tokens, &self.lengths),
                })
                .collect());
        };
        if trace.duration_s() <= flags.warmup {
            return Err(cli::usage(format!(
                "--trace: its last arrival comes at {:.3} s, inside --warmup {} s: nothing would be measured; lower --warmup",
                trace.duration_s() - 0.001,
                flags.warmup
            )));
        }
        Ok(vec![LoadRun {
            rate_per_s: trace.rate_per_s(),
            duration_s: trace.duration_s(),
            requests: bench::generation::traced_requests(&trace.arrivals, flags.seed, prompt_tokens, &self.lengths),
        }])
    }

    /// How the arrivals come, for a run's heading.
    pub fn arrivals_label(&self, flags: &LoadFlags) -> String {
        match &self.trace {
            Some(trace) => format!("the trace {} ({} arrivals)", flags.arrivals_source(), trace.arrivals.len()),
            None => format!("open-loop Poisson arrivals, seed {}", flags.seed),
        }
    }
}

impl LoadFlags {
    /// Where the arrivals come from, as a report records it (the serving
    /// study's `arrivals`): `poisson`, or the trace file's path.
    pub fn arrivals_source(&self) -> String {
        self.trace.as_ref().map_or("poisson".to_string(), |path| path.display().to_string())
    }

    /// Checks the flags against each other (usage errors, exit 2).
    pub fn check(&self) -> Result<()> {
        if let Some(bad) = self.rates.iter().find(|r| !(r.is_finite() && **r > 0.0)) {
            return Err(cli::usage(format!("--rates: {bad} is not a positive rate")));
        }
        if !(self.duration > self.warmup && self.warmup >= 0.0) {
            return Err(cli::usage("--duration must be longer than --warmup"));
        }
        if self.drain.is_nan() || self.drain < 0.0 {
            return Err(cli::usage("--drain must not be negative"));
        }
        Ok(())
    }

    /// The texts, the output lengths to draw from, and the trace if one
    /// was given (then the texts are the ones it sends). Without a trace
    /// every prompt of `--prompts` is in the set; with one, `--prompts`
    /// is where its task ids are looked up (a file of blank-line-separated
    /// prompts names them `prompt-1`, `prompt-2`, …).
    pub fn inputs(&self) -> Result<LoadInputs> {
        let text = String::from_utf8(read(&self.prompts, "--prompts")?)
            .with_context(|| format!("--prompts {}: not UTF-8", self.prompts.display()))?;
        let source = format!("--prompts {}", self.prompts.display());
        let tasks: Vec<(String, String)> = if path_is_jsonl(&self.prompts) {
            bench::tasks::parse_jsonl(&text, &source).map_err(anyhow::Error::msg)?.into_iter().map(|t| (t.id, t.prompt)).collect()
        } else {
            let texts = bench::tasks::prompt_texts(&text, &source, false).map_err(anyhow::Error::msg)?;
            texts.into_iter().enumerate().map(|(i, t)| (format!("prompt-{}", i + 1), t)).collect()
        };
        let results = String::from_utf8(read(&self.results, "--results")?).context("--results: not UTF-8")?;
        let lengths =
            bench::decode_study::recorded_output_lengths(&results, self.max_new_cap).map_err(|e| anyhow::anyhow!("--results: {e}"))?;
        let Some(path) = &self.trace else {
            return Ok(LoadInputs { texts: tasks.into_iter().map(|(_, prompt)| prompt).collect(), lengths, trace: None });
        };
        let trace_text = String::from_utf8(read(path, "--trace")?).with_context(|| format!("--trace {}: not UTF-8", path.display()))?;
        let lines = serving::parse_trace(&trace_text).with_context(|| format!("--trace {}", path.display()))?;
        let trace =
            bench::generation::GenerationTrace::new(&lines, &tasks).map_err(|e| anyhow::anyhow!("--trace {}: {e}", path.display()))?;
        Ok(LoadInputs { texts: trace.texts.clone(), lengths, trace: Some(trace) })
    }
}

pub const DEFAULT_CHECKPOINT: &str = "assets/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_POOL: &str = "configs/pool.coderouterbench.yaml";
pub const DEFAULT_PROMPTS: &str = "data/coderouterbench/ood176_sample.jsonl";

pub fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{what} {}", path.display()))
}

/// A GGUF path, or the single `.gguf` in a folder; plus a tokenizer.json beside it if present.
pub fn resolve_checkpoint(path: &Path) -> Result<(PathBuf, Option<PathBuf>)> {
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

pub fn prompt_texts(path: &Path) -> Result<Vec<String>> {
    let text = String::from_utf8(read(path, "--prompts")?).with_context(|| format!("--prompts {}: not UTF-8", path.display()))?;
    bench::tasks::prompt_texts(&text, &format!("--prompts {}", path.display()), path_is_jsonl(path)).map_err(anyhow::Error::msg)
}

fn path_is_jsonl(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "jsonl")
}

/// This process's environment, for a native report: target, command line,
/// versions, git revision, CPU, threads, OS, and when the run started.
pub fn native_environment(started_unix_ms: u64) -> bench::Environment {
    bench::Environment {
        runtime: "native".into(),
        target: env!("BENCH_TARGET").into(),
        command_line: std::env::args().collect(),
        versions: bench::report::component_versions(env!("BENCH_RUSTC_VERSION")),
        git_revision: git_revision(),
        cpu_model: cpu_model(),
        threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        os: std::env::consts::OS.into(),
        started_unix_ms,
        ..bench::Environment::default()
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms_now() -> u64 {
    web_time::SystemTime::now().duration_since(web_time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Writes a report as pretty JSON, creating its folder; errors name `--out`.
pub fn write_report(out: &Path, report: &bench::Report) -> Result<()> {
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("--out {}", out.display()))?;
    }
    std::fs::write(out, serde_json::to_string_pretty(report)?).with_context(|| format!("--out {}", out.display()))
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

pub fn git_revision() -> String {
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

/// `router_max_tokens`: ENTHALPY_ROUTER_MAX_TOKENS, else the default.
fn max_tokens_from_env() -> Result<usize> {
    match std::env::var("ENTHALPY_ROUTER_MAX_TOKENS") {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| cli::usage(format!("ENTHALPY_ROUTER_MAX_TOKENS={v}: not a positive whole number"))),
        Err(_) => Ok(router::router::DEFAULT_MAX_TOKENS),
    }
}

/// A loaded router and the checkpoint file's name as given.
pub struct Loaded {
    pub router: Router,
    pub checkpoint_file: String,
}

/// Reads the files and loads the router from their bytes.
fn load_router(checkpoint: &Path, tokenizer: Option<&Path>, pool: &Path, config: RouterConfig) -> Result<Loaded> {
    let (gguf_path, tokenizer_beside) = resolve_checkpoint(checkpoint)?;
    let tokenizer_path = tokenizer.map(Path::to_path_buf).or(tokenizer_beside);
    let gguf = read(&gguf_path, "--checkpoint")?;
    let tokenizer = tokenizer_path.as_ref().map(|p| read(p, "--tokenizer")).transpose()?;
    let pool_bytes = read(pool, "--pool")?;
    let gguf_name = gguf_path.display().to_string();
    let tok_name = tokenizer_path.as_ref().map(|p| p.display().to_string());
    let pool_name = pool.display().to_string();
    let assets = RouterAssets {
        gguf: &gguf,
        gguf_name: &gguf_name,
        gguf_sha256: None,
        tokenizer_json: tokenizer.as_deref().zip(tok_name.as_deref()),
        pool_yaml: &pool_bytes,
        pool_name: &pool_name,
    };
    let router = Router::load(&assets, config)?;
    Ok(Loaded { router, checkpoint_file: gguf_name })
}
