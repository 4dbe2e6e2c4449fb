//! Property test of the URL codec: any text in any field survives
//! `to_query` → `from_query` unchanged, so a link loses nothing the user typed.

// proptest is a native dev-dependency (the wasm32 lint pass builds tests too).
#![cfg(not(target_arch = "wasm32"))]

use kv::{Form, FIELDS};
use proptest::prelude::*;

/// Pieces a URL codec can get wrong (separators, escapes, an already
/// escaped `%2B`, quotes, multi-byte characters), now and then any character.
const AWKWARD: &[&str] = &[
    "a", "Z", "0", "9", " ", "&", "=", "+", "%", "#", "?", ",", "x", ".", "-", "→", "é", "\n", "%2B", "/", ":", "*", "~", "_", "\"", "'",
    "<",
];

fn field_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![6 => proptest::sample::select(AWKWARD).prop_map(str::to_string), 1 => any::<char>().prop_map(String::from)];
    proptest::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

/// A form with a third of its fields set, and the preset empty or valid (a
/// valid preset fills omitted fields by design, so the round trip must
/// write them out).
fn form() -> impl Strategy<Value = Form> {
    let fields = proptest::collection::vec(proptest::option::weighted(1.0 / 3.0, field_text()), FIELDS.len());
    (fields, proptest::bool::weighted(0.25)).prop_map(|(texts, with_preset)| {
        let mut form = Form::default();
        for (field, text) in FIELDS.iter().zip(texts) {
            if let Some(text) = text {
                form.set(field.name, text);
            }
        }
        form.set("preset", if with_preset { "gemma-3-27b" } else { "" });
        form
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]
    #[test]
    fn any_form_round_trips(form in form()) {
        let query = form.to_query();
        let (back, warnings) = Form::from_query(&query);
        // Fields the preset would fill are written out, so nothing is refilled.
        prop_assert_eq!(&back, &form, "{}", query);
        prop_assert!(warnings.is_empty(), "{:?}", warnings);
    }
}
