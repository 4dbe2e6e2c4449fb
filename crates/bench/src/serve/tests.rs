//! The serving study's verdicts and figures over runs the scheduler made
//! against `serving::testing::TimedEngine`.

use super::*;
use serving::testing::*;
use serving::{ServeSettings, Server};
use std::cell::Cell;
use std::rc::Rc;

#[test]
fn the_goodput_peak_and_the_verdicts_read_the_load_sweep() {
    let run = |offered: f64, goodput: f64| drawn_run(offered, offered, goodput);
    // The goodput peak exists without a knee (an SLO tighter than an
    // unloaded long request), is the first of equal rates, and the verdicts
    // name it with the SLO read against the unloaded decide.
    let study = |runs: Vec<ServeRun>| ServeStudy {
        prompt_set: "test".into(),
        prompts: prompts(),
        router_max_tokens: 1024,
        arrivals: "poisson".into(),
        runs,
        note: String::new(),
        unloaded_heaviest_ms: Some(5000.0),
    };
    let saturating = study(vec![run(0.1, 0.05), run(0.2, 0.08), run(0.3, 0.08), run(0.5, 0.02)]);
    assert_eq!(saturating.knee(), None);
    assert_eq!(saturating.goodput_peak().map(|r| r.summary.offered_per_s), Some(0.2));
    let verdicts = saturating.verdicts();
    assert!(
        verdicts.iter().any(|v| v.starts_with("Saturation: the most served within the SLO was 0.08 /s, at 0.2 requests/s")),
        "{verdicts:?}"
    );
    assert!(verdicts.iter().any(|v| v.contains("took 5000 ms with nothing queued")), "{verdicts:?}");
    // Still rising at the last rate: no saturation claimed.
    assert!(!study(vec![run(0.1, 0.1), run(0.2, 0.2)]).verdicts().iter().any(|v| v.starts_with("Saturation")));
}

#[test]
fn hostile_task_names_and_run_labels_stay_text_in_every_figure() {
    use crate::svg::{assert_inert, texts_and_values, HOSTILE};
    let hostile_prompts = vec![TracePrompt { task: HOSTILE.into(), tokens: 64 }, TracePrompt { task: "long".into(), tokens: 1024 }];
    let mut runs = Vec::new();
    for (rate, chunk) in [(1.0, None), (2.0, None), (1.0, Some(256))] {
        let clock = Rc::new(Cell::new(0.0));
        let mut e = TimedEngine { prompts: hostile_prompts.clone(), ..engine(&clock) };
        let settings = ServeSettings { rate_per_s: rate, ..settings(chunk, Policy::Fcfs) };
        let server = Server::new(settings, hostile_prompts.clone(), arrivals(&[(0.0, 0), (10.0, 1), (20.0, 0)])).unwrap();
        let mut run = drive(server, &mut e, &clock);
        run.label = HOSTILE.into();
        runs.push(run);
    }
    let study = ServeStudy {
        prompt_set: HOSTILE.into(),
        prompts: hostile_prompts,
        router_max_tokens: 1024,
        arrivals: HOSTILE.into(),
        runs,
        note: HOSTILE.into(),
        unloaded_heaviest_ms: None,
    };
    let run = &study.runs[0];
    assert_inert(&plot::timeline_svg(run), HOSTILE);
    assert_inert(&plot::queue_svg(&run.queue, run.settings.end_ms(), &run.label), HOSTILE);
    // The sweep and chunk figures carry no label of the user's; they must still parse as inert.
    texts_and_values(&plot::load_svg(&study));
    texts_and_values(&plot::chunks_svg(&study));
}
