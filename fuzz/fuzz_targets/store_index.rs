//! An epoch's `index.json` (and `epoch.json`) as the store reads them: the
//! input is written into a scratch database's epoch beside one valid profile,
//! then the index is read, the profiles it lists are loaded and the epochs listed.
//! The input's first 0xff byte, if any, separates index.json from epoch.json.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_model::{EventName, ImageId, ImageOffset, ProcessKey, Profile};
use loupe_store::{Database, EpochId};
use std::path::PathBuf;
use std::sync::OnceLock;

/// A database created once per fuzzing process, and its first epoch's directory.
fn scratch() -> &'static (Database, EpochId, PathBuf) {
    static DB: OnceLock<(Database, EpochId, PathBuf)> = OnceLock::new();
    DB.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("loupe-fuzz-index-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let db = Database::create(&root).expect("scratch database");
        let e = db.current_epoch().expect("epoch");
        let mut p = Profile::new(ImageId::elf("/bin/x", None), EventName::new("cpu-clock"));
        p.add(ProcessKey::new(1, "x"), ImageOffset(0x1000), 3, 3_000_000);
        db.merge(e, &[p]).expect("merge");
        // The directory as the store documents its layout: what someone who can write the database writes into.
        let dir = root.join("epochs").join(format!("{:06}", e.0));
        assert!(dir.join("index.json").is_file(), "the store's layout moved: {}", dir.display());
        (db, e, dir)
    })
}

fuzz_target!(|data: &[u8]| {
    let (db, e, dir) = scratch();
    let (index, epoch) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"{}"[..]),
    };
    std::fs::write(dir.join("index.json"), index).expect("write index.json");
    std::fs::write(dir.join("epoch.json"), epoch).expect("write epoch.json");
    if let Ok((idx, _)) = db.index(*e) {
        let _ = idx.entries.iter().map(|e| e.total_samples).count();
    }
    let _ = db.load(*e, &|_| true);
    let _ = db.epochs();
});
