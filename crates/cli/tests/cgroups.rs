//! Cgroup labels and `--cgroup`: a workload moved into a cgroup the test
//! makes (named like a systemd transient scope) beside one left outside.

mod util;
use std::path::{Path, PathBuf};
use util::*;

/// Where the cgroup v2 hierarchy is mounted, if it is.
fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|w| w.len() > 2 && w[2] == "cgroup2").map(|w| PathBuf::from(w[1]))
}

/// A cgroup made for the test, removed when dropped (once its processes are gone).
struct Cgroup(PathBuf);

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn total(db: &Path, args: &[&str]) -> u64 {
    top_json(db, &[&["--by", "image"], args].concat())["total_samples"].as_u64().unwrap()
}

/// Samples in `export --format collapsed` with `args`.
fn stacked(db: &Path, args: &[&str]) -> u64 {
    let out = run_ok(loupe().args(["export", "--format", "collapsed", "--db"]).arg(db).args(args));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum()
}

#[test]
fn a_process_in_a_scope_carries_its_unit_label_and_cgroup_selects_exactly_its_samples() {
    // Checks label:unit and --cgroup against --pid of the one process the test moved into its scope (exact equality).
    if !require_root() {
        return;
    }
    let Some(root) = cgroup2_root() else {
        eprintln!("skipping: no cgroup v2 hierarchy mounted");
        return;
    };
    let _serial = serial();
    let unit = format!("loupe-test-{}.scope", std::process::id());
    let cg = Cgroup(root.join(&unit));
    std::fs::create_dir(&cg.0).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (db, pidfile) = (dir.path().join("db"), dir.path().join("inner.pid"));
    let burn = workloads().join("burn");
    // The inner shell moves itself into the scope, then becomes burn (as systemd-run --scope does); its parent stays out.
    let script = format!(
        "sh -c 'echo $$ > {procs}; echo $$ > {pidfile}; exec {burn} --iterations 100000000 >/dev/null' & {burn} --iterations 100000000 >/dev/null; wait",
        procs = cg.0.join("cgroup.procs").display(),
        pidfile = pidfile.display(),
        burn = burn.display()
    );
    run_ok(loupe().args(["record", "--db"]).arg(&db).args(["--", "sh", "-c", &script]));
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_string();
    let path = format!("/{unit}");
    let (by_pid, by_cgroup) = (total(&db, &["--pid", &pid]), total(&db, &["--cgroup", &path]));
    assert!(by_pid > 0, "the process in the scope was sampled");
    assert_eq!(by_cgroup, by_pid, "--cgroup {path} selects exactly process {pid}'s samples");
    assert_eq!(total(&db, &["--label", &format!("unit={unit}")]), by_pid);
    assert!(total(&db, &[]) > by_pid, "the process outside the scope was sampled too");
    let labels = top_json(&db, &["--by", "label:unit"]);
    let row = labels["rows"].as_array().unwrap().iter().find(|r| r["unit"] == unit.as_str()).unwrap_or_else(|| panic!("{labels}"));
    assert_eq!(row["samples"].as_u64().unwrap(), by_pid);
    assert_eq!(stacked(&db, &["--cgroup", &path]), stacked(&db, &["--pid", &pid]), "flame/export select the same processes");
}
