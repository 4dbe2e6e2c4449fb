//! The CLI as a script would use it: real process, real exit codes.

use std::process::Command;

fn kv_budget(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kv-budget")).args(args).output().expect("run kv-budget");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).expect("valid JSON")
}

#[test]
fn seed_query_as_json() {
    let (code, out, err) = kv_budget(&["--query", "layers=32&kv_heads=8&head_dim=128&kv_dtype=bf16&seqs=8192x4", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["logical_bytes"], 4_294_967_296u64);
    assert_eq!(v["per_token_bytes"], 131_072);
    assert_eq!(v["allocated_bytes"], 4_294_967_296u64);
    assert_eq!(v["logical"], "4.00 GiB");
    assert_eq!(v["report"]["formula"], "2 × 32 × 8 × 128 × 2 × 8192 × 4 = 4294967296 bytes");
}

#[test]
fn config_import_as_json() {
    let dir = std::env::temp_dir().join(format!("kv-budget-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(&path, r#"{"model_type":"qwen3","num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"hidden_size":1024,"torch_dtype":"bfloat16","sliding_window":null,"use_sliding_window":false}"#).unwrap();
    let (code, out, err) = kv_budget(&["--config", path.to_str().unwrap(), "--seqs", "4096x1", "--kv-dtype", "bf16", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["per_token_bytes"], 2 * 28 * 8 * 128 * 2);
    assert_eq!(v["logical_bytes"], 2 * 28 * 8 * 128 * 2 * 4096);
    assert_eq!(v["allocated_bytes"], 2 * 28 * 8 * 128 * 2 * 4096);
}

/// A hybrid preset: the recurrent state as its own term, vLLM's page in
/// the JSON and in the text, and capacity that counts the state.
#[test]
fn a_hybrid_preset_reports_its_state_and_vllm_page() {
    let (code, out, err) =
        kv_budget(&["--preset", "qwen3-next-80b-a3b", "--seqs", "8192x4", "--set", "gpu_gib=80", "--set", "tp=2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["logical_bytes"], 963_379_200u64);
    assert_eq!(v["report"]["hybrid_page"]["block"], 544);
    assert_eq!(v["report"]["tensor_parallel"]["per_gpu_logical_bytes"], 963_379_200u64 / 2);
    let state = &v["report"]["logical"]["terms"][0];
    assert!(state["label"].as_str().unwrap().contains("constant per sequence"), "{state}");
    assert!(v["query"].as_str().unwrap().contains("conv_state=3x8192"));
    let (code, out, err) = kv_budget(&["--preset", "jamba-v0.1", "--seqs", "4096"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("the attention block becomes 80 tokens"), "{out}");
    assert!(out.contains("Mamba state · 28 layers"), "{out}");
}

/// `--gguf` reads the bundled checkpoint's header (fetched by
/// scripts/fetch-assets.sh) and sizes it; a file that is not GGUF exits 1
/// naming it.
#[test]
fn a_gguf_header_fills_the_model() {
    let gguf = concat!(env!("CARGO_MANIFEST_DIR"), "/../../assets/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(std::path::Path::new(gguf).exists(), "{gguf} is missing: run scripts/fetch-assets.sh");
    let (code, out, err) = kv_budget(&["--gguf", gguf, "--seqs", "8192x1", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    // 2 × 30 layers × 3 KV heads × 64 × 2 bytes × 8,192 tokens.
    assert_eq!(v["logical_bytes"], 2 * 30 * 3 * 64 * 2 * 8192);
    let notes = v["import_notes"].as_array().unwrap();
    assert!(notes[0].as_str().unwrap().contains("of 98362432 bytes"), "{notes:?}");
    assert!(v["query"].as_str().unwrap().contains("weight_bytes=96576768"), "{}", v["query"]);
    let (code, _, err) = kv_budget(&["--gguf", concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--gguf") && err.contains("not the GGUF magic"), "{err}");
}

/// `--metrics` lays out the ledger against a scrape; a scrape without
/// the cache's configuration exits 1 naming what is missing.
#[test]
fn a_metrics_scrape_is_reconciled() {
    let dir = std::env::temp_dir().join(format!("kv-budget-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("metrics.txt");
    std::fs::write(
        &path,
        "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"False\",num_gpu_blocks=\"27000\"} 1.0\nvllm:kv_cache_usage_perc 0.02322222222222222\nvllm:num_requests_running 4.0\n",
    )
    .unwrap();
    let (code, out, err) =
        kv_budget(&["--preset", "llama-3.1-8b", "--seqs", "1000,2000,3000,4000", "--metrics", path.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let rows = v["ledger"]["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["label"] == "= blocks in use, by the metrics" && r["blocks"] == 627), "{rows:?}");
    assert!(!rows.iter().any(|r| r["source"] == "unattributed"), "{rows:?}");
    std::fs::write(&path, "vllm:kv_cache_usage_perc 0.5\n").unwrap();
    let (code, _, err) = kv_budget(&["--preset", "llama-3.1-8b", "--metrics", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no `vllm:cache_config_info` line"), "{err}");
}

#[test]
fn bad_input_names_the_field_and_fails() {
    // Exit code 2: the command line is wrong; 1: something failed while running.
    let (code, _, err) = kv_budget(&["--query", "layers=32&kv_heads=0&seqs=8192x4", "--json"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("kv_heads"), "{err}");
    let (code, _, err) = kv_budget(&["--config", "/nonexistent/config.json"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--config"), "{err}");
    let (code, _, err) = kv_budget(&["--query", "seqs=8192x4", "--kv-dtype", "fp7"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("kv_dtype"), "{err}");
    let (code, _, err) = kv_budget(&["--preset", "no-such-model"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no preset `no-such-model`"), "{err}");
    let (code, _, err) = kv_budget(&["--jsn"]);
    assert_eq!(code, 2, "{err}");
}

/// `--lengths` on the dataset's own results: OOD176's rows divided into
/// mean calls, the failed runs left out, and the table sized on the GPU's
/// budget; without a budget it says what is missing; a bad line is named.
#[test]
fn lengths_size_a_distribution_against_the_budget() {
    let results = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/coderouterbench/ood176_results_long.csv");
    let results = results.to_str().unwrap();
    let (code, out, err) = kv_budget(&["--preset", "llama-3.1-8b", "--set", "gpu_gib=80", "--lengths", results, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let d = &v["distribution"];
    assert_eq!((d["samples"].as_u64(), d["skipped_empty"].as_u64(), d["per_call"].as_bool()), (Some(1002), Some(406), Some(true)));
    let rows = d["rows"].as_array().unwrap();
    let labels: Vec<&str> = rows.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["mean", "p50", "p95", "p99", "max"]);
    let budget = v["report"]["budget"]["kv_budget_bytes_per_gpu"].as_u64().unwrap() as u128;
    for row in rows {
        // Llama 3.1 8B in bf16: 128 KiB a token, in blocks of 16.
        let tokens = row["retained_tokens"].as_u64().unwrap() as u128;
        let bytes = row["bytes_per_sequence"].as_u64().unwrap() as u128;
        if row["label"] != "mean" {
            assert_eq!(bytes, tokens.div_ceil(16) * 16 * 131_072, "{row}");
        }
        assert_eq!(row["sequences"].as_u64().unwrap() as u128, budget / bytes, "{row}");
    }
    let fits: Vec<u64> = rows.iter().map(|r| r["sequences"].as_u64().unwrap()).collect();
    assert!(fits[0] > fits[3] && fits[3] >= fits[4], "{fits:?}");

    let (code, _, err) = kv_budget(&["--query", "lengths=ood176", "--set", "gpu_gib=80"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pass its file, --lengths data/coderouterbench/ood176_results_long.csv"), "{err}");
    let (code, _, err) = kv_budget(&["--preset", "llama-3.1-8b", "--lengths", results]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--lengths: give a GPU budget too"), "{err}");
    let dir = std::env::temp_dir().join(format!("kv-budget-lengths-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "input,output\n10,5\n10,five\n").unwrap();
    let (code, _, err) = kv_budget(&["--preset", "llama-3.1-8b", "--set", "gpu_gib=80", "--lengths", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("line 3: output `five` is not a number"), "{err}");
}
