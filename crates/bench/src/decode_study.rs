//! Note 06's generating experiment as data and figures, without the
//! engine (the page's UI thread draws them): a run ([`GenerationRun`]),
//! the note's figure from a real run (one row per request, its prefill
//! chunks and decode iterations coloured on a shared time axis), the
//! trade-off plot (inter-token latency p95 against TTFT p95, a point per
//! run, a line per mixing policy) and the trade-off named from the
//! numbers.

use serde::{Deserialize, Serialize};
use serving::batching::{BatchSettings, Memory, Mixing};
use serving::disaggregation::{Cluster, HandOff, Layout, Transfer};
use serving::generation::{GenOutcome, GenRecord, GenSettings, GenSummary, Iteration};

use crate::svg::{escape, plot_svg, step_points, PlotSeries};

/// One generating run: its settings and everything it recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationRun {
    pub rate_per_s: f64,
    pub settings: GenSettings,
    pub summary: GenSummary,
    pub records: Vec<GenRecord>,
    pub iterations: Vec<Iteration>,
    /// How many engine instances served it, and how (older runs: one).
    #[serde(default = "one_instance")]
    pub layout: Layout,
    /// P/D separation's hand-offs, one per request decoded on the second instance.
    #[serde(default)]
    pub transfers: Vec<Transfer>,
    /// Each instance's time stepping work, ms (empty for older runs).
    #[serde(default)]
    pub busy_ms: Vec<f64>,
    /// Bytes of a K/V block as the budget counts it (the calculator's
    /// bytes a token, every layer keeping every token, times the block's
    /// tokens); 0 in older runs, which recorded no K/V over time.
    #[serde(default)]
    pub kv_block_bytes: u64,
    /// The link between P/D instances whose time was added to each
    /// hand-off, Gbit/s (none: the measured copy alone).
    #[serde(default)]
    pub link_gbit_per_s: Option<f64>,
}

fn one_instance() -> Layout {
    Layout::Colocated { replicas: 1 }
}

impl GenerationRun {
    /// A finished run of `server`, whose budget counts blocks of
    /// `kv_block_bytes`.
    pub fn from_server<E: serving::generation::StepEngine>(
        rate_per_s: f64,
        settings: GenSettings,
        server: &serving::generation::GenServer<E>,
        kv_block_bytes: u64,
    ) -> GenerationRun {
        GenerationRun {
            rate_per_s,
            settings,
            summary: GenSummary::of(server.records(), &settings),
            records: server.records().to_vec(),
            iterations: server.iterations().to_vec(),
            layout: one_instance(),
            transfers: Vec::new(),
            busy_ms: Vec::new(),
            kv_block_bytes,
            link_gbit_per_s: None,
        }
    }

    /// A finished run of `cluster` (as [`GenerationRun::from_server`]).
    pub fn from_cluster<E: HandOff>(rate_per_s: f64, cluster: &Cluster<E>, kv_block_bytes: u64) -> GenerationRun {
        let settings = cluster.gen_settings();
        let records = cluster.records();
        GenerationRun {
            rate_per_s,
            settings,
            summary: GenSummary::of(&records, &settings),
            records,
            iterations: cluster.iterations(),
            layout: cluster.settings().layout,
            transfers: cluster.transfers().to_vec(),
            busy_ms: cluster.busy_ms(),
            kv_block_bytes,
            link_gbit_per_s: cluster.settings().link_gbit_per_s,
        }
    }

    /// The policy without the rate: its mixing, and its layout when it has
    /// more than one instance.
    pub fn policy(&self) -> String {
        match self.layout {
            Layout::Colocated { replicas: 1 } => self.settings.batch.mixing.label(),
            layout => format!("{}, {}", self.settings.batch.mixing.label(), layout.label()),
        }
    }

    pub fn label(&self) -> String {
        match self.layout {
            Layout::Colocated { replicas: 1 } => format!("{} req/s, {}", self.rate_per_s, self.settings.batch.mixing.label()),
            layout => format!("{} req/s, {}, {}", self.rate_per_s, self.settings.batch.mixing.label(), layout.label()),
        }
    }
}

/// Output lengths as the dataset recorded them: per task and model, the
/// tokens a call produced on average (`out_tok / calls`), leaving out the
/// rows with no tokens (failed runs), each capped at `cap`.
pub fn recorded_output_lengths(results_csv: &str, cap: usize) -> Result<Vec<usize>, String> {
    let mut reader = csv::Reader::from_reader(results_csv.as_bytes());
    let headers = reader.headers().map_err(|e| e.to_string())?.clone();
    let column = |name: &str| headers.iter().position(|h| h == name).ok_or_else(|| format!("the results have no `{name}` column"));
    let (out, calls) = (column("out_tok")?, column("calls")?);
    let mut lengths = Vec::new();
    for (line, row) in reader.records().enumerate() {
        let row = row.map_err(|e| format!("line {}: {e}", line + 2))?;
        let number = |i: usize| row.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let (out, calls) = (number(out), number(calls));
        if out > 0.0 && calls > 0.0 {
            lengths.push(((out / calls).round() as usize).clamp(1, cap.max(1)));
        }
    }
    if lengths.is_empty() {
        return Err("the results hold no row with output tokens".into());
    }
    Ok(lengths)
}

