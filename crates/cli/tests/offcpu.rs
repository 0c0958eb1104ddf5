//! `record --off-cpu`, `top`/`export -e off-cpu` and `loupe wall` against
//! `offcpu`, a program that blocks in known ways (sleep, a mutex another
//! thread holds, a pipe another thread writes late) and measures each block
//! and each thread's lifetime itself (ground truth).

mod util;
use std::collections::HashMap;
use std::path::Path;
use util::*;

/// (function of the workload, the reason it blocks for).
const PHASES: [(&str, &str); 3] = [("sleep_phase", "sleep"), ("lock_phase", "lock"), ("pipe_phase", "io")];

/// Records the workload with off-CPU time; returns its own figures.
fn recorded(db: &Path, truth: &Path) -> serde_json::Value {
    run_ok(
        loupe()
            .args(["record", "--off-cpu", "--db"])
            .arg(db)
            .arg("--")
            .arg(workloads().join("offcpu"))
            .args(["--ms", "300", "--out"])
            .arg(truth),
    );
    serde_json::from_slice(&std::fs::read(truth).unwrap()).unwrap()
}

/// Off-CPU µs per (function on the stack, reason), from collapsed stacks
/// (`root;...;leaf count`, the leaf naming the reason), and their total.
fn by_function_and_reason(db: &Path) -> (HashMap<(String, String), u64>, u64) {
    let out = run_ok(loupe().args(["export", "--format", "collapsed", "-e", "off-cpu", "--db"]).arg(db));
    let (mut sums, mut total) = (HashMap::new(), 0);
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        total += n.parse::<u64>().unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        let reason = frames.last().unwrap().strip_prefix("[off-cpu: ").and_then(|r| r.strip_suffix(']')).expect("reason leaf");
        for f in &frames[..frames.len() - 1] {
            *sums.entry((f.to_string(), reason.to_string())).or_insert(0) += n.parse::<u64>().unwrap();
        }
    }
    (sums, total)
}

#[test]
fn off_cpu_time_per_function_reason_and_thread_match_the_programs_own_within_5_percent() {
    // Checks off-CPU time per blocking function (5%) with its reason, and each thread's on+off-CPU time against its lifetime (5%).
    if !require_root() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let truth = recorded(&db, &dir.path().join("truth.json"));
    let (sums, total) = by_function_and_reason(&db);
    let mut report = String::new();
    for (f, reason) in PHASES {
        let want = truth["phases"][f].as_f64().unwrap();
        let got = sums.get(&(f.to_string(), reason.to_string())).copied().unwrap_or(0) as f64 / 1e6;
        let other: u64 = sums.iter().filter(|((g, r), _)| g == f && r != reason).map(|(_, n)| n).sum();
        report += &format!("{f}: {got:.6} s {reason} vs {want:.6} s measured, {} µs for other reasons\n", other);
        assert!((got - want).abs() <= 0.05 * want, "{f} off by more than 5%:\n{report}");
        assert!((other as f64 / 1e6) < 0.05 * want, "{f} blocked for another reason:\n{report}");
    }
    let wall = json(&run_ok(loupe().args(["wall", "--format", "json", "--db"]).arg(&db)));
    let rows = wall["threads"].as_array().unwrap();
    for t in truth["threads"].as_array().unwrap() {
        let row = rows.iter().find(|r| r["tid"] == t["tid"]).unwrap_or_else(|| panic!("no row for thread {t}: {wall}"));
        let (got, want) = (row["wall_ns"].as_f64().unwrap() / 1e9, t["seconds"].as_f64().unwrap());
        report += &format!("thread {}: {got:.6} s on+off-CPU vs {want:.6} s lifetime\n", t["name"]);
        assert_eq!(row["pid"], truth["pid"]);
        assert!((got - want).abs() <= 0.05 * want, "thread {} wall-clock off by more than 5%:\n{report}", t["name"]);
    }
    eprint!("{report}");
    // The flat view counts the same blocks as the stacks, one sample per µs.
    let top = top_json(&db, &["-e", "off-cpu"]);
    assert_eq!(sum_rows(&top, |_| true), total, "top -e off-cpu and the stacks disagree");
}
