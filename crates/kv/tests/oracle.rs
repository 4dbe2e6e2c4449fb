//! Property test: the calculator's checked `u128` arithmetic against an
//! arbitrary-precision oracle (num-bigint) on 100,000 proptest cases, a share
//! of them at the extremes of every input's range (a failure shrinks to a
//! small case). A case either agrees to the bit or reports overflow exactly
//! when the true value exceeds `u128`. Recurrent layers (a constant state
//! per sequence) and vLLM's paging of hybrid models are in the draw too.

// proptest is a native dev-dependency (the wasm32 lint pass builds tests too).
#![cfg(not(target_arch = "wasm32"))]

use kv::calc::{compute, Inputs, ScaleOverhead};
use kv::model::{RecurrentState, StateFamily};
use kv::runs::Run;
use kv::{Dtype, KvError, LayerKind, LayerRun, ModelShape};
use num_bigint::BigUint;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use std::cell::Cell;

/// Mostly small realistic values, sometimes the extremes of the range and
/// its neighbours: where checked arithmetic overflows or just fits.
fn edge(min: u64, max: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(max),
        1 => Just(min),
        1 => (0..3u64).prop_map(move |d| max.saturating_sub(d).max(min)),
        1 => min..=max,
        6 => (0..4096u64).prop_map(move |d| min.saturating_add(d).min(max)),
    ]
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
    let sequences: BigUint = inputs.seqs.iter().map(|s| big(s.count as u128)).sum();
    let state_bits = |s: &RecurrentState| {
        big(s.conv_rows as u128) * big(s.conv_channels as u128) * big(inputs.state_dtype.bits() as u128)
            + big(s.ssm_heads as u128) * big(s.ssm_rows as u128) * big(s.ssm_cols as u128) * big(inputs.ssm_dtype.bits() as u128)
    };
    // vLLM's hybrid page: with attention and recurrent layers, the block
    // grows to 16 × ⌈state ÷ (16 × one attention layer's token)⌉ and each
    // state takes a page of it.
    let attention_token = m
        .runs
        .iter()
        .find(|r| matches!(r.kind, LayerKind::Full | LayerKind::Sliding { .. }))
        .map(|r| big(2) * big(r.kv_heads as u128) * big(r.head_dim as u128) * &bits);
    let largest_state = m
        .runs
        .iter()
        .filter_map(|r| match &r.kind {
            LayerKind::Recurrent { state, .. } => Some(state_bits(state)),
            _ => None,
        })
        .max();
    let mut block = big(inputs.block as u128);
    if let (Some(token), Some(state)) = (&attention_token, &largest_state) {
        let aligned = big(16) * ceil_div(state, &(big(16) * token));
        block = block.max(aligned);
    }
    for run in &m.runs {
        let elements = match run.kind {
            LayerKind::Mla { kv_lora_rank, qk_rope_head_dim } => big(kv_lora_rank as u128) + big(qk_rope_head_dim as u128),
            LayerKind::Recurrent { state, .. } => {
                let one = state_bits(&state);
                let page = match &attention_token {
                    Some(token) => (&block * token).max(one.clone()),
                    None => one.clone(),
                };
                logical += big(run.count as u128) * one * &sequences;
                allocated += big(run.count as u128) * page * &sequences;
                continue;
            }
            LayerKind::Stateless => continue,
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
            let rounded = ceil_div(&big(kept), &block) * &block;
            logical += big(run.count as u128) * &per_layer_token * big(kept) * big(s.count as u128);
            allocated += big(run.count as u128) * &per_layer_token * rounded * big(s.count as u128);
        }
    }
    Oracle { plain, logical, allocated, per_token }
}

