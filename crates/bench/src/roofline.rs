//! The roofline of one decide on the device that ran it: how fast each
//! part of the prefill ran against the fastest this device measurably
//! allows, and a plain sentence saying whether the decide's speed is what
//! the device allows.
//!
//! A decide's time is the projections (the linear layers: compute-bound
//! at long prompts, bound by reading the weights at short ones), attention
//! (scores, softmax and weighted values, on the f32 micro-kernel at every
//! precision) and the rest (norms, RoPE, the K/V copy, tokenizing, the
//! head). Each of the first two gets a ceiling from probes run on the same
//! device and build a moment before ([`DeviceCeilings`]): the projections'
//! precision's GEMM rate, capped by memory bandwidth times their arithmetic
//! intensity (FLOPs per weight byte, the classic roofline); attention's the
//! f32 GEMM rate. The rest has no probe and is counted at its measured
//! time, so the decide's floor is `Σ FLOPs / ceiling + rest`.
//!
//! Pure: the probes are measured by the caller (the worker, `router-decide
//! --roofline`) through [`measure`], and the readout is computed from
//! their results and a decision's own stage timings wherever it is shown.

use router::{BandwidthProbe, Decision, FlopModel, GemmProbe};
use serde::{Deserialize, Serialize};

/// Bytes the memory-bandwidth probe streams in the worker (the roofline
/// and the decode-speed panel): past the cache (on the development VM,
/// whose L3 reads 300 MiB, 64 MiB streamed at 44–55 GB/s and 256 MiB to
/// 1 GiB at 23–27), so the rate is memory's. The buffer is freed after
/// the probe, but the wasm memory it grew stays (it never shrinks) for the
/// allocator to reuse, so both probes streaming the same size grow it once;
/// neither runs unless asked.
pub const BANDWIDTH_PROBE_BYTES: usize = 256 << 20;

/// Rows of the activations the GEMM probes multiply: a 1,024-token
/// prefill, where the kernels reach their best rate.
#[cfg(feature = "engine")]
const PROBE_ROWS: usize = 1024;
#[cfg(feature = "engine")]
const PROBE_REPEATS: usize = 5;

/// What bounds this device for the loaded backbone, measured in one go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceCeilings {
    /// The fastest of the backbone's own projection shapes through the f32
    /// kernels.
    pub f32: GemmProbe,
    /// The same through the integer kernels (8-bit activations).
    pub int8: GemmProbe,
    pub bandwidth: BandwidthProbe,
    /// The projections' weight bytes as held (what a prefill reads once).
    pub projection_bytes: u64,
    /// Projections the integer kernels compute, of all of them: the
    /// loaded precision's, not the probes'.
    pub integer_projections: usize,
    pub projections: usize,
    /// Threads of the pool that ran the probes (the decide's).
    pub threads: usize,
}

/// Runs the probes for `router`'s backbone on this device: the f32 and
/// integer GEMM at each of its projection shapes (attention's square one,
/// the FFN's widening and narrowing ones), the fastest of each kept as the
/// ceiling, and memory bandwidth.
///
/// Every shape, not one: measured natively on the AVX2 machine, a 1,024-
/// token decide's projections ran at 196 GOP/s while the probe at the
/// FFN's `576 → 1536` alone gave 162 at 512 rows: the narrowing `1536 →
/// 576` reads longer rows per quantized activation and runs faster, and a
/// ceiling a decide beats is no ceiling.
#[cfg(feature = "engine")]
pub fn measure(router: &router::Router) -> Result<DeviceCeilings, router::RouterError> {
    use router::probe::{gemm_probe, memory_bandwidth};
    use router::Precision;
    let h = &router.backbone.hparams;
    let shapes = [(h.hidden, h.heads * h.head_dim), (h.hidden, h.ffn), (h.ffn, h.hidden)];
    let fastest = |precision: Precision| -> Result<GemmProbe, router::RouterError> {
        let mut best: Option<GemmProbe> = None;
        for &(k, n) in &shapes {
            let probe = gemm_probe(PROBE_ROWS, k, n, PROBE_REPEATS, precision)?;
            if best.as_ref().is_none_or(|b| probe.gflops > b.gflops) {
                best = Some(probe);
            }
        }
        Ok(best.expect("three shapes were probed"))
    };
    let (integer_projections, projections) = router.backbone.integer_projections();
    Ok(DeviceCeilings {
        f32: fastest(Precision::DequantizedF32)?,
        int8: fastest(Precision::IntegerQ8)?,
        bandwidth: memory_bandwidth(BANDWIDTH_PROBE_BYTES, PROBE_REPEATS),
        projection_bytes: router.backbone.weight_bytes().projections,
        integer_projections,
        projections,
        threads: router::parallel::threads(),
    })
}

