//! The command-line conventions every native tool of this crate follows:
//! enumerated flags as `clap::ValueEnum` (so a typo is refused by clap
//! with the choices listed), usage errors apart from failures in the exit
//! code (2: the command line is wrong; 1: something failed while running),
//! and progress on long runs that says which step of how many, the time
//! elapsed and an estimate of the time left.

use std::io::{IsTerminal, Write};
use std::num::NonZeroUsize;
use std::process::ExitCode;

use router::Precision;
use web_time::{Duration, Instant};

/// `--precision`, as the page's `precision=` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    /// Weights dequantized once at load; f32 matmul.
    F32,
    /// The stored blocks times activations quantized to 8 bits, integer dot products.
    Int8,
    /// candle's quantized matmul on the stored blocks.
    Quantized,
}

impl From<PrecisionArg> for Precision {
    fn from(arg: PrecisionArg) -> Precision {
        match arg {
            PrecisionArg::F32 => Precision::DequantizedF32,
            PrecisionArg::Int8 => Precision::IntegerQ8,
            PrecisionArg::Quantized => Precision::Quantized,
        }
    }
}

/// `--device`: the backbone runs on candle's CPU backend only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceArg {
    /// This machine's CPU (every thread the pool starts).
    Cpu,
}

/// `--policy` of the serving test, as its report spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    /// First come, first served.
    Fcfs,
    /// The fewest kept tokens left to prefill first.
    #[value(name = "shortest_first", alias = "shortest-first")]
    ShortestFirst,
}

impl From<PolicyArg> for bench::serve::Policy {
    fn from(arg: PolicyArg) -> bench::serve::Policy {
        match arg {
            PolicyArg::Fcfs => bench::serve::Policy::Fcfs,
            PolicyArg::ShortestFirst => bench::serve::Policy::ShortestFirst,
        }
    }
}

/// `--chunk`: `whole` (one prefill) or a positive number of tokens. Not a
/// `ValueEnum`, whose values are a fixed list, but typed the same way: a
/// parser clap calls, so a bad value is a usage error naming the flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkArg {
    Whole,
    Tokens(NonZeroUsize),
}

impl ChunkArg {
    pub fn parse(text: &str) -> Result<ChunkArg, String> {
        match text.trim() {
            "whole" | "none" => Ok(ChunkArg::Whole),
            n => n
                .parse::<NonZeroUsize>()
                .map(ChunkArg::Tokens)
                .map_err(|_| format!("`{text}` is neither `whole` nor a number of tokens above 0")),
        }
    }

    /// The scheduler's spelling: `None` for a whole prefill.
    pub fn tokens(self) -> Option<usize> {
        match self {
            ChunkArg::Whole => None,
            ChunkArg::Tokens(n) => Some(n.get()),
        }
    }
}

/// A usage error found after clap parsed the flags (a value out of range,
/// flags that do not fit together): reported like clap's own, exit code 2.
pub fn usage(message: impl std::fmt::Display) -> anyhow::Error {
    clap::Error::raw(clap::error::ErrorKind::ValueValidation, format!("{message}\n")).into()
}

