//! The serving test of the field guide's note 06 as an experiment: the
//! study (a load sweep and a chunking sweep on one checkpoint and prompt
//! set), its table, verdicts and figures, and the engine that runs `decide`
//! on a `Router` for the scheduler. The scheduler, the records and their
//! statistics are the `serving` crate's.

#[cfg(feature = "engine")]
pub mod engine;
pub mod plot;

use serde::{Deserialize, Serialize};
use serving::{knee, ms_or_beyond, Outcome, Policy, ServeRun, TracePrompt, KNEE_SHARE};

/// A serving study: the runs of a load sweep and a chunking sweep, on one
/// checkpoint and prompt set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServeStudy {
    /// Where the prompts came from, and how long each is kept.
    pub prompt_set: String,
    pub prompts: Vec<TracePrompt>,
    pub router_max_tokens: usize,
    /// `poisson` or the trace file's name.
    pub arrivals: String,
    pub runs: Vec<ServeRun>,
    /// What else ran on the machine, as the caller states it.
    #[serde(default)]
    pub note: String,
    /// One whole decide of the heaviest prompt (most kept tokens, then
    /// most text to tokenise) before the first run, nothing queued (ms):
    /// the slowest request on this machine without load, against which the
    /// SLO is read. Absent in studies written before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unloaded_heaviest_ms: Option<f64>,
}

impl ServeStudy {
    /// Runs without chunking under FCFS, by rate: the load sweep.
    pub fn load_sweep(&self) -> Vec<&ServeRun> {
        let mut runs: Vec<&ServeRun> =
            self.runs.iter().filter(|r| r.settings.chunk.is_none() && r.settings.policy == Policy::Fcfs).collect();
        runs.sort_by(|a, b| a.settings.rate_per_s.total_cmp(&b.settings.rate_per_s));
        runs.dedup_by(|a, b| a.settings.rate_per_s == b.settings.rate_per_s);
        runs
    }

    pub fn knee(&self) -> Option<f64> {
        knee(&self.load_sweep(), KNEE_SHARE)
    }

    /// The load-sweep run that served the most within the SLO per second
    /// (the lowest rate on a tie): past it, more offered load serves no
    /// more. Unlike the knee it exists even when the SLO is tighter than
    /// some unloaded requests.
    pub fn goodput_peak(&self) -> Option<&ServeRun> {
        self.load_sweep().into_iter().fold(None, |best: Option<&ServeRun>, run| match best {
            Some(b) if b.summary.goodput_per_s >= run.summary.goodput_per_s => Some(b),
            _ => Some(run),
        })
    }

    /// The rates at which more than one chunk setting ran: the chunk sweep.
    pub fn chunk_rates(&self) -> Vec<f64> {
        let mut rates: Vec<f64> = self.runs.iter().map(|r| r.settings.rate_per_s).collect();
        rates.sort_by(f64::total_cmp);
        rates.dedup();
        rates
            .into_iter()
            .filter(|&rate| self.runs.iter().filter(|r| r.settings.rate_per_s == rate && r.settings.chunk.is_some()).count() > 0)
            .collect()
    }
}

/// A round step for time ticks over `seconds`.
fn plot_step(seconds: f64) -> f64 {
    [1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0].into_iter().find(|s| seconds / s <= 10.0).unwrap_or(1200.0)
}

/// A latency in a sentence: "1234 ms", or "not served".
fn with_unit(p: Option<f64>) -> String {
    p.map_or_else(|| "not served".to_string(), |v| format!("{v:.0} ms"))
}

