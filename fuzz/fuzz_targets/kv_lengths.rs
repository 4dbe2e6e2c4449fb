//! Pasted or opened length distributions (CSV or JSON), sized against a
//! budget: reading never panics, and whatever reads can be sized.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u32, &str)| {
    let (gib, text) = input;
    if let Ok(lengths) = kv::distribution::parse_lengths(text) {
        let _ = kv::distribution::capacity(&kv::Inputs::seed(), (gib as u128) << 30, &lengths);
    }
});
