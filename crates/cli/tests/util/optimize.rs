//! Helpers of the optimize end-to-end tests (optimize.rs, lbr.rs): a BOLT
//! build of a workload, the decision log Loupe keeps of it, and the daemon
//! whose manager makes such builds by itself.

use super::loupe;
use loupe_optimize::{identity, manage, tool};
use std::path::Path;
use std::process::{Child, Stdio};

/// An ELF file's build-id in hex.
pub fn build_id_hex(bin: &Path) -> String {
    identity::read_build_id(bin).unwrap().iter().map(|b| format!("{b:02x}")).collect()
}

/// BOLTs the `layout` workload at `bin` into `cand` with its interpreter and helpers hot, as `optimize export`
/// writes them for this workload (the profile goes to `dir`/p.fdata).
pub fn bolt_layout(dir: &Path, bin: &Path, cand: &Path) {
    let fdata = dir.join("p.fdata");
    std::fs::write(&fdata, "no_lbr loupe-block-counts\n1 run 0 1000\n1 mix 0 500\n1 step 0 500\n1 main 0 10\n").unwrap();
    tool::run_bolt(&tool::find_bolt(None).unwrap(), bin, &fdata, cand).unwrap();
}

/// Makes the database's decision log say Loupe built `cand_bid` from `bin`'s original build `orig_bid` and took
/// `action` on it, as the manager would have logged it.
pub fn log_decision(db: &Path, bin: &Path, action: &str, orig_bid: &str, cand_bid: &str) {
    let d = manage::Decision {
        unix_time: 0,
        image: bin.display().to_string(),
        build_id: orig_bid.to_string(),
        candidate_build_id: Some(cand_bid.to_string()),
        replaces: None,
        action: action.into(),
        reason: "test".into(),
        measurement: None,
    };
    std::fs::create_dir_all(db.join("optimize")).unwrap();
    std::fs::write(db.join("optimize/decisions.jsonl"), serde_json::to_string(&d).unwrap() + "\n").unwrap();
}

/// `loupe daemon --no-stacks EXTRA --flush-every 1 --max-overhead off --db DB --optimize CFG` with its stderr
/// kept. Stopped (with its manager) when dropped, so a test that fails before stopping it leaves nothing running.
pub struct OptimizeDaemon(Option<Child>);

impl OptimizeDaemon {
    pub fn spawn(db: &Path, cfg: &Path, extra: &[&str]) -> OptimizeDaemon {
        let child = loupe()
            .args(["daemon", "--no-stacks"])
            .args(extra)
            .args(["--flush-every", "1", "--max-overhead", "off", "--db"])
            .arg(db)
            .arg("--optimize")
            .arg(cfg)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        OptimizeDaemon(Some(child))
    }

    /// Stops the daemon now and returns what it wrote to stderr.
    pub fn stop(mut self) -> String {
        let d = self.0.take().unwrap();
        // SAFETY: SIGTERM to our own child; the daemon then stops its manager.
        unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
        String::from_utf8_lossy(&d.wait_with_output().unwrap().stderr).to_string()
    }
}

impl Drop for OptimizeDaemon {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            // SAFETY: SIGTERM to our own child; the daemon then stops its manager.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}
