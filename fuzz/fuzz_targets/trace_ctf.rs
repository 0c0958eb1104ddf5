//! A CTF stream file of a trace directory (`loupe_trace::tracefile::decode_stream`,
//! what `loupe trace report` reads), cut into packets of (first byte + 1) x 8
//! bytes; each packet is also sealed and trimmed as the recorder does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_trace::tracefile::{decode_stream, Trace};

use loupe_fuzz::spec;

fuzz_target!(|data: &[u8]| {
    let Some((&b, bytes)) = data.split_first() else { return };
    let spec = spec::spec();
    let sub_size = (b as usize + 1) * 8;
    let mut t = Trace { spec: spec.clone(), entries: Vec::new(), packets: 0, dropped: 0, counters: Vec::new(), errors: Vec::new() };
    decode_stream(spec, bytes, sub_size, &mut t);
    assert!(t.packets as usize <= bytes.len().div_ceil(sub_size));
    for p in bytes.chunks(sub_size) {
        let mut p = p.to_vec();
        if loupe_trace::buffer::packet_header(&p).is_some() {
            loupe_trace::buffer::seal(&mut p, 0);
            loupe_trace::ctf::trim_content(spec, &mut p);
        }
        let _ = loupe_trace::record::decode_all(spec, &p);
    }
});