/// The tools' exit: 0; a usage error (clap's) as clap prints it, with
/// status 2; any other error's chain on stderr with status 1.
pub fn exit(tool: &str, outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<clap::Error>() {
            Some(usage) => {
                eprint!("{tool}: {}", usage.render());
                ExitCode::from(2)
            }
            None => {
                eprintln!("{tool}: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

/// Progress of a run made of steps of known relative size (a serving
/// run's planned seconds, a routing pass's tasks), on stderr. On a
/// terminal the count within a step is rewritten in place; into a file or
/// a pipe (CI's log) it is a plain line at each tenth, so the log stays
/// readable.
pub struct Progress {
    tool: String,
    weights: Vec<f64>,
    started: Instant,
    /// Steps started so far.
    step: usize,
    terminal: bool,
    quiet: bool,
    /// The last tenth printed within the current step.
    tenth: Option<usize>,
}

impl Progress {
    /// `weights`: each step's expected share of the time (any unit).
    pub fn new(tool: &str, weights: Vec<f64>, quiet: bool) -> Progress {
        Progress {
            tool: tool.to_string(),
            weights,
            started: Instant::now(),
            step: 0,
            terminal: std::io::stderr().is_terminal(),
            quiet,
            tenth: None,
        }
    }

    /// Starts the next step and says so.
    pub fn step(&mut self, what: &str) {
        self.end_in_place_line();
        self.step += 1;
        self.tenth = None;
        let elapsed = self.started.elapsed();
        let left = remaining(&self.weights, self.step - 1, elapsed);
        self.say(&step_line(self.step, self.weights.len(), what, elapsed, left));
    }

    /// A line of its own (not a step).
    pub fn note(&mut self, what: &str) {
        self.end_in_place_line();
        self.say(what);
    }

    /// `done` of `total` within the current step.
    pub fn within(&mut self, done: usize, total: usize, unit: &str) {
        if self.quiet {
            return;
        }
        let tenth = done * 10 / total.max(1);
        if self.terminal {
            eprint!("\r{}: {done}/{total} {unit}", self.tool);
            let _ = std::io::stderr().flush();
            self.tenth = Some(tenth);
        } else if self.tenth != Some(tenth) {
            self.tenth = Some(tenth);
            eprintln!("{}: {done}/{total} {unit}", self.tool);
        }
    }

    fn end_in_place_line(&mut self) {
        if self.terminal && !self.quiet && self.tenth.is_some() {
            eprintln!();
            self.tenth = None;
        }
    }

    fn say(&self, what: &str) {
        if !self.quiet {
            eprintln!("{}: {what}", self.tool);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.end_in_place_line();
    }
}

/// The time left, from the time the `done` first steps took and the
/// weights of the rest; `None` before any step has finished.
pub fn remaining(weights: &[f64], done: usize, elapsed: Duration) -> Option<Duration> {
    let finished: f64 = weights.iter().take(done).sum();
    let left: f64 = weights.iter().skip(done).sum();
    (finished > 0.0).then(|| Duration::from_secs_f64(elapsed.as_secs_f64() * left / finished))
}

/// `step 3 of 12: what (4m10s elapsed, about 12m30s left)`.
pub fn step_line(step: usize, steps: usize, what: &str, elapsed: Duration, left: Option<Duration>) -> String {
    let left = left.map_or(String::new(), |l| format!(", about {} left", clock(l)));
    format!("step {step} of {steps}: {what} ({} elapsed{left})", clock(elapsed))
}

/// `1h02m`, `4m10s` or `12s`.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

/// For each tool's tests: clap's own consistency checks, and a help text
/// on every flag.
pub fn assert_documented(command: &clap::Command) {
    command.clone().debug_assert();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if id != "help" && id != "version" {
            assert!(arg.get_help().is_some(), "{}: --{id} has no help text", command.get_name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn enumerated_flags_are_spelled_as_the_page_and_the_report_spell_them() {
        for arg in PrecisionArg::value_variants() {
            let name = arg.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(Precision::from_flag(&name), Some(Precision::from(*arg)), "{name}");
        }
        for arg in PolicyArg::value_variants() {
            let name = arg.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(bench::serve::Policy::parse(&name).ok(), Some(bench::serve::Policy::from(*arg)), "{name}");
        }
    }

    #[test]
    fn chunks_are_whole_or_positive_token_counts() {
        assert_eq!(ChunkArg::parse("whole"), Ok(ChunkArg::Whole));
        assert_eq!(ChunkArg::parse(" 256 ").map(ChunkArg::tokens), Ok(Some(256)));
        assert!(ChunkArg::parse("0").unwrap_err().contains("`0`"));
        assert!(ChunkArg::parse("-3").is_err() && ChunkArg::parse("half").is_err());
    }

    #[test]
    fn the_time_left_scales_the_elapsed_time_by_the_weights_left() {
        let weights = [10.0, 10.0, 20.0];
        assert_eq!(remaining(&weights, 0, Duration::from_secs(5)), None);
        assert_eq!(remaining(&weights, 1, Duration::from_secs(30)), Some(Duration::from_secs(90)));
        assert_eq!(remaining(&weights, 3, Duration::from_secs(80)), Some(Duration::ZERO));
        assert_eq!(
            step_line(2, 3, "rate 2/s", Duration::from_secs(30), remaining(&weights, 1, Duration::from_secs(30))),
            "step 2 of 3: rate 2/s (30s elapsed, about 1m30s left)"
        );
        assert_eq!(clock(Duration::from_secs(3725)), "1h02m");
    }

    #[test]
    fn usage_errors_exit_with_2_and_failures_with_1() {
        assert_eq!(exit("t", Err(usage("--lengths: give positive token counts"))), ExitCode::from(2));
        assert_eq!(exit("t", Err(anyhow::anyhow!("--checkpoint x: not found"))), ExitCode::from(1));
        assert_eq!(exit("t", Ok(())), ExitCode::SUCCESS);
    }
}
