//! A user's GGUF, the whole way a page takes it: the bounds-checked walk and
//! the hyper-parameters, then (when it parses) the router built from it,
//! weights, tokenizer from its metadata and the pool's descriptors, and one
//! decision. Seeds are small synthetic checkpoints (`make-seeds`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use router::router::{RouterAssets, RouterConfig};

fuzz_target!(|bytes: &[u8]| {
    let Ok(ck) = router::gguf::Checkpoint::parse(bytes, "fuzz.gguf") else { return };
    let _ = ck.hparams.flop_model();
    drop(ck);
    let assets = RouterAssets {
        gguf: bytes,
        gguf_name: "fuzz.gguf",
        gguf_sha256: None,
        tokenizer_json: None,
        pool_yaml: workbench_fuzz::POOL_YAML,
        pool_name: "pool.coderouterbench.yaml",
    };
    let Ok(router) = router::Router::load(&assets, RouterConfig::default()) else { return };
    let _ = router.decide(&router::Conversation::user("Fix the failing test in src/parser.rs"), None);
});
