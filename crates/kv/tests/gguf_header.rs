//! The calculator's model read from GGUF headers: the two checkpoints the
//! workbench ships (fetched by `scripts/fetch-assets.sh`, Gemma 3 with
//! `--gemma`), read from their first bytes only and compared field by field
//! with the published `config.json` they were converted from; and the
//! router's malformed checkpoints, refused with the reason the router gives.

use std::io::Read;
use std::path::{Path, PathBuf};

use kv::Form;

fn asset(name: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets").join(name);
    path.exists().then_some(path)
}

/// Reads a header as the page does: slice by slice from the start.
fn header_of(path: &Path) -> (gguf::Header, u64) {
    let len = std::fs::metadata(path).unwrap().len();
    gguf::read_header_from(len, 1 << 20, 64 << 20, |n| {
        let mut bytes = Vec::new();
        std::fs::File::open(path)?.take(n).read_to_end(&mut bytes)?;
        Ok::<_, std::io::Error>(bytes)
    })
    .unwrap()
}

fn imported(path: &Path) -> (Form, kv::config_import::Imported, u64, u64) {
    let (header, read) = header_of(path);
    let imported = kv::gguf_import::import(&header).unwrap();
    let mut form = Form::default();
    form.apply(&imported.patch);
    (form, imported, read, header.file_len)
}

/// SmolLM2-135M-Instruct: its config.json has 30 layers, 9 heads, 3 KV
/// heads, hidden 576 (d_head 64), all full attention: the preset's fields.
#[test]
fn smollm2_header_matches_its_config() {
    let Some(path) = asset("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        panic!("assets/SmolLM2-135M-Instruct.Q4_1.gguf is missing: run scripts/fetch-assets.sh");
    };
    let (form, imported, read, len) = imported(&path);
    for (field, want) in [("layers", "30"), ("kv_heads", "3"), ("head_dim", "64"), ("layer_types", ""), ("window", "")] {
        assert_eq!(form.get(field), want, "{field}");
    }
    let preset = kv::presets::find("smollm2-135m").unwrap();
    assert_eq!(form.get("params"), preset.params.to_string(), "every tensor's elements: the published parameter count");
    assert!(read < len / 10, "read {read} of {len} bytes: the header, not the weights");
    assert!(imported.notes.iter().any(|n| n.contains("Q4_1")), "{:?}", imported.notes);
    assert!(form.validate().is_ok());
}

/// Gemma 3 270M: config.json has 18 layers, 4 heads, 1 KV head, head_dim
/// 256, sliding_window 512 and the pattern of five local layers then one
/// global (llama.cpp keeps that pattern in its code, which the note says).
#[test]
fn gemma3_header_matches_its_config() {
    let Some(path) = asset("gemma-3-270m-q4_k_m.gguf") else {
        eprintln!("assets/gemma-3-270m-q4_k_m.gguf is absent (fetch-assets.sh --gemma): skipped");
        return;
    };
    let (form, imported, read, len) = imported(&path);
    for (field, want) in [
        ("layers", "18"),
        ("kv_heads", "1"),
        ("head_dim", "256"),
        ("layer_types", "slidingx5,full,slidingx5,full,slidingx5,full"),
        ("window", "512"),
    ] {
        assert_eq!(form.get(field), want, "{field}");
    }
    assert!(imported.notes.iter().any(|n| n.contains("llama.cpp's code makes every 6th layer global")), "{:?}", imported.notes);
    assert!(read < len / 10, "read {read} of {len} bytes");
    // The budget counts the file's exact weight bytes, not parameters × a dtype.
    let weight_bytes: u128 = form.get("weight_bytes").parse().unwrap();
    let mut with_gpu = form.clone();
    with_gpu.set("gpu_gib", "1");
    let report = kv::compute(&with_gpu.validate().unwrap()).unwrap();
    assert_eq!(report.budget.unwrap().weight_bytes_total, weight_bytes);
}

/// The router's malformed corpus, read as headers of files of their own
/// length: each refused with the message the router's loader gives (one
/// reader), the unsupported architecture and quant type aside (those are
/// the router's policy, not the header's).
#[test]
fn malformed_headers_are_refused_by_name() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../router/tests/malformed");
    let mut seen = 0;
    for entry in std::fs::read_dir(&folder).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&path).unwrap();
        let result = gguf::read_header(&bytes, bytes.len() as u64);
        match name.as_str() {
            // The calculator sizes any architecture whose keys it finds:
            // this one is llama-shaped under another name.
            "unsupported-architecture.gguf" => {
                let imported = kv::gguf_import::import(&result.unwrap()).unwrap();
                assert_eq!(imported.model, "synthetic-mamba");
            }
            "unsupported-quant-type.gguf" => assert!(result.is_ok(), "{name}: Q8_1 is sized, only the router cannot compute it"),
            _ => {
                let e = result.unwrap_err().to_string();
                let want = match name.as_str() {
                    "bad-magic.gguf" => "not the GGUF magic",
                    "unknown-version.gguf" => "GGUF version 4",
                    "impossibly-large-tensor.gguf" => "impossibly large",
                    "misaligned-tensor.gguf" => "not a multiple of the alignment",
                    "overlapping-tensors.gguf" => "overlap",
                    _ => "truncated",
                };
                assert!(e.contains(want), "{name}: want {want:?} in {e:?}");
            }
        }
        seen += 1;
    }
    assert_eq!(seen, 12);
}

/// A header with an architecture and nothing else names the missing key;
/// a key of the wrong type names itself.
#[test]
fn a_header_without_the_model_keys_names_them() {
    fn header(entries: &[(&str, u32, Vec<u8>)]) -> gguf::Header {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (key, type_id, value) in entries {
            b.extend_from_slice(&(key.len() as u64).to_le_bytes());
            b.extend_from_slice(key.as_bytes());
            b.extend_from_slice(&type_id.to_le_bytes());
            b.extend_from_slice(value);
        }
        gguf::read_header(&b, b.len() as u64).unwrap()
    }
    let string = |s: &str| [(s.len() as u64).to_le_bytes().to_vec(), s.as_bytes().to_vec()].concat();
    let e = kv::gguf_import::import(&header(&[("general.architecture", 8, string("llama"))])).unwrap_err().to_string();
    assert_eq!(e, "GGUF: `llama.block_count` is missing");
    let e = kv::gguf_import::import(&header(&[("general.architecture", 8, string("llama")), ("llama.block_count", 8, string("32"))]))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "GGUF: `llama.block_count` is not a whole number");
    let e = kv::gguf_import::import(&header(&[("general.architecture", 4, 7u32.to_le_bytes().to_vec())])).unwrap_err().to_string();
    assert_eq!(e, "GGUF: `general.architecture` is missing or not a string");
}
