//! The calculator's URL query: any text reads into a form (unknown keys
//! reported, every value kept), evaluates without a panic, and writes back
//! to a query that reads into the same form.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|query: &str| {
    let (form, _warnings) = kv::Form::from_query(query);
    let _ = kv::evaluate(&form);
    let again = kv::Form::from_query(&form.to_query()).0;
    assert_eq!(again, form, "the query codec lost text");
});
