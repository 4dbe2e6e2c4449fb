//! `bench-decide --quality`: the shell around `bench::quality`. It reads the
//! data files and the router's, routes every task (at the main setting and,
//! with `--truncation-sweep`, at every other), runs the cross-validations
//! on as many threads as seeds allow, and writes the report and the head.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use bench::quality::{self, route, CvSettings, Dataset, Family, QualityStudy, SeedOutcome, Subset};
use bench::report::{Provenance, Report, Studies};
use bench_cli::cli::{usage, Progress};
use bench_cli::{read, Loaded, RouterFlags};
use router::{FeatureMap, Pooling, Router, TruncationSide};

#[derive(clap::Args, Debug)]
pub struct QualityFlags {
    /// OOD176 tasks (JSON lines with `task_id`, `source_split`, `bench`, `prompt`).
    #[arg(long, default_value = "data/coderouterbench/ood176_tasks.jsonl")]
    tasks: PathBuf,
    /// OOD176 outcomes, one row per task × model.
    #[arg(long, default_value = "data/coderouterbench/ood176_results_long.csv")]
    results: PathBuf,
    /// Where to write the head trained on all tasks (its digest joins the checkpoint id).
    #[arg(long, default_value = "reports/head.smollm2-135m.json")]
    head_out: PathBuf,
    /// Seeds of the outer cross-validation.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    /// Also evaluate at these router_max_tokens, cutting from the left and keeping the start.
    #[arg(long, value_delimiter = ',')]
    truncation_sweep: Vec<usize>,
    /// Only the first N tasks (a quick look; numbers are then not OOD176's).
    #[arg(long)]
    limit: Option<usize>,
}

/// The feature maps the truncation sweep's cross-validations choose among:
/// the final hidden state's mean and last token, as before the taps. Every
/// map at every setting would multiply the sweep's cost by six; the sweep
/// measures what truncation costs, and these two show it.
const SWEEP_MAPS: [FeatureMap; 2] =
    [FeatureMap { after_layers: None, pooling: Pooling::Mean }, FeatureMap { after_layers: None, pooling: Pooling::Last }];

/// A cross-validated policy's row per mode, `{label}, {mode}`.
fn mode_rows(data: &Dataset, subset: Subset, label: &str, cv: &[SeedOutcome]) -> Vec<quality::PolicyRow> {
    quality::MODES
        .iter()
        .enumerate()
        .map(|(m, (mode, _))| {
            let per_seed: Vec<Vec<usize>> = cv.iter().map(|o| o.by_mode[m].clone()).collect();
            quality::policy_row(data, subset, &format!("{label}, {mode}"), Family::Trained, &per_seed)
        })
        .collect()
}

/// Runs one cross-validation per seed on its own thread.
fn cross_validate(
    data: &Dataset,
    kernels_for: &(dyn Fn(&[usize]) -> quality::KernelSet + Sync),
    settings: &CvSettings,
) -> Vec<SeedOutcome> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = settings
            .seeds
            .iter()
            .map(|&seed| scope.spawn(move || quality::cross_validate_seed(data, kernels_for, settings, seed)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("a cross-validation thread panicked")).collect()
    })
}

/// The tasks and outcomes `--tasks` and `--results` name, for the loaded
/// pool's candidates, cut to `--limit`.
fn read_dataset(q: &QualityFlags, router: &Router) -> Result<Dataset> {
    let models: Vec<&str> = router.pool.candidates.iter().map(|c| c.id.as_str()).collect();
    let text = |path: &Path, what: &str| -> Result<String> {
        String::from_utf8(read(path, what)?).with_context(|| format!("{what} {}: not UTF-8", path.display()))
    };
    let (tasks_text, results_text) = (text(&q.tasks, "--tasks")?, text(&q.results, "--results")?);
    let data = Dataset::parse(&tasks_text, &q.tasks.display().to_string(), &results_text, &q.results.display().to_string(), &models)?;
    Ok(match q.limit {
        Some(limit) => data.restricted(&(0..limit.min(data.tasks.len())).collect::<Vec<_>>()),
        None => data,
    })
}

fn route_logged(router: &mut Router, data: &Dataset, log: &mut Progress) -> Result<route::Routed> {
    let tasks: Vec<&quality::Task> = data.tasks.iter().collect();
    Ok(route::route_all(router, &tasks, &mut |done, total| log.within(done, total, "tasks routed"))?)
}

