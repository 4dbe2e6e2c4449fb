//! A deterministic report for the crate's unit tests.

use router::{LoadTimings, StageTimings};

use crate::report::{Environment, LengthResult, ProtocolRecord, Provenance, Report, Studies, SCHEMA};
use crate::stats::Summary;

pub fn sample_report() -> Report {
    let results = [(15usize, 65usize, 130.0f64), (256, 932, 980.0), (1024, 3913, 6900.0)]
        .iter()
        .map(|&(tokens, characters, base)| {
            let warm_ms: Vec<f64> = (0..25).map(|i| base + (i * 7 % 13) as f64).collect();
            let warm_stages: Vec<StageTimings> = warm_ms
                .iter()
                .map(|&t| StageTimings {
                    mode_ms: 0.001,
                    assemble_ms: 0.01,
                    tokenize_ms: 0.4,
                    truncate_ms: 0.001,
                    prefill_ms: t - 1.0,
                    stack_ms: 0.001,
                    score_ms: 0.02,
                    cost_ms: 0.003,
                    rank_ms: 0.004,
                    total_ms: t,
                    ..StageTimings::default()
                })
                .collect();
            LengthResult {
                prompt_tokens: tokens,
                characters,
                truncated: false,
                cold_ms: base * 1.05,
                cold_stages: warm_stages[0],
                warmup_ms: vec![base; 5],
                warm: Summary::of(&warm_ms),
                warm_ms,
                warm_stages,
                encode_and_score_ms: vec![base - 2.0; 25],
                encode_and_score: Summary::of(&[base - 2.0; 25]),
                top_candidate: "claude-opus-4.6".into(),
            }
        })
        .collect();
    Report {
        schema: SCHEMA.into(),
        environment: Environment {
            runtime: "native".into(),
            target: "x86_64-unknown-linux-gnu".into(),
            threads: 2,
            ..Environment::default()
        },
        provenance: Provenance { checkpoint_id: "gguf-b179c952".into(), pool_id: "b3e272f2".into(), ..Provenance::default() },
        protocol: ProtocolRecord { lengths: vec![15, 256, 1024], warmup: 5, iterations: 25, prompts_source: "test".into() },
        load: LoadTimings { weights_ms: 426.0, tokenizer_ms: 279.0, descriptors_ms: 2281.0, ..LoadTimings::default() },
        results,
        studies: Studies::default(),
    }
}
