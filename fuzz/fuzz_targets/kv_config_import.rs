//! A Hugging Face config.json the user drops: any bytes import or fail with
//! a message, and an import evaluates like typed fields.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(imported) = kv::config_import::import(bytes) {
        let mut form = kv::Form::default();
        form.apply(&imported.patch);
        let _ = kv::evaluate(&form);
    }
});