/// The candidate `decide` (similarity scoring) ranked first for each task in `mode`.
fn similarity_choices(data: &Dataset, routed: &route::Routed, mode: &str) -> Vec<usize> {
    routed.tasks.iter().map(|t| t.similarity_top.get(mode).and_then(|id| data.model_index(id)).unwrap_or(0)).collect()
}

/// One setting of the truncation trade-off: the similarity scoring's
/// default mode and the head's cost-blind and balanced modes (CV).
fn truncation_point(
    data: &Dataset,
    routed: &route::Routed,
    cv: &[SeedOutcome],
    (max_tokens, side): (usize, TruncationSide),
    default_mode: &str,
) -> quality::TruncationPoint {
    let head = |m: usize| cv.iter().map(|o| o.by_mode[m].clone()).collect::<Vec<_>>();
    let rows = vec![
        quality::policy_row(
            data,
            Subset::All,
            &format!("similarity, {default_mode}"),
            Family::Untrained,
            &[similarity_choices(data, routed, default_mode)],
        ),
        quality::policy_row(data, Subset::All, "head (CV), quality", Family::Trained, &head(0)),
        quality::policy_row(data, Subset::All, "head (CV), balanced", Family::Trained, &head(1)),
    ];
    quality::TruncationPoint { max_tokens, side, tokens_used_mean: routed.tokens_used_mean(), decide: routed.decide(), rows }
}

