//! The third timing boundary, the whole request at the client (the field
//! guide's "first token & completion"), as data: what a load generator saw
//! of each request it sent to an OpenAI-compatible endpoint, the
//! endpoint's own account of the same request when it gives one, and note
//! 06's decomposition checked against the client's clock:
//!
//! `TTFT = T_queue + T_prompt_path + T_first_content`
//!
//! Pure (no clock, no HTTP): `gateway` measures and fills these in; the
//! page can read a run written by the CLI. A client run carries a
//! [`GenerationRun`] built from the client's records, so everything that
//! plots a serving run plots a client run the same way, beside it.

use serde::{Deserialize, Serialize};
use serving::generation::{GenOutcome, GenRecord, GenSettings, GenSummary};
use serving::Percentiles;

use crate::decode_study::GenerationRun;
use crate::svg::escape;

/// The endpoint's account of one request, as this workbench's server
/// writes it into the last streamed event (the `workbench` field of the
/// OpenAI chunk; other engines have no such field, and their requests go
/// unchecked). Durations on the server's clock, from when it had read the
/// whole request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerTimings {
    /// Read to the first engine iteration that fed it: waiting for the
    /// engine (and, for `model: "auto"`, deciding, which is also given apart).
    pub queue_ms: f64,
    /// The first iteration that fed it to its first token: the prompt's
    /// prefill, in one piece or in chunks among other requests' decodes.
    pub prompt_path_ms: f64,
    /// The first token to the first token that decoded to visible text
    /// (a leading newline or a partial character is not content).
    pub first_content_ms: f64,
    /// `Router.decide`'s wall time, when the request asked for `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_ms: Option<f64>,
    /// The candidate the router chose, and the model that served it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed: Option<Routed>,
    pub prompt_tokens: usize,
    pub prefill_chunks: usize,
    pub preemptions: usize,
}

impl ServerTimings {
    /// The server's part of the time to first content.
    pub fn to_first_content_ms(&self) -> f64 {
        self.queue_ms + self.prompt_path_ms + self.first_content_ms
    }
}

/// A routed request: what `decide` chose, and which model generated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Routed {
    pub candidate: String,
    pub served_by: String,
}

/// One request as the client saw it: its [`GenRecord`] (times from the
/// run's start on the client's clock; the first token is the first event
/// carrying text, the gaps are between such events) and what only a client
/// sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRecord {
    pub record: GenRecord,
    /// When it was actually sent (open loop: its arrival, plus whatever
    /// the client itself was late).
    pub sent_ms: Option<f64>,
    /// The response's status and headers arrived.
    pub headers_ms: Option<f64>,
    /// The first server-sent event, whatever it carried.
    pub first_event_ms: Option<f64>,
    /// Whether that first event carried visible text (the note asks).
    pub first_event_had_content: bool,
    /// The first visible text (not whitespace).
    pub first_content_ms: Option<f64>,
    pub status: Option<u16>,
    /// Why it did not complete, as the endpoint or the connection said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Sends that failed to connect before this one was answered
    /// (counted, never hidden).
    pub retries: usize,
    /// Why the stream ended, as the endpoint said (`stop`, `length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerTimings>,
}

impl ClientRecord {
    /// Sent to the first visible text, on the client's clock.
    pub fn ttfc_ms(&self) -> Option<f64> {
        Some(self.first_content_ms? - self.sent_ms?)
    }

    /// The client's time to first content less the server's account of it:
    /// what neither the server's queue, prompt path nor first content
    /// explains (sending the request, reading it, the response's way back,
    /// the client's own scheduling).
    pub fn unaccounted_ms(&self) -> Option<f64> {
        Some(self.ttfc_ms()? - self.server.as_ref()?.to_first_content_ms())
    }
}

/// The decomposition over a run's served requests that carried the
/// server's account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decomposition {
    /// Requests with both clocks' figures.
    pub checked: usize,
    /// Of those, the sum within [`Decomposition::tolerance_ms`] of the
    /// client's time to first content.
    pub within: usize,
    pub queue_ms: Percentiles,
    pub prompt_path_ms: Percentiles,
    pub first_content_ms: Percentiles,
    /// Client TTFC less the server's sum.
    pub unaccounted_ms: Percentiles,
    /// Requests whose first event carried visible text.
    pub first_event_had_content: usize,
    pub with_first_event: usize,
}

