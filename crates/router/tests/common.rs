//! Shared helpers for the router's tests: the assets fetched by
//! scripts/fetch-assets.sh (the tests fail with a clear message without them).

#![allow(dead_code)]

use std::path::PathBuf;

pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn asset(name: &str) -> Vec<u8> {
    let path = workspace().join("assets").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}. Run scripts/fetch-assets.sh (scripts/test.sh does) first.", path.display()))
}

pub fn smollm2() -> Vec<u8> {
    asset("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Gemma 3 270M (Q4_K_M), Gemma terms: fetched on request by
/// `scripts/fetch-assets.sh --gemma` (scripts/test.sh asks for it).
pub fn gemma3() -> Vec<u8> {
    let path = workspace().join("assets").join(GEMMA3_FILE);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}. Run scripts/fetch-assets.sh --gemma (scripts/test.sh does) first.", path.display()))
}

pub const GEMMA3_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

pub fn pool_yaml() -> Vec<u8> {
    std::fs::read(workspace().join("configs/pool.coderouterbench.yaml")).expect("default pool file")
}

/// The bundled SmolLM2 checkpoint with the default pool, loaded with `config`.
pub fn smollm2_router(config: router::RouterConfig) -> router::Router {
    let gguf = smollm2();
    let pool = pool_yaml();
    let assets = router::RouterAssets {
        gguf: &gguf,
        gguf_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256: None,
        tokenizer_json: None,
        pool_yaml: &pool,
        pool_name: "pool.coderouterbench.yaml",
    };
    router::Router::load(&assets, config).unwrap()
}
