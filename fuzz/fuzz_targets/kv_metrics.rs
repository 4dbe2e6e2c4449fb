//! A vLLM /metrics scrape the user pastes: any text reads into samples and
//! named skipped lines, and the metrics found reconcile against the seed
//! example's figures without a panic (any block size, any block count).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let scrape = kv::reconcile::parse_scrape(text);
    if let Ok(metrics) = kv::reconcile::vllm_metrics(&scrape) {
        let inputs = kv::Form::default().validate().expect("the seed example is valid");
        let report = kv::compute(&inputs).expect("the seed example computes");
        let _ = kv::reconcile::reconcile(&inputs, &report, &metrics);
    }
});
