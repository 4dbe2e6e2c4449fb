//! A run's figures from its records: the queue over time, percentiles in
//! which an unserved request counts as beyond every value, goodput within
//! the SLO, the knee of a load sweep, and the one-line summary.

use serde::{Deserialize, Serialize};

use crate::{LengthClass, Outcome, QueueSample, RequestRecord, ServeSettings};

/// Requests in the system (arrived and not yet ended; a rejected one never
/// enters) and waiting (not yet started) over time, exactly, from the
/// records: one sample at t = 0 and one after each instant at which
/// something arrived, started or ended.
pub fn queue_from_records(records: &[RequestRecord]) -> Vec<QueueSample> {
    // (time, change in the system, change in waiting); at equal times the
    // ends come first, so no instant counts a request twice.
    let mut events: Vec<(f64, i64, i64)> = Vec::new();
    for r in records.iter().filter(|r| r.outcome != Outcome::Rejected) {
        events.push((r.arrival_ms, 1, 1));
        match r.start_ms {
            Some(start) => {
                events.push((start, 0, -1));
                events.push((r.end_ms, -1, 0));
            }
            None => events.push((r.end_ms, -1, -1)),
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut queue = vec![QueueSample { t_ms: 0.0, in_system: 0, waiting: 0 }];
    let (mut in_system, mut waiting) = (0i64, 0i64);
    for (i, &(t, d_system, d_waiting)) in events.iter().enumerate() {
        in_system += d_system;
        waiting += d_waiting;
        if events.get(i + 1).is_none_or(|next| next.0 > t) {
            queue.push(QueueSample { t_ms: t, in_system: in_system.max(0) as usize, waiting: waiting.max(0) as usize });
        }
    }
    queue
}

/// p50, p95 and p99 in ms; `None` where a request never got that far
/// counts as beyond every finite value (so a quantile that falls on one is
/// `None`: "not served").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub n: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
}

impl Percentiles {
    /// Over `values`, where `None` is worse than any value.
    pub fn of(values: impl IntoIterator<Item = Option<f64>>) -> Percentiles {
        let mut finite: Vec<f64> = Vec::new();
        let mut n = 0;
        for v in values {
            n += 1;
            if let Some(v) = v {
                finite.push(v);
            }
        }
        finite.sort_by(f64::total_cmp);
        // Nearest rank among all n (no interpolation: past the last finite
        // value there is nothing to interpolate towards).
        let at = |q: f64| -> Option<f64> {
            let rank = (q * n as f64).ceil().max(1.0) as usize;
            finite.get(rank - 1).copied()
        };
        Percentiles { n, p50: at(0.50), p95: at(0.95), p99: at(0.99) }
    }
}

/// One run's figures over the measurement interval (arrivals after the
/// warm-up), with the warm-up's counts beside them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub offered_per_s: f64,
    pub arrivals: usize,
    pub measured: usize,
    /// Measured requests per outcome, in [`Outcome::ALL`] order.
    pub outcomes: Vec<(Outcome, usize)>,
    pub warmup_outcomes: Vec<(Outcome, usize)>,
    /// End to end over every measured request (not served = beyond).
    pub end_to_end: Percentiles,
    /// Over the measured requests that started.
    pub queue: Percentiles,
    pub prefill: Percentiles,
    pub other: Percentiles,
    pub preempted: Percentiles,
    /// Served within the SLO per second of the measurement interval.
    pub goodput_per_s: f64,
    /// Decisions (served or late) per second of the measurement interval.
    pub throughput_per_s: f64,
    /// End to end of the measured short and long requests.
    pub short: Percentiles,
    pub long: Percentiles,
    /// Requests in the system when the arrivals stopped.
    pub in_system_at_end: usize,
    /// Requests still in the system when the run stopped.
    pub unfinished: usize,
    /// Engine busy time ÷ the run's length.
    pub utilisation: f64,
    pub max_in_system: usize,
}

impl RunSummary {
    pub fn of(settings: &ServeSettings, records: &[RequestRecord], queue: &[QueueSample], arrivals: usize, busy_ms: f64) -> RunSummary {
        let measured: Vec<&RequestRecord> = records.iter().filter(|r| !r.warmup).collect();
        let count = |rs: &[&RequestRecord], o: Outcome| rs.iter().filter(|r| r.outcome == o).count();
        let warm: Vec<&RequestRecord> = records.iter().filter(|r| r.warmup).collect();
        let window_s = settings.duration_s - settings.warmup_s;
        let e2e = |r: &&RequestRecord| (r.outcome == Outcome::Served).then(|| r.elapsed_ms());
        let started: Vec<&&RequestRecord> = measured.iter().filter(|r| r.start_ms.is_some()).collect();
        let class = |c: LengthClass| Percentiles::of(measured.iter().filter(|r| r.class == c).map(e2e));
        let end = settings.end_ms();
        let in_system_at_end = records.iter().filter(|r| r.arrival_ms <= end && r.end_ms > end && r.outcome != Outcome::Rejected).count();
        let run_ms = records.iter().map(|r| r.end_ms).fold(end, f64::max);
        RunSummary {
            offered_per_s: settings.rate_per_s,
            arrivals,
            measured: measured.len(),
            outcomes: Outcome::ALL.iter().map(|&o| (o, count(&measured, o))).collect(),
            warmup_outcomes: Outcome::ALL.iter().map(|&o| (o, count(&warm, o))).collect(),
            end_to_end: Percentiles::of(measured.iter().map(e2e)),
            queue: Percentiles::of(started.iter().map(|r| Some(r.queue_ms))),
            prefill: Percentiles::of(started.iter().map(|r| Some(r.prefill_ms))),
            other: Percentiles::of(started.iter().map(|r| Some(r.other_ms))),
            preempted: Percentiles::of(started.iter().map(|r| Some(r.preempted_ms))),
            goodput_per_s: measured.iter().filter(|r| r.within(settings.slo_ms)).count() as f64 / window_s,
            throughput_per_s: measured.iter().filter(|r| r.top.is_some()).count() as f64 / window_s,
            short: class(LengthClass::Short),
            long: class(LengthClass::Long),
            in_system_at_end,
            unfinished: count(&records.iter().collect::<Vec<_>>(), Outcome::Unfinished),
            utilisation: busy_ms / run_ms.max(1.0),
            max_in_system: queue.iter().map(|q| q.in_system).max().unwrap_or(0),
        }
    }

