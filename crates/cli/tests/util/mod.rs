//! Helpers for end-to-end tests: run the real `loupe` binary against real
//! workloads built from testdata/ at test time.

#![allow(dead_code)]

pub mod optimize;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn loupe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_loupe"))
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Builds the C workloads once per test binary and returns their directory.
pub fn workloads() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let out = repo_root().join("target/testdata-workloads");
        std::fs::create_dir_all(&out).unwrap();
        let st = Command::new("make")
            .arg("-s")
            .arg("-C")
            .arg(repo_root().join("testdata/workloads"))
            .arg(format!("OUT={}", out.display()))
            .status()
            .expect("make");
        assert!(st.success(), "building the workloads failed");
        out
    })
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{:?} failed with {:?}\nstdout: {}\nstderr: {}",
        cmd,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Privileged tests need root (perf_event_open system-wide); elsewhere they
/// say so and pass vacuously only when LOUPE_ALLOW_UNPRIVILEGED is set.
pub fn require_root() -> bool {
    if is_root() {
        return true;
    }
    assert!(std::env::var_os("LOUPE_ALLOW_UNPRIVILEGED").is_some(), "privileged test: run as root (CI does)");
    eprintln!("skipping privileged test: not root");
    false
}

/// `loupe top ... --format json` on a database.
pub fn top_json(db: &Path, extra: &[&str]) -> serde_json::Value {
    let out = run_ok(loupe().args(["top", "--db"]).arg(db).args(["--format", "json", "--limit", "100000"]).args(extra));
    json(&out)
}

/// Sum of `samples` over rows matching `pred`.
pub fn sum_rows(top: &serde_json::Value, pred: impl Fn(&serde_json::Value) -> bool) -> u64 {
    top["rows"].as_array().unwrap().iter().filter(|r| pred(r)).map(|r| r["samples"].as_u64().unwrap()).sum()
}

/// Tests that judge sample counts or shares of the whole machine take this
/// lock, so tests of the same binary running in parallel do not starve
/// each other's workloads.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