/// One part of a decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    Projections,
    Attention,
}

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Part::Projections => "projections",
            Part::Attention => "attention",
        }
    }

    /// The part as a sentence's subject, and its possessive.
    fn subject(self) -> (&'static str, &'static str) {
        match self {
            Part::Projections => ("the projections", "their"),
            Part::Attention => ("attention", "its"),
        }
    }
}

/// What caps a part's rate on this device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The kernel's measured arithmetic rate.
    Compute,
    /// Reading the weights from memory: too few tokens reuse each byte.
    Memory,
}

/// One part against its ceiling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartRate {
    pub part: Part,
    pub ms: f64,
    pub flops: f64,
    pub achieved_gflops: f64,
    pub ceiling_gflops: f64,
    pub bound: Bound,
    /// `ceiling` in words: which probe, and for a memory bound the
    /// arithmetic intensity it was multiplied by.
    pub ceiling_source: String,
    /// The part's time at its ceiling.
    pub floor_ms: f64,
}

impl PartRate {
    /// The achieved rate as a share of the ceiling.
    pub fn share(&self) -> f64 {
        self.achieved_gflops / self.ceiling_gflops
    }
}

/// A decide's parts against this device's ceilings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    pub prefilled_tokens: usize,
    pub parts: Vec<PartRate>,
    /// Everything outside the projections and attention, at its measured time.
    pub rest_ms: f64,
    pub decide_ms: f64,
    /// The decide at every part's ceiling, the rest as measured.
    pub floor_ms: f64,
}

/// Why a decision has no roofline.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RooflineError {
    #[error("this decide prefilled no tokens (its whole prompt came from the prefix cache); decide a new prompt first")]
    NothingPrefilled,
    #[error("this decide's stage timings carry no projection or attention time (a report from before they were recorded)")]
    NoStageTimings,
    #[error("a probe measured no rate ({0}); run it again")]
    NoRate(&'static str),
}

impl Roofline {
    /// `decision`'s parts against `ceilings`, with the backbone's FLOPs.
    pub fn of(ceilings: &DeviceCeilings, flops: &FlopModel, decision: &Decision) -> Result<Roofline, RooflineError> {
        let t = &decision.timings;
        let (held, prefilled) = match decision.prefix {
            Some(p) => (p.reused_tokens, p.prefilled_tokens),
            None => (0, decision.tokens_used),
        };
        if prefilled == 0 {
            return Err(RooflineError::NothingPrefilled);
        }
        if t.projections_ms <= 0.0 || t.attention_ms <= 0.0 {
            return Err(RooflineError::NoStageTimings);
        }
        for (rate, name) in
            [(ceilings.f32.gflops, "f32 GEMM"), (ceilings.int8.gflops, "int8 GEMM"), (ceilings.bandwidth.gb_per_s, "bandwidth")]
        {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(RooflineError::NoRate(name));
            }
        }

        // Projections: the loaded precision's kernel rate. A file whose
        // projections are partly integer (Q8_0 tensors stay f32) gets the
        // rate at which that mix would run, counting projections alike.
        let integer = ceilings.integer_projections as f64 / ceilings.projections.max(1) as f64;
        let compute = 1.0 / (integer / ceilings.int8.gflops + (1.0 - integer) / ceilings.f32.gflops);
        let compute_source = match ceilings.integer_projections {
            0 => "the f32 GEMM probe".to_string(),
            n if n == ceilings.projections => "the int8 GEMM probe".to_string(),
            n => format!("the int8 and f32 GEMM probes ({n} of {} projections integer)", ceilings.projections),
        };
        let projection_flops = flops.per_token * prefilled as f64;
        // FLOPs per weight byte: the weights are read once a prefill.
        let intensity = projection_flops / ceilings.projection_bytes.max(1) as f64;
        let memory = ceilings.bandwidth.gb_per_s * intensity;
        let (ceiling, bound, source) = if memory < compute {
            (memory, Bound::Memory, format!("memory bandwidth × {intensity:.1} FLOP per weight byte"))
        } else {
            (compute, Bound::Compute, compute_source)
        };
        let projections = part(Part::Projections, t.projections_ms, projection_flops, ceiling, bound, source);

        // Attention: the causal pairs of the new tokens against every key
        // they see, on the f32 micro-kernel.
        let (start, end) = (held as f64, (held + prefilled) as f64);
        let attention_flops = flops.per_token_squared * (end * end - start * start);
        let attention =
            part(Part::Attention, t.attention_ms, attention_flops, ceilings.f32.gflops, Bound::Compute, "the f32 GEMM probe".into());

