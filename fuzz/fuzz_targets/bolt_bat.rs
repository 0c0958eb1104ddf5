//! BOLT's address translation table (`.note.bolt_bat` of an optimized binary,
//! `loupe_optimize::bat::Bat::parse`), then translation of every fragment's
//! entries and of addresses just past them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_optimize::bat::Bat;

fuzz_target!(|data: &[u8]| {
    // The note header is fixed; the fuzzer writes the table after it.
    let mut note = Vec::with_capacity(20 + data.len());
    note.extend_from_slice(&5u32.to_le_bytes());
    note.extend_from_slice(&(data.len() as u32).to_le_bytes());
    note.extend_from_slice(&1u32.to_le_bytes());
    note.extend_from_slice(b"BOLT\0\0\0\0");
    note.extend_from_slice(data);
    let _ = Bat::parse(data);
    let Ok(bat) = Bat::parse(&note) else { return };
    for f in bat.fragments.values() {
        for &(out, _, _) in &f.entries {
            for d in [0, 1, 0x1000, u32::MAX as u64] {
                let _ = bat.translate(f.address.wrapping_add(out as u64).wrapping_add(d));
            }
        }
    }
});
