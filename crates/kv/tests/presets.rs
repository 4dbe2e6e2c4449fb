//! Every preset through the same path as the page: a form filled from its
//! patch, validated and computed, with known per-token figures checked.

use kv::presets::{find, PRESETS};
use kv::{compute, units, Form};

fn report(id: &str, seqs: &str) -> kv::Report {
    let mut form = Form::default();
    form.apply(&find(id).unwrap().patch());
    form.set("seqs", seqs);
    compute(&form.validate().unwrap_or_else(|e| panic!("{id}: {e:?}"))).unwrap()
}

#[test]
fn every_preset_validates() {
    assert!(PRESETS.len() >= 10);
    for p in PRESETS {
        let r = report(p.id, "4096x2");
        assert!(r.logical_bytes > 0, "{}", p.id);
        assert!(p.source.starts_with("https://huggingface.co/"), "{}", p.id);
    }
}

#[test]
fn known_per_token_figures() {
    // Llama-3.1-8B: 2 × 32 × 8 × 128 × 2 = 128 KiB per token.
    assert_eq!(report("llama-3.1-8b", "1").per_token_bytes, 131_072);
    // DeepSeek-V3 MLA: 61 × 576 × 2 = 70,272 bytes per token.
    assert_eq!(report("deepseek-v3", "1").per_token_bytes, 70_272);
    // Gemma-3-27B at 32k: 10 global layers keep 32,768 tokens, 52 local keep 1,024.
    let r = report("gemma-3-27b", "32768");
    let per = 2 * 16 * 128 * 2u128;
    assert_eq!(r.logical_bytes, per * (10 * 32_768 + 52 * 1_024));
    assert_eq!(units::binary(r.logical_bytes), "2.91 GiB");
    // gpt-oss-20b: 12 sliding layers keep 128 tokens.
    let r = report("gpt-oss-20b", "8192");
    assert_eq!(r.logical_bytes, 2 * 8 * 64 * 2 * (12 * 8192 + 12 * 128));
}