pub fn run(flags: &RouterFlags, q: &QualityFlags, out: &Path, output: crate::Output) -> Result<()> {
    // The flags are checked before anything is loaded.
    if let Some(limit) = q.limit.filter(|&limit| limit < 20) {
        return Err(usage(format!("--limit {limit}: cross-validation needs at least 20 tasks")));
    }
    if q.seeds == 0 {
        return Err(usage("--seeds 0: give at least one seed"));
    }
    // The study routes untrained and trains its own head.
    if let Some(head) = &flags.head {
        return Err(usage(format!("--head {}: --quality trains its own head (written to --head-out)", head.display())));
    }
    let started_unix_ms = bench_cli::unix_ms_now();
    let Loaded { mut router, checkpoint_file } = flags.load_untrained()?;
    let data = read_dataset(q, &router)?;
    let settings = CvSettings { seeds: (0..q.seeds).collect(), ..CvSettings::default() };
    let main_setting = (router.config().max_tokens, router.config().truncation);

    let mut sweep: Vec<(usize, TruncationSide)> =
        q.truncation_sweep.iter().flat_map(|&l| [(l, TruncationSide::Left), (l, TruncationSide::KeepStart)]).collect();
    sweep.dedup();
    // One step per routing pass and its cross-validations, the main setting's first; equal weights.
    let passes = 1 + sweep.iter().filter(|s| **s != main_setting).count();
    let mut log = Progress::new("bench-decide --quality", vec![1.0; passes], output.quiet);
    log.note(&format!("{} tasks × {} models; routing each through decide", data.tasks.len(), data.models.len()));
    log.step("main setting: routing every task");
    let routed = route_logged(&mut router, &data, &mut log)?;
    let feature_rows = routed.feature_rows();
    let texts: Vec<&str> = data.tasks.iter().map(|t| t.prompt.as_str()).collect();

    log.note(&format!(
        "nested cross-validation of the head ({} seeds × {} folds; {} feature maps: {})",
        settings.seeds.len(),
        settings.folds,
        feature_rows.len(),
        feature_rows.iter().map(|(m, _)| m.name()).collect::<Vec<_>>().join(", ")
    ));
    let head_cv = cross_validate(&data, &|train: &[usize]| route::hidden_kernels(&feature_rows, None, train), &settings);
    log.note("nested cross-validation of TF-IDF + logistic regression");
    let tfidf_cv =
        cross_validate(&data, &|train: &[usize]| vec![("tfidf".to_string(), quality::learn::tfidf_kernel(&texts, train))], &settings);

    let mut rows = Vec::new();
    for subset in Subset::ALL {
        rows.extend(quality::baseline_rows(&data, subset));
        for mode in &routed.modes {
            rows.push(quality::policy_row(
                &data,
                subset,
                &format!("router, similarity scoring, {mode}"),
                Family::Untrained,
                &[similarity_choices(&data, &routed, mode)],
            ));
        }
        rows.extend(mode_rows(&data, subset, "router, trained head (CV)", &head_cv));
        rows.extend(mode_rows(&data, subset, "TF-IDF + logistic regression (CV)", &tfidf_cv));
    }
    let similarity_curve = quality::Curve {
        policy: "router, similarity scoring".into(),
        points: settings
            .lambdas
            .iter()
            .map(|&lambda| {
                let choices: Vec<usize> = routed.scores.iter().zip(&routed.costs).map(|(p, c)| data.pick(p, c, lambda)).collect();
                let t = quality::totals(&data, &choices, &data.indices(Subset::All));
                quality::CurvePoint { lambda, resolved: quality::Stat::exact(t.resolved), cost_usd: quality::Stat::exact(t.cost_usd) }
            })
            .collect(),
    };
    let curves = vec![
        quality::cv_curve(&data, "router, trained head (CV)", &head_cv, &settings.lambdas),
        quality::cv_curve_predicted(&data, "router, trained head (CV), per-task cost", &head_cv, &settings.lambdas),
        quality::cv_curve(&data, "TF-IDF + logistic regression (CV)", &tfidf_cv, &settings.lambdas),
        similarity_curve,
    ];

    // The deployable head, trained on every task, then checked by loading it.
    let trained_on = format!("{} tasks of CodeRouterBench OOD176 ({} failed runs as recorded)", data.tasks.len(), data.failed_runs());
    let similarity: std::collections::BTreeMap<String, Vec<usize>> =
        routed.modes.iter().map(|mode| (mode.clone(), similarity_choices(&data, &routed, mode))).collect();
    let evaluation = route::evaluation(&data, &similarity, &head_cv, &settings);
    let calibration = quality::doubt::calibration(&data, &head_cv);
    let doubt = quality::doubt::doubt_study(&data, &head_cv);
    let sigmas: Vec<f64> = calibration.iter().map(|c| c.p_sigma).collect();
    let head = route::train_head(&router, &data, &routed.features, &settings, &trained_on, &sigmas, evaluation);
    let head_bytes = serde_json::to_vec_pretty(&head)?;
    if let Some(dir) = q.head_out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("--head-out {}", q.head_out.display()))?;
    }
    std::fs::write(&q.head_out, &head_bytes).with_context(|| format!("--head-out {}", q.head_out.display()))?;
    let head_file = q.head_out.display().to_string();
    // Read back and attached as a user would, so a head that does not fit fails here.
    let loaded_head = router::LoadedHead::from_json(&head_bytes, &head_file)?;
    router.attach_loaded_head(loaded_head.clone(), &head_file)?;
    router.detach_head();
    let head_record = quality::HeadRecord { id: loaded_head.id.clone(), file: head_file, trained_on: head.trained_on.clone() };
    let per_task: Vec<quality::RoutedTask> = routed
        .tasks
        .iter()
        .zip(&routed.features)
        .map(|(task, features)| quality::RoutedTask { head_top: route::head_tops(&loaded_head, features, &routed.modes), ..task.clone() })
        .collect();

    // The truncation trade-off: every other setting routed anew.
    let mut truncation = Vec::new();
    let default_mode = router.pool.default_mode.clone();
    // Every setting's features, for a head whose inner CV also chooses the truncation.
    let mut every_setting: Vec<((usize, TruncationSide), route::FeatureRows)> = Vec::new();
    for setting in sweep {
        if setting == main_setting {
            // Already routed and cross-validated above.
            truncation.push(truncation_point(&data, &routed, &head_cv, setting, &default_mode));
            every_setting.push((setting, feature_rows.clone()));
            continue;
        }
        let (max_tokens, side) = setting;
        router.retruncate(max_tokens, side).with_context(|| format!("--truncation-sweep {max_tokens}"))?;
        log.step(&format!("{max_tokens} tokens, {}: routing every task", side.name()));
        let here = route_logged(&mut router, &data, &mut log)?;
        let rows_here = here.feature_rows();
        let cv = cross_validate(&data, &|train: &[usize]| route::hidden_kernels(&rows_here, Some(&SWEEP_MAPS), train), &settings);
        truncation.push(truncation_point(&data, &here, &cv, setting, &default_mode));
        every_setting.push((setting, rows_here));
    }
    router.retruncate(main_setting.0, main_setting.1)?;

    // Is the best cell of the sweep real? The same head with the truncation
    // chosen by the inner CV too (each setting with the sweep's two maps),
    // so the outer folds judge the choice rather than the reader.
    let mut chosen = vec![
        ("trained head".to_string(), quality::chosen_summary(&head_cv)),
        ("TF-IDF + logistic regression".to_string(), quality::chosen_summary(&tfidf_cv)),
    ];
    if every_setting.len() > 1 {
        log.note(&format!("nested cross-validation of the head choosing among {} truncation settings too", every_setting.len()));
        let kernels_for = |train: &[usize]| -> quality::KernelSet {
            every_setting
                .iter()
                .flat_map(|((max_tokens, side), rows)| {
                    route::hidden_kernels(rows, Some(&SWEEP_MAPS), train)
                        .into_iter()
                        .map(move |(name, kernel)| (format!("{name} at {max_tokens} {}", side.name()), kernel))
                })
                .collect()
        };
        let joint_cv = cross_validate(&data, &kernels_for, &settings);
        for subset in Subset::ALL {
            rows.extend(mode_rows(&data, subset, "router, trained head (CV, truncation chosen inside)", &joint_cv));
        }
        chosen.push(("trained head, truncation chosen inside".to_string(), quality::chosen_summary(&joint_cv)));
    }

    let study = QualityStudy {
        dataset: format!("CodeRouterBench OOD176 (MIT): {} and {}", q.tasks.display(), q.results.display()),
        tasks: data.tasks.len(),
        failed_runs: data.failed_runs(),
        failed_run_rule: quality::FAILED_RUN_RULE.into(),
        cv: settings.clone(),
        modes: quality::MODES.iter().map(|(m, d)| (m.to_string(), d.to_string())).collect(),
        rows,
        curves,
        chosen,
        decide: routed.decide(),
        router_max_tokens: main_setting.0,
        truncation_side: main_setting.1,
        head: Some(head_record),
        truncation,
        published_note: quality::PUBLISHED_NOTE.into(),
        per_task,
        calibration,
        doubt: Some(doubt),
        cost_prediction: quality::cost_prediction(&data, &head_cv),
    };
    let report = Report::for_study(
        bench_cli::native_environment(started_unix_ms),
        Provenance::of(&router, &checkpoint_file),
        router.load_timings,
        q.tasks.display().to_string(),
        Studies { quality: Some(study), ..Studies::default() },
    );
    bench_cli::write_report(out, &report)?;
    drop(log);
    // Printed from the report's section, so what is shown is what was stored.
    let study = report.studies.quality.as_ref().expect("set above");
    let figure = |suffix: &str, svg: String| -> Result<PathBuf> {
        let path = out.with_extension(suffix);
        std::fs::write(&path, svg).with_context(|| format!("{}", path.display()))?;
        Ok(path)
    };
    let curves = figure("cost-quality.svg", study.cost_quality_svg())?;
    let trade_off = if study.truncation.is_empty() { None } else { Some(figure("truncation.svg", study.truncation_svg())?) };
    if output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}", study.table());
    for verdict in study.verdicts() {
        println!("- {verdict}");
    }
    println!("figures: {}{}", curves.display(), trade_off.map_or(String::new(), |p| format!(", {}", p.display())));
    if let Some(d) = study.decide {
        println!(
            "decide (prefilling call per task, {} tasks): p50 {}, p95 {}",
            d.n,
            bench::report::format_ms(d.p50),
            bench::report::format_ms(d.p95)
        );
    }
    println!(
        "head {} written to {} ({})\nwrote {}",
        head_record_id(study),
        q.head_out.display(),
        study.head.as_ref().map_or("", |h| h.trained_on.as_str()),
        out.display()
    );
    Ok(())
}