        let rest_ms = (t.total_ms - t.projections_ms - t.attention_ms).max(0.0);
        let floor_ms = projections.floor_ms + attention.floor_ms + rest_ms;
        Ok(Roofline { prefilled_tokens: prefilled, parts: vec![projections, attention], rest_ms, decide_ms: t.total_ms, floor_ms })
    }

    /// The floor as a share of the measured decide: 1 is this device's limit.
    pub fn share_of_limit(&self) -> f64 {
        self.floor_ms / self.decide_ms
    }

    /// The part whose time lies furthest above its floor.
    pub fn widest_gap(&self) -> &PartRate {
        self.parts.iter().max_by(|a, b| (a.ms - a.floor_ms).total_cmp(&(b.ms - b.floor_ms))).expect("a roofline has parts")
    }

    /// Whether this decide's speed is what the device allows, in a sentence.
    pub fn verdict(&self) -> String {
        let share = self.share_of_limit();
        let gap = self.widest_gap();
        let rest = self.rest_ms / self.decide_ms;
        let lead = format!(
            "At this device's measured ceilings this decide would take {} instead of {}",
            crate::report::format_ms(self.floor_ms),
            crate::report::format_ms(self.decide_ms)
        );
        let (subject, their) = gap.part.subject();
        let ceiling = match gap.bound {
            Bound::Compute => format!("{their} ceiling"),
            Bound::Memory => format!("what memory bandwidth allows {}", if their == "its" { "it" } else { "them" }),
        };
        let judgement = if share >= 0.75 {
            format!("{lead}: this speed is close to what the device allows.")
        } else if share >= 0.5 {
            format!("{lead}: within twice what the device allows; {subject} ran at {:.0} % of {ceiling}.", 100.0 * gap.share())
        } else {
            format!(
                "{lead}: the device allows about {:.1}× this speed, and most of the gap is in {}, at {:.0} % of {ceiling}.",
                1.0 / share,
                gap.part.name(),
                100.0 * gap.share()
            )
        };
        if rest > 0.3 {
            format!(
                "{judgement} The rest (norms, RoPE, tokenizing, the head: {:.0} % of the decide) has no measured ceiling and is counted as it ran.",
                100.0 * rest
            )
        } else {
            judgement
        }
    }
}

