//! The command-line conventions every native tool of the workspace follows
//! (`bench-decide`, `router-decide`, `gemm-probe`, `kv-budget`): usage
//! errors apart from failures in the exit code (2: the command line is
//! wrong; 1: something failed while running), help on every flag (checked
//! by each tool's tests), and progress on long runs that says which step of
//! how many, the time elapsed and an estimate of the time left. A crate of
//! its own so that `kv-budget` shares it without linking the router.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use web_time::{Duration, Instant};

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
    /// When the first step started: the time left is estimated from the
    /// steps' own time, not from the loading and warm-up before them.
    first_step: Option<Instant>,
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
            first_step: None,
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
        let stepping = self.first_step.get_or_insert_with(Instant::now).elapsed();
        let left = remaining(&self.weights, self.step - 1, stepping);
        self.say(&step_line(self.step, self.weights.len(), what, self.started.elapsed(), left));
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

/// The time left, from the time the `done` first steps took (`elapsed`
/// since the first began) and the weights of the rest; `None` before any
/// step has finished.
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
