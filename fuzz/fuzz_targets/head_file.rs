//! A trained head's JSON file (a user's `--head`, or a site's head before
//! its digest is checked): read, or refused with a message; once read,
//! scoring, the confidence and the neighbours on any features never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(head) = router::LoadedHead::from_json(bytes, "fuzz.json") else { return };
    let _ = head.check_fits("fuzz.json", 4, &["a", "b"], &["quality"]);
    // Features of the head's width (capped) and of a wrong one.
    for width in [head.head.width().min(8192), 3] {
        let features: Vec<f32> = (0..width).map(|i| (i as f32 * 0.37).sin()).collect();
        let p = head.probabilities(&features);
        let ids: Vec<&str> = head.head.candidates.iter().map(|c| c.id.as_str()).collect();
        // The costs the head's modes weigh (mean or predicted), as decide takes them.
        let costs = head.costs(&features);
        let ranked = router::rank(&ids, &p, &[], &costs, 0.5);
        let confidence = head.confidence(&features, &ranked);
        let _ = head.neighbours(&confidence.nearest);
    }
});
