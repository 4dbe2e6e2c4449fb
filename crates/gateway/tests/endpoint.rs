//! The OpenAI-compatible endpoint on the loopback address, on the bundled
//! SmolLM2 checkpoint (scripts/test.sh fetches it first): a streamed answer
//! is the engine's own greedy answer, refusals have OpenAI's shape and name
//! the field, a client that leaves frees its sequence and K/V before the
//! next iteration, `auto` is routed and says so, and the load generator
//! accounts for every request with note 06's decomposition matching its
//! own clock.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use bench::client_run::Decomposition;
use bench_cli::cli::PrecisionArg;
use bench_cli::RouterFlags;
use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use gateway::client::{replay, Planned, ReplaySettings};
use gateway::engine::{EngineConfig, EngineHandle};
use gateway::openai::{ChatChunk, ChatCompletion, Defaults, ErrorBody};
use gateway::ListenOptions;
use router::generate::generate;
use router::sampling::SamplingParams;
use router::{Conversation, Router};
use serving::batching::{BatchSettings, Memory, Mixing};
use serving::generation::{GenOutcome, GenSettings};

const MODEL: &str = "smollm2";
const BODY_LIMIT: usize = 64 * 1024;

fn root(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

fn load() -> Router {
    let flags = RouterFlags {
        pool: root(bench_cli::DEFAULT_POOL),
        checkpoint: root(bench_cli::DEFAULT_CHECKPOINT),
        tokenizer: None,
        mode: None,
        precision: PrecisionArg::Int8,
        // Named: the tests run from the crate's folder, where the default
        // (reports/ under the working directory) is not.
        scoring: bench_cli::cli::ScoringArg::Trained,
        head: Some(root("reports/head.smollm2-135m.json")),
    };
    flags.load().expect("the bundled checkpoint (scripts/setup.sh fetches it)").router
}

fn settings(budget_blocks: usize) -> GenSettings {
    GenSettings {
        batch: BatchSettings { budget_blocks, max_running: 8, mixing: Mixing::Chunked { token_budget: 64 }, memory: Memory::Recompute },
        timeout_ms: 30_000.0,
        warmup_ms: 0.0,
        drain_ms: f64::INFINITY,
        ttft_slo_ms: f64::INFINITY,
        tpot_slo_ms: f64::INFINITY,
    }
}

/// An endpoint on its own runtime thread, for the whole test binary (or
/// one test that needs the engine to itself).
fn start(routing: bool) -> (SocketAddr, EngineHandle) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async move {
            let config = EngineConfig { gen: settings(400), model_id: MODEL.into(), routing: routing.then_some(None) };
            let options = ListenOptions {
                addr: "127.0.0.1:0".parse().unwrap(),
                body_limit: BODY_LIMIT,
                api_key: None,
                defaults: Defaults { max_tokens: 32 },
            };
            let endpoint = gateway::listen(load(), config, options).await.unwrap();
            tx.send((endpoint.addr, endpoint.engine.clone())).unwrap();
            let _ = endpoint.serving.await;
        });
    });
    rx.recv().unwrap()
}

fn shared() -> &'static (SocketAddr, EngineHandle) {
    static ENDPOINT: OnceLock<(SocketAddr, EngineHandle)> = OnceLock::new();
    ENDPOINT.get_or_init(|| start(true))
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