impl Decomposition {
    /// The tolerance a request's sum must keep: 5 ms, or 5 % of its time
    /// to first content if that is more (the client shares this machine's
    /// cores with the server on loopback; its own scheduling is in the gap).
    pub fn tolerance_ms(ttfc_ms: f64) -> f64 {
        (0.05 * ttfc_ms).max(5.0)
    }

    pub fn of(records: &[ClientRecord]) -> Decomposition {
        let checked: Vec<&ClientRecord> =
            records.iter().filter(|r| r.record.outcome == GenOutcome::Served && r.unaccounted_ms().is_some()).collect();
        let server = |f: fn(&ServerTimings) -> f64| Percentiles::of(checked.iter().map(|r| r.server.as_ref().map(f)));
        let within = checked
            .iter()
            .filter(|r| {
                let (gap, ttfc) = (r.unaccounted_ms().unwrap_or(f64::INFINITY), r.ttfc_ms().unwrap_or(0.0));
                gap.abs() <= Decomposition::tolerance_ms(ttfc)
            })
            .count();
        Decomposition {
            checked: checked.len(),
            within,
            queue_ms: server(|s| s.queue_ms),
            prompt_path_ms: server(|s| s.prompt_path_ms),
            first_content_ms: server(|s| s.first_content_ms),
            unaccounted_ms: Percentiles::of(checked.iter().map(|r| r.unaccounted_ms())),
            first_event_had_content: records.iter().filter(|r| r.first_event_ms.is_some() && r.first_event_had_content).count(),
            with_first_event: records.iter().filter(|r| r.first_event_ms.is_some()).count(),
        }
    }

    /// The check in words: how many sums match, and what is unaccounted.
    pub fn lines(&self) -> Vec<String> {
        let ms = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
        let p = |x: &Percentiles| format!("p50 {} · p95 {} ms", ms(x.p50), ms(x.p95));
        let mut lines = vec![format!(
            "The first event carried visible text in {} of {} requests (the rest opened with a role header or whitespace).",
            self.first_event_had_content, self.with_first_event
        )];
        if self.checked == 0 {
            lines.push(
                "TTFT decomposition: the endpoint gave no account of its own (no `workbench` field), so only the client's figures stand."
                    .into(),
            );
            return lines;
        }
        lines.push(format!(
            "TTFT = T_queue ({}) + T_prompt_path ({}) + T_first_content ({}), on the server's clock.",
            p(&self.queue_ms),
            p(&self.prompt_path_ms),
            p(&self.first_content_ms)
        ));
        lines.push(format!(
            "The sum matches the client's time to first content within max(5 ms, 5 %) for {} of {} served requests; unaccounted (request upload, response transport, the client's own scheduling): {}.",
            self.within,
            self.checked,
            p(&self.unaccounted_ms)
        ));
        lines
    }
}

/// One replay of a trace against one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientRun {
    /// The base URL it was sent to.
    pub endpoint: String,
    /// The `model` field each request carried.
    pub model: String,
    /// The client's records as a serving run (no iterations: the client
    /// cannot see the engine's), for every table and plot of one.
    pub run: GenerationRun,
    /// What only the client saw, one per record, in the records' order.
    pub requests: Vec<ClientRecord>,
    pub decomposition: Decomposition,
}

impl ClientRun {
    /// A run from its client records; `settings` carries the client's
    /// timeout, warm-up and SLOs (its batch settings are the endpoint's
    /// business and unknown here).
    pub fn new(endpoint: String, model: String, rate_per_s: f64, settings: GenSettings, requests: Vec<ClientRecord>) -> ClientRun {
        let records: Vec<GenRecord> = requests.iter().map(|r| r.record.clone()).collect();
        let summary = GenSummary::of(&records, &settings);
        let decomposition = Decomposition::of(&requests);
        let run = GenerationRun {
            rate_per_s,
            settings,
            summary,
            records,
            iterations: Vec::new(),
            layout: serving::disaggregation::Layout::Colocated { replicas: 1 },
            transfers: Vec::new(),
            busy_ms: Vec::new(),
            // An endpoint's K/V is its own business, as its batching is.
            kv_block_bytes: 0,
            link_gbit_per_s: None,
        };
        ClientRun { endpoint, model, run, requests, decomposition }
    }
}

