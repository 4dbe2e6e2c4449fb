//! Property test of the URL codec: any text in any field survives
//! `to_query` → `from_query` unchanged, so a link loses nothing the user typed.

use kv::{Form, FIELDS};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const ALPHABET: &[&str] = &[
    "a", "Z", "0", "9", " ", "&", "=", "+", "%", "#", "?", ",", "x", ".", "-", "→", "é", "\n", "%2B", "/", ":", "*", "~", "_", "\"", "'",
    "<",
];

#[test]
fn random_forms_round_trip() {
    let mut rng = Rng(0x2026_1130);
    for case in 0..10_000 {
        let mut form = Form::default();
        for field in FIELDS {
            if rng.next().is_multiple_of(3) {
                let len = (rng.next() % 12) as usize;
                let text: String = (0..len).map(|_| ALPHABET[(rng.next() % ALPHABET.len() as u64) as usize]).collect();
                form.set(field.name, text);
            }
        }
        // Keep the preset empty or valid: a valid preset fills omitted fields by design.
        if rng.next().is_multiple_of(4) {
            form.set("preset", "gemma-3-27b");
        } else {
            form.set("preset", "");
        }
        let query = form.to_query();
        let (back, warnings) = Form::from_query(&query);
        // Fields the preset would fill are written out, so nothing is refilled.
        assert_eq!(back, form, "case {case}: {query}");
        assert!(warnings.is_empty(), "case {case}: {warnings:?}");
    }
}
