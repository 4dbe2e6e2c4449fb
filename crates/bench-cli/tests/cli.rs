//! bench-decide as a user runs it: real process, real files, exit codes,
//! and the JSON report checked against the schema.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs one of the crate's binaries from the repository's root: exit code, stdout, stderr.
fn run(exe: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(exe);
    cmd.current_dir(root()).args(args).env_remove("ENTHALPY_ROUTER_MAX_TOKENS");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("run {exe}: {e}"));
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn bench_decide(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    run(env!("CARGO_BIN_EXE_bench-decide"), args, env)
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bench-decide-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn short_run_writes_the_shared_schema_with_cold_and_warm_apart() {
    let out = tmp("report.json");
    let (code, stdout, stderr) = bench_decide(
        &["--lengths", "15,40", "--iterations", "3", "--warmup", "1", "--encode-iterations", "2", "--out", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 0, "{stderr}");
    let header: Vec<&str> = stdout.lines().next().unwrap().split('|').map(str::trim).collect();
    assert_eq!(header, ["prompt tokens", "characters", "p50 (warm)", "p95 (warm)", "min–max (warm)", "first call (cold)"]);
    assert!(stdout.contains("Conditions: backbone llama (30 layers"), "{stdout}");
    assert!(stdout.contains("checkpoint gguf-b179c952"), "{stdout}");
    let r: bench::Report = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("report matches the schema");
    assert_eq!(r.schema, bench::SCHEMA);
    assert_eq!(r.environment.runtime, "native");
    assert!(r.environment.threads >= 1 && !r.environment.cpu_model.is_empty());
    assert!(r.environment.command_line.iter().any(|a| a == "--lengths"));
    assert_eq!(r.provenance.candidates, 8);
    assert_eq!(r.provenance.router_max_tokens, 1024);
    assert!(r.provenance.precision.contains("Q4_1"));
    assert!(r.load.weights_ms > 0.0 && r.load.tokenizer_ms > 0.0);
    assert_eq!(r.results.len(), 2);
    for (res, n) in r.results.iter().zip([15, 40]) {
        assert_eq!(res.prompt_tokens, n);
        assert!(res.cold_ms > 0.0);
        assert_eq!(res.warmup_ms.len(), 1);
        assert_eq!(res.warm_ms.len(), 3);
        assert_eq!(res.warm.unwrap().n, 3);
        assert_eq!(res.encode_and_score_ms.len(), 2);
        assert!(!res.top_candidate.is_empty());
    }
}

#[test]
fn router_max_tokens_from_the_environment_truncates() {
    let out = tmp("truncated.json");
    let (code, _, stderr) = bench_decide(
        &["--lengths", "60", "--iterations", "1", "--warmup", "0", "--encode-iterations", "0", "--out", out.to_str().unwrap()],
        &[("ENTHALPY_ROUTER_MAX_TOKENS", "20")],
    );
    assert_eq!(code, 0, "{stderr}");
    let r: bench::Report = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(r.provenance.router_max_tokens, 20);
    assert!(r.results[0].truncated);
    assert_eq!(r.results[0].prompt_tokens, 20);
}

#[test]
fn bad_inputs_fail_with_a_message_naming_the_file() {
    let garbage = tmp("garbage.gguf");
    std::fs::write(&garbage, b"GGUF\x03\x00\x00\x00 this is not a checkpoint").unwrap();
    let pool = tmp("pool.yaml");
    std::fs::write(&pool, "name: [unclosed\n").unwrap();
    // Exit code 2: the command line is wrong; 1: something failed while running.
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["--checkpoint", "/nonexistent/model.gguf"], 1, "--checkpoint /nonexistent/model.gguf"),
        (vec!["--checkpoint", garbage.to_str().unwrap()], 1, "garbage.gguf: not a valid GGUF checkpoint: declares"),
        (vec!["--pool", pool.to_str().unwrap()], 1, "pool.yaml: pool:"),
        (vec!["--device", "cuda"], 2, "invalid value 'cuda' for '--device <DEVICE>'"),
        (vec!["--lengths", "0"], 2, "--lengths"),
        (vec!["--precision", "int2"], 2, "invalid value 'int2' for '--precision <PRECISION>'"),
        (vec!["--quality", "--serve"], 2, "cannot be used with"),
    ];
    for (args, want_code, want) in cases {
        let (code, _, stderr) = bench_decide(&args, &[]);
        assert_eq!(code, want_code, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: want {want:?} in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let (code, _, stderr) = bench_decide(&["--lengths", "15"], &[("ENTHALPY_ROUTER_MAX_TOKENS", "lots")]);
    assert_eq!(code, 2);
    assert!(stderr.contains("ENTHALPY_ROUTER_MAX_TOKENS=lots"), "{stderr}");
}

#[test]
fn quality_routes_every_task_and_writes_study_head_and_figures() {
    let out = tmp("quality.json");
    let head = tmp("head.json");
    let (code, stdout, stderr) = bench_decide(
        &[
            "--quality",
            "--limit",
            "20",
            "--seeds",
            "2",
            "--truncation-sweep",
            "32",
            "--out",
            out.to_str().unwrap(),
            "--head-out",
            head.to_str().unwrap(),
        ],
        &[("ENTHALPY_ROUTER_MAX_TOKENS", "48")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("| oracle (cheapest resolving model) |"), "{stdout}");
    let r: bench::Report = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("report matches the schema");
    assert_eq!(r.schema, bench::SCHEMA);
    assert!(r.results.is_empty(), "a quality run measures no latency protocol");
    let q = r.studies.quality.as_ref().expect("the quality section");
    assert_eq!((q.tasks, q.router_max_tokens, q.per_task.len()), (20, 48, 20));
    assert_eq!(q.cv.seeds, vec![0, 1]);
    let all: Vec<_> = q.rows.iter().filter(|r| r.subset == bench::quality::Subset::All).collect();
    let oracle = all.iter().find(|r| r.family == bench::quality::Family::Oracle).unwrap();
    for row in &all {
        assert!(row.resolved.mean <= oracle.resolved.mean + 1e-9, "{} beats the oracle", row.policy);
        assert!(row.resolved_ci95[0] <= row.resolved.mean + 1e-9 && row.resolved.mean <= row.resolved_ci95[1] + 1e-9, "{}", row.policy);
    }
    for mode in ["quality", "balanced", "economy"] {
        assert!(all.iter().any(|r| r.policy == format!("router, similarity scoring, {mode}")));
        assert!(all
            .iter()
            .any(|r| r.policy == format!("router, trained head (CV), {mode}") && r.family == bench::quality::Family::Trained));
    }
    // The sweep: 32 tokens cut from the left and keeping the start, then 48 is the main setting.
    let sides: Vec<_> = q.truncation.iter().map(|p| (p.max_tokens, p.side)).collect();
    assert_eq!(sides, [(32, router::TruncationSide::Left), (32, router::TruncationSide::KeepStart)]);
    assert!(q.truncation.iter().all(|p| p.tokens_used_mean <= 32.0 && p.decide.is_some()));
    // With a sweep, a head whose inner CV chooses the truncation too, among all three settings.
    for mode in ["quality", "balanced", "economy"] {
        assert!(all.iter().any(|r| r.policy == format!("router, trained head (CV, truncation chosen inside), {mode}")));
    }
    let (_, inside) = q.chosen.iter().find(|(p, _)| p == "trained head, truncation chosen inside").expect("its chosen settings");
    assert!(inside.contains(" at 32 left") || inside.contains(" at 32 keep_start") || inside.contains(" at 48 left"), "{inside}");
    // Every task's decisions, by mode, with and without the head.
    assert!(q.per_task.iter().all(|t| t.similarity_top.len() == 3 && t.head_top.len() == 3 && t.tokens_used <= 48));
    // The head file reads back, names the backbone and the settings it was trained for.
    let bytes = std::fs::read(&head).unwrap();
    let loaded = router::LoadedHead::from_json(&bytes, "head.json").unwrap();
    assert_eq!(q.head.as_ref().unwrap().id, loaded.id);
    assert_eq!((loaded.head.router_max_tokens, loaded.head.hidden, loaded.head.candidates.len()), (48, 576, 8));
    assert_eq!(loaded.head.backbone_checkpoint_id, "gguf-b179c952");
    let svg = std::fs::read_to_string(out.with_extension("cost-quality.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("oracle"));
    let trade_off = std::fs::read_to_string(out.with_extension("truncation.svg")).unwrap();
    assert!(trade_off.contains("similarity, balanced, keep_start") && trade_off.contains("head (CV), quality, left"), "{trade_off}");

    // The head just trained, read over f32's and int8's features of the
    // first tasks: the agreement study's section, both precisions named.
    let agreement = tmp("agreement.json");
    let (code, stdout, stderr) = bench_decide(
        &["--precision-agreement", "--limit", "5", "--head", head.to_str().unwrap(), "--out", agreement.to_str().unwrap()],
        &[("ENTHALPY_ROUTER_MAX_TOKENS", "48")],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("same top") && stdout.contains("in-sample"), "{stdout}");
    let r: bench::Report = serde_json::from_slice(&std::fs::read(&agreement).unwrap()).expect("report matches the schema");
    let a = r.studies.precision.as_ref().expect("the agreement section");
    assert_eq!((a.tasks, a.head.as_str()), (5, loaded.id.as_str()));
    assert!(a.reference.contains("dequantized to f32") && a.candidate.contains("integer dot"), "{} / {}", a.reference, a.candidate);
    assert_eq!(a.modes.iter().map(|m| m.mode.as_str()).collect::<Vec<_>>(), ["balanced", "economy", "quality"]);
    for m in &a.modes {
        assert!(m.same_order <= m.same_top && m.same_top <= 5 && m.turned.len() == 5 - m.same_top, "{m:?}");
        assert!((-1.0..=1.0).contains(&m.kendall_tau_mean), "{m:?}");
    }
    let cosine = a.feature_cosine.expect("five tasks' features");
    assert!(cosine.min > 0.99, "int8's features stay close to f32's: {cosine:?}");
}

#[test]
fn quality_refuses_bad_data_with_the_file_and_line() {
    let tasks = tmp("tasks.jsonl");
    std::fs::write(&tasks, "{\"task_id\": \"a\", \"source_split\": \"new64\", \"bench\": \"x\", \"prompt\": \"p\"}\nnot json\n").unwrap();
    let results = tmp("results.csv");
    std::fs::write(&results, "task_id,model,resolved,in_tok,out_tok,cost_usd\n").unwrap();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["--tasks", "/nonexistent/tasks.jsonl"], 1, "--tasks /nonexistent/tasks.jsonl"),
        (vec!["--tasks", tasks.to_str().unwrap()], 1, "tasks.jsonl, line 2:"),
        (vec!["--limit", "5"], 2, "--limit 5: cross-validation needs at least 20 tasks"),
        (vec!["--seeds", "0"], 2, "--seeds 0"),
    ];
    for (mut args, want_code, want) in cases {
        args.insert(0, "--quality");
        let (code, _, stderr) = bench_decide(&args, &[]);
        assert_eq!(code, want_code, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: want {want:?} in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn serve_replays_a_trace_and_keeps_every_request() {
    // Three short tasks at once and a conversation a little later, a queue
    // of two: one arrival is rejected, the rest are served with chunks of 32.
    let tasks = tmp("serve-tasks.jsonl");
    std::fs::write(
        &tasks,
        "{\"task_id\": \"a\", \"prompt\": \"Fix the failing parser test in the tokenizer module.\"}\n\
         {\"task_id\": \"b\", \"prompt\": \"Why does this Rust program segfault when the vector grows past its capacity? It uses unsafe code to push.\"}\n",
    )
    .unwrap();
    let trace = tmp("trace.jsonl");
    std::fs::write(
        &trace,
        "{\"at_ms\": 0, \"task\": \"a\"}\n{\"at_ms\": 0, \"task\": \"b\"}\n{\"at_ms\": 0, \"task\": \"a\"}\n\
         {\"at_ms\": 1500, \"conversation\": {\"messages\": [{\"role\": \"user\", \"content\": \"Refactor the CLI flags.\"}]}}\n",
    )
    .unwrap();
    let out = tmp("serve.json");
    let args = [
        "--serve",
        "--trace",
        trace.to_str().unwrap(),
        "--serve-tasks",
        tasks.to_str().unwrap(),
        "--duration",
        "2",
        "--warmup-s",
        "0",
        "--chunk",
        "32",
        "--queue-limit",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = bench_decide(&args, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("| offered /s | arrived /s | chunk | policy |"), "{stdout}");
    let r: bench::Report = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let study = r.studies.serve.as_ref().unwrap();
    assert_eq!(study.arrivals, trace.display().to_string());
    let run = &study.runs[0];
    let outcomes: Vec<serving::Outcome> = run.records.iter().map(|r| r.outcome).collect();
    use serving::Outcome::{Rejected, Served};
    assert_eq!(outcomes, [Served, Served, Rejected, Served], "{:#?}", run.records);
    assert_eq!(run.records[3].task, "trace-arrival-4");
    for r in run.records.iter().filter(|r| r.outcome == Served) {
        assert_eq!(r.chunks, r.tokens.div_ceil(32), "{r:?}");
        assert!(r.prefill_ms > 0.0 && r.start_ms.unwrap() >= r.arrival_ms && r.top.is_some());
    }
    // The second request waited for the first.
    assert!(run.records[1].queue_ms > 0.0);
    assert!(out.with_extension("timeline.svg").exists());
    // The warm-up decided the heavier task (b) once, before the run.
    assert!(study.unloaded_heaviest_ms.is_some_and(|ms| ms > 0.0));

    // --render presents a written report again, loading no model.
    std::fs::remove_file(out.with_extension("timeline.svg")).unwrap();
    let (code, rendered, stderr) =
        bench_decide(&["--serve", "--render", "--checkpoint", "/nonexistent.gguf", "--out", out.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{stderr}");
    let table = |text: &str| text.lines().filter(|l| l.starts_with('|')).map(String::from).collect::<Vec<_>>();
    assert!(!table(&stdout).is_empty());
    assert_eq!(table(&rendered), table(&stdout), "{rendered}");
    assert!(out.with_extension("timeline.svg").exists());
    let (code, _, stderr) = bench_decide(&["--serve", "--render", "--out", tasks.to_str().unwrap()], &[]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not a report"), "{stderr}");

    // Bad flags (exit code 2) and traces (1) are named.
    let (code, _, stderr) = bench_decide(&["--serve", "--chunk", "0", "--out", out.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("invalid value '0' for '--chunk <CHUNK>'"), "{stderr}");
    let (code, _, stderr) = bench_decide(&["--serve", "--rate", "0", "--out", out.to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("rate: must be"), "{stderr}");
    std::fs::write(&trace, "{\"at_ms\": 0, \"task\": \"zzz\"}\n").unwrap();
    let (code, _, stderr) = bench_decide(
        &["--serve", "--trace", trace.to_str().unwrap(), "--serve-tasks", tasks.to_str().unwrap(), "--out", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 1);
    assert!(stderr.contains("trace line 1: task `zzz` is not in the task file"), "{stderr}");
}

fn router_decide(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    run(env!("CARGO_BIN_EXE_router-decide"), args, env)
}

#[test]
fn decide_scores_with_the_checkpoints_trained_head_unless_told_otherwise() {
    let cases = tmp("cases.json");
    std::fs::write(&cases, r#"[{"messages": [{"role": "user", "content": "Fix the failing date parser test in utils/dates.py"}]}]"#)
        .unwrap();
    let cases = cases.to_str().unwrap();
    let decisions = |stdout: &str| -> Vec<router::Decision> { serde_json::from_str(stdout).expect("decisions as JSON") };
    // By default: the head in reports/ trained on the bundled checkpoint,
    // with the decision's confidence and its nearest training tasks.
    let (code, stdout, stderr) = router_decide(&["--conversations", cases], &[]);
    assert_eq!(code, 0, "{stderr}");
    let trained = decisions(&stdout);
    assert!(trained[0].scoring.starts_with("head-"), "{}", trained[0].scoring);
    let confidence = trained[0].confidence.as_ref().expect("a head's decision says how sure it is");
    assert_eq!(confidence.nearest.len(), router::head::NEAREST);
    assert!((0.5..=1.0).contains(&confidence.p_first_ahead));
    // The untrained scoring, asked for by name: no confidence to give.
    let (code, stdout, stderr) = router_decide(&["--conversations", cases, "--scoring", "similarity"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let untrained = decisions(&stdout);
    assert_eq!(untrained[0].scoring, "similarity");
    assert!(untrained[0].confidence.is_none());
    // The default head trained at 1,024 tokens does not fit a router that
    // keeps 48: it runs untrained and says why on stderr.
    let (code, stdout, stderr) = router_decide(&["--conversations", cases], &[("ENTHALPY_ROUTER_MAX_TOKENS", "48")]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(decisions(&stdout)[0].scoring, "similarity");
    assert!(stderr.contains("trained on features truncated to 1024 tokens (left), this router keeps 48 (left)"), "{stderr}");
    assert!(stderr.contains("untrained descriptor similarity"), "{stderr}");
    // A head named on the command line must fit: refused with the file and reason.
    let bad = tmp("bad-head.json");
    std::fs::write(&bad, br#"{"schema": "workbench.router-head/1"}"#).unwrap();
    let (code, _, stderr) = router_decide(&["--conversations", cases, "--head", bad.to_str().unwrap()], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("bad-head.json: scoring head: schema `workbench.router-head/1`"), "{stderr}");
    // --head with --scoring similarity contradicts itself, and the quality
    // study trains its own head: usage errors.
    let (code, _, stderr) = router_decide(&["--conversations", cases, "--scoring", "similarity", "--head", "x.json"], &[]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, stderr) = bench_decide(&["--quality", "--head", "x.json"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--head x.json: --quality trains its own head"), "{stderr}");
}

#[test]
fn the_sites_manifest_pins_the_heads_in_reports_by_their_digest() {
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(root().join("www/models/manifest.json")).unwrap()).unwrap();
    let heads = manifest["heads"].as_array().expect("the manifest lists the trained heads");
    assert!(!heads.is_empty());
    for entry in heads {
        let file = entry["file"].as_str().unwrap();
        // The file the site serves is the one reports/ holds (build-site.sh copies it).
        let bytes = std::fs::read(root().join("reports").join(file)).unwrap_or_else(|e| panic!("reports/{file}: {e}"));
        let head = router::LoadedHead::from_json(&bytes, file).unwrap();
        assert_eq!(head.sha256, entry["sha256"].as_str().unwrap(), "{file}: the manifest pins another digest");
        assert_eq!(head.head.backbone_checkpoint_id, entry["backbone_checkpoint_id"].as_str().unwrap(), "{file}");
        // And that backbone is one the manifest lists.
        let models = manifest["models"].as_array().unwrap();
        assert!(
            models.iter().any(|m| format!("gguf-{}", &m["sha256"].as_str().unwrap()[..8]) == head.head.backbone_checkpoint_id),
            "{file}: trained on a checkpoint the site does not list"
        );
    }
}

/// `--roofline`: the warm decide of each conversation against this
/// machine's measured ceilings, as JSON, and each readout on stderr.
#[test]
fn decide_with_a_roofline_sets_each_part_against_this_machines_ceilings() {
    let cases = tmp("roofline-cases.json");
    std::fs::write(
        &cases,
        r#"[{"messages": [{"role": "user", "content": "Fix the failing date parser test in utils/dates.py, and explain the cause."}]}]"#,
    )
    .unwrap();
    let (code, stdout, stderr) = router_decide(&["--conversations", cases.to_str().unwrap(), "--roofline"], &[]);
    assert_eq!(code, 0, "{stderr}");
    let out: serde_json::Value = serde_json::from_str(&stdout).expect("the output is JSON");
    let ceilings: bench::roofline::DeviceCeilings = serde_json::from_value(out["ceilings"].clone()).unwrap();
    assert!(ceilings.f32.gflops > 0.0 && ceilings.int8.gflops > 0.0 && ceilings.bandwidth.gb_per_s > 0.0);
    // The served precision: every projection of the Q4_1 file on the integer kernels.
    assert_eq!((ceilings.integer_projections, ceilings.projections), (210, 210));
    let rooflines: Vec<bench::roofline::Roofline> = serde_json::from_value(out["rooflines"].clone()).unwrap();
    let decisions: Vec<router::Decision> = serde_json::from_value(out["decisions"].clone()).unwrap();
    assert_eq!((rooflines.len(), decisions.len()), (1, 1));
    let roofline = &rooflines[0];
    // The CLI's router keeps no prefix cache: the warm call prefills the
    // whole text again, and the roofline counts all of it.
    assert!(decisions[0].prefix.is_none());
    assert_eq!(roofline.prefilled_tokens, decisions[0].tokens_used);
    assert_eq!(roofline.decide_ms, decisions[0].timings.total_ms);
    assert_eq!(roofline.parts.iter().map(|p| p.part.name()).collect::<Vec<_>>(), ["projections", "attention"]);
    assert!(roofline.parts.iter().all(|p| p.achieved_gflops > 0.0 && p.floor_ms > 0.0 && p.floor_ms < 10.0 * p.ms));
    assert!(stderr.contains("ceilings (") && stderr.contains("At this device's measured ceilings this decide would take"), "{stderr}");
}
