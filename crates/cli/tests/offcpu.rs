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

/// (middle function of a chain of `offchain`, its leaf, the reason it blocks for).
const CHAINS: [(&str, &str, &str); 3] =
    [("sleep_chain", "sleep_leaf", "sleep"), ("read_chain", "read_leaf", "io"), ("wait_chain", "wait_leaf", "lock")];

/// Off-CPU µs per chain of `offchain` whose stack holds `main;chain;leaf`
/// (root first) blocked for its reason, from collapsed stacks.
fn whole_chains(db: &Path) -> HashMap<&'static str, u64> {
    let out = run_ok(loupe().args(["export", "--format", "collapsed", "-e", "off-cpu", "--db"]).arg(db));
    let mut sums = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        for (chain, leaf, reason) in CHAINS {
            if stack.contains(&format!(";main;{chain};{leaf};")) && stack.ends_with(&format!(";[off-cpu: {reason}]")) {
                *sums.entry(chain).or_insert(0) += n.parse::<u64>().unwrap();
            }
        }
    }
    sums
}

#[test]
fn off_cpu_chains_through_code_without_frame_pointers_reach_main() {
    // Checks that blocks in libc called from -fomit-frame-pointer code are attributed whole (main;chain;leaf) within 5% of the measured time, and that frame pointers alone (-g) lose those chains.
    if !require_root() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut report = String::new();
    // The process is described to the table walker after its first block: a
    // second of warm-up blocks (not measured) leaves the daemon time for it.
    for (flags, tables, warmup) in [(&[][..], true, "1000"), (&["-g"][..], false, "0")] {
        let (db, truth) = (dir.path().join(format!("db{tables}")), dir.path().join(format!("truth{tables}.json")));
        let out = run_ok(
            loupe()
                .args(["record", "--off-cpu"])
                .args(flags)
                .arg("--db")
                .arg(&db)
                .arg("--")
                .arg(workloads().join("offchain"))
                .args(["--ms", "100", "--rounds", "3", "--warmup-ms", warmup, "--out"])
                .arg(&truth),
        );
        let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
        let sums = whole_chains(&db);
        for (chain, _, reason) in CHAINS {
            let want = truth["chains"][chain].as_f64().unwrap();
            let got = sums.get(chain).copied().unwrap_or(0) as f64 / 1e6;
            report += &format!("{flags:?} {chain}: {got:.6} s whole ({reason}) vs {want:.6} s measured\n");
            if tables {
                let err = String::from_utf8_lossy(&out.stderr);
                assert!((got - want).abs() <= 0.05 * want, "{chain} off by more than 5%:\n{report}{err}");
            } else {
                assert!(got < 0.05 * want, "a frame-pointer walk reached main through libc:\n{report}");
            }
        }
    }
    eprint!("{report}");
}
