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
