//! A measured report carried in a link: JSON, deflated, base64url. The page
//! puts it in the URL fragment, so it never reaches a server, and renders it
//! read-only, labelled with where and when it was measured.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::report::{Envelope, SCHEMA, SCHEMAS_READ};

/// Prefix of every shared payload; a new layout gets a new prefix.
const PREFIX: &str = "r1.";
/// A shared report never inflates beyond this (a crafted link cannot make
/// the page allocate without bound).
const MAX_JSON_BYTES: usize = 8 << 20;

/// The payload for a link.
pub fn encode<S: Serialize>(report: &Envelope<S>) -> String {
    let json = serde_json::to_vec(report).expect("a report always serialises");
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(miniz_oxide::deflate::compress_to_vec(&json, 9)))
}

/// Reads a payload back, with the sections `S` holds (a section it does not
/// is skipped); the error says what is wrong with the link.
pub fn decode<S: DeserializeOwned>(payload: &str) -> Result<Envelope<S>, String> {
    let body = payload.trim().strip_prefix(PREFIX).ok_or("the shared result does not start with `r1.` (a link from another version?)")?;
    let deflated = URL_SAFE_NO_PAD.decode(body).map_err(|e| format!("the shared result is not base64url: {e}"))?;
    let json = miniz_oxide::inflate::decompress_to_vec_with_limit(&deflated, MAX_JSON_BYTES).map_err(|e| match e.status {
        // The limit stops inflation as soon as it is reached: a deflate bomb
        // costs at most 8 MiB and a moment, never the memory it claims.
        miniz_oxide::inflate::TINFLStatus::HasMoreOutput => {
            format!("the shared result inflates past {} MiB, more than any report (a crafted link?)", MAX_JSON_BYTES >> 20)
        }
        status => format!("the shared result is damaged (cannot inflate: {status:?})"),
    })?;
    let report: Envelope<S> = serde_json::from_slice(&json).map_err(|e| format!("the shared result is not a latency report: {e}"))?;
    check_schema(&report)?;
    Ok(report)
}

/// Reads a report file (exported by the page or written by bench-decide).
pub fn parse_report<S: DeserializeOwned>(json: &str, source: &str) -> Result<Envelope<S>, String> {
    let report: Envelope<S> = serde_json::from_str(json).map_err(|e| format!("{source}: not a latency report: {e}"))?;
    check_schema(&report).map_err(|e| format!("{source}: {e}"))?;
    Ok(report)
}

fn check_schema<S>(report: &Envelope<S>) -> Result<(), String> {
    if !SCHEMAS_READ.contains(&report.schema.as_str()) {
        return Err(format!(
            "schema `{}`, expected `{SCHEMA}` (or an older {})",
            report.schema,
            SCHEMAS_READ[..SCHEMAS_READ.len() - 1].join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{LatencyReport, NoStudies, Report, Studies};
    use crate::testing::sample_report;

    #[test]
    fn round_trips_and_stays_link_sized() {
        let report = sample_report();
        let payload = encode(&report);
        assert_eq!(decode::<Studies>(&payload).unwrap(), report);
        // Three lengths × 25 iterations with their stage timings: a few KB.
        assert!(payload.len() < 16_000, "{}", payload.len());
    }

    #[test]
    fn a_version_1_report_still_reads() {
        // The native report committed before version 2 (no prefix section,
        // no cache stages in its timings), kept as a fixture when the report
        // was rerun.
        let v1 = include_str!("../tests/fixtures/router-latency.v1.json");
        let report: Report = parse_report(v1, "router-latency.cpu.json").unwrap();
        assert_eq!(report.schema, "workbench.router-latency/1");
        assert!(report.studies.prefix.is_none() && report.results.iter().all(|r| r.cold_stages.lookup_ms == 0.0));
    }

    /// Every committed report reads with its sections typed, and as the
    /// latency widget's type, which skips them.
    #[test]
    fn committed_reports_read_typed_and_latency_only() {
        let read = |json: &str, name: &str| (parse_report::<Studies>(json, name).unwrap(), parse_report::<NoStudies>(json, name).unwrap());
        let (quality, latency) = read(include_str!("../../../reports/router-quality.cpu.json"), "quality");
        assert!(quality.studies.quality.is_some_and(|q| !q.per_task.is_empty()));
        assert_eq!(latency.provenance, quality.provenance);
        let (serve, _) = read(include_str!("../../../reports/router-serve.cpu.json"), "serve");
        assert!(serve.studies.serve.as_ref().is_some_and(|s| !s.runs.is_empty()));
        let (browser, _) = read(include_str!("../../../reports/router-serve.browser.json"), "serve (browser)");
        assert!(browser.studies.serve.is_some());
        // A full report shared is a latency report to the widget, and back.
        let mut full = sample_report();
        full.studies.serve = serve.studies.serve.clone();
        let widget: LatencyReport = decode(&encode(&full)).unwrap();
        assert_eq!(widget.results, full.results);
        let back: Report = decode(&encode(&widget)).unwrap();
        assert_eq!(back.studies, Studies::default());
    }

    #[test]
    fn bad_links_are_named() {
        let decode = decode::<Studies>;
        let parse_report = parse_report::<Studies>;
        assert!(decode("x").unwrap_err().contains("does not start with `r1.`"));
        assert!(decode("r1.***").unwrap_err().contains("not base64url"));
        assert!(decode("r1.AAAA").unwrap_err().contains("damaged"));
        let not_a_report = format!("r1.{}", URL_SAFE_NO_PAD.encode(miniz_oxide::deflate::compress_to_vec(b"{\"a\":1}", 9)));
        assert!(decode(&not_a_report).unwrap_err().contains("not a latency report"));
        let mut other = sample_report();
        other.schema = "workbench.router-latency/0".into();
        assert!(decode(&encode(&other)).unwrap_err().contains("expected `workbench.router-latency/5`"));
        assert!(parse_report("[]", "native.json").unwrap_err().starts_with("native.json: not a latency report"));
    }

    /// A deflate bomb: 64 MiB of spaces deflate to a link of about 87 KB.
    /// Decoding stops at the 8 MiB limit and names it.
    #[test]
    fn a_deflate_bomb_fails_at_the_limit() {
        let bomb = vec![b' '; 64 << 20];
        let link = format!("r1.{}", URL_SAFE_NO_PAD.encode(miniz_oxide::deflate::compress_to_vec(&bomb, 9)));
        assert!(link.len() < 200_000, "{}", link.len());
        assert_eq!(decode::<Studies>(&link).unwrap_err(), "the shared result inflates past 8 MiB, more than any report (a crafted link?)");
    }
}
