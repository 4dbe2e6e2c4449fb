//! Calculator links with hostile values: huge, negative, non-numeric,
//! repeated, unicode, malformed percent escapes and very long. Each bad field
//! is named with a message, every other field keeps its text, and nothing
//! panics or wraps. (The page shows the same messages next to the inputs;
//! tests/e2e/kv.test.js checks that.)

use kv::{Evaluation, Form};

/// `(link, the fields that must be named)`.
const CASES: [(&str, &[&str]); 13] = [
    ("layers=1000000000000000000000000000000000000000&kv_heads=8&head_dim=128&seqs=4096", &["layers"]),
    ("layers=32&kv_heads=-8&head_dim=128&seqs=4096", &["kv_heads"]),
    ("layers=32&kv_heads=8&head_dim=abc&seqs=4096", &["head_dim"]),
    ("layers=32&kv_heads=8&head_dim=128&seqs=4096x-2", &["seqs"]),
    // Full-width digits and an Arabic-Indic three look like numbers; they are not.
    ("layers=%EF%BC%93%EF%BC%92&kv_heads=%D9%A3&head_dim=128&seqs=4096", &["layers", "kv_heads"]),
    ("layers=32&kv_heads=8&head_dim=128&seqs=4096&kv_dtype=%ZZ", &["kv_dtype"]),
    ("layers=32&kv_heads=8&head_dim=128&seqs=99999999999999999999999999999999x99999999999999999999", &["seqs"]),
    ("layers=32&kv_heads=8&head_dim=128&seqs=4096&gpu_gib=1e309", &["gpu_gib"]),
    ("layers=32&kv_heads=8&head_dim=1.5&seqs=😀", &["head_dim", "seqs"]),
    // Recurrent state: a factor past u32, a shape with too many factors,
    // a state without a recurrent layer, a recurrent layer without a state.
    ("layers=2&kv_heads=8&head_dim=128&seqs=4096&layer_types=mamba,full&conv_state=3x4294967296&ssm_state=8x16", &["conv_state"]),
    ("layers=2&kv_heads=8&head_dim=128&seqs=4096&layer_types=linear,full&conv_state=3x8&ssm_state=1x2x3x4", &["ssm_state"]),
    ("layers=2&kv_heads=8&head_dim=128&seqs=4096&conv_state=3x8&ssm_state=8x16", &["layer_types"]),
    ("layers=2&kv_heads=8&head_dim=128&seqs=4096&layer_types=linearx2&state_dtype=fp5", &["state_dtype", "ssm_state"]),
];

#[test]
fn bad_fields_are_named_and_the_rest_kept() {
    for (link, fields) in CASES {
        let (form, _) = Form::from_query(link);
        let named: Vec<&str> = match kv::evaluate(&form) {
            Evaluation::Invalid(errors) => {
                assert!(errors.iter().all(|e| !e.message.is_empty()), "{link}");
                errors.iter().map(|e| e.field).collect()
            }
            Evaluation::Failed(message) => panic!("{link}: failed as a whole ({message}) instead of naming a field"),
            Evaluation::Ready { .. } => panic!("{link}: accepted"),
        };
        assert_eq!(named, fields, "{link}");
        // Every value in the link is kept, good or bad, exactly as written.
        for pair in link.split('&') {
            let (name, value) = pair.split_once('=').unwrap();
            assert_eq!(form.get(name), kv::form::percent_decode(value), "{link}: {name}");
        }
    }
}

#[test]
fn repeated_and_huge_parameters_are_reported_not_fatal() {
    let (form, warnings) = Form::from_query("layers=1&layers=32&kv_heads=8&head_dim=128&seqs=4096");
    assert_eq!(warnings, vec!["parameter `layers` appears more than once; the last value is used".to_string()]);
    assert_eq!(form.get("layers"), "32");
    assert!(matches!(kv::evaluate(&form), Evaluation::Ready { .. }));
    // A 1 MB value is kept (the user's text is never cut) and named.
    let long = "9".repeat(1 << 20);
    let (form, _) = Form::from_query(&format!("layers={long}&kv_heads=8&head_dim=128&seqs=4096"));
    assert_eq!(form.get("layers").len(), 1 << 20);
    match kv::evaluate(&form) {
        Evaluation::Invalid(errors) => assert_eq!(errors.iter().map(|e| e.field).collect::<Vec<_>>(), vec!["layers"]),
        other => panic!("{other:?}"),
    }
}
