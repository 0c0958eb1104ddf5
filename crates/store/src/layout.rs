//! Where things other than epochs live in a database directory. These take
//! the directory rather than an open [`crate::Database`]: the symbolizer and
//! the optimizer look there whether or not anything has been recorded yet.

use std::path::{Path, PathBuf};

/// Copies of binaries by build-id (vDSO, replaced or deleted files), where
/// the symbolizer looks before the usual places.
pub fn images_dir(db: &Path) -> PathBuf {
    db.join("images")
}

/// The copy of build `build_hex` in the image cache.
pub fn cached_image(db: &Path, build_hex: &str) -> PathBuf {
    images_dir(db).join(build_hex)
}

/// Copies of the perf maps and jitdumps that name JIT code
/// (`<image file key>.map`, `<image file key>.dump`), kept because the
/// runtime's files in `/tmp` are gone or rewritten after the process exits.
pub fn jit_dir(db: &Path) -> PathBuf {
    db.join("jit")
}

/// The kept perf map of the JIT image with file key `key`.
pub fn jit_map(db: &Path, key: &str) -> PathBuf {
    jit_dir(db).join(format!("{key}.map"))
}

/// The kept jitdump of the JIT image with file key `key`.
pub fn jit_dump(db: &Path, key: &str) -> PathBuf {
    jit_dir(db).join(format!("{key}.dump"))
}

/// The running daemon's control socket.
pub fn daemon_socket(db: &Path) -> PathBuf {
    db.join("daemon.sock")
}

/// The probe counts the optimizer keeps for a build.
pub fn probe_tally(db: &Path, build_hex: &str) -> PathBuf {
    db.join("probes").join(format!("{build_hex}.json"))
}

/// The optimizer's directory: its decisions, state and work files.
pub fn optimize_dir(db: &Path) -> PathBuf {
    db.join("optimize")
}

/// The optimizer's log of decisions, one JSON object a line.
pub fn decisions_log(db: &Path) -> PathBuf {
    optimize_dir(db).join("decisions.jsonl")
}

/// The optimizer manager's state across restarts.
pub fn optimize_state(db: &Path) -> PathBuf {
    optimize_dir(db).join("state.json")
}

/// Where the optimizer writes profiles and candidates while it works.
pub fn optimize_work(db: &Path) -> PathBuf {
    optimize_dir(db).join("work")
}