/// What the worker reports of one routed request in the page (the
/// page's own engine is the upstream): the router's choice and its two
/// boundaries, and the request's account on the worker's clock from when
/// the worker took the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestAccount {
    /// `encode_and_score`'s share of the decide: tokenising, prefill,
    /// stacking and scores (the decide less mode, assembly, cost and ranking).
    pub encode_scores_ms: f64,
    pub timings: ServerTimings,
    pub tokens_out: usize,
    /// `stop` or `length`; absent when cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// One routed request in the page: the worker's account and what the
/// page's UI thread saw of it (its [`ClientRecord`]: times from the click
/// that sent it, on the UI thread's clock, as each message arrived).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageRequest {
    /// The user turn's length in characters (the text itself is not kept:
    /// a shared link should not carry what someone typed).
    pub prompt_chars: usize,
    pub encode_scores_ms: f64,
    pub client: ClientRecord,
}

impl PageRequest {
    /// The cells of [`request_rows`]' row for this request.
    fn cells(&self) -> Vec<String> {
        let ms = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.1}"));
        let c = &self.client;
        let s = c.server.as_ref();
        let gaps = Percentiles::of(c.record.gaps_ms.iter().map(|&g| Some(g)));
        vec![
            s.and_then(|s| s.routed.as_ref()).map_or("–".into(), |r| format!("{} → {}", r.candidate, r.served_by)),
            format!("{:.1}", self.encode_scores_ms),
            ms(s.and_then(|s| s.decide_ms)),
            ms(s.map(|s| s.queue_ms)),
            ms(s.map(|s| s.prompt_path_ms)),
            ms(s.map(|s| s.first_content_ms)),
            ms(c.record.first_token_ms),
            ms(c.first_content_ms),
            format!("{} / {}", ms(gaps.p50), ms(gaps.p95)),
            ms(Some(c.record.end_ms)),
            c.record.tokens_out.to_string(),
            ms(c.unaccounted_ms()),
        ]
    }
}

/// The columns of the routed requests' table: the router's two boundaries
/// and the worker's account on its clock, then the page's (the client's).
pub const REQUEST_COLUMNS: [&str; 12] = [
    "routed to",
    "encode + scores ms",
    "decide ms",
    "T_queue ms (decide inside)",
    "T_prompt_path ms",
    "T_first_content ms",
    "first token at the page ms",
    "first content at the page ms",
    "ITL p50 / p95 ms (page)",
    "completion ms (page)",
    "tokens",
    "unaccounted ms",
];

/// The table of routed requests, a row each.
pub fn request_rows(requests: &[PageRequest]) -> Vec<Vec<String>> {
    requests.iter().map(PageRequest::cells).collect()
}

/// The columns of the load generator's runs, as the page shows a report
/// that holds them.
pub const RUN_COLUMNS: [&str; 9] = [
    "endpoint",
    "model",
    "req/s",
    "served",
    "TTFT p50 / p95 ms",
    "first content p50 / p95 ms",
    "ITL p50 / p95 ms",
    "tokens/s",
    "sums within tolerance",
];

/// The load generator's runs, a row each (the client's figures; the
/// decomposition where the endpoint gave its account).
pub fn run_rows(runs: &[ClientRun]) -> Vec<Vec<String>> {
    let ms = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
    let pair = |p: &Percentiles| format!("{} / {}", ms(p.p50), ms(p.p95));
    runs.iter()
        .map(|run| {
            let s = &run.run.summary;
            let ttfc = Percentiles::of(
                run.requests.iter().filter(|r| !r.record.warmup).map(|r| r.first_content_ms.map(|c| c - r.record.arrival_ms)),
            );
            let d = &run.decomposition;
            vec![
                run.endpoint.clone(),
                run.model.clone(),
                run.run.rate_per_s.to_string(),
                format!("{} of {}", s.served, s.measured),
                pair(&s.ttft_ms),
                pair(&ttfc),
                pair(&s.itl_ms),
                format!("{:.1}", s.tokens_per_s),
                if d.checked == 0 { "no server account".into() } else { format!("{} of {}", d.within, d.checked) },
            ]
        })
        .collect()
}

