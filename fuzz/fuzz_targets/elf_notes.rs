//! Build-ids of untrusted ELF files and note blobs: the one reader
//! (`loupe_symbolize::build_id`) on a `/sys/kernel/notes`-style blob and on an
//! image, with the place of the id it reports, and its users in the collector
//! and the optimizer (the latter through a scratch file).
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_symbolize::build_id;

fuzz_target!(|data: &[u8]| {
    let _ = build_id::of_notes(data);
    if let Ok(at) = build_id::locate(data) {
        assert!(at.start <= at.end && at.end <= data.len());
        assert_eq!(build_id::of_elf(data).map(|b| b.0), Some(data[at].to_vec()));
    }
    let _ = loupe_collector::images::build_id_of_bytes(data);
    let path = std::env::temp_dir().join(format!("loupe-fuzz-elf-{}", std::process::id()));
    std::fs::write(&path, data).expect("write scratch file");
    let _ = loupe_optimize::identity::read_build_id(&path);
});