/// What a generating serving test asks for: the runs (each rate × each
/// mixing × each layout) and what they share. The engine turns the K/V
/// budget into pages by the checkpoint's formula; each instance of a
/// layout has that budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationPlan {
    pub rates: Vec<f64>,
    pub mixings: Vec<Mixing>,
    /// One engine instance, colocated replicas or P/D separation.
    #[serde(default = "single_layout")]
    pub layouts: Vec<Layout>,
    /// A link between P/D instances, Gbit/s: its time for each hand-off's
    /// bytes is added to the measured copy (none: the copy alone).
    #[serde(default)]
    pub link_gbit_per_s: Option<f64>,
    pub memory: Memory,
    pub kv_budget_mib: f64,
    pub max_running: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub drain_s: f64,
    pub timeout_s: f64,
    pub max_prompt_tokens: usize,
    pub ttft_slo_ms: f64,
    pub tpot_slo_ms: f64,
    pub seed: u64,
}

fn single_layout() -> Vec<Layout> {
    vec![one_instance()]
}

/// One run of a [`GenerationPlan`]: its load's rate, each instance's
/// settings, and the instances.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedRun {
    pub rate_per_s: f64,
    pub settings: GenSettings,
    pub layout: Layout,
}

impl GenerationPlan {
    /// Every run, rates outermost, then mixings, then layouts (so a P/D
    /// run follows the colocated one it is read against); `budget_blocks`
    /// from the engine.
    pub fn runs(&self, budget_blocks: usize) -> Vec<PlannedRun> {
        let mut runs = Vec::new();
        for &rate_per_s in &self.rates {
            for &mixing in &self.mixings {
                let settings = GenSettings {
                    batch: BatchSettings { budget_blocks, max_running: self.max_running, mixing, memory: self.memory },
                    timeout_ms: self.timeout_s * 1000.0,
                    warmup_ms: self.warmup_s * 1000.0,
                    drain_ms: self.drain_s * 1000.0,
                    ttft_slo_ms: self.ttft_slo_ms,
                    tpot_slo_ms: self.tpot_slo_ms,
                };
                runs.extend(self.layouts.iter().map(|&layout| PlannedRun { rate_per_s, settings, layout }));
            }
        }
        runs
    }

    /// Refuses a plan that cannot run, naming the field.
    pub fn check(&self) -> Result<(), String> {
        if self.rates.is_empty() || self.rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
            return Err("rates: give positive rates, requests a second".into());
        }
        if self.mixings.is_empty() {
            return Err("mixing: give at least one".into());
        }
        if self.layouts.is_empty() {
            return Err("layouts: give at least one".into());
        }
        if let Some(bad) = self.link_gbit_per_s.filter(|g| !(g.is_finite() && *g > 0.0)) {
            return Err(format!("link_gbit: {bad} is not a positive rate; leave it empty for no link"));
        }
        if let Some(Layout::Colocated { replicas }) = self.layouts.iter().find(|l| l.instances() > MOST_INSTANCES) {
            return Err(format!("layouts: replicas:{replicas} is more instances than the {MOST_INSTANCES} a run may have"));
        }
        if !(self.duration_s > self.warmup_s && self.warmup_s >= 0.0) {
            return Err("duration: must be longer than the warm-up".into());
        }
        if self.kv_budget_mib.is_nan() || self.kv_budget_mib <= 0.0 || self.max_running == 0 || self.max_prompt_tokens == 0 {
            return Err("the K/V budget, the running limit and the prompt cut must be positive".into());
        }
        Ok(())
    }
}

/// The most engine instances a run may have: each holds a K/V budget of
/// its own, and every one of them runs on this machine.
pub const MOST_INSTANCES: usize = 8;

/// The page's form for a generating serving test, as typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationForm {
    pub rates: String,
    pub mixings: String,
    /// Forms saved before layouts existed read as one instance.
    #[serde(default = "single_layout_text")]
    pub layouts: String,
    /// Empty: no link between P/D instances.
    #[serde(default)]
    pub link_gbit: String,
    pub duration_s: String,
    pub warmup_s: String,
    pub max_prompt_tokens: String,
    pub max_new_cap: String,
    pub kv_budget_mib: String,
    pub max_running: String,
}

impl Default for GenerationForm {
    /// A short run the browser finishes in about half a minute a policy.
    fn default() -> GenerationForm {
        GenerationForm {
            rates: "1".into(),
            mixings: "prefill-first, decode-first, chunked:32".into(),
            layouts: single_layout_text(),
            link_gbit: String::new(),
            duration_s: "12".into(),
            warmup_s: "2".into(),
            max_prompt_tokens: "96".into(),
            max_new_cap: "32".into(),
            kv_budget_mib: "64".into(),
            max_running: "8".into(),
        }
    }
}

fn single_layout_text() -> String {
    "single".into()
}

