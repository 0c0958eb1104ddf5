//! Issue 8's safety rule: a crash during optimization leaves the original in
//! place. `loupe optimize run --install` is killed with SIGKILL (with its
//! whole process group: BOLT, the check, the benchmark) at two points —
//! while llvm-bolt rewrites the binary, and while the candidate is being
//! benchmarked after passing its check — and the program the user runs must
//! be the original, byte for byte, and still work; the next run must proceed.

mod util;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use util::*;

/// Process ids in process group `pgid` whose command name is `comm`.
fn in_group(pgid: i32, comm: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // pid (comm) state ppid pgrp ...: comm may hold spaces, so split after the last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let rest: Vec<&str> = stat[close + 2..].split(' ').collect();
        if &stat[open + 1..close] == comm && rest.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) {
            found.push(stat[..open].trim().parse().unwrap());
        }
    }
    found
}

/// Waits until `ready` holds (polling every 2 ms), then kills the child's whole process group.
fn kill_group_when(child: &mut Child, what: &str, ready: impl Fn() -> bool) {
    let pgid = child.id() as i32;
    let start = Instant::now();
    while !ready() {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("optimize run ended ({st}) before {what}");
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no {what} within 60 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill(2) on the process group of our own child, which has not been waited for.
    assert_eq!(unsafe { libc::kill(-pgid, libc::SIGKILL) }, 0);
    child.wait().unwrap();
}

fn optimize_run(db: &Path, bin: &Path, bench: &str) -> Command {
    let mut c = loupe();
    c.args(["optimize", "run", "--db"])
        .arg(db)
        .arg(bin)
        .args(["--check", "{} 300", "--bench", bench, "--rounds", "2", "--install", "--min-samples", "100"])
        .process_group(0);
    c
}

fn assert_original_in_place(bin: &Path, original: &[u8], when: &str) {
    assert!(std::fs::read(bin).unwrap() == original, "{when}: the file at the path is not the original");
    let name = bin.file_name().unwrap().to_str().unwrap();
    assert!(!bin.with_file_name(format!("{name}.loupe-orig")).exists(), "{when}: an install began");
    assert!(run_ok(Command::new(bin).arg("300")).status.success());
}

#[test]
fn killed_optimization_leaves_the_original_in_place() {
    // Checks: SIGKILL during llvm-bolt and during validation -> the original bytes at the path, no saved copy, and a later run completes.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("layout"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    let original = std::fs::read(&bin).unwrap();
    let checksum = run_ok(Command::new(&bin).arg("300")).stdout;
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(&bin).arg("3000"));

    // 1. While llvm-bolt runs.
    let mut child = optimize_run(&db, &bin, "{} 300").spawn().unwrap();
    let pgid = child.id() as i32;
    kill_group_when(&mut child, "llvm-bolt", || !in_group(pgid, "llvm-bolt").is_empty());
    assert_original_in_place(&bin, &original, "killed during llvm-bolt");

    // 2. After BOLT and the check, while the candidate is benchmarked: the bench leaves a mark, then waits.
    let mark = dir.path().join("benchmarking");
    let bench = format!("{{}} 300 >/dev/null && touch '{}' && sleep 60", mark.display());
    let mut child = optimize_run(&db, &bin, &bench).spawn().unwrap();
    kill_group_when(&mut child, "the benchmark", || mark.exists());
    assert!(dir.path().join("layout.loupe-bolt").exists(), "the kill came before the candidate existed");
    assert_original_in_place(&bin, &original, "killed during validation");

    // 3. The next run starts over the leftovers (a candidate file, no decision) and decides: two rounds can never be
    // significant, so it discards the candidate, and the original stays.
    let out = optimize_run(&db, &bin, "{} 300").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("discarded (not significantly faster"), "{stdout}");
    assert_original_in_place(&bin, &original, "after the next run");
    assert_eq!(run_ok(Command::new(&bin).arg("300")).stdout, checksum);
}
