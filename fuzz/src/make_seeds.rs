//! Writes the committed seed corpus (`fuzz/seeds/<target>/`): small real
//! examples of each input, so the fuzzer starts from valid structure.
//! `cargo run --release --bin make-seeds` (from `fuzz/`) rewrites them.

use std::io::Cursor;
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use router::synthetic::{self, SyntheticSpec};
use workbench_fuzz::TokenizerSpec;

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds").join(target);
    std::fs::create_dir_all(&dir).expect("seed folder");
    std::fs::write(dir.join(name), bytes).expect("seed file");
}

/// A SentencePiece vocabulary with byte fallback: control tokens, the 256
/// byte pieces, letters with and without `▁`, and a few merged pieces.
fn sentencepiece(text: &str) -> TokenizerSpec {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<bos>".into(), "<eos>".into(), "<start_of_turn>".into()];
    let mut types = vec![2, 3, 3, 3];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.extend([6; 256]);
    for piece in ["▁", "e", "t", "a", "s", "r", "▁t", "▁a", "▁s", "er", "▁the", "te", "st", "▁te", "▁test", "▁parser"] {
        tokens.push(piece.into());
        types.push(1);
    }
    let scores = (0..tokens.len()).map(|i| -(i as f32)).collect();
    TokenizerSpec {
        sentencepiece: true,
        pre: 0,
        tokens,
        scores,
        types,
        merges: Vec::new(),
        add_bos: Some(true),
        bos: 1,
        add_space_prefix: Some(false),
        chat_template: None,
        text: text.into(),
    }
}

/// A byte-level BPE vocabulary (GPT-2's byte-to-character map) with merges.
fn byte_level(text: &str, pre: u8) -> TokenizerSpec {
    let mut bytes: Vec<u32> = (b'!'..=b'~').chain(0xA1..=0xAC).chain(0xAE..=0xFF).map(u32::from).collect();
    let mut extra = 0;
    let mut tokens: Vec<String> = Vec::new();
    for b in 0..=255u32 {
        if !bytes.contains(&b) {
            bytes.push(b);
            tokens.push(char::from_u32(256 + extra).unwrap().to_string());
            extra += 1;
        } else {
            tokens.push(char::from_u32(b).unwrap().to_string());
        }
    }
    let merges = ["Ġ t", "e s", "Ġt es", "Ġtes t", "i x", "f ix"];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    tokens.push("<|im_start|>".into());
    TokenizerSpec {
        sentencepiece: false,
        pre,
        tokens,
        scores: Vec::new(),
        types: Vec::new(),
        merges: merges.iter().map(|m| m.to_string()).collect(),
        add_bos: None,
        bos: 0,
        add_space_prefix: None,
        chat_template: Some("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}".into()),
        text: text.into(),
    }
}

/// A tiny synthetic checkpoint of `architecture` with `tokenizer` in its
/// metadata, so `Router::load` gets past the tokenizer to the descriptors.
fn checkpoint(architecture: &'static str, weight_type: GgmlDType, tokenizer: &TokenizerSpec) -> Vec<u8> {
    let spec = SyntheticSpec {
        layers: 1,
        hidden: 64,
        heads: 2,
        kv_heads: 1,
        head_dim: 32,
        ffn: 128,
        vocab: tokenizer.tokens.len(),
        ..SyntheticSpec::of(architecture, weight_type)
    };
    let weights = synthetic::write(&spec).expect("synthetic checkpoint");
    let mut reader = Cursor::new(&weights);
    let content = gguf_file::Content::read(&mut reader).expect("its own file reads");
    let tensors: Vec<(String, QTensor)> =
        content.tensor_infos.keys().map(|name| (name.clone(), content.tensor(&mut reader, name, &Device::Cpu).expect("tensor"))).collect();
    let tokenizer_meta = gguf_file::Content::read(&mut Cursor::new(tokenizer.gguf())).expect("tokenizer metadata").metadata;
    let mut meta: Vec<(String, Value)> = content.metadata.into_iter().collect();
    meta.extend(tokenizer_meta.into_iter().filter(|(k, _)| k.starts_with("tokenizer.")));
    meta.sort_by(|a, b| a.0.cmp(&b.0));
    let meta_refs: Vec<(&str, &Value)> = meta.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut out = Cursor::new(Vec::new());
    gguf_file::write(&mut out, &meta_refs, &tensor_refs).expect("writing to memory");
    out.into_inner()
}