fn chat(prompt: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut body = serde_json::json!({"model": MODEL, "messages": [{"role": "user", "content": prompt}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Every `data:` event of a streamed response, parsed, up to `[DONE]`.
async fn events(response: reqwest::Response) -> (Vec<ChatChunk>, bool) {
    let mut stream = response.bytes_stream().eventsource();
    let mut chunks = Vec::new();
    while let Some(event) = stream.next().await {
        let event = event.unwrap();
        if event.data == "[DONE]" {
            return (chunks, true);
        }
        chunks.push(serde_json::from_str(&event.data).unwrap_or_else(|e| panic!("{e}: {}", event.data)));
    }
    (chunks, false)
}

#[tokio::test]
async fn a_streamed_answer_is_the_engines_own() {
    let (addr, _) = *shared();
    let prompt = "Write one sentence about the cache of a CPU.";
    let http = reqwest::Client::new();
    let body = chat(
        prompt,
        serde_json::json!({"stream": true, "temperature": 0, "max_tokens": 24, "ignore_eos": true, "stream_options": {"include_usage": true}}),
    );
    let response = http.post(url(addr, "/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let (chunks, done) = events(response).await;
    assert!(done, "the stream ends with [DONE]");
    // The role header first, with no text: the note's "state whether the first event contains actual content".
    assert_eq!(chunks[0].choices[0].delta.role.as_deref(), Some("assistant"));
    assert_eq!(chunks[0].choices[0].delta.content.as_deref(), Some(""));
    let streamed: String = chunks.iter().flat_map(|c| c.choices.iter().filter_map(|ch| ch.delta.content.clone())).collect();
    let finish = chunks.iter().find_map(|c| c.choices.first().and_then(|ch| ch.finish_reason.clone()));
    assert_eq!(finish.as_deref(), Some("length"));
    let usage = chunks.iter().find_map(|c| c.usage.clone()).expect("a usage chunk, as asked");
    assert_eq!(usage.completion_tokens, 24);
    let timings = chunks.iter().find_map(|c| c.workbench.clone()).expect("the server's account in the last chunk");
    assert!(timings.queue_ms >= 0.0 && timings.prompt_path_ms > 0.0, "{timings:?}");

    // The same request, not streamed, and the engine's own loop: one answer.
    let mut whole = body.clone();
    whole["stream"] = false.into();
    let response = http.post(url(addr, "/v1/chat/completions")).json(&whole).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let completion: ChatCompletion = response.json().await.unwrap();
    assert_eq!(completion.choices[0].message.content, streamed);
    let router = load();
    let ids = router.tokenizer.encode(&Conversation::user(prompt).generation_prompt(router.tokenizer.layout)).unwrap();
    let params = SamplingParams { temperature: 0.0, max_new_tokens: 24, ignore_eos: true, ..SamplingParams::default() };
    assert_eq!(usage.prompt_tokens, ids.len(), "the prompt in the checkpoint's chat layout, counted by the server");
    assert_eq!(timings.prompt_tokens, ids.len());
    let (sequence, _) = generate(&router.backbone, &router.tokenizer, ids, params, |_| true).unwrap();
    assert_eq!(streamed, sequence.text(), "the endpoint's greedy answer is the engine's");
    assert!(!streamed.trim().is_empty());
}

#[tokio::test]
async fn refusals_have_openais_shape_and_name_the_field() {
    let (addr, _) = *shared();
    let http = reqwest::Client::new();
    let post = |body: String| http.post(url(addr, "/v1/chat/completions")).header("content-type", "application/json").body(body).send();
    let cases: Vec<(String, u16, Option<&str>, Option<&str>)> = vec![
        ("{\"model\": ".into(), 400, Some("body"), Some("invalid_json")),
        (chat("hi", serde_json::json!({"model": "gpt-9"})).to_string(), 404, None, Some("model_not_found")),
        (chat("hi", serde_json::json!({"temperature": -1})).to_string(), 400, Some("temperature"), None),
        (chat("hi", serde_json::json!({"top_p": 0})).to_string(), 400, Some("top_p"), None),
        (chat("hi", serde_json::json!({"max_tokens": 0})).to_string(), 400, Some("max_tokens"), None),
        (chat("hi", serde_json::json!({"stop": ["", "x"]})).to_string(), 400, Some("stop"), None),
        // Past SmolLM2's context of 8,192.
        (chat("hi", serde_json::json!({"max_tokens": 9000})).to_string(), 400, Some("max_tokens"), None),
        // Within the context, past this server's K/V budget of 400 blocks of 16 tokens.
        (chat("hi", serde_json::json!({"max_tokens": 7000})).to_string(), 400, Some("max_tokens"), Some("context_length_exceeded")),
        (chat(&"x".repeat(BODY_LIMIT), serde_json::json!({})).to_string(), 413, Some("body"), Some("request_too_large")),
    ];
    for (body, status, param, code) in cases {
        let response = post(body.clone()).await.unwrap();
        assert_eq!(response.status().as_u16(), status, "{}", &body[..body.len().min(120)]);
        let error: ErrorBody = response.json().await.expect("OpenAI's error shape");
        assert_eq!(error.error.param.as_deref(), param, "{:?}", error.error);
        if let Some(code) = code {
            assert_eq!(error.error.code.as_deref(), Some(code), "{:?}", error.error);
        }
        assert!(!error.error.message.is_empty());
    }
    let missing = http.get(url(addr, "/v2/nothing")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    assert!(missing.json::<ErrorBody>().await.is_ok());
    let wrong_method = http.get(url(addr, "/v1/chat/completions")).send().await.unwrap();
    assert_eq!(wrong_method.status(), 405);
    assert!(wrong_method.json::<ErrorBody>().await.is_ok());
}

/// A client that disconnects mid-stream: its sequence leaves the batch
/// and its K/V blocks come back before the engine's next iteration.
#[tokio::test]
async fn a_client_that_leaves_frees_its_sequence_and_kv() {
    // An engine of its own, so no other test's requests are in its batch.
    let (addr, engine) = start(false);
    let http = reqwest::Client::new();
    let body = chat("Count from one to a thousand.", serde_json::json!({"stream": true, "max_tokens": 3000, "ignore_eos": true}));
    let response = http.post(url(addr, "/v1/chat/completions")).json(&body).send().await.unwrap();
    let mut stream = response.bytes_stream().eventsource();
    let mut texts = 0;
    while texts < 4 {
        let event = stream.next().await.unwrap().unwrap();
        if event.data.contains("\"content\":\"") && !event.data.contains("\"content\":\"\"") {
            texts += 1;
        }
    }
    let before = engine.metrics();
    assert_eq!(before.running, 1);
    assert!(before.kv_blocks_in_use > 0);
    let left = std::time::Instant::now();
    drop(stream);
    let freed = loop {
        let m = engine.metrics();
        if m.running == 0 && m.kv_blocks_in_use == 0 && m.outcome("cancelled") == 1 {
            break left.elapsed();
        }
        assert!(left.elapsed() < Duration::from_secs(2), "still held 2 s after the client left: {m:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    println!("freed {} K/V blocks {:.1} ms after the client left", before.kv_blocks_in_use, freed.as_secs_f64() * 1000.0);
    let metrics = http.get(url(addr, "/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("workbench:request_outcome_total{outcome=\"cancelled\"} 1"), "{metrics}");
    assert!(metrics.contains("workbench:num_requests_running 0"), "{metrics}");
}

#[tokio::test]
async fn auto_is_routed_and_says_what_it_chose() {
    let (addr, _) = *shared();
    let http = reqwest::Client::new();
    let models: gateway::openai::ModelList = http.get(url(addr, "/v1/models")).send().await.unwrap().json().await.unwrap();
    let ids: Vec<&str> = models.data.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, [MODEL, "auto"]);
    let body = serde_json::json!({"model": "auto", "stream": true, "max_tokens": 4, "messages": [{"role": "user", "content": "Fix the failing unit test in the parser module."}]});
    let response = http.post(url(addr, "/v1/chat/completions")).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let timing = response.headers()["server-timing"].to_str().unwrap().to_string();
    let chosen = response.headers()["x-workbench-routed-to"].to_str().unwrap().to_string();
    assert!(timing.starts_with("decide;dur="), "{timing}");
    let (chunks, done) = events(response).await;
    assert!(done);
    let account = chunks.iter().find_map(|c| c.workbench.clone()).unwrap();
    let routed = account.routed.clone().expect("the routed candidate in the last event");
    assert_eq!(routed.candidate, chosen);
    assert_eq!(routed.served_by, MODEL);
    let pool = router::Pool::from_yaml(&std::fs::read(root(bench_cli::DEFAULT_POOL)).unwrap(), "pool").unwrap();
    assert!(pool.candidates.iter().any(|c| c.id == chosen), "{chosen} is one of the pool's candidates");
    assert!(
        account.decide_ms.unwrap() > 0.0 && account.queue_ms >= account.decide_ms.unwrap(),
        "deciding is inside the queue time: {account:?}"
    );
}

/// The load generator against the endpoint: every planned request gets a
/// record, the served ones carry the server's account, and that account
/// lies inside the client's time to first content, short of it by the
/// tolerance at the median.
/// Requests whose first text cannot come in time are timed out at the
/// client, and the server frees them.
#[tokio::test]
async fn the_load_generator_accounts_for_every_request() {
    let (addr, _) = *shared();
    let http = reqwest::Client::new();
    let prompts =
        ["Sort a list in Python.", "What is a mutex?", "Explain the borrow checker in one line.", "Name three sorting algorithms."];
    let plan: Vec<Planned> = (0..8)
        .map(|i| Planned {
            id: i,
            at_ms: i as f64 * 120.0,
            text: prompts[i as usize % prompts.len()].into(),
            prompt_tokens: 0,
            max_tokens: 6 + i as usize,
            seed: i,
        })
        .collect();
    let settings = ReplaySettings {
        model: MODEL.into(),
        temperature: 0.8,
        top_p: 0.95,
        ignore_eos: true,
        ttft_timeout_ms: 20_000.0,
        end_ms: 40_000.0,
        warmup_ms: 0.0,
        retries: 0,
        api_key: None,
    };
    let base = format!("http://{addr}");
    let records = replay(&http, &base, &plan, &settings).await;
    assert_eq!(records.len(), plan.len());
    for (r, p) in records.iter().zip(&plan) {
        assert_eq!(r.record.outcome, GenOutcome::Served, "#{}: {:?}", r.record.id, r.error);
        assert_eq!(r.record.tokens_out, p.max_tokens);
        assert!(!r.first_event_had_content, "this server opens with the role header");
        assert!(r.first_content_ms >= r.record.first_token_ms && r.record.first_token_ms > r.sent_ms);
    }
    let d = Decomposition::of(&records);
    for line in d.lines() {
        println!("{line}");
    }
    assert_eq!(d.checked, plan.len());
    // The server's interval lies inside the client's (it starts after the
    // request is read and ends before the token is sent), so its sum can
    // never exceed the client's time to first content: a part counted
    // twice, or a clock read in the wrong place, breaks this for every
    // request. How far inside is transport and scheduling, which a loaded
    // 2-core CI machine stretches now and then (11 ms once): so one
    // request past the tolerance is noise, while a part missing from the
    // account (T_queue's tens of ms) moves the median.
    let gaps: Vec<f64> = records.iter().filter_map(|r| r.unaccounted_ms()).collect();
    assert!(gaps.iter().all(|&gap| gap >= -0.5), "the server's account exceeds the client's clock: {gaps:?}");
    let median = d.unaccounted_ms.p50.expect("a median over 8 requests");
    assert!(median <= Decomposition::tolerance_ms(0.0), "median unaccounted {median:.1} ms: {gaps:?}");
}

/// A request whose first text cannot come before the client's timeout (a
/// long prompt prefilled in chunks of 64 tokens): the client records it
/// as timed out and closes, and the server cancels it mid-prefill rather
/// than finishing it for nobody.
#[tokio::test]
async fn a_client_timeout_cancels_the_request_at_the_server() {
    let (addr, engine) = start(false);
    let http = reqwest::Client::new();
    let plan = [Planned { id: 0, at_ms: 0.0, text: "word ".repeat(1500), prompt_tokens: 0, max_tokens: 8, seed: 0 }];
    let settings = ReplaySettings {
        model: MODEL.into(),
        temperature: 0.0,
        top_p: 1.0,
        ignore_eos: true,
        ttft_timeout_ms: 40.0,
        end_ms: 10_000.0,
        warmup_ms: 0.0,
        retries: 0,
        api_key: None,
    };
    let records = replay(&http, &format!("http://{addr}"), &plan, &settings).await;
    assert_eq!(records[0].record.outcome, GenOutcome::TimedOut, "{:?}", records[0]);
    let waited = std::time::Instant::now();
    loop {
        let m = engine.metrics();
        if m.outcome("cancelled") == 1 && m.running == 0 && m.kv_blocks_in_use == 0 {
            assert_eq!(m.outcome("served"), 0, "{m:?}");
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(5), "the server never noticed the client leave: {m:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `openai-replay --trace` as a user runs it, against the endpoint: the
/// trace's arrivals at their times, a task of the prompt set by its id, a
/// conversation written out, an answer length where the line gives one;
/// one run, its rate the trace's, and the report says which trace it was.
/// Flags that a trace replaces are refused, not ignored.
#[test]
fn openai_replay_replays_a_trace_file() {
    let (addr, _) = *shared();
    let dir = std::env::temp_dir().join(format!("openai-replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.jsonl");
    std::fs::write(
        &trace,
        "{\"at_ms\": 0, \"task\": \"old112::astropy__astropy-13033\", \"max_tokens\": 5}\n\n\
         {\"at_ms\": 300, \"conversation\": {\"messages\": [{\"role\": \"user\", \"content\": \"What is a mutex?\"}]}, \"max_tokens\": 3}\n\
         {\"at_ms\": 600, \"task\": \"old112::astropy__astropy-13033\"}\n",
    )
    .unwrap();
    let out = dir.join("client.json");
    let replay = |extra: &[&str]| {
        let base = format!("http://{addr}");
        let mut args = vec!["--url", &base, "--model", MODEL, "--warmup", "0", "--drain", "60", "--max-prompt-tokens", "48"];
        args.extend_from_slice(extra);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_openai-replay")).current_dir(root("")).args(&args).output().unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (code, _, stderr) = replay(&["--trace", trace.to_str().unwrap(), "--rates", "2"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--rates"), "{stderr}");

    let (code, stdout, stderr) = replay(&["--trace", trace.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(&format!("the trace {} (3 arrivals)", trace.display())), "{stdout}");
    let report: bench::Report = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let study = report.studies.client.expect("a client section");
    assert_eq!(study.arrivals.as_deref(), Some(trace.to_str().unwrap()));
    let [run] = study.runs.as_slice() else { panic!("one run for one trace: {}", study.runs.len()) };
    assert_eq!(run.run.rate_per_s, 4.992, "3 arrivals over 0.601 s");
    let records: Vec<(f64, GenOutcome, usize)> =
        run.requests.iter().map(|r| (r.record.arrival_ms, r.record.outcome, r.record.tokens_out)).collect();
    assert_eq!(records[..2], [(0.0, GenOutcome::Served, 5), (300.0, GenOutcome::Served, 3)], "{:?}", run.requests);
    // The third line gives no length: one drawn from the dataset's recorded outputs (capped at 64).
    assert_eq!((records[2].0, records[2].1), (600.0, GenOutcome::Served));
    assert!((1..=64).contains(&records[2].2), "{records:?}");
    // Sent at the trace's times, not all at once: the client's send clock follows the lines.
    let sent: Vec<f64> = run.requests.iter().map(|r| r.sent_ms.unwrap()).collect();
    assert!(sent[1] >= 300.0 && sent[2] >= 600.0, "{sent:?}");
}