impl ServeStudy {
    /// The table's header and one row of cells per run (latencies in ms
    /// over the measurement interval; "not served" where the quantile falls
    /// on a request that timed out, was rejected or did not finish).
    pub fn table_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "offered /s",
            "arrived /s",
            "chunk",
            "policy",
            "measured",
            "served",
            "≤ SLO /s",
            "timed out",
            "rejected",
            "unfinished",
            "e2e p50",
            "e2e p95",
            "e2e p99",
            "queue p95",
            "prefill p95",
            "short p95",
            "long p95",
            "max in system",
            "busy",
        ];
        let rows = self
            .runs
            .iter()
            .map(|r| {
                let s = &r.summary;
                vec![
                    r.settings.rate_per_s.to_string(),
                    format!("{:.2}", r.arrived_per_s()),
                    r.settings.chunk_label(),
                    r.settings.policy.label().to_string(),
                    s.measured.to_string(),
                    s.outcome(Outcome::Served).to_string(),
                    format!("{:.2}", s.goodput_per_s),
                    s.outcome(Outcome::TimedOut).to_string(),
                    s.outcome(Outcome::Rejected).to_string(),
                    s.unfinished.to_string(),
                    ms_or_beyond(s.end_to_end.p50),
                    ms_or_beyond(s.end_to_end.p95),
                    ms_or_beyond(s.end_to_end.p99),
                    ms_or_beyond(s.queue.p95),
                    ms_or_beyond(s.prefill.p95),
                    ms_or_beyond(s.short.p95),
                    ms_or_beyond(s.long.p95),
                    s.max_in_system.to_string(),
                    format!("{:.0} %", s.utilisation * 100.0),
                ]
            })
            .collect();
        (header, rows)
    }

    /// [`ServeStudy::table_cells`] as Markdown.
    pub fn table(&self) -> String {
        let (header, rows) = self.table_cells();
        let mut out = format!("| {} |\n|{}\n", header.join(" | "), "---:|".repeat(header.len()));
        for row in rows {
            out.push_str(&format!("| {} |\n", row.join(" | ")));
        }
        out
    }

    /// Sentences computed from the runs: the knee, and at each chunk-sweep
    /// rate what chunking with shortest-first did to short and long
    /// requests against one whole prefill.
    pub fn verdicts(&self) -> Vec<String> {
        let mut out = Vec::new();
        let sweep = self.load_sweep();
        if let (Some(first), Some(last)) = (sweep.first(), sweep.last()) {
            let slo = first.settings.slo_ms;
            out.push(match self.knee().and_then(|k| sweep.iter().find(|r| r.summary.offered_per_s == k)) {
                Some(at) => {
                    let beyond = if last.summary.offered_per_s > at.summary.offered_per_s {
                        format!(
                            " Past it the queue grows: at {} /s offered ({:.2} /s arrived), {:.2} /s within the SLO, {} in the system at most.",
                            last.summary.offered_per_s,
                            last.arrived_per_s(),
                            last.summary.goodput_per_s,
                            last.summary.max_in_system
                        )
                    } else {
                        " The sweep did not go past it.".to_string()
                    };
                    format!(
                        "Knee: up to {} requests/s offered ({:.2} /s arrived in the measured interval), at least {:.0} % of the arrivals were served within {slo:.0} ms.{beyond}",
                        at.summary.offered_per_s,
                        at.arrived_per_s(),
                        KNEE_SHARE * 100.0
                    )
                }
                None => format!(
                    "No knee in the sweep: even at {} requests/s offered less than {:.0} % of the arrivals were served within {slo:.0} ms.",
                    first.summary.offered_per_s,
                    KNEE_SHARE * 100.0
                ),
            });
        }
        if let (Some(peak), Some(last)) = (self.goodput_peak(), sweep.last()) {
            if peak.summary.offered_per_s < last.summary.offered_per_s {
                out.push(format!(
                    "Saturation: the most served within the SLO was {:.2} /s, at {} requests/s offered (engine busy {:.0} %); at {} /s offered it was {:.2} /s.",
                    peak.summary.goodput_per_s,
                    peak.summary.offered_per_s,
                    peak.summary.utilisation * 100.0,
                    last.summary.offered_per_s,
                    last.summary.goodput_per_s
                ));
            }
        }
        if let (Some(unloaded), Some(first)) = (self.unloaded_heaviest_ms, sweep.first()) {
            out.push(format!(
                "The SLO ({:.0} ms) against this machine's speed: one decide of the heaviest prompt ({} tokens kept) took {unloaded:.0} ms with nothing queued.",
                first.settings.slo_ms,
                self.prompts.iter().map(|p| p.tokens).max().unwrap_or(0)
            ));
        }
        for rate in self.chunk_rates() {
            let at = |chunk: Option<usize>, policy: Policy| {
                self.runs.iter().find(|r| r.settings.rate_per_s == rate && r.settings.chunk == chunk && r.settings.policy == policy)
            };
            let Some(whole) = at(None, Policy::Fcfs) else { continue };
            let best = self
                .runs
                .iter()
                .filter(|r| r.settings.rate_per_s == rate && r.settings.chunk.is_some() && r.settings.policy == Policy::ShortestFirst)
                .filter_map(|r| r.summary.short.p95.map(|p| (r, p)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((run, short)) = best {
                out.push(format!(
                    "At {rate} requests/s, chunks of {} with shortest first: short requests' p95 {} against {} with one whole prefill (FCFS); long requests' p95 {} against {}.",
                    run.settings.chunk_label(),
                    with_unit(Some(short)),
                    with_unit(whole.summary.short.p95),
                    with_unit(run.summary.long.p95),
                    with_unit(whole.summary.long.p95)
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
