//! The field guide's published routing-latency table ("Apply the
//! measurements to serving acceptance", section "Routing latency"), as data,
//! and the latency widget's rows: that table beside what this browser
//! measured, matched by prompt length.
//!
//! The published figures were measured natively on Qwen/Qwen3-0.6B in float32
//! with another checkpoint and pool; the widget runs SmolLM2-135M in the
//! reader's browser. The two columns share a protocol and a prompt length,
//! not a model or a machine, and the widget says so under the table.

use crate::report::{format_ms, Envelope};

/// One row of the guide's table, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PublishedRow {
    pub prompt_tokens: usize,
    pub characters: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub cold_ms: f64,
}

/// The guide's table, as printed (prompt tokens | characters | p50 (warm) |
/// p95 (warm) | min–max | first call (cold)).
pub const PUBLISHED: [PublishedRow; 3] = [
    PublishedRow { prompt_tokens: 15, characters: 60, p50_ms: 71.0, p95_ms: 77.0, min_ms: 67.0, max_ms: 80.0, cold_ms: 180.0 },
    PublishedRow { prompt_tokens: 256, characters: 1293, p50_ms: 264.0, p95_ms: 334.0, min_ms: 247.0, max_ms: 369.0, cold_ms: 251.0 },
    PublishedRow { prompt_tokens: 1024, characters: 5229, p50_ms: 944.0, p95_ms: 998.0, min_ms: 917.0, max_ms: 1029.0, cold_ms: 963.0 },
];

/// The conditions line printed under the guide's table, verbatim.
pub const PUBLISHED_CONDITIONS: &str = "Conditions: backbone Qwen/Qwen3-0.6B, device cpu, dtype float32, 8 candidates, 25 iterations plus 5 warm-ups, router_max_tokens 1,024. Checkpoint sft-2e9f, pool 3520b40d.";

/// What this browser measured at one length: warm p50 and p95, and the
/// first call. `None` while nothing was measured (or a cancelled run
/// stopped before this length's warm calls).
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredCells {
    pub p50: String,
    pub p95: String,
    pub cold: String,
}

/// One row of the widget: the published figures (when the guide has this
/// length) and the measured ones (when a report has it).
#[derive(Debug, Clone, PartialEq)]
pub struct WidgetRow {
    pub prompt_tokens: usize,
    pub published: Option<PublishedRow>,
    pub measured: Option<MeasuredCells>,
}

/// The rows for `lengths` (the protocol the widget runs): every published
/// length first, in the guide's order, then any other length asked for, each
/// with the report's figures when it holds that length. A row appears once
/// per length.
pub fn widget_rows<S>(lengths: &[usize], report: Option<&Envelope<S>>) -> Vec<WidgetRow> {
    let mut tokens: Vec<usize> = PUBLISHED.iter().map(|r| r.prompt_tokens).collect();
    let measured_lengths = report.map(|r| r.results.iter().map(|x| x.prompt_tokens).collect::<Vec<_>>()).unwrap_or_default();
    for &n in lengths.iter().chain(&measured_lengths) {
        if !tokens.contains(&n) {
            tokens.push(n);
        }
    }
    tokens
        .into_iter()
        .map(|n| WidgetRow {
            prompt_tokens: n,
            published: PUBLISHED.iter().copied().find(|r| r.prompt_tokens == n),
            measured: report.and_then(|r| r.results.iter().find(|x| x.prompt_tokens == n)).map(|x| MeasuredCells {
                p50: x.warm.map(|s| format_ms(s.p50)).unwrap_or_else(|| "–".into()),
                p95: x.warm.map(|s| format_ms(s.p95)).unwrap_or_else(|| "–".into()),
                cold: format_ms(x.cold_ms),
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::sample_report;

    #[test]
    fn published_rows_come_first_and_measured_lengths_fill_their_cells() {
        let report = sample_report();
        let measured: Vec<usize> = report.results.iter().map(|r| r.prompt_tokens).collect();
        let rows = widget_rows(&[15, 64], Some(&report));
        let tokens: Vec<usize> = rows.iter().map(|r| r.prompt_tokens).collect();
        // The guide's three lengths, then 64 (asked for), then any measured length not yet listed.
        assert_eq!(&tokens[..4], &[15, 256, 1024, 64]);
        for r in &rows {
            assert_eq!(r.published.is_some(), [15, 256, 1024].contains(&r.prompt_tokens));
            assert_eq!(r.measured.is_some(), measured.contains(&r.prompt_tokens), "{}", r.prompt_tokens);
        }
        let first = report.results.iter().find(|r| r.prompt_tokens == 15).expect("the sample report measures 15 tokens");
        let row = rows.iter().find(|r| r.prompt_tokens == 15).unwrap();
        assert_eq!(row.measured.as_ref().unwrap().cold, format_ms(first.cold_ms));
        assert_eq!(row.measured.as_ref().unwrap().p50, format_ms(first.warm.unwrap().p50));
    }

    #[test]
    fn nothing_measured_leaves_an_empty_column_and_no_duplicate_lengths() {
        let rows = widget_rows::<crate::report::NoStudies>(&[1024, 15, 256, 15], None);
        assert_eq!(rows.iter().map(|r| r.prompt_tokens).collect::<Vec<_>>(), vec![15, 256, 1024]);
        assert!(rows.iter().all(|r| r.measured.is_none() && r.published.is_some()));
    }

    #[test]
    fn the_published_table_reads_as_the_guide_prints_it() {
        // The guide: "A short prompt (15 tokens) takes 71 ms; at the
        // truncation ceiling of 1,024 tokens it takes 944 ms", and "The first
        // decision in a process takes 180 ms".
        assert_eq!(PUBLISHED[0].p50_ms, 71.0);
        assert_eq!(PUBLISHED[2].p50_ms, 944.0);
        assert_eq!(PUBLISHED[0].cold_ms, 180.0);
        assert!(PUBLISHED.iter().all(|r| r.min_ms <= r.p50_ms && r.p50_ms <= r.p95_ms && r.p95_ms <= r.max_ms));
    }
}