fn part(part: Part, ms: f64, flops: f64, ceiling_gflops: f64, bound: Bound, ceiling_source: String) -> PartRate {
    PartRate {
        part,
        ms,
        flops,
        achieved_gflops: flops / ms / 1e6,
        ceiling_gflops,
        bound,
        ceiling_source,
        floor_ms: flops / ceiling_gflops / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use router::{PrefixReuse, StageTimings};

    use super::*;

    fn probe(gflops: f64) -> GemmProbe {
        GemmProbe { m: 512, k: 576, n: 1536, repeats: 5, best_ms: 1.0, gflops, median_ms: 1.0, kernel: "test".into() }
    }

    fn ceilings(integer_projections: usize) -> DeviceCeilings {
        DeviceCeilings {
            f32: probe(80.0),
            int8: probe(160.0),
            bandwidth: BandwidthProbe { bytes: 1 << 28, threads: 2, repeats: 5, best_ms: 10.0, median_ms: 10.0, gb_per_s: 20.0 },
            projection_bytes: 100_000_000,
            integer_projections,
            projections: 210,
            threads: 2,
        }
    }

    /// 10⁸ FLOPs a token in the projections, 10⁴ per token² in attention.
    const FLOPS: FlopModel = FlopModel { per_token: 1e8, per_token_squared: 1e4 };

    fn decision(tokens: usize, projections_ms: f64, attention_ms: f64, total_ms: f64) -> Decision {
        Decision {
            scoring: "similarity".into(),
            mode: "balanced".into(),
            cost_weight: 0.5,
            ranked: Vec::new(),
            tokens_total: tokens,
            tokens_used: tokens,
            truncated: false,
            timings: StageTimings { projections_ms, attention_ms, total_ms, ..StageTimings::default() },
            prefix: None,
            confidence: None,
            cost_term: None,
        }
    }

    #[test]
    fn a_long_prompt_is_compute_bound_and_its_floor_adds_the_rest() {
        // 1,000 tokens: 10¹¹ projection FLOPs over 10⁸ bytes is 1,000 FLOP
        // a byte, × 20 GB/s = 20 TFLOP/s, far above the int8 rate.
        let decision = decision(1000, 1250.0, 500.0, 2000.0);
        let roofline = Roofline::of(&ceilings(210), &FLOPS, &decision).unwrap();
        let [projections, attention] = &roofline.parts[..] else { panic!("two parts") };
        assert_eq!(projections.bound, Bound::Compute);
        assert_eq!(projections.ceiling_gflops, 160.0);
        assert!((projections.achieved_gflops - 80.0).abs() < 1e-9, "1e11 FLOPs in 1.25 s");
        assert!((projections.floor_ms - 625.0).abs() < 1e-9);
        // 10⁴ × 1,000² = 10¹⁰ FLOPs at f32's 80 GFLOP/s: 125 ms, a quarter
        // of the 500 it took.
        assert!((attention.floor_ms - 125.0).abs() < 1e-9);
        assert!((attention.share() - 0.25).abs() < 1e-9);
        assert_eq!(roofline.rest_ms, 250.0);
        assert!((roofline.floor_ms - (625.0 + 125.0 + 250.0)).abs() < 1e-9);
    }

    #[test]
    fn a_short_prompt_is_bound_by_reading_the_weights() {
        // 10 tokens: 10⁹ FLOPs over 10⁸ bytes = 10 FLOP a byte × 20 GB/s = 200
        // GFLOP/s… above int8's 160; at 5 tokens, 100 GFLOP/s, below it.
        let roofline = Roofline::of(&ceilings(210), &FLOPS, &decision(5, 10.0, 0.1, 20.0)).unwrap();
        let projections = &roofline.parts[0];
        assert_eq!(projections.bound, Bound::Memory);
        assert!((projections.ceiling_gflops - 100.0).abs() < 1e-9);
        assert!(projections.ceiling_source.contains("5.0 FLOP per weight byte"), "{}", projections.ceiling_source);
        assert!((projections.floor_ms - 5.0).abs() < 1e-9, "5e8 FLOPs at 100 GFLOP/s");
    }

    #[test]
    fn the_verdict_names_the_part_furthest_from_its_ceiling() {
        // Projections at their floor (625 ms), attention 4× its floor (125 ms);
        // then both far from theirs: a floor of 850 ms against 3,200.
        let flops = FLOPS;
        let roofline = Roofline::of(&ceilings(210), &flops, &decision(1000, 625.0, 500.0, 1200.0)).unwrap();
        assert_eq!(roofline.widest_gap().part, Part::Attention);
        let verdict = roofline.verdict();
        assert!(verdict.contains("within twice") && verdict.contains("attention ran at 25 % of its ceiling"), "{verdict}");

        let close = Roofline::of(&ceilings(210), &flops, &decision(1000, 630.0, 130.0, 800.0)).unwrap();
        assert!(close.verdict().contains("close to what the device allows"), "{}", close.verdict());

        let far = Roofline::of(&ceilings(210), &flops, &decision(1000, 2500.0, 600.0, 3200.0)).unwrap();
        assert!(far.verdict().contains("about 3.8× this speed") && far.verdict().contains("gap is in projections"), "{}", far.verdict());
    }

    #[test]
    fn mixed_and_f32_projections_get_their_own_rate() {
        let d = decision(1000, 1000.0, 100.0, 1200.0);
        assert_eq!(Roofline::of(&ceilings(0), &FLOPS, &d).unwrap().parts[0].ceiling_gflops, 80.0);
        let mixed = Roofline::of(&ceilings(105), &FLOPS, &d).unwrap();
        // Half the projections at each rate: 1 / (0.5/160 + 0.5/80).
        assert!((mixed.parts[0].ceiling_gflops - 1.0 / (0.5 / 160.0 + 0.5 / 80.0)).abs() < 1e-9);
        assert!(mixed.parts[0].ceiling_source.contains("105 of 210"));
    }

    #[test]
    fn a_cached_prefix_counts_only_the_new_tokens() {
        let mut d = decision(1000, 100.0, 50.0, 200.0);
        d.prefix = Some(PrefixReuse { reused_tokens: 900, prefilled_tokens: 100, ..PrefixReuse::default() });
        let roofline = Roofline::of(&ceilings(210), &FLOPS, &d).unwrap();
        assert_eq!(roofline.prefilled_tokens, 100);
        assert_eq!(roofline.parts[0].flops, 1e10);
        assert_eq!(roofline.parts[1].flops, 1e4 * (1000.0f64.powi(2) - 900.0f64.powi(2)));

        d.prefix = Some(PrefixReuse { reused_tokens: 1000, prefilled_tokens: 0, ..PrefixReuse::default() });
        assert_eq!(Roofline::of(&ceilings(210), &FLOPS, &d), Err(RooflineError::NothingPrefilled));
    }

    #[test]
    fn missing_timings_or_rates_are_refused_with_the_reason() {
        assert_eq!(Roofline::of(&ceilings(210), &FLOPS, &decision(10, 0.0, 0.0, 5.0)), Err(RooflineError::NoStageTimings));
        let mut broken = ceilings(210);
        broken.bandwidth.gb_per_s = 0.0;
        assert_eq!(Roofline::of(&broken, &FLOPS, &decision(10, 1.0, 1.0, 5.0)), Err(RooflineError::NoRate("bandwidth")));
    }
}