/// The replayed runs side by side: TTFT p95 at the client against the
/// arrival rate, a line per endpoint (a rate whose p95 fell on a request
/// never served is left out: the table says "–" there).
pub fn runs_svg(runs: &[ClientRun]) -> String {
    let mut endpoints: Vec<(&str, &str)> = Vec::new();
    for run in runs {
        if !endpoints.contains(&(run.endpoint.as_str(), run.model.as_str())) {
            endpoints.push((&run.endpoint, &run.model));
        }
    }
    let series: Vec<crate::svg::PlotSeries> = endpoints
        .iter()
        .enumerate()
        .map(|(i, (endpoint, model))| crate::svg::PlotSeries {
            label: format!("{endpoint} ({model})"),
            class: format!("{}", i % 8),
            points: runs
                .iter()
                .filter(|r| (r.endpoint.as_str(), r.model.as_str()) == (*endpoint, *model))
                .filter_map(|r| r.run.summary.ttft_ms.p95.map(|p95| (r.run.rate_per_s, p95 / 1000.0, None)))
                .collect(),
            line: true,
        })
        .collect();
    crate::svg::plot_svg("TTFT p95 at the client, by endpoint", "arrival rate (requests/s)", "TTFT p95 (s)", &series)
}

/// The whole request at the client, in a report (schema 5): the page's
/// routed requests, and `openai-replay`'s runs when a report carries them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientStudy {
    #[serde(default)]
    pub requests: Vec<PageRequest>,
    #[serde(default)]
    pub runs: Vec<ClientRun>,
    /// How `runs`' arrivals came: "poisson" (from the seed) or the trace
    /// file replayed, as the serving test's study says it; absent for the
    /// page's own requests, which a user sends one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<String>,
}