    pub fn outcome(&self, o: Outcome) -> usize {
        self.outcomes.iter().find(|(x, _)| *x == o).map_or(0, |(_, n)| *n)
    }
}

/// One load run: settings, every request, the queue over time, the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeRun {
    pub label: String,
    pub settings: ServeSettings,
    pub records: Vec<RequestRecord>,
    pub queue: Vec<QueueSample>,
    pub summary: RunSummary,
}

impl ServeRun {
    /// A run from its settings and records (in any order) and how many
    /// arrivals it had: the queue series and the summary are derived, so a
    /// report's runs can be derived again under this build's definitions
    /// (`bench-decide --serve --render`). The engine's busy time is the
    /// requests' own engine time, prefill and the other stages.
    pub fn from_records(label: String, settings: ServeSettings, mut records: Vec<RequestRecord>, arrivals: usize) -> ServeRun {
        records.sort_by_key(|r| r.id);
        let queue = queue_from_records(&records);
        let busy_ms = records.iter().map(|r| r.prefill_ms + r.other_ms).sum();
        let summary = RunSummary::of(&settings, &records, &queue, arrivals, busy_ms);
        ServeRun { label, settings, records, queue, summary }
    }

    /// This run derived again from its records ([`ServeRun::from_records`]).
    pub fn derived_again(&self) -> ServeRun {
        ServeRun::from_records(self.label.clone(), self.settings.clone(), self.records.clone(), self.summary.arrivals)
    }

    /// Arrivals per second in the measurement interval: what was offered
    /// in fact. A Poisson draw of a few minutes can fall well short of the
    /// nominal rate (or pass it), so the knee compares against this.
    pub fn arrived_per_s(&self) -> f64 {
        self.summary.measured as f64 / (self.settings.duration_s - self.settings.warmup_s)
    }

    /// [`summary_line`] of this run.
    pub fn summary_line(&self) -> String {
        summary_line(&self.label, &self.settings, &self.summary)
    }
}

/// The knee of a load sweep: the highest offered rate at which at least
/// `share` of the measured arrivals were served within the SLO, with every
/// lower rate too (runs in rate order).
pub fn knee(runs: &[&ServeRun], share: f64) -> Option<f64> {
    let mut knee = None;
    for run in runs {
        if run.summary.goodput_per_s >= share * run.arrived_per_s() {
            knee = Some(run.summary.offered_per_s);
        } else {
            break;
        }
    }
    knee
}

/// The share of the arrivals that must be served within the SLO for a
/// rate to count as sustained (below the knee).
pub const KNEE_SHARE: f64 = 0.9;

/// A latency in a table cell: whole milliseconds, or "not served".
pub fn ms_or_beyond(p: Option<f64>) -> String {
    p.map_or_else(|| "not served".to_string(), |v| format!("{v:.0}"))
}

/// A run's name: offered rate, chunk and policy.
pub fn run_label(settings: &ServeSettings) -> String {
    let rate = (settings.rate_per_s * 1000.0).round() / 1000.0;
    format!("{rate} req/s, chunk {}, {}", settings.chunk_label(), settings.policy.label())
}

/// One line per run, as the CLI prints it while a sweep runs and the page
/// lists the finished runs: from the run's name, settings and figures only
/// (the worker posts these, not the records, as each run ends).
pub fn summary_line(label: &str, settings: &ServeSettings, s: &RunSummary) -> String {
    format!(
        "{}: {} measured, {} served ({} within {:.0} ms), {} timed out, {} rejected, {} unfinished; end to end p50/p95/p99 {}/{}/{} ms; goodput {:.2}/s; max {} in system",
        label,
        s.measured,
        s.outcome(Outcome::Served),
        (s.goodput_per_s * (settings.duration_s - settings.warmup_s)).round(),
        settings.slo_ms,
        s.outcome(Outcome::TimedOut),
        s.outcome(Outcome::Rejected),
        s.unfinished,
        ms_or_beyond(s.end_to_end.p50),
        ms_or_beyond(s.end_to_end.p95),
        ms_or_beyond(s.end_to_end.p99),
        s.goodput_per_s,
        s.max_in_system
    )
}
