//! wasm-bindgen tests that need a real browser: they run in headless Chromium
//! (`scripts/test.sh` sets `CHROMEDRIVER`). Native unit tests cover the
//! arithmetic; these cover what only a browser can say.

#![cfg(target_arch = "wasm32")]

use std::time::Duration;

use kv::{Evaluation, Form};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
fn u128_arithmetic_in_wasm32_matches_native() {
    let (form, _) = Form::from_query("layers=32&kv_heads=8&head_dim=128&kv_dtype=bf16&seqs=8192x4");
    let Evaluation::Ready { report, .. } = kv::evaluate(&form) else { panic!("seed example must be valid") };
    assert_eq!(report.formula, "2 × 32 × 8 × 128 × 2 × 8192 × 4 = 4294967296 bytes");
    assert_eq!(kv::units::binary(report.logical_bytes), "4.00 GiB");
    // Near the top of u128, where a 32-bit target could go wrong.
    let (form, _) = Form::from_query("layers=4294967295&kv_heads=4294967295&head_dim=4294967295&kv_dtype=fp32&seqs=1");
    let Evaluation::Ready { report, .. } = kv::evaluate(&form) else { panic!("fits in u128") };
    assert_eq!(report.logical_bytes, 2 * 4 * (u32::MAX as u128).pow(3));
}

#[wasm_bindgen_test]
fn browser_url_search_params_reads_our_links_as_we_do() {
    let mut form = Form::default();
    form.set("seqs", "2048,4096,8192x2");
    form.set("vllm", "GPU KV cache size: 1,000 tokens & more + 5% = ok\n#2");
    form.set("layer_types", "slidingx5,full");
    let query = form.to_query();
    let params = web_sys::UrlSearchParams::new_with_str(&query).unwrap();
    for name in ["seqs", "vllm", "layer_types", "layers"] {
        assert_eq!(params.get(name).as_deref(), Some(form.get(name)), "{name}");
    }
    // And the other way: what the browser writes, we read.
    let browser_written = web_sys::UrlSearchParams::new().unwrap();
    browser_written.append("vllm", "a+b & c=d → é");
    browser_written.append("seqs", "100,200x3");
    let (back, warnings) = Form::from_query(&String::from(browser_written.to_string()));
    assert!(warnings.is_empty());
    assert_eq!(back.get("vllm"), "a+b & c=d → é");
    assert_eq!(back.get("seqs"), "100,200x3");
}

#[wasm_bindgen_test]
fn replace_query_changes_the_address_without_a_history_entry() {
    let history = web_sys::window().unwrap().history().unwrap();
    let before = history.length().unwrap();
    workbench::browser::replace_query("layers=7&seqs=1x2");
    assert_eq!(workbench::browser::current_query(), "layers=7&seqs=1x2");
    assert_eq!(history.length().unwrap(), before);
}

#[wasm_bindgen_test]
async fn the_mounted_page_shows_the_linked_figures() {
    workbench::browser::replace_query("preset=deepseek-v3&seqs=32768x1");
    let document = web_sys::window().unwrap().document().unwrap();
    let host: web_sys::HtmlElement = document.create_element("div").unwrap().unchecked_into();
    document.body().unwrap().append_child(&host).unwrap();
    let handle = leptos::mount::mount_to(host.clone(), workbench::App);
    gloo_timers::future::sleep(Duration::from_millis(50)).await;
    let text = |id: &str| host.query_selector(&format!("[data-testid={id}]")).unwrap().map(|e| e.text_content().unwrap_or_default());
    assert_eq!(text("per-token").as_deref(), Some("68.63 KiB"));
    assert_eq!(text("logical-total").as_deref(), Some("2.14 GiB"));
    // The page rewrote the address into the full, canonical link.
    assert!(workbench::browser::current_query().contains("kv_lora_rank=512"));
    drop(handle);
}

use wasm_bindgen::JsCast;
