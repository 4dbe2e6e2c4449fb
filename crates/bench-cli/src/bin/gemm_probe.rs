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
//! prefill's other stage, at the same rate unit, once per panel width
//! this CPU runs (16 on AVX-512, and 8), repeats alternated.
//! With `--checkpoint`, it also prints each length's prefill FLOPs for that
//! backbone (`router::FlopModel`), so callers divide by the rate without
//! restating the formula.

use std::process::ExitCode;

use bench_cli::cli::usage;
use clap::Parser;

/// Times `[m × k]` by a `[n × k]` weight through the backbone's `Linear`.
#[derive(Parser, Debug)]
#[command(name = "gemm-probe", version)]
struct Args {
    /// Rows of the activations (tokens; with --attention, the sequence length).
    #[arg(long, default_value_t = 1024)]
    m: usize,
    /// The shared dimension (the model's width).
    #[arg(long, default_value_t = 576)]
    k: usize,
    /// Rows of the weight (the projection's outputs).
    #[arg(long, default_value_t = 1536)]
    n: usize,
    /// Timed repeats; the best is reported.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// The matmul to time, as bench-decide spells it.
    #[arg(long, value_enum, default_value_t = bench_cli::cli::PrecisionArg::F32)]
    precision: bench_cli::cli::PrecisionArg,
    /// Time every integer kernel this CPU runs instead of one precision's matmul.
    #[arg(long, conflicts_with_all = ["attention", "precision"])]
    kernels: bool,
    /// Time causal attention of `m` tokens instead of the matmul.
    #[arg(long, conflicts_with = "precision")]
    attention: bool,
    /// Query heads, for --attention.
    #[arg(long, default_value_t = 9, requires = "attention")]
    heads: usize,
    /// Key/value heads, for --attention (a divisor of --heads).
    #[arg(long, default_value_t = 3, requires = "attention")]
    kv_heads: usize,
    /// Dimensions per head, for --attention.
    #[arg(long, default_value_t = 64, requires = "attention")]
    head_dim: usize,
    /// A GGUF whose prefill FLOPs to print.
    #[arg(long)]
    checkpoint: Option<std::path::PathBuf>,
    /// Prompt lengths in tokens whose prefill FLOPs to print, with --checkpoint.
    #[arg(long, default_value = "15,256,1024", value_delimiter = ',', requires = "checkpoint")]
    lengths: Vec<usize>,
}

fn main() -> ExitCode {
    bench_cli::exit("gemm-probe", run(Args::parse()))
}

fn run(args: Args) -> anyhow::Result<()> {
    if args.m == 0 || args.k == 0 || args.n == 0 || args.repeats == 0 {
        return Err(usage("--m, --k, --n and --repeats must be positive"));
    }
    let mut out = if args.attention {
        if !(args.heads > 0 && args.kv_heads > 0 && args.heads.is_multiple_of(args.kv_heads)) {
            return Err(usage("--heads must be a positive multiple of --kv-heads"));
        }
        if args.head_dim == 0 {
            return Err(usage("--head-dim must be positive"));
        }
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
        serde_json::json!({ "kernels": router::probe::integer_kernel_probes(args.m, args.k, args.n, args.repeats)? })
    } else {
        let probe = router::probe::gemm_probe(args.m, args.k, args.n, args.repeats, args.precision.into())?;
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_flag_is_documented() {
        bench_cli::cli::assert_documented(&super::Args::command());
    }
}