impl GenerationForm {
    /// The plan and the output-length cap, or `field: why`.
    pub fn parse(&self) -> Result<(GenerationPlan, usize), String> {
        fn number<T: std::str::FromStr>(field: &str, text: &str) -> Result<T, String> {
            text.trim().parse().map_err(|_| format!("{field}: {:?} is not a number of the kind it takes", text.trim()))
        }
        let rates = self.rates.split(',').map(|r| number::<f64>("rates", r)).collect::<Result<Vec<_>, _>>()?;
        let mixings =
            self.mixings.split(',').map(|m| Mixing::parse(m).map_err(|e| format!("mixing: {e}"))).collect::<Result<Vec<_>, _>>()?;
        let layouts =
            self.layouts.split(',').map(|l| Layout::parse(l).map_err(|e| format!("layouts: {e}"))).collect::<Result<Vec<_>, _>>()?;
        let link_gbit_per_s = match self.link_gbit.trim() {
            "" => None,
            text => Some(number::<f64>("link_gbit", text)?),
        };
        let duration_s: f64 = number("duration", &self.duration_s)?;
        let plan = GenerationPlan {
            rates,
            mixings,
            layouts,
            link_gbit_per_s,
            memory: Memory::Recompute,
            kv_budget_mib: number("kv_budget_mib", &self.kv_budget_mib)?,
            max_running: number("max_running", &self.max_running)?,
            duration_s,
            warmup_s: number("warmup", &self.warmup_s)?,
            drain_s: 60.0,
            timeout_s: 30.0,
            max_prompt_tokens: number("max_prompt_tokens", &self.max_prompt_tokens)?,
            ttft_slo_ms: 2000.0,
            tpot_slo_ms: 200.0,
            seed: 1,
        };
        let cap: usize = number("max_new_cap", &self.max_new_cap)?;
        if cap == 0 {
            return Err("max_new_cap: at least 1 token".into());
        }
        plan.check()?;
        Ok((plan, cap))
    }
}

const W: f64 = 640.0;
const L: f64 = 56.0;
const R: f64 = 16.0;

/// Work on one request between two times, as the figure draws it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stretch {
    start: f64,
    end: f64,
    prefill: bool,
}

/// Each request's stretches of engine work: consecutive iterations of the
/// same kind merged (a decode iteration follows the last within a
/// millisecond), so a run of thousands of iterations stays a small figure.
fn stretches(iterations: &[Iteration], id: u64) -> Vec<Stretch> {
    let mut out: Vec<Stretch> = Vec::new();
    for it in iterations {
        let Some(feed) = it.feeds.iter().find(|f| f.id == id) else { continue };
        match out.last_mut() {
            Some(last) if last.prefill == feed.prefill && it.start_ms - last.end <= 1.0 => last.end = it.end_ms,
            _ => out.push(Stretch { start: it.start_ms, end: it.end_ms, prefill: feed.prefill }),
        }
    }
    out
}

/// Note 06's figure from a real run: a row per request (arrival order),
/// waiting from arrival to its first iteration (light), its prefill chunks
/// (P) and decode iterations (D) in their colours, on one time axis; a
/// request that ended unserved is marked by its outcome. Under P/D
/// separation, each hand-off is drawn from its first token to when the
/// decode instance could admit it (the K/V crossing).
pub fn pd_timeline_svg(run: &GenerationRun) -> String {
    let mut records: Vec<&GenRecord> = run.records.iter().collect();
    records.sort_by(|a, b| a.arrival_ms.total_cmp(&b.arrival_ms));
    let rows = records.len().max(1);
    let bar = match rows {
        0..=30 => 12.0,
        31..=100 => 5.0,
        _ => 2.5,
    };
    let h = 30.0 + bar * rows as f64 + 24.0;
    let end = records.iter().map(|r| r.end_ms).fold(1.0, f64::max);
    let x = |t: f64| L + (W - L - R) * t / end;
    let label = escape(&run.label());
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h:.0}" role="img" class="pd-timeline" aria-label="Prefill and decode: {label}"><title>Prefill and decode: {label}</title>"#
    );
    out.push_str(&crate::serve::plot::time_axis(end, h, x));
    let transfers: std::collections::HashMap<u64, &Transfer> = run.transfers.iter().map(|t| (t.id, t)).collect();
    for (i, r) in records.iter().enumerate() {
        let y = 28.0 + bar * i as f64;
        let waited = r.start_ms.unwrap_or(r.end_ms);
        let outcome = match r.outcome {
            GenOutcome::Served | GenOutcome::HandedOff => "served",
            GenOutcome::TimedOut | GenOutcome::Unfinished => "late",
            GenOutcome::Rejected | GenOutcome::Failed | GenOutcome::Cancelled => "dropped",
        };
        out.push_str(&format!(
            r#"<rect class="wait {outcome}" data-id="{}" x="{:.1}" y="{y:.1}" width="{:.2}" height="{:.1}"><title>#{} ({} prompt tokens, {} out): waited {:.0} ms, first token after {}, {} preemptions</title></rect>"#,
            r.id,
            x(r.arrival_ms),
            (x(waited) - x(r.arrival_ms)).max(0.5),
            bar * 0.8,
            r.id,
            r.prompt_tokens,
            r.tokens_out,
            waited - r.arrival_ms,
            r.ttft_ms().map_or("never".to_string(), |t| format!("{t:.0} ms")),
            r.preemptions,
        ));
        for s in stretches(&run.iterations, r.id) {
            let (class, kind) = if s.prefill { ("prefill", "P") } else { ("decode", "D") };
            out.push_str(&format!(
                r#"<rect class="{class}" x="{:.1}" y="{y:.1}" width="{:.2}" height="{:.1}"><title>#{} {kind} {:.0}–{:.0} ms</title></rect>"#,
                x(s.start),
                (x(s.end) - x(s.start)).max(0.5),
                bar * 0.8,
                r.id,
                s.start,
                s.end
            ));
        }
        // Over the bars beside it, so a hand-off of a millisecond still shows.
        if let Some(t) = transfers.get(&r.id) {
            out.push_str(&format!(
                r#"<rect class="transfer" data-id="{}" x="{:.1}" y="{y:.1}" width="{:.2}" height="{:.1}"><title>#{} K/V hand-off: {:.2} MB, copied out and in in {:.1} ms, admissible {:.1} ms after its first token</title></rect>"#,
                t.id,
                x(t.sent_ms),
                (x(t.arrived_ms) - x(t.sent_ms)).max(1.0),
                bar * 0.8,
                t.id,
                t.bytes as f64 / 1e6,
                t.copy_ms,
                t.arrived_ms - t.sent_ms,
            ));
        }
    }
    // The legend fits the figure's width with the hand-offs' key only in shorter words.
    let legend = if run.transfers.is_empty() {
        "a row per request: waiting (light), prefill chunks P (orange), decode iterations D (blue)"
    } else {
        "a row per request: waiting (light), prefill P (orange), decode D (blue), K/V hand-off (dark)"
    };
    out.push_str(&format!(r#"<text class="legend" x="{L}" y="{:.1}">{legend}</text></svg>"#, h - 4.0));
    out
}

/// The engine's state at the end of an iteration, summed over instances.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct KvSample {
    t_ms: f64,
    payload: u64,
    allocated: u64,
    counted: u64,
    running: usize,
    waiting: usize,
}

