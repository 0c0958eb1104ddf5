//! Event spec XML (`loupe_trace::spec::parse`): the files a trace directory
//! carries in `spec/` and that `loupe trace` reads back. A spec that validates
//! must also generate CTF metadata.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(spec) = loupe_trace::spec::parse(&[("fuzz.xml", text)]) {
        let _ = loupe_trace::ctf::metadata(&spec);
        for ev in &spec.events {
            let _ = loupe_trace::record::max_size(ev);
        }
    }
});
