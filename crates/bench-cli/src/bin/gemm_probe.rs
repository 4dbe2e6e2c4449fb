//! `gemm-probe`: the attainable rate of the backbone's own matmul on this
//! machine (natively; the router page measures the same in the browser),
//! printed as JSON. The peer bench divides a prefill's FLOPs by it to get the
//! GEMM floor.
//!
//! ```text
//! gemm-probe [--m 1024] [--k 576] [--n 1536] [--repeats 5] \
//!   [--precision f32|int8] [--checkpoint assets/SmolLM2-135M-Instruct.Q4_1.gguf --lengths 15,256,1024]
//! ```
//! With `--kernels`, it times the integer product through every integer
//! kernel this CPU runs (AVX-VNNI two panels a pass and one, AVX2, …, the
//! portable reference), repeats alternated, so their rates compare within
//! one run.
//! With `--attention`, it times one layer's causal attention of `--m`
//! tokens instead (`--heads 9 --kv-heads 3 --head-dim 64`, SmolLM2's), the
//! prefill's other stage, at the same rate unit, once per query panel width
//! this CPU runs (16 on AVX-512, and 8), repeats alternated.
//! With `--checkpoint`, it also prints each length's prefill FLOPs for that
//! backbone (`router::FlopModel`), so callers divide by the rate without
//! restating the formula.

use std::process::ExitCode;

use clap::Parser;

/// Times `[m × k]` by a `[n × k]` weight through the backbone's `Linear`.
#[derive(Parser, Debug)]
#[command(name = "gemm-probe", version)]
struct Args {
    #[arg(long, default_value_t = 1024)]
    m: usize,
    #[arg(long, default_value_t = 576)]
    k: usize,
    #[arg(long, default_value_t = 1536)]
    n: usize,
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// `f32` or `int8` (the integer kernels), as bench-decide spells it.
    #[arg(long, default_value = "f32")]
    precision: String,
    /// Time every integer kernel this CPU runs instead of one precision's matmul.
    #[arg(long, conflicts_with_all = ["attention", "precision"])]
    kernels: bool,
    /// Time causal attention of `m` tokens instead of the matmul.
    #[arg(long)]
    attention: bool,
    #[arg(long, default_value_t = 9)]
    heads: usize,
    #[arg(long, default_value_t = 3)]
    kv_heads: usize,
    #[arg(long, default_value_t = 64)]
    head_dim: usize,
    /// A GGUF whose prefill FLOPs to print.
    #[arg(long)]
    checkpoint: Option<std::path::PathBuf>,
    #[arg(long, default_value = "15,256,1024", value_delimiter = ',')]
    lengths: Vec<usize>,
}

fn main() -> ExitCode {
    bench_cli::exit("gemm-probe", run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<()> {
    let mut out = if args.attention {
        anyhow::ensure!(
            args.heads > 0 && args.kv_heads > 0 && args.heads.is_multiple_of(args.kv_heads),
            "--heads must be a positive multiple of --kv-heads"
        );
        anyhow::ensure!(args.m > 0 && args.head_dim > 0, "--m (tokens) and --head-dim must be positive");
        let shape = router::attention::Shape {
            heads: args.heads,
            kv_heads: args.kv_heads,
            tokens: args.m,
            head_dim: args.head_dim,
            start: 0,
            window: None,
        };
        serde_json::json!({ "attention": router::attention::probe(shape, args.repeats) })
    } else if args.kernels {
        serde_json::json!({ "kernels": router::model::integer_kernel_probes(args.m, args.k, args.n, args.repeats)? })
    } else {
        let probe = router::model::gemm_probe(args.m, args.k, args.n, args.repeats, bench_cli::precision(&args.precision)?)?;
        serde_json::json!({ "probe": probe })
    };
    if let Some(path) = &args.checkpoint {
        let bytes = bench_cli::read(path, "--checkpoint")?;
        let checkpoint = router::gguf::Checkpoint::parse(&bytes, &path.display().to_string())?;
        let model = checkpoint.hparams.flop_model();
        let flops: serde_json::Map<String, serde_json::Value> =
            args.lengths.iter().map(|&t| (t.to_string(), model.prefill(t).into())).collect();
        out["flop_model"] = serde_json::to_value(model)?;
        out["prefill_flops"] = flops.into();
    }
    println!("{out}");
    Ok(())
}
