//! The enumerated flags of this crate's tools as `clap::ValueEnum` (so a
//! typo is refused by clap with the choices listed), spelled as the page
//! and the reports spell them; the conventions all the workspace's tools
//! share (exit codes, usage errors, progress) come from `cli-conventions`.

use std::num::NonZeroUsize;

use router::Precision;

pub use cli_conventions::{assert_documented, exit, usage, Progress};

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

/// `--scoring`: how decide scores the candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScoringArg {
    /// The trained head for this checkpoint (P(resolve) per candidate), when there is one.
    Trained,
    /// The untrained descriptor similarity (measured below random on OOD176).
    Similarity,
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

impl From<PolicyArg> for serving::Policy {
    fn from(arg: PolicyArg) -> serving::Policy {
        match arg {
            PolicyArg::Fcfs => serving::Policy::Fcfs,
            PolicyArg::ShortestFirst => serving::Policy::ShortestFirst,
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
            assert_eq!(serving::Policy::parse(&name).ok(), Some(serving::Policy::from(*arg)), "{name}");
        }
    }

    #[test]
    fn chunks_are_whole_or_positive_token_counts() {
        assert_eq!(ChunkArg::parse("whole"), Ok(ChunkArg::Whole));
        assert_eq!(ChunkArg::parse(" 256 ").map(ChunkArg::tokens), Ok(Some(256)));
        assert!(ChunkArg::parse("0").unwrap_err().contains("`0`"));
        assert!(ChunkArg::parse("-3").is_err() && ChunkArg::parse("half").is_err());
    }
}