/// A run's [`KvSample`]s in time order: after each iteration, each
/// instance's latest figures summed.
fn kv_samples(run: &GenerationRun) -> Vec<KvSample> {
    let mut iterations: Vec<&Iteration> = run.iterations.iter().collect();
    iterations.sort_by(|a, b| a.end_ms.total_cmp(&b.end_ms));
    let instances = iterations.iter().map(|it| it.instance + 1).max().unwrap_or(0);
    let mut latest = vec![KvSample::default(); instances];
    iterations
        .into_iter()
        .map(|it| {
            latest[it.instance] = KvSample {
                t_ms: it.end_ms,
                payload: it.kv.payload,
                allocated: it.kv.allocated,
                counted: it.blocks_in_use as u64 * run.kv_block_bytes,
                running: it.running,
                waiting: it.waiting,
            };
            latest.iter().fold(KvSample { t_ms: it.end_ms, ..KvSample::default() }, |sum, l| KvSample {
                t_ms: sum.t_ms,
                payload: sum.payload + l.payload,
                allocated: sum.allocated + l.allocated,
                counted: sum.counted + l.counted,
                running: sum.running + l.running,
                waiting: sum.waiting + l.waiting,
            })
        })
        .collect()
}

/// Note 03 live, over a run: the running batch's K/V after each iteration
/// by the calculator's formula (payload), as the engine's blocks allocate
/// it, and as the scheduler counts it against the budget (blocks reserved
/// for tokens not yet generated included, under reservation), under the
/// budget; beneath, the requests running and waiting (the queue over
/// time). Several instances are summed. A step line per figure, at most
/// one point a pixel column (its largest value, so no peak is hidden),
/// so a run of thousands of iterations stays a small figure. `None` for
/// runs that recorded no K/V (older reports).
pub fn kv_timeline_svg(run: &GenerationRun) -> Option<String> {
    if run.kv_block_bytes == 0 || run.iterations.is_empty() {
        return None;
    }
    let samples = kv_samples(run);
    let budget = (run.settings.batch.budget_blocks * run.layout.instances()) as u64 * run.kv_block_bytes;
    let end = run.records.iter().map(|r| r.end_ms).chain(samples.iter().map(|s| s.t_ms)).fold(1.0, f64::max);
    let x = |t: f64| L + (W - L - R) * t / end;
    let (bytes_top, bytes_h, queue_top, queue_h) = (14.0, 120.0, 170.0, 70.0);
    let h = queue_top + queue_h + 30.0;
    let max_bytes = samples.iter().map(|s| s.counted.max(s.allocated)).fold(budget, u64::max).max(1) as f64;
    let max_queue = samples.iter().map(|s| s.running + s.waiting).max().unwrap_or(0).max(1) as f64;
    let y_bytes = |b: f64| bytes_top + bytes_h * (1.0 - b / max_bytes);
    let y_queue = |n: f64| queue_top + queue_h * (1.0 - n / max_queue);
    let step_line =
        |value: &dyn Fn(&KvSample) -> f64, y: &dyn Fn(f64) -> f64| step_points(samples.iter().map(|s| (x(s.t_ms), value(s))), y);
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let label = escape(&run.label());
    let most = |f: &dyn Fn(&KvSample) -> u64| samples.iter().map(f).max().unwrap_or(0);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h:.0}" role="img" class="kv-timeline" aria-label="K/V and queue: {label}" data-budget="{budget}" data-max-payload="{}" data-max-allocated="{}" data-max-counted="{}" data-max-running="{}"><title>K/V and queue: {label}</title>"#,
        most(&|s| s.payload),
        most(&|s| s.allocated),
        most(&|s| s.counted),
        most(&|s| s.running as u64),
    );
    out.push_str(&format!(
        r#"<line class="budget" x1="{L}" x2="{right:.1}" y1="{budget_y:.1}" y2="{budget_y:.1}"/><text class="tick" x="{tick_x:.1}" y="{budget_y:.1}" text-anchor="end">{budget_mib:.1} MiB</text><text class="tick" x="{tick_x:.1}" y="{zero_y:.1}" text-anchor="end">0</text>"#,
        right = W - R,
        tick_x = L - 4.0,
        budget_y = y_bytes(budget as f64),
        budget_mib = mib(budget as f64),
        zero_y = y_bytes(0.0),
    ));
    for (class, value) in [
        ("counted", &(|s: &KvSample| s.counted as f64) as &dyn Fn(&KvSample) -> f64),
        ("allocated", &|s: &KvSample| s.allocated as f64),
        ("payload", &|s: &KvSample| s.payload as f64),
    ] {
        out.push_str(&format!(r#"<polyline class="{class}" fill="none" points="{}"/>"#, step_line(value, &y_bytes)));
    }
    // The legend, each key in its line's colour.
    let keys = [
        ("payload", "K/V by the formula (payload)"),
        ("allocated", "allocated in pages"),
        ("counted", "counted against the budget"),
        ("budget", "the budget"),
    ];
    let mut key_x = L;
    for (class, text) in keys {
        out.push_str(&format!(r#"<text class="legend key-{class}" x="{key_x:.0}" y="{:.1}">{text}</text>"#, bytes_top + bytes_h + 16.0));
        key_x += 6.0 * text.len() as f64 + 14.0;
    }
    out.push_str(&format!(
        r#"<text class="tick" x="{:.1}" y="{queue_top:.1}" text-anchor="end" dominant-baseline="hanging">{max_queue}</text><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">0</text>"#,
        L - 4.0,
        L - 4.0,
        y_queue(0.0),
    ));
    out.push_str(&format!(r#"<polyline class="running" fill="none" points="{}"/>"#, step_line(&|s| s.running as f64, &y_queue)));
    out.push_str(&format!(r#"<polyline class="waiting" fill="none" points="{}"/>"#, step_line(&|s| s.waiting as f64, &y_queue)));
    out.push_str(&format!(
        r#"<text class="legend key-running" x="{L}" y="{:.1}">requests running</text><text class="legend key-waiting" x="{:.1}" y="{:.1}">waiting</text><text class="legend" x="{:.1}" y="{:.1}" text-anchor="end">{:.1} s</text></svg>"#,
        h - 8.0,
        L + 130.0,
        h - 8.0,
        W - R,
        h - 8.0,
        end / 1000.0
    ));
    Some(out)
}

/// Inter-token latency p95 against TTFT p95, a point per run labelled by
/// its rate, a line per policy (a mixing on a layout; chunked runs of one
/// token budget are one policy).
pub fn tradeoff_svg(runs: &[GenerationRun]) -> String {
    let mut policies: Vec<String> = Vec::new();
    for run in runs {
        if !policies.contains(&run.policy()) {
            policies.push(run.policy());
        }
    }
    let series: Vec<PlotSeries> = policies
        .iter()
        .enumerate()
        .map(|(i, policy)| {
            let mut points: Vec<(f64, f64, Option<String>)> = runs
                .iter()
                .filter(|r| &r.policy() == policy)
                .filter_map(|r| {
                    let (ttft, itl) = (r.summary.ttft_ms.p95?, r.summary.itl_ms.p95?);
                    Some((ttft / 1000.0, itl, Some(format!("{}/s", r.rate_per_s))))
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            PlotSeries { label: policy.clone(), class: format!("q{}", i % 6), points, line: true }
        })
        .collect();
    plot_svg("Inter-token latency against time to first token", "TTFT p95 (s)", "ITL p95 (ms)", &series)
}

/// The trade-off in words, from the numbers: for each rate, which policy
/// had the lowest ITL p95 and which the lowest TTFT p95, and, between the
/// smallest and largest chunk budgets run, what the smaller chunks bought
/// and cost (tokens/s: the scheduling overhead of more, smaller
/// iterations).
pub fn tradeoff_lines(runs: &[GenerationRun]) -> Vec<String> {
    let mut rates: Vec<f64> = runs.iter().map(|r| r.rate_per_s).collect();
    rates.sort_by(f64::total_cmp);
    rates.dedup();
    let mut lines = Vec::new();
    for rate in rates {
        let at: Vec<&GenerationRun> = runs.iter().filter(|r| r.rate_per_s == rate).collect();
        let best = |f: &dyn Fn(&GenSummary) -> Option<f64>| {
            at.iter().filter_map(|r| f(&r.summary).map(|v| (v, r.policy()))).min_by(|a, b| a.0.total_cmp(&b.0))
        };
        if let (Some(itl), Some(ttft)) = (best(&|s| s.itl_ms.p95), best(&|s| s.ttft_ms.p95)) {
            lines.push(format!(
                "At {rate} req/s the lowest ITL p95 was {} ({:.0} ms) and the lowest TTFT p95 {} ({:.0} ms).",
                itl.1, itl.0, ttft.1, ttft.0
            ));
        }
        // Chunk budgets compared on one instance (the note's setting).
        let mut chunked: Vec<(usize, &GenerationRun)> = at
            .iter()
            .filter(|r| r.layout == one_instance())
            .filter_map(|r| match r.settings.batch.mixing {
                Mixing::Chunked { token_budget } => Some((token_budget, *r)),
                _ => None,
            })
            .collect();
        chunked.sort_by_key(|c| c.0);
        if let (Some(small), Some(large)) = (chunked.first(), chunked.last()) {
            if small.0 != large.0 {
                let p95 = |r: &GenerationRun, f: fn(&GenSummary) -> serving::Percentiles| f(&r.summary).p95.unwrap_or(f64::NAN);
                lines.push(format!(
                    "At {rate} req/s, chunks of {} against {} tokens: ITL p95 {:.0} against {:.0} ms, TTFT p95 {:.0} against {:.0} ms, {:.1} against {:.1} tokens/s{}.",
                    small.0,
                    large.0,
                    p95(small.1, |s| s.itl_ms),
                    p95(large.1, |s| s.itl_ms),
                    p95(small.1, |s| s.ttft_ms),
                    p95(large.1, |s| s.ttft_ms),
                    small.1.summary.tokens_per_s,
                    large.1.summary.tokens_per_s,
                    if small.1.summary.tokens_per_s < large.1.summary.tokens_per_s {
                        ": smaller chunks cost throughput (more iterations, each re-reading the weights)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    lines
}

/// P/D separation against colocated serving in words, from the numbers:
/// for each rate and mixing run disaggregated, its TTFT and ITL p95 beside
/// two colocated replicas' (equal hardware) and one instance's, and what
/// its hand-offs moved and took.
pub fn separation_lines(runs: &[GenerationRun]) -> Vec<String> {
    let mut lines = Vec::new();
    for pd in runs.iter().filter(|r| r.layout == Layout::Disaggregated) {
        let same = |layout: Layout| {
            runs.iter().find(|r| r.layout == layout && r.rate_per_s == pd.rate_per_s && r.settings.batch.mixing == pd.settings.batch.mixing)
        };
        let p95 = |r: &GenerationRun| {
            let one = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
            format!(
                "TTFT p95 {} ms, ITL p95 {} ms, {:.1} tokens/s",
                one(r.summary.ttft_ms.p95),
                one(r.summary.itl_ms.p95),
                r.summary.tokens_per_s
            )
        };
        let mut line = format!("At {} req/s, {}: P/D {}", pd.rate_per_s, pd.settings.batch.mixing.label(), p95(pd));
        // How busy each instance was over the run: the ratio of prefill to
        // decode instances fits the load only if neither idles while the other queues.
        let span = pd.iterations.iter().map(|it| it.end_ms).fold(1.0, f64::max);
        if let [prefill, decode] = pd.busy_ms[..] {
            line.push_str(&format!(
                " (prefill instance busy {:.0} %, decode instance {:.0} %)",
                100.0 * prefill / span,
                100.0 * decode / span
            ));
        }
        if let Some(two) = same(Layout::Colocated { replicas: 2 }) {
            line.push_str(&format!("; two colocated replicas {}", p95(two)));
        }
        if let Some(one) = same(one_instance()) {
            line.push_str(&format!("; one instance {}", p95(one)));
        }
        line.push('.');
        lines.push(line);
        if !pd.transfers.is_empty() {
            let bytes: Vec<f64> = pd.transfers.iter().map(|t| t.bytes as f64).collect();
            let copy = serving::Percentiles::of(pd.transfers.iter().map(|t| Some(t.copy_ms)));
            let in_flight = serving::Percentiles::of(pd.transfers.iter().map(|t| Some(t.arrived_ms - t.sent_ms)));
            let one = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
            lines.push(format!(
                "  {} hand-offs moved {:.1} MB of K/V ({:.2} MB each on average); the copy out and in took p50 {} ms, p95 {} ms; sent to admissible p50 {} ms, p95 {} ms.",
                pd.transfers.len(),
                bytes.iter().sum::<f64>() / 1e6,
                bytes.iter().sum::<f64>() / 1e6 / bytes.len() as f64,
                one(copy.p50),
                one(copy.p95),
                one(in_flight.p50),
                one(in_flight.p95),
            ));
            lines.push(match pd.link_gbit_per_s {
                Some(gbit) => format!(
                    "  Transfer time is the measured copy out of one instance's pages and into the other's, plus the bytes at a link of {gbit} Gbit/s."
                ),
                None => "  Transfer time is the measured copy out of one instance's pages and into the other's (no link modelled).".into(),
            });
            // Older runs recorded no payload to hold the bytes against.
            if pd.transfers.iter().all(|t| t.payload_bytes > 0) {
                let equal = pd.transfers.iter().filter(|t| t.bytes == t.payload_bytes).count();
                lines.push(format!(
                    "  Bytes moved against the kv calculator's payload for each prompt (Σ layers 2 × H_kv × d_head × 4 × retained(T)): {equal} of {} hand-offs equal.",
                    pd.transfers.len()
                ));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serving::batching::{BatchSettings, Memory};
    use serving::generation::Feed;
    use serving::Percentiles;

    fn run(label_rate: f64) -> GenerationRun {
        let settings = GenSettings {
            batch: BatchSettings {
                budget_blocks: 10,
                max_running: 4,
                mixing: Mixing::Chunked { token_budget: 8 },
                memory: Memory::Recompute,
            },
            timeout_ms: 1e9,
            warmup_ms: 0.0,
            drain_ms: 1e9,
            ttft_slo_ms: 100.0,
            tpot_slo_ms: 10.0,
        };
        let record = GenRecord {
            id: 0,
            prompt_tokens: 5,
            max_new_tokens: 3,
            warmup: false,
            arrival_ms: 0.0,
            start_ms: Some(1.0),
            first_token_ms: Some(3.0),
            gaps_ms: vec![1.0, 1.0],
            end_ms: 5.0,
            tokens_out: 3,
            prefill_chunks: 1,
            preemptions: 0,
            outcome: GenOutcome::Served,
        };
        let feed = |prefill| vec![Feed { id: 0, tokens: if prefill { 5 } else { 1 }, prefill }];
        // 100 bytes a token, blocks of 4 tokens: 6 tokens held take 2
        // blocks, 7 too; the last iteration retires the request.
        let kv = |payload, allocated| serving::batching::KvBytes { payload, allocated };
        let iterations = vec![
            Iteration {
                instance: 0,
                start_ms: 1.0,
                end_ms: 3.0,
                feeds: feed(true),
                blocks_in_use: 2,
                running: 1,
                waiting: 1,
                kv: kv(600, 800),
            },
            Iteration {
                instance: 0,
                start_ms: 3.0,
                end_ms: 4.0,
                feeds: feed(false),
                blocks_in_use: 2,
                running: 1,
                waiting: 0,
                kv: kv(700, 800),
            },
            Iteration {
                instance: 0,
                start_ms: 4.0,
                end_ms: 5.0,
                feeds: feed(false),
                blocks_in_use: 0,
                running: 0,
                waiting: 0,
                kv: kv(0, 0),
            },
        ];
        let summary = GenSummary::of(std::slice::from_ref(&record), &settings);
        GenerationRun {
            rate_per_s: label_rate,
            settings,
            summary,
            records: vec![record],
            iterations,
            layout: one_instance(),
            transfers: Vec::new(),
            busy_ms: Vec::new(),
            kv_block_bytes: 400,
            link_gbit_per_s: None,
        }
    }

    #[test]
    fn the_form_parses_or_names_its_field() {
        let (plan, cap) = GenerationForm::default().parse().unwrap();
        assert_eq!(plan.mixings, vec![Mixing::PrefillFirst, Mixing::DecodeFirst, Mixing::Chunked { token_budget: 32 }]);
        assert_eq!((plan.rates.clone(), cap), (vec![1.0], 32));
        assert_eq!(plan.runs(10).len(), 3);
        let (plan, _) =
            GenerationForm { layouts: "single, pd".into(), mixings: "chunked:16".into(), ..GenerationForm::default() }.parse().unwrap();
        let layouts: Vec<Layout> = plan.runs(10).iter().map(|r| r.layout).collect();
        assert_eq!(layouts, vec![Layout::Colocated { replicas: 1 }, Layout::Disaggregated]);
        // A form saved before the layouts field reads as one instance.
        let old: GenerationForm = serde_json::from_str(
            r#"{"rates":"1","mixings":"chunked:8","duration_s":"4","warmup_s":"1","max_prompt_tokens":"32","max_new_cap":"8","kv_budget_mib":"8","max_running":"4"}"#,
        )
        .unwrap();
        assert_eq!(old.parse().unwrap().0.layouts, vec![Layout::Colocated { replicas: 1 }]);
        let refused = |f: GenerationForm| f.parse().unwrap_err();
        assert!(refused(GenerationForm { layouts: "single, p/d".into(), ..GenerationForm::default() }).starts_with("layouts:"));
        assert!(refused(GenerationForm { layouts: "replicas:9".into(), ..GenerationForm::default() }).starts_with("layouts:"));
        assert!(refused(GenerationForm { link_gbit: "0".into(), ..GenerationForm::default() }).starts_with("link_gbit:"));
        assert!(refused(GenerationForm { link_gbit: "fast".into(), ..GenerationForm::default() }).starts_with("link_gbit:"));
        let linked = GenerationForm { link_gbit: " 10 ".into(), ..GenerationForm::default() }.parse().unwrap().0;
        assert_eq!(linked.link_gbit_per_s, Some(10.0));
        assert!(refused(GenerationForm { rates: "1, fast".into(), ..GenerationForm::default() }).starts_with("rates:"));
        assert!(refused(GenerationForm { mixings: "chunked:0".into(), ..GenerationForm::default() }).starts_with("mixing:"));
        assert!(refused(GenerationForm { warmup_s: "20".into(), ..GenerationForm::default() }).starts_with("duration:"));
        assert!(refused(GenerationForm { max_new_cap: "0".into(), ..GenerationForm::default() }).starts_with("max_new_cap:"));
    }

    /// P/D in words: beside the colocated run at the same rate and mixing,
    /// its hand-offs, and the bytes held against the calculator's payload
    /// (a parcel one byte off is not counted equal; older runs say nothing).
    #[test]
    fn separation_names_its_neighbours_and_checks_the_bytes() {
        let single = run(1.0);
        let transfer =
            |id, bytes| Transfer { id, bytes, held_tokens: 5, sent_ms: 1.0, arrived_ms: 3.0, copy_ms: 2.0, payload_bytes: 1_000 };
        let pd = GenerationRun {
            layout: Layout::Disaggregated,
            transfers: vec![transfer(0, 1_000), transfer(1, 1_001)],
            busy_ms: vec![10.0, 20.0],
            ..run(1.0)
        };
        let figure = pd_timeline_svg(&pd);
        assert_eq!(figure.matches(r#"<rect class="transfer""#).count(), 1, "one request has one hand-off drawn: {figure}");
        assert!(figure.contains("K/V hand-off (dark)") && !pd_timeline_svg(&single).contains("hand-off"));
        let lines = separation_lines(&[single.clone(), pd.clone()]);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].contains(": P/D TTFT p95") && lines[0].contains("; one instance TTFT p95"), "{}", lines[0]);
        assert!(lines[1].contains("2 hand-offs moved"), "{}", lines[1]);
        assert!(lines[2].ends_with("(no link modelled)."), "{}", lines[2]);
        assert!(lines[3].ends_with("1 of 2 hand-offs equal."), "{}", lines[3]);
        let linked = separation_lines(&[single.clone(), GenerationRun { link_gbit_per_s: Some(8.0), ..pd.clone() }]);
        assert!(linked[2].ends_with("a link of 8 Gbit/s."), "{}", linked[2]);
        let older = GenerationRun { transfers: pd.transfers.iter().map(|t| Transfer { payload_bytes: 0, ..t.clone() }).collect(), ..pd };
        assert_eq!(separation_lines(&[single.clone(), older]).len(), 3);
        assert!(separation_lines(&[single]).is_empty());
    }

    /// Both figures are well-formed XML of plot elements only (their
    /// labels are numbers and policy names; the page mounts them as HTML).
    #[test]
    fn the_figures_hold_plot_elements_only() {
        let r = run(1.0);
        crate::svg::texts_and_values(&pd_timeline_svg(&r));
        crate::svg::texts_and_values(&kv_timeline_svg(&r).expect("a run with K/V recorded"));
        crate::svg::texts_and_values(&tradeoff_svg(&[r]));
    }

    /// The K/V figure's largest figures are the iterations' (blocks
    /// counted at the block's bytes), the budget is the settings' blocks,
    /// and two instances' figures add up; a run without K/V has none.
    #[test]
    fn the_kv_figure_reads_the_iterations() {
        let mut r = run(1.0);
        let svg = kv_timeline_svg(&r).unwrap();
        for attribute in [r#"data-budget="4000""#, r#"data-max-payload="700""#, r#"data-max-allocated="800""#, r#"data-max-counted="800""#]
        {
            assert!(svg.contains(attribute), "{attribute} in {svg}");
        }
        // The same iterations on a second instance, a millisecond later.
        let second: Vec<Iteration> =
            r.iterations.iter().map(|it| Iteration { instance: 1, end_ms: it.end_ms + 0.001, ..it.clone() }).collect();
        r.iterations.extend(second);
        r.layout = Layout::Colocated { replicas: 2 };
        let svg = kv_timeline_svg(&r).unwrap();
        assert!(svg.contains(r#"data-budget="8000""#) && svg.contains(r#"data-max-payload="1400""#), "{svg}");
        r.kv_block_bytes = 0;
        assert!(kv_timeline_svg(&r).is_none());
    }

    #[test]
    fn consecutive_decodes_merge_into_one_stretch() {
        let r = run(1.0);
        assert_eq!(
            stretches(&r.iterations, 0),
            vec![Stretch { start: 1.0, end: 3.0, prefill: true }, Stretch { start: 3.0, end: 5.0, prefill: false }]
        );
        let svg = pd_timeline_svg(&r);
        assert_eq!(svg.matches(r#"class="prefill""#).count(), 1);
        assert_eq!(svg.matches(r#"class="decode""#).count(), 1);
    }

    #[test]
    fn the_tradeoff_names_the_best_policy_per_rate() {
        let mut a = run(1.0);
        a.summary.itl_ms = Percentiles { n: 3, p50: Some(1.0), p95: Some(2.0), p99: Some(3.0) };
        let mut b = run(1.0);
        b.settings.batch.mixing = Mixing::Chunked { token_budget: 64 };
        b.summary.itl_ms = Percentiles { n: 3, p50: Some(5.0), p95: Some(9.0), p99: Some(12.0) };
        b.summary.tokens_per_s = a.summary.tokens_per_s + 10.0;
        let lines = tradeoff_lines(&[a.clone(), b.clone()]);
        assert!(lines[0].contains("lowest ITL p95 was chunked, 8 tokens an iteration (2 ms)"), "{lines:?}");
        assert!(lines[1].contains("chunks of 8 against 64 tokens") && lines[1].contains("smaller chunks cost throughput"), "{lines:?}");
        let svg = tradeoff_svg(&[a, b]);
        assert!(svg.contains("chunked, 64 tokens an iteration"));
    }
}
