//! Allocation tracking with an `LD_PRELOAD` shim (`shim/alloc_shim.c`), the
//! alternative to uprobes: no privileges, no trap per call (a function call
//! and a buffered record instead), but only for processes started with it
//! and only allocators reached through dynamic symbol lookup.
//!
//! The shim is built with the crate and embedded here; [`install`] writes
//! it into the record database and returns the environment a command needs.
//! Each process of the tree writes `<db>/allocs/preload-<pid>.alog`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

const SHIM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libloupe_alloc.so"));

/// The shim's file name in `<db>/allocs/` (and so in the maps of a process
/// that loaded it): samples in its code are Loupe's, not the program's.
pub const SHIM_FILE: &str = "libloupe_alloc.so";

/// Environment variables that make a command log its allocations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreloadEnv {
    pub shim: PathBuf,
    pub vars: Vec<(OsString, OsString)>,
}

/// Writes the shim into `<db_dir>/allocs/` and names the variables to set.
/// An `LD_PRELOAD` already in this environment is kept after the shim.
pub fn install(db_dir: &Path) -> std::io::Result<PreloadEnv> {
    let dir = db_dir.join(crate::log::DIR);
    loupe_files::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let shim = dir.join(SHIM_FILE);
    loupe_files::write(&shim, SHIM)?;
    let mut preload = shim.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let vars = vec![("LD_PRELOAD".into(), preload), ("LOUPE_ALLOC_DIR".into(), dir.into_os_string())];
    Ok(PreloadEnv { shim, vars })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_an_elf_shared_object_and_points_the_variables_at_it() {
        // Checks the embedded shim is an ELF file written under <db>/allocs and both variables name it.
        let db = tempfile::tempdir().unwrap();
        let env = install(db.path()).unwrap();
        assert_eq!(&std::fs::read(&env.shim).unwrap()[..4], b"\x7fELF");
        assert!(env.vars[0].1.to_string_lossy().starts_with(&*env.shim.to_string_lossy()));
        assert_eq!(Path::new(&env.vars[1].1), env.shim.parent().unwrap());
    }
}
