//! Pasted vLLM start-up lines, with any block size.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u64, &str)| {
    let (block, text) = input;
    if let Ok(observation) = kv::vllm::parse(text, block) {
        let _ = observation.tokens();
    }
});