fn main() {
    for (name, query) in [
        ("seed-example", "layers=32&kv_heads=8&head_dim=128&kv_dtype=bf16&seqs=8192x4"),
        ("mla", "preset=deepseek-v3&seqs=32768x1"),
        ("sliding", "preset=gemma-3-27b&seqs=32768&kv_dtype=bf16"),
        ("budget-tp", "preset=llama-3.1-70b&gpu_gib=80&tp=4&seqs=4096x8,32768x2&block=16"),
        ("embed", "embed=kv&preset=qwen3-0.6b&seqs=4096x8"),
    ] {
        put("kv_query", name, query.as_bytes());
    }
    put(
        "kv_config_import",
        "llama",
        br#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"torch_dtype":"bfloat16"}"#,
    );
    put(
        "kv_config_import",
        "qwen3",
        br#"{"model_type":"qwen3","num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"hidden_size":1024,"head_dim":128,"use_sliding_window":false,"sliding_window":null}"#,
    );
    put(
        "kv_config_import",
        "deepseek-mla",
        br#"{"model_type":"deepseek_v3","num_hidden_layers":61,"num_attention_heads":128,"num_key_value_heads":128,"hidden_size":7168,"kv_lora_rank":512,"qk_rope_head_dim":64}"#,
    );
    put(
        "kv_config_import",
        "gemma3",
        br#"{"model_type":"gemma3_text","num_hidden_layers":62,"num_attention_heads":32,"num_key_value_heads":16,"head_dim":128,"hidden_size":5376,"sliding_window":1024,"sliding_window_pattern":6}"#,
    );
    put(
        "kv_vllm_log",
        "v1",
        b"\x10\x00\x00\x00\x00\x00\x00\x00INFO 05-01 12:00:00 [gpu_worker.py:227] Available KV cache memory: 59.95 GiB\nINFO [kv_cache_utils.py:636] GPU KV cache size: 491,008 tokens\nINFO [kv_cache_utils.py:637] Maximum concurrency for 8,192 tokens per request: 59.94x",
    );
    put("kv_lengths", "csv", b"\x50\x00\x00\x00task_id,in_tok,out_tok,calls\n\"a, b\",205845,3128,17\nb,0,0,0\n");
    put("kv_lengths", "json", b"\x50\x00\x00\x00[{\"input\": 1200, \"output\": 300}, {\"isl\": 8000, \"osl\": 450}]");
    put(
        "kv_lengths",
        "jsonl",
        b"\x50\x00\x00\x00{\"prompt_tokens\": 10, \"completion_tokens\": 5}\n\n{\"prompt_tokens\": 7, \"completion_tokens\": 0}",
    );
    put(
        "kv_vllm_log",
        "v0",
        b"\x10\x00\x00\x00\x00\x00\x00\x00INFO 01-01 00:00:00 llm_engine.py:340] # GPU blocks: 30688, # CPU blocks: 2048",
    );

    let native = include_str!("../../reports/router-latency.cpu.json");
    let report: bench::report::Report = bench::share::parse_report(native, "router-latency.cpu.json").expect("the committed report reads");
    put("share_link", "native-report", bench::share::encode(&report).as_bytes());
    put("share_link", "damaged", b"r1.AAAA");

    for (name, fragment) in [
        ("defaults", "router"),
        ("settings", "router&mode=economy&iters=25&warmup=5&lengths=15,256,1024&system=You%20route.&user=Fix%20the%20test"),
        ("widget", "router&lengths=15,64&iters=2&warmup=1"),
        ("shared", "router&result=r1.abc-_"),
    ] {
        put("router_fragment", name, fragment.as_bytes());
    }
    put("pool_file", "coderouterbench", workbench_fuzz::POOL_YAML);
    // The committed head is 363 KB; a small one of the same shape lets the
    // fuzzer mutate every field within its budget.
    put("head_file", "small", small_head().as_bytes());

    let text = "<start_of_turn>user\nFix the failing test in src/parser.rs ✓ 中文<end_of_turn>";
    for (name, bytes) in [
        ("llama-q8_0", checkpoint("llama", GgmlDType::Q8_0, &byte_level(text, 1))),
        ("qwen3-q4_1", checkpoint("qwen3", GgmlDType::Q4_1, &byte_level(text, 2))),
        ("gemma3-q8_0", checkpoint("gemma3", GgmlDType::Q8_0, &sentencepiece(text))),
    ] {
        // A seed that does not load would leave the fuzzer outside the router.
        let assets = router::RouterAssets {
            gguf: &bytes,
            gguf_name: name,
            gguf_sha256: None,
            tokenizer_json: None,
            pool_yaml: workbench_fuzz::POOL_YAML,
            pool_name: "pool.coderouterbench.yaml",
        };
        let loaded = router::Router::load(&assets, router::RouterConfig::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        loaded.decide(&router::Conversation::user(text), None).unwrap_or_else(|e| panic!("{name}: {e}"));
        put("gguf", name, &bytes);
    }
    // The tokenizer target reads a GGUF after a 0 byte (its other inputs are
    // structured by `arbitrary`).
    for (name, spec) in
        [("sentencepiece", sentencepiece(text)), ("byte-level-smollm", byte_level(text, 1)), ("byte-level-qwen2", byte_level(text, 2))]
    {
        put("gguf_tokenizer", name, &[&[0u8][..], &spec.gguf()].concat());
    }
    println!("seeds written under {}/seeds", env!("CARGO_MANIFEST_DIR"));
}

/// A valid head of two candidates over 4 features and 3 training tasks.
fn small_head() -> String {
    use router::head::{quantize_rows, Head, HeadCandidate, HeadEvaluation, TrainingSet, TrainingTask, HEAD_SCHEMA};
    let rows = vec![vec![1.0, -0.5, 0.25, 0.0], vec![0.0, 1.0, -1.0, 0.5], vec![-0.3, 0.2, 0.9, -1.0]];
    let (features_i8, feature_scales) = quantize_rows(&rows);
    let head = Head {
        schema: HEAD_SCHEMA.into(),
        backbone_checkpoint_id: "gguf-00000000".into(),
        hidden: 4,
        pooling: router::Pooling::Last,
        after_layers: Some(2),
        cost_term: router::CostTerm::Predicted,
        router_max_tokens: 1024,
        truncation: router::TruncationSide::Left,
        modes: [("quality".to_string(), 0.0), ("balanced".to_string(), 0.1)].into_iter().collect(),
        candidates: ["a", "b"]
            .iter()
            .enumerate()
            .map(|(i, id)| HeadCandidate {
                id: id.to_string(),
                weights: vec![0.5, -0.25, i as f32, 1.0],
                bias: -0.5,
                mean_cost_usd: 1.0 + i as f64,
                p_sigma: 0.05,
                cost_model: Some(router::head::CostModel { weights: vec![0.1, 0.0, -0.2, 0.3], bias: -1.0 - i as f32, smearing: 1.2 }),
            })
            .collect(),
        trained_on: "fuzz seed".into(),
        evaluation: HeadEvaluation::default(),
        training: TrainingSet {
            mean: vec![0.0; 4],
            scale: vec![1.0; 4],
            novelty_percentile: 5.0,
            novelty_threshold: 0.2,
            tasks: (0..3)
                .map(|t| TrainingTask {
                    id: format!("t{t}"),
                    excerpt: "Fix the test".into(),
                    resolved: vec![t % 2 == 0, true],
                    cost_usd: vec![0.5, 1.5],
                })
                .collect(),
            features_i8,
            feature_scales,
        },
    };
    let text = serde_json::to_string(&head).expect("a head serialises");
    router::LoadedHead::from_json(text.as_bytes(), "seed").expect("the seed reads");
    text
}
