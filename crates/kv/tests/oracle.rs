//! Property test: the calculator's checked `u128` arithmetic against an
//! arbitrary-precision oracle (num-bigint) on 100,000 random cases, a share of
//! them at the extremes of every input's range. A case either agrees to the
//! bit or reports overflow exactly when the true value exceeds `u128`.

use kv::calc::{compute, Inputs, ScaleOverhead};
use kv::runs::Run;
use kv::{Dtype, KvError, LayerKind, LayerRun, ModelShape};
use num_bigint::BigUint;

/// splitmix64: deterministic, so a failure is reproducible from its case index.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Mostly small realistic values, sometimes the extremes.
    fn value(&mut self, min: u64, max: u64) -> u64 {
        match self.below(10) {
            0 => max,
            1 => min,
            2 => max.saturating_sub(self.below(3)).max(min),
            3 => min + self.below(max - min + 1),
            _ => (min + self.below(4096)).min(max),
        }
    }
}

fn big(v: u128) -> BigUint {
    BigUint::from(v)
}

fn ceil_div(a: &BigUint, b: &BigUint) -> BigUint {
    (a + b - BigUint::from(1u8)) / b
}

struct Oracle {
    plain: BigUint,
    logical: BigUint,
    allocated: BigUint,
    per_token: BigUint,
}

fn oracle(inputs: &Inputs) -> Oracle {
    let bits = big(inputs.kv_dtype.bits() as u128);
    let m = &inputs.model;
    let sum_t: BigUint = inputs.seqs.iter().map(|s| big(s.value as u128) * big(s.count as u128)).sum();
    let plain = big(2) * big(m.layers as u128) * big(m.kv_heads as u128) * big(m.head_dim as u128) * &bits * &sum_t;
    let mut logical = BigUint::from(0u8);
    let mut allocated = BigUint::from(0u8);
    let mut per_token = BigUint::from(0u8);
    let block = inputs.block as u128;
    for run in &m.runs {
        let elements = match run.kind {
            LayerKind::Mla { kv_lora_rank, qk_rope_head_dim } => big(kv_lora_rank as u128) + big(qk_rope_head_dim as u128),
            _ => big(2) * big(run.kv_heads as u128) * big(run.head_dim as u128),
        };
        let scale_per_token = match inputs.scale {
            Some(ScaleOverhead { bits, group }) => ceil_div(&elements, &big(group as u128)) * big(bits as u128),
            None => BigUint::from(0u8),
        };
        let per_layer_token = &elements * &bits + &scale_per_token;
        per_token += big(run.count as u128) * &elements * &bits;
        for s in &inputs.seqs {
            let kept = match run.kind {
                LayerKind::Sliding { window } => s.value.min(window),
                _ => s.value,
            } as u128;
            let rounded = kept.div_ceil(block) * block;
            logical += big(run.count as u128) * &per_layer_token * big(kept) * big(s.count as u128);
            allocated += big(run.count as u128) * &per_layer_token * big(rounded) * big(s.count as u128);
        }
    }
    Oracle { plain, logical, allocated, per_token }
}

fn random_inputs(rng: &mut Rng) -> Inputs {
    let n_runs = 1 + rng.below(3) as usize;
    let head_dim = rng.value(1, u32::MAX as u64) as u32;
    let mut runs = Vec::new();
    let mut layers: u64 = 0;
    for _ in 0..n_runs {
        let count = rng.value(1, (u32::MAX as u64) / 4);
        layers += count;
        let kind = match rng.below(3) {
            0 => LayerKind::Full,
            1 => LayerKind::Sliding { window: rng.value(1, u64::MAX) },
            _ => LayerKind::Mla {
                kv_lora_rank: rng.value(1, u32::MAX as u64) as u32,
                qk_rope_head_dim: rng.value(0, u32::MAX as u64) as u32,
            },
        };
        runs.push(LayerRun { kind, count, kv_heads: rng.value(1, u32::MAX as u64) as u32, head_dim });
    }
    let seqs = (0..1 + rng.below(3)).map(|_| Run { value: rng.value(1, u64::MAX), count: rng.value(1, u64::MAX) }).collect();
    Inputs {
        model: ModelShape { layers: layers as u32, kv_heads: runs[0].kv_heads, head_dim, runs },
        kv_dtype: Dtype::ALL[rng.below(6) as usize],
        scale: (rng.below(3) == 0)
            .then(|| ScaleOverhead { bits: [8, 16, 32][rng.below(3) as usize], group: rng.value(1, u32::MAX as u64) as u32 }),
        seqs,
        block: rng.value(1, u64::MAX),
        tp: 1,
        prefix: None,
        budget: None,
        vllm: None,
    }
}

#[test]
fn matches_arbitrary_precision_on_100k_cases() {
    let limit = big(u128::MAX);
    let mut rng = Rng(0x5eed_2026);
    let (mut agreed, mut overflowed) = (0u32, 0u32);
    for case in 0..100_000 {
        let inputs = random_inputs(&mut rng);
        let want = oracle(&inputs);
        match compute(&inputs) {
            Ok(r) => {
                agreed += 1;
                assert_eq!(big(r.logical.total_bits), want.logical, "case {case}: logical");
                assert_eq!(big(r.allocated.total_bits), want.allocated, "case {case}: allocated");
                assert_eq!(big(r.per_token_bits), want.per_token, "case {case}: per token");
                assert_eq!(big(r.formula_bytes), ceil_div(&want.plain, &big(8)), "case {case}: plain formula");
            }
            Err(KvError::Overflow { what }) => {
                overflowed += 1;
                let biggest = [&want.plain, &want.logical, &want.allocated].into_iter().max().unwrap().clone();
                assert!(biggest > limit, "case {case}: reported overflow of {what} but every true value fits");
            }
            Err(other) => panic!("case {case}: unexpected error {other}"),
        }
    }
    // Both outcomes must be exercised, or the test proves little.
    assert!(agreed > 10_000 && overflowed > 10_000, "agreed {agreed}, overflowed {overflowed}");
}

#[test]
fn seed_example_at_the_edges() {
    let mut inputs = Inputs::seed();
    inputs.seqs = vec![Run { value: u64::MAX, count: 1 }];
    inputs.model = ModelShape::uniform(1, 1, 1);
    inputs.kv_dtype = Dtype::Int4;
    // 2 × 1 × 1 × 1 × 4 bits × (2^64 − 1) tokens fits in u128.
    let r = compute(&inputs).unwrap();
    assert_eq!(r.logical.total_bits, 8 * u64::MAX as u128);
}
