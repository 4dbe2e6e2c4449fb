//! The tokenizer built from GGUF metadata (byte-level BPE or SentencePiece):
//! it builds or says why, and every id it returns names a token of the
//! vocabulary (an id past it would index past the embedding table). An
//! input starting with a 0 byte is a GGUF (the seeds, mutated byte by byte);
//! any other is a `TokenizerSpec` whose fields the fuzzer mutates one by one.
#![no_main]
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use workbench_fuzz::TokenizerSpec;

const TEXTS: [&str; 3] = ["Fix the failing test in src/parser.rs", "  two  spaces\tand\ttabs\n", "<start_of_turn>user ✓ 中文 😀 \u{0}"];

fuzz_target!(|data: &[u8]| {
    let (bytes, texts) = match data.split_first() {
        Some((0, gguf)) => (gguf.to_vec(), TEXTS.iter().map(|t| t.to_string()).collect::<Vec<_>>()),
        _ => match TokenizerSpec::arbitrary(&mut Unstructured::new(data)) {
            Ok(spec) => (spec.gguf(), vec![spec.text.clone()]),
            Err(_) => return,
        },
    };
    let Ok(ck) = router::gguf::Checkpoint::parse(&bytes, "fuzz.gguf") else { return };
    let vocab = ck.hparams.vocab;
    let Ok(tokenizer) = router::tokenizer::RouterTokenizer::from_gguf(&ck) else { return };
    for text in &texts {
        if let Ok(ids) = tokenizer.encode(text) {
            assert!(ids.iter().all(|&id| (id as usize) < vocab), "an id past the vocabulary of {vocab}");
        }
        let _ = tokenizer.encode_with_ends(text);
    }
});
