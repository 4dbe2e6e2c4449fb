//! A pool file (YAML): candidates, prices and modes, or a message.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = router::pool::Pool::from_yaml(bytes, "fuzz.yaml");
    let _ = router::pool::pool_id(bytes);
});
