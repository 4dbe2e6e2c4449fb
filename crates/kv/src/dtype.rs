//! Storage precisions, counted in bits so that int4 needs no fractions.

use serde::{Deserialize, Serialize};

/// A storage precision for KV entries or weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Fp32,
    Bf16,
    Fp16,
    Fp8,
    Int8,
    Int4,
}

impl Dtype {
    pub const ALL: [Dtype; 6] = [Dtype::Fp32, Dtype::Bf16, Dtype::Fp16, Dtype::Fp8, Dtype::Int8, Dtype::Int4];

    /// Bits per element. The byte width `b` of the field guide is `bits / 8`.
    pub fn bits(self) -> u32 {
        match self {
            Dtype::Fp32 => 32,
            Dtype::Bf16 | Dtype::Fp16 => 16,
            Dtype::Fp8 | Dtype::Int8 => 8,
            Dtype::Int4 => 4,
        }
    }

    /// The URL spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Int8 => "int8",
            Dtype::Int4 => "int4",
        }
    }

    /// `b` as printed in a formula: whole bytes, or `0.5` for int4.
    pub fn bytes_text(self) -> &'static str {
        match self {
            Dtype::Fp32 => "4",
            Dtype::Bf16 | Dtype::Fp16 => "2",
            Dtype::Fp8 | Dtype::Int8 => "1",
            Dtype::Int4 => "0.5",
        }
    }

    /// Parses the URL spelling, and also the `torch_dtype` spellings of a
    /// Hugging Face config (`bfloat16`, `float16`, `float32`).
    pub fn parse(text: &str) -> Option<Dtype> {
        match text.trim().to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "f32" => Some(Dtype::Fp32),
            "bf16" | "bfloat16" => Some(Dtype::Bf16),
            "fp16" | "float16" | "f16" | "half" => Some(Dtype::Fp16),
            "fp8" | "float8" | "fp8_e4m3" | "fp8_e5m2" | "float8_e4m3fn" => Some(Dtype::Fp8),
            "int8" | "i8" => Some(Dtype::Int8),
            "int4" | "i4" => Some(Dtype::Int4),
            _ => None,
        }
    }
}
