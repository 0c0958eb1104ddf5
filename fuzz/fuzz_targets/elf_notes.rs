//! Build-ids of untrusted ELF files and note blobs: the collector's reader of
//! `/sys/kernel/notes`-style blobs and of mapped files, the optimizer's note
//! walker and its reader of whole files (through a scratch file). Every
//! reported range lies inside the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    let _ = loupe_collector::kernel::build_id_from_notes(data);
    let _ = loupe_collector::images::build_id_of_bytes(data);
    if let Some(r) = loupe_optimize::identity::build_id_desc(data) {
        assert!(r.start <= r.end && r.end <= data.len());
    }
    let path = std::env::temp_dir().join(format!("loupe-fuzz-elf-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).expect("scratch file");
    f.write_all(data).expect("write scratch file");
    drop(f);
    let _ = loupe_optimize::identity::read_build_id(&path);
});
