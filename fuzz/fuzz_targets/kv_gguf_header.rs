//! A GGUF file the user drops on the calculator, read as the page reads it:
//! a prefix of any length of a file of any stated length (the first eight
//! bytes of the input state it), slice after slice. Any bytes give a header,
//! a request for more bytes within the limit, or a message; never a panic
//! or an allocation past the budgets. A header imports or fails with a
//! message, and an import evaluates like typed fields.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let (stated, file) = match input.split_first_chunk::<8>() {
        Some((len, rest)) => (u64::from_le_bytes(*len), rest),
        None => return,
    };
    // The stated length is the file's, at least what is present (a reader
    // is never handed more bytes than the file has).
    let file_len = stated.max(file.len() as u64);
    let mut reader = gguf::PrefixReader::new(file_len, 64, kv::gguf_import::HEADER_LIMIT);
    for _ in 0..64 {
        let want = reader.want().min(file.len() as u64) as usize;
        match reader.offer(&file[..want]) {
            Ok(Some(header)) => {
                if let Ok(imported) = kv::gguf_import::import(&header) {
                    let mut form = kv::Form::default();
                    form.apply(&imported.patch);
                    let _ = kv::evaluate(&form);
                }
                return;
            }
            Ok(None) if reader.want() as usize > file.len() && want == file.len() => return,
            Ok(None) => {}
            Err(_) => return,
        }
    }
});