fn layer_run(head_dim: u32) -> impl Strategy<Value = LayerRun> {
    let u32_max = u32::MAX as u64;
    let kind = prop_oneof![
        Just(LayerKind::Full),
        edge(1, u64::MAX).prop_map(|window| LayerKind::Sliding { window }),
        (edge(1, u32_max), edge(0, u32_max))
            .prop_map(|(rank, rope)| LayerKind::Mla { kv_lora_rank: rank as u32, qk_rope_head_dim: rope as u32 }),
        recurrent(),
        Just(LayerKind::Stateless),
    ];
    (edge(1, u32_max / 4), kind, edge(1, u32_max)).prop_map(move |(count, kind, kv_heads)| LayerRun {
        kind,
        count,
        kv_heads: kv_heads as u32,
        head_dim,
    })
}

/// A recurrent layer's state. Its sizes stay below 2^20 so that vLLM's block
/// for it (a `u64`, like every block) cannot overflow while the bytes still
/// fit: the oracle's claim, overflow exactly past `u128`, stays exact.
fn recurrent() -> impl Strategy<Value = LayerKind> {
    let size = || edge(0, 1 << 20).prop_map(|v| v as u32);
    (any::<bool>(), size(), size(), size(), size(), size()).prop_map(|(linear, conv_rows, conv_channels, ssm_heads, ssm_rows, ssm_cols)| {
        LayerKind::Recurrent {
            family: if linear { StateFamily::Linear } else { StateFamily::Mamba },
            state: RecurrentState { conv_rows, conv_channels, ssm_heads, ssm_rows, ssm_cols },
        }
    })
}

fn inputs() -> impl Strategy<Value = Inputs> {
    let u32_max = u32::MAX as u64;
    let runs = edge(1, u32_max).prop_flat_map(|head_dim| proptest::collection::vec(layer_run(head_dim as u32), 1..=3));
    let seqs = proptest::collection::vec((edge(1, u64::MAX), edge(1, u64::MAX)).prop_map(|(value, count)| Run { value, count }), 1..=3);
    let scale = proptest::option::weighted(
        1.0 / 3.0,
        (proptest::sample::select(vec![8u32, 16, 32]), edge(1, u32_max))
            .prop_map(|(bits, group)| ScaleOverhead { bits, group: group as u32 }),
    );
    let dtype = || proptest::sample::select(Dtype::ALL.to_vec());
    (runs, seqs, (dtype(), dtype(), dtype()), scale, edge(1, u64::MAX)).prop_map(
        |(runs, seqs, (kv_dtype, state_dtype, ssm_dtype), scale, block)| {
            let layers: u64 = runs.iter().map(|r| r.count).sum();
            Inputs {
                model: ModelShape { layers: layers as u32, kv_heads: runs[0].kv_heads, head_dim: runs[0].head_dim, runs },
                kv_dtype,
                state_dtype,
                ssm_dtype,
                scale,
                seqs,
                block,
                tp: 1,
                prefix: None,
                budget: None,
                vllm: None,
            }
        },
    )
}

#[test]
fn matches_arbitrary_precision_on_100k_cases() {
    let limit = big(u128::MAX);
    let (agreed, overflowed) = (Cell::new(0u32), Cell::new(0u32));
    let mut runner = TestRunner::new(ProptestConfig::with_cases(100_000));
    let outcome = runner.run(&inputs(), |inputs| {
        let want = oracle(&inputs);
        match compute(&inputs) {
            Ok(r) => {
                agreed.set(agreed.get() + 1);
                prop_assert_eq!(big(r.logical.total_bits), want.logical, "logical");
                prop_assert_eq!(big(r.allocated.total_bits), want.allocated, "allocated");
                prop_assert_eq!(big(r.per_token_bits), want.per_token, "per token");
                prop_assert_eq!(big(r.formula_bytes), ceil_div(&want.plain, &big(8)), "plain formula");
            }
            Err(KvError::Overflow { what }) => {
                overflowed.set(overflowed.get() + 1);
                let biggest = [&want.plain, &want.logical, &want.allocated].into_iter().max().unwrap().clone();
                prop_assert!(biggest > limit, "reported overflow of {} but every true value fits", what);
            }
            Err(other) => prop_assert!(false, "unexpected error {}", other),
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
    // Both outcomes must be exercised, or the test proves little.
    let (agreed, overflowed) = (agreed.get(), overflowed.get());
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
