//! A shared-report link (deflate + base64url + JSON): any payload decodes or
//! is refused with a message, and a report that decodes renders everything
//! the page and the latency widget draw from it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|payload: &str| {
    let Ok(report) = bench::share::decode::<bench::report::Studies>(payload) else { return };
    let _ = report.rows();
    let _ = report.table();
    let _ = report.conditions();
    let _ = report.boundaries();
    for result in &report.results {
        let _ = bench::figures::Breakdown::of(result);
    }
    let _ = bench::figures::latency_svg(&[bench::figures::Series { label: "shared", report: &report }]);
    let _ = bench::figures::compare(&report, &report);
    let _ = bench::guide::widget_rows(&[15, 256, 1024], Some(&report));
    let _ = bench::share::encode(&report);
});