/// One row per routed request on a shared time axis from the click: the
/// worker's account as bars (decide, the rest of the queue, the prompt
/// path, the wait for visible text, then decoding to the end), and the
/// page's clock as marks (each token's arrival; a taller mark at the first
/// visible text). The space between the end of the bars' first content and
/// the page's mark is what neither clock's parts explain.
pub fn request_timeline_svg(requests: &[PageRequest]) -> String {
    const W: f64 = 640.0;
    const L: f64 = 150.0;
    const R: f64 = 16.0;
    let bar = 14.0;
    let h = 30.0 + (bar + 6.0) * requests.len().max(1) as f64 + 24.0;
    let end = requests.iter().map(|r| r.client.record.end_ms).fold(1.0, f64::max);
    let x = |t: f64| L + (W - L - R) * t.clamp(0.0, end) / end;
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {h:.0}" role="img" class="request-timeline" aria-label="Routed requests, decide to completion"><title>Routed requests, decide to completion</title>"#
    );
    out.push_str(&crate::serve::plot::time_axis(end, h, x));
    for (i, r) in requests.iter().enumerate() {
        let y = 28.0 + (bar + 6.0) * i as f64;
        let c = &r.client;
        let label = c.server.as_ref().and_then(|s| s.routed.as_ref()).map_or("–".to_string(), |r| r.candidate.clone());
        out.push_str(&format!(
            r#"<text class="row-label" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            L - 6.0,
            y + bar * 0.75,
            escape(&format!("#{} {label}", i + 1))
        ));
        if let Some(s) = &c.server {
            let decide = s.decide_ms.unwrap_or(0.0);
            let parts = [
                ("decide", 0.0, decide, "decide"),
                ("queue", decide, s.queue_ms, "rest of the queue"),
                ("prompt", s.queue_ms, s.queue_ms + s.prompt_path_ms, "prompt path"),
                ("first-content", s.queue_ms + s.prompt_path_ms, s.to_first_content_ms(), "to first content"),
                ("decode", s.to_first_content_ms(), c.record.end_ms, "decoding"),
            ];
            for (class, from, to, what) in parts {
                if to > from {
                    out.push_str(&format!(
                        r#"<rect class="{class}" x="{:.1}" y="{y:.1}" width="{:.2}" height="{bar:.1}"><title>{what}: {:.1} ms</title></rect>"#,
                        x(from),
                        (x(to) - x(from)).max(0.5),
                        to - from
                    ));
                }
            }
        }
        let mut at = c.record.first_token_ms;
        let mut ticks: Vec<f64> = at.into_iter().collect();
        for gap in &c.record.gaps_ms {
            at = at.map(|t| t + gap);
            ticks.extend(at);
        }
        for t in ticks {
            out.push_str(&format!(
                r#"<line class="token" x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}"/>"#,
                x(t),
                y + bar,
                y + bar + 4.0
            ));
        }
        if let Some(t) = c.first_content_ms {
            out.push_str(&format!(
                r#"<line class="first-content" x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}"><title>first content at the page: {3:.1} ms</title></line>"#,
                x(t),
                y - 2.0,
                y + bar + 6.0,
                t
            ));
        }
    }
    out.push_str(&format!(
        r#"<text class="legend" x="{L}" y="{:.1}">bars: the worker's account (decide, queue, prompt path, to first content, decoding); marks: tokens reaching the page</text></svg>"#,
        h - 4.0
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(id: u64, sent: f64, content: f64, server_sum: Option<f64>) -> ClientRecord {
        ClientRecord {
            record: GenRecord {
                id,
                prompt_tokens: 10,
                max_new_tokens: 4,
                warmup: false,
                arrival_ms: sent,
                start_ms: None,
                first_token_ms: Some(content),
                gaps_ms: vec![5.0; 3],
                end_ms: content + 15.0,
                tokens_out: 4,
                prefill_chunks: 0,
                preemptions: 0,
                outcome: GenOutcome::Served,
            },
            sent_ms: Some(sent),
            headers_ms: Some(sent + 1.0),
            first_event_ms: Some(content - 1.0),
            first_event_had_content: false,
            first_content_ms: Some(content),
            status: Some(200),
            error: None,
            retries: 0,
            finish_reason: Some("length".into()),
            server: server_sum.map(|sum| ServerTimings {
                queue_ms: sum * 0.5,
                prompt_path_ms: sum * 0.4,
                first_content_ms: sum * 0.1,
                decide_ms: None,
                routed: None,
                prompt_tokens: 10,
                prefill_chunks: 1,
                preemptions: 0,
            }),
        }
    }

    /// A request whose server account explains its TTFT to within the
    /// tolerance counts as matched; one with 40 ms unexplained does not;
    /// one with no account is not checked at all.
    #[test]
    fn the_decomposition_names_what_the_server_does_not_account_for() {
        let records = vec![served(0, 0.0, 100.0, Some(98.0)), served(1, 10.0, 210.0, Some(160.0)), served(2, 20.0, 50.0, None)];
        let d = Decomposition::of(&records);
        assert_eq!((d.checked, d.within), (2, 1));
        assert_eq!(records[1].unaccounted_ms(), Some(40.0));
        assert_eq!(d.with_first_event, 3);
        assert_eq!(d.first_event_had_content, 0);
        assert!(d.lines().iter().any(|l| l.contains("1 of 2 served requests")), "{:?}", d.lines());
    }

    /// The figure is plot elements only, and a hostile candidate name
    /// (it can come from a shared link) stays inert text.
    #[test]
    fn the_request_timeline_holds_plot_elements_only() {
        let hostile = r#"<script>"x'"#;
        let mut record = served(0, 0.0, 100.0, Some(98.0));
        if let Some(s) = record.server.as_mut() {
            s.decide_ms = Some(20.0);
            s.routed = Some(Routed { candidate: hostile.into(), served_by: "m".into() });
        }
        let request = PageRequest { prompt_chars: 10, encode_scores_ms: 15.0, client: record };
        let svg = request_timeline_svg(std::slice::from_ref(&request));
        crate::svg::assert_inert(&svg, hostile);
        assert_eq!(svg.matches(r#"class="token""#).count(), 4);
        assert_eq!(request_rows(&[request])[0].len(), REQUEST_COLUMNS.len());
    }

    #[test]
    fn a_client_run_round_trips_through_json() {
        let settings = GenSettings {
            batch: serving::batching::BatchSettings {
                budget_blocks: 0,
                max_running: 0,
                mixing: serving::batching::Mixing::PrefillFirst,
                memory: serving::batching::Memory::Recompute,
            },
            timeout_ms: 1000.0,
            warmup_ms: 0.0,
            drain_ms: 1000.0,
            ttft_slo_ms: 500.0,
            tpot_slo_ms: 50.0,
        };
        let run = ClientRun::new("http://127.0.0.1:1".into(), "m".into(), 2.0, settings, vec![served(0, 0.0, 100.0, Some(98.0))]);
        let back: ClientRun = serde_json::from_str(&serde_json::to_string(&run).unwrap()).unwrap();
        assert_eq!(back, run);
        assert_eq!(run.run.summary.served, 1);
        let hostile = r#"<script>"x'"#;
        crate::svg::assert_inert(&runs_svg(&[ClientRun { endpoint: hostile.into(), ..run.clone() }]), hostile);
        let rows = run_rows(&[run]);
        assert_eq!(rows[0].len(), RUN_COLUMNS.len());
        assert_eq!((rows[0][3].as_str(), rows[0][8].as_str()), ("1 of 1", "1 of 1"));
    }
}
