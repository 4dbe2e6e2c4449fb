//! How long a protocol will take on this device, said before it runs.
//!
//! The probe is free: loading a router prefills every candidate descriptor,
//! and [`router::LoadTimings::probe_gflops`] is the speed that showed. A call
//! at `T` tokens is then the prefill's FLOPs ([`FlopModel`]) at that speed;
//! prefill is over 99 % of a decide. Attention's T² part runs below GEMM
//! speed, so long prompts may take longer than said; the page shows the
//! estimate next to the measurement afterwards.

use router::FlopModel;

use crate::protocol::Protocol;

/// The expected duration, per length and in total.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub per_length: Vec<LengthEstimate>,
    pub total_ms: f64,
    /// The speed assumed.
    pub gflops: f64,
}

/// One prompt length's expected time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthEstimate {
    pub prompt_tokens: usize,
    /// For all the protocol's calls at that length.
    pub ms: f64,
}

/// `max_tokens` caps each length as truncation does.
pub fn estimate(protocol: &Protocol, model: &FlopModel, gflops: f64, max_tokens: usize) -> Option<Estimate> {
    if !(gflops.is_finite() && gflops > 0.0) {
        return None;
    }
    let per_call_ms = |tokens: usize| model.prefill(tokens.min(max_tokens)) / (gflops * 1e6);
    let per_length: Vec<LengthEstimate> = protocol
        .lengths
        .iter()
        .map(|&prompt_tokens| LengthEstimate { prompt_tokens, ms: per_call_ms(prompt_tokens) * protocol.calls_per_length() as f64 })
        .collect();
    let total_ms = per_length.iter().map(|l| l.ms).sum();
    Some(Estimate { per_length, total_ms, gflops })
}

/// `850 ms`, `42 s`, `7.5 min`, `1 h 20 min`.
pub fn format_duration(ms: f64) -> String {
    let s = ms / 1000.0;
    if s < 1.0 {
        format!("{ms:.0} ms")
    } else if s < 90.0 {
        format!("{s:.0} s")
    } else if s < 3600.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        let minutes = (s / 60.0).round() as u64;
        format!("{} h {} min", minutes / 60, minutes % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M: 30 layers, hidden 576, 9 heads × 64, 3 KV heads, FFN 1536.
    const SMOLLM2: FlopModel = FlopModel { per_token: 2.0 * 3_538_944.0 * 30.0, per_token_squared: 2.0 * 576.0 * 30.0 };

    #[test]
    fn counts_every_call_and_caps_at_truncation() {
        let protocol = Protocol::default();
        let e = estimate(&protocol, &SMOLLM2, 10.0, 1024).unwrap();
        // 1,024 tokens: 217.4 GFLOP linear + 36.2 GFLOP causal attention =
        // 253.7 GFLOP, 25.4 s per call at 10 GFLOP/s, 56 calls.
        let LengthEstimate { prompt_tokens, ms } = e.per_length[2];
        assert_eq!(prompt_tokens, 1024);
        assert!((ms / 56.0 - 25_367.2).abs() < 1.0, "{ms}");
        let longer = Protocol { lengths: vec![4096], ..Protocol::default() };
        assert_eq!(estimate(&longer, &SMOLLM2, 10.0, 1024).unwrap().per_length[0].ms, ms);
        assert!(estimate(&protocol, &SMOLLM2, 0.0, 1024).is_none());
        assert!((e.total_ms - e.per_length.iter().map(|l| l.ms).sum::<f64>()).abs() < 1e-6);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(850.0), "850 ms");
        assert_eq!(format_duration(42_000.0), "42 s");
        assert_eq!(format_duration(450_000.0), "7.5 min");
        assert_eq!(format_duration(4_800_000.0), "1 h 20 min");
    }
}
