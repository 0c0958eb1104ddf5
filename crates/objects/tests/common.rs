//! Shared by the integration tests: the C workloads, root checks.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Builds the workloads once per test binary, in a directory of this crate's own.
pub fn workloads() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = repo_root().join("target/testdata-objects");
        std::fs::create_dir_all(&out).unwrap();
        let st = Command::new("make")
            .args(["-s", "-C"])
            .arg(repo_root().join("testdata/workloads"))
            .arg(format!("OUT={}", out.display()))
            .args(["allocs", "queue", "dtypes-O1", "dtypes-O2"].map(|w| out.join(w).to_str().unwrap().to_string()))
            .status()
            .expect("make");
        assert!(st.success(), "building the workloads failed");
        out
    })
}

/// Privileged tests need root (uprobes, eBPF, breakpoints on other processes).
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(std::env::var_os("LOUPE_ALLOW_UNPRIVILEGED").is_some(), "privileged test: run as root (CI does)");
    eprintln!("skipping privileged test: not root");
    false
}