/// `bench-decide --precision-agreement`: every task routed at f32 and at
/// int8, the same trained head (`--head`, or the one in reports/ for this
/// checkpoint) read over each precision's features, and the two sets of
/// decisions compared (`bench::quality::agreement`). What int8 as the
/// default would change for a visitor, measured rather than assumed.
pub fn run_agreement(flags: &RouterFlags, q: &QualityFlags, out: &Path, output: crate::Output) -> Result<()> {
    use bench::quality::agreement::{self, HeadView, Side};
    use bench_cli::cli::PrecisionArg;

    if let Some(limit) = q.limit.filter(|&limit| limit == 0) {
        return Err(usage(format!("--limit {limit}: give at least one task")));
    }
    let started_unix_ms = bench_cli::unix_ms_now();
    let at = |precision: PrecisionArg| RouterFlags { precision, ..flags.clone() };
    let mut log = Progress::new("bench-decide --precision-agreement", vec![1.0, 1.0], output.quiet);

    /// One precision's pass over the tasks through the head.
    struct Pass {
        precision: String,
        probabilities: Vec<Vec<f32>>,
        costs: Vec<Vec<f64>>,
        features: Vec<Vec<f32>>,
        decide_ms: Vec<f64>,
    }
    let mut passes: Vec<Pass> = Vec::new();
    let mut last = None;
    // The head and the data, read once: both passes load the same checkpoint.
    let mut inputs: Option<(router::LoadedHead, String, Dataset)> = None;
    for precision in [PrecisionArg::F32, PrecisionArg::Int8] {
        let Loaded { mut router, checkpoint_file } = at(precision).load_untrained()?;
        if inputs.is_none() {
            let head_path = match &flags.head {
                Some(path) => path.clone(),
                None => bench_cli::find_head(Path::new(bench_cli::HEADS_DIR), router.backbone_checkpoint_id())?.ok_or_else(|| {
                    usage(format!(
                        "no trained head for checkpoint {} in {}/: give --head (bench-decide --quality trains one)",
                        router.backbone_checkpoint_id(),
                        bench_cli::HEADS_DIR
                    ))
                })?,
            };
            let head_file = head_path.display().to_string();
            let head = router::LoadedHead::from_json(&read(&head_path, "--head")?, &head_file)?;
            inputs = Some((head, head_file, read_dataset(q, &router)?));
        }
        let (head, head_file, data) = inputs.as_ref().expect("read in the first pass");
        // Attached, so a head that does not fit this backbone is refused with its reason.
        router.attach_loaded_head(head.clone(), head_file)?;
        router.detach_head();
        let described = router.precision_label();
        log.step(&format!("{described}: routing every task"));
        let routed = route_logged(&mut router, data, &mut log)?;
        let map = head.head.feature_map();
        let mut pass = Pass { precision: described, probabilities: vec![], costs: vec![], features: vec![], decide_ms: vec![] };
        for (task, features) in data.tasks.iter().zip(&routed.features) {
            let x = features
                .get(map)
                .with_context(|| format!("task {}: the prefill pooled no {} features for the head", task.id, map.name()))?;
            pass.probabilities.push(head.probabilities(x));
            pass.costs.push(head.costs(x));
            pass.features.push(x.to_vec());
        }
        pass.decide_ms = routed.tasks.iter().map(|t| t.decide_ms).collect();
        passes.push(pass);
        last = Some((router, checkpoint_file));
    }
    drop(log);
    let (router, checkpoint_file) = last.expect("two passes ran");
    let (head, _, data) = inputs.expect("read in the first pass");
    fn side(p: &Pass) -> Side<'_> {
        Side { precision: &p.precision, probabilities: &p.probabilities, costs: &p.costs, features: &p.features, decide_ms: &p.decide_ms }
    }
    let candidates: Vec<&str> = head.head.candidates.iter().map(|c| c.id.as_str()).collect();
    let modes: Vec<(String, f64)> = head.head.modes.iter().map(|(m, l)| (m.clone(), *l)).collect();
    let view = HeadView { id: &head.id, trained_on: &head.head.trained_on, candidates: &candidates, modes: &modes };
    let study = agreement::compare(&data, view, side(&passes[0]), side(&passes[1]))?;
    let report = Report::for_study(
        bench_cli::native_environment(started_unix_ms),
        Provenance::of(&router, &checkpoint_file),
        router.load_timings,
        q.tasks.display().to_string(),
        Studies { precision: Some(study), ..Studies::default() },
    );
    bench_cli::write_report(out, &report)?;
    if output.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("{}", report.studies.precision.as_ref().expect("set above").table());
    println!("wrote {}", out.display());
    Ok(())
}

fn head_record_id(study: &QualityStudy) -> &str {
    study.head.as_ref().map_or("—", |h| h.id.as_str())
}
