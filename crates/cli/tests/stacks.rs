//! Call stacks against a workload whose call structure and per-path CPU
//! time are known by construction: `callstack` runs main -> a, a -> b -> c
//! and a -> d -> c (c in a shared library) and measures each function's
//! self time with CLOCK_THREAD_CPUTIME_ID. Built with frame pointers, and
//! with the library built -fomit-frame-pointer (only DWARF CFI unwinds it).

mod util;
use util::*;

use std::path::Path;

/// Records `callstack` and returns (truth, db dir).
fn record(dir: &Path, binary: &Path, extra: &[&str]) -> (serde_json::Value, std::path::PathBuf) {
    let db = dir.join("db");
    let truth_file = dir.join("truth.json");
    run_ok(
        loupe()
            .args(["record", "--freq", "2000", "--db"])
            .arg(&db)
            .args(extra)
            .arg("--")
            .arg(binary)
            .args(["--seconds", "3", "--out"])
            .arg(&truth_file),
    );
    (serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap(), db)
}

/// Shares of a's inclusive samples (a's loop is exactly what the workload
/// timed) against the workload's own shares; within 2 points each.
fn check_shares(truth: &serde_json::Value, db: &Path) {
    let pid = truth["pid"].as_u64().unwrap().to_string();
    let top = top_json(db, &["--children", "--pid", &pid]);
    let row = |p: &str| top["rows"].as_array().unwrap().iter().find(|r| r["procedure"] == p).cloned().unwrap_or_default();
    let n = |p: &str, col: &str| row(p)[col].as_u64().unwrap_or(0) as f64;
    let base = n("a", "inclusive");
    assert!(base > 4000.0, "too few samples under a: {base}\n{top}");
    let t = |k: &str| truth["self"][k].as_f64().unwrap();
    let total = truth["total_cpu"].as_f64().unwrap();
    let cases = [
        ("a self", n("a", "self"), t("a")),
        ("b self", n("b", "self"), t("b")),
        ("d self", n("d", "self"), t("d")),
        ("b inclusive", n("b", "inclusive"), t("b") + t("c_via_b")),
        ("d inclusive", n("d", "inclusive"), t("d") + t("c_via_d")),
        ("c_work inclusive", n("c_work", "inclusive"), t("c_via_b") + t("c_via_d")),
    ];
    let mut report = String::new();
    for (what, got, want) in cases {
        report += &format!("{what}: loupe {:.2}% truth {:.2}%\n", 100.0 * got / base, 100.0 * want / total);
    }
    eprintln!("{report}");
    for (what, got, want) in cases {
        assert!((100.0 * got / base - 100.0 * want / total).abs() <= 2.0, "{what} off by more than 2 points:\n{report}");
    }
    // Which path c ran under: callers of c_work split as b and d did.
    let out = run_ok(loupe().args(["top", "--db"]).arg(db).args(["--format", "json", "--pid", &pid, "--callers", "c_work"]));
    let nb = json(&out);
    let caller =
        |p: &str| nb["callers"].as_array().unwrap().iter().find(|c| c["procedure"] == p).map_or(0.0, |c| c["samples"].as_f64().unwrap());
    let share_b = 100.0 * caller("b") / (caller("b") + caller("d"));
    let truth_b = 100.0 * t("c_via_b") / (t("c_via_b") + t("c_via_d"));
    assert!((share_b - truth_b).abs() <= 2.0, "c_work called from b: loupe {share_b:.2}% truth {truth_b:.2}%");
}

#[test]
fn frame_pointer_stacks_give_inclusive_and_self_shares() {
    // Checks inclusive/self shares within 2 points with frame pointers only (no stack copies).
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (truth, db) = record(dir.path(), &workloads().join("callstack"), &["--stack-bytes", "0"]);
    check_shares(&truth, &db);
}

#[test]
fn dwarf_unwinding_through_a_library_without_frame_pointers() {
    // Checks the same shares when c lives in a -fomit-frame-pointer library (DWARF CFI from stack copies), and the exports.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (truth, db) = record(dir.path(), &workloads().join("nofp/callstack"), &[]);
    check_shares(&truth, &db);
    check_exports(dir.path(), &db, &truth["pid"].as_u64().unwrap().to_string());
}

/// collapsed sums to the total; pprof is read by `go tool pprof` with the
/// same total; speedscope and perfetto are well-formed; flame draws,
/// with DWARF inline frames.
fn check_exports(dir: &Path, db: &Path, pid: &str) {
    let top = top_json(db, &["--children", "--pid", pid]);
    let total = top["total_samples"].as_u64().unwrap();
    let out = run_ok(loupe().args(["export", "--format", "collapsed", "--pid", pid, "--db"]).arg(db));
    let text = String::from_utf8(out.stdout).unwrap();
    let sum: u64 = text.lines().map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap()).sum();
    assert_eq!(sum, total);
    assert!(text.lines().any(|l| l.contains(";main;a;d;c_work ")), "{text}");
    let pb = dir.join("cpu.pb.gz");
    run_ok(loupe().args(["export", "--format", "pprof", "--pid", pid, "-o"]).arg(&pb).arg("--db").arg(db));
    let go = std::process::Command::new("go").args(["tool", "pprof", "-top", "-sample_index=samples"]).arg(&pb).output();
    let period = match go {
        Ok(go) => {
            let s = String::from_utf8_lossy(&go.stdout);
            assert!(go.status.success(), "go tool pprof failed: {}", String::from_utf8_lossy(&go.stderr));
            assert!(s.contains(&format!("of {total} total")), "pprof total differs from {total}:\n{s}");
            assert!(s.contains("c_work"), "{s}");
            check_pprof_raw(&pb, total, "callstack")
        }
        Err(_) => 1_000_000_000 / 2000,
    };
    let out = run_ok(loupe().args(["export", "--format", "speedscope", "--pid", pid, "--db"]).arg(db));
    let v = json(&out);
    let w: u64 = v["profiles"][0]["weights"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).sum();
    assert_eq!((v["profiles"][0]["unit"].as_str(), w), (Some("nanoseconds"), total * period));
    let out = run_ok(loupe().args(["export", "--format", "collapsed", "--root", "comm", "--pid", pid, "--db"]).arg(db));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().all(|l| l.starts_with("callstack;")), "{text}");
    let out = run_ok(loupe().args(["export", "--format", "perfetto", "--pid", pid, "--db"]).arg(db));
    assert!(out.stdout.len() > 100 && out.stdout[0] == 0x0a, "a Trace starts with field 1 (packet), length-delimited");
    let svg = dir.join("f.svg");
    run_ok(loupe().args(["flame", "--pid", pid, "-o"]).arg(&svg).arg("--db").arg(db));
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("c_work"));
    // `spin` is inlined into a, b and d: DWARF names it as a frame of its own.
    assert!(svg.contains("spin (inlined)"), "inline frames missing from the flame graph");
}

/// What `go tool pprof -raw` reads from a cpu-clock export: `samples/count`
/// and `cpu/nanoseconds` (the default), nanoseconds = samples x period, and
/// the profiled program as the first mapping. Returns the period.
fn check_pprof_raw(pb: &Path, total: u64, program: &str) -> u64 {
    let raw = std::process::Command::new("go").args(["tool", "pprof", "-raw"]).arg(pb).output().unwrap();
    let s = String::from_utf8_lossy(&raw.stdout);
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    assert!(s.contains("PeriodType: cpu nanoseconds\n"), "{s}");
    assert!(s.lines().any(|l| l.trim() == "samples/count cpu/nanoseconds[dflt]"), "{s}");
    let period: u64 = s.lines().find_map(|l| l.strip_prefix("Period: ")?.trim().parse().ok()).expect("Period line");
    // Sample lines: "  count  nanoseconds: location ids".
    let (mut n, mut ns) = (0, 0);
    let samples = s.split("Samples:\n").nth(1).and_then(|x| x.split("Locations\n").next()).expect("Samples section");
    for l in samples.lines().filter(|l| l.contains(": ") && l.trim_start().starts_with(|c: char| c.is_ascii_digit())) {
        let mut v = l.split(':').next().unwrap().split_whitespace().map(|x| x.parse::<u64>().unwrap());
        let (c, t) = (v.next().unwrap(), v.next().unwrap());
        assert_eq!(t, c * period, "{l}");
        (n, ns) = (n + c, ns + t);
    }
    assert_eq!((n, ns), (total, total * period));
    let mappings = s.split("Mappings\n").nth(1).expect("Mappings section");
    let first = mappings.lines().next().unwrap();
    assert!(first.starts_with("1: ") && first.split_whitespace().nth(2).is_some_and(|p| p.ends_with(&format!("/{program}"))), "{first}");
    period
}

#[test]
fn no_stacks_records_flat_profiles_only() {
    // Checks that --no-stacks writes no stack file and flame says why it has nothing.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, db) = record(dir.path(), &workloads().join("callstack"), &["--no-stacks"]);
    let out = loupe().args(["flame", "--db"]).arg(&db).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no call stacks"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Inclusive samples of `procedures` and the process's total, from `top --children`.
fn inclusive(db: &Path, pid: &str, procedures: &[&str]) -> (f64, Vec<f64>) {
    let top = top_json(db, &["--children", "--pid", pid]);
    let total = top["total_samples"].as_u64().unwrap() as f64;
    let row =
        |p: &str| top["rows"].as_array().unwrap().iter().find(|r| r["procedure"] == p).map_or(0.0, |r| r["inclusive"].as_f64().unwrap());
    (total, procedures.iter().map(|p| row(p)).collect())
}

/// A stream-backend daemon collecting into `db`; running once its socket exists.
fn start_stream_daemon(db: &Path) -> std::process::Child {
    let child = loupe()
        .args(["daemon", "--freq", "1000", "--max-overhead", "off", "--backend", "stream", "--db"])
        .arg(db)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !db.join("daemon.sock").exists() {
        assert!(t.elapsed() < std::time::Duration::from_secs(60), "daemon did not come up");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

/// Stops a daemon and returns its closing report.
fn stop_daemon(d: std::process::Child) -> serde_json::Value {
    // SAFETY: sending SIGTERM to our own child.
    unsafe { libc::kill(d.id() as i32, libc::SIGTERM) };
    let out = d.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let last =
        stderr.lines().find_map(|l| l.strip_prefix("loupe: daemon stopped: ")).unwrap_or_else(|| panic!("no closing report: {stderr}"));
    serde_json::from_str(last).unwrap()
}

#[test]
fn kernel_walked_and_streamed_stacks_agree_on_the_same_run() {
    // Checks one run of callstack, collected at once by `record` (stacks walked in the kernel) and a --backend stream daemon, with and without frame pointers in its library: both within 2 points of the truth and of each other, both reaching main.
    if !require_root() {
        return;
    }
    for binary in ["callstack", "nofp/callstack"] {
        let dir = tempfile::tempdir().unwrap();
        let (kdb, sdb) = (dir.path().join("auto"), dir.path().join("stream"));
        // The daemon samples the whole machine; `record` only the workload,
        // so its ring carries only the workload's streamed samples. (Samples
        // lost from a ring would be those of the streamed code only, a bias;
        // system-wide on a loaded machine, both daemons lost thousands.)
        let s = start_stream_daemon(&sdb);
        let truth_file = dir.path().join("truth.json");
        let k = run_ok(
            loupe()
                .args(["record", "--freq", "1000", "--db"])
                .arg(&kdb)
                .arg("--")
                .arg(workloads().join(binary))
                .args(["--seconds", "6", "--out"])
                .arg(&truth_file),
        );
        let sr = stop_daemon(s);
        let kernel_log = String::from_utf8_lossy(&k.stderr).into_owned();
        assert!(kernel_log.contains("loupe: backend bpf (call stacks walked"), "{kernel_log}");
        assert_eq!(sr["backend"], "stream", "{sr}");
        let walked: u64 = kernel_log.split(" walked in the kernel").next().and_then(|l| l.rsplit('(').next()).unwrap().parse().unwrap();
        assert!(walked > 1000, "{binary}: {walked} stacks walked in the kernel\n{kernel_log}");
        let by_tables: u64 =
            kernel_log.split(" walked by unwind tables").next().and_then(|l| l.rsplit('(').next()).unwrap().parse().unwrap();
        assert!(binary == "callstack" || by_tables > 100, "{binary}: {by_tables} walked by unwind tables\n{kernel_log}");
        let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
        let pid = truth["pid"].as_u64().unwrap().to_string();
        eprintln!("{binary}: stream daemon lost {}; record: {kernel_log}", sr["kernel_lost"]);
        check_shares(&truth, &kdb);
        check_shares(&truth, &sdb);
        let procs = ["main", "a", "b", "d", "c_work"];
        let ((kt, ki), (st, si)) = (inclusive(&kdb, &pid, &procs), inclusive(&sdb, &pid, &procs));
        let report: Vec<String> = procs
            .iter()
            .zip(ki.iter().zip(&si))
            .map(|(p, (k, s))| format!("{p}: kernel {:.2}% stream {:.2}%", 100.0 * k / kt, 100.0 * s / st))
            .collect();
        eprintln!("{binary}: {walked} walked in the kernel\n{}", report.join("\n"));
        for (p, (k, s)) in procs.iter().zip(ki.iter().zip(&si)) {
            assert!(
                (100.0 * k / kt - 100.0 * s / st).abs() <= 2.0,
                "{binary} {p} inclusive differs by more than 2 points:\n{}\nrecord: {kernel_log}",
                report.join("\n")
            );
        }
        assert!(ki[0] / kt >= 0.97 && si[0] / st >= 0.97, "{binary}: stacks reach main:\n{}", report.join("\n"));
    }
}

#[test]
fn unwind_tables_in_the_kernel_reach_the_root_through_libc_qsort() {
    // Checks qsortcb (-O2 without frame pointers, through Debian's libc qsort, which has none either): `record` walks its stacks in the kernel by unwind tables, and as many reach main as with the stream daemon's DWARF stack copies on the same run.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (kdb, sdb) = (dir.path().join("auto"), dir.path().join("stream"));
    let s = start_stream_daemon(&sdb);
    let truth_file = dir.path().join("truth.json");
    let k = run_ok(
        loupe()
            .args(["record", "--freq", "1000", "--db"])
            .arg(&kdb)
            .arg("--")
            .arg(workloads().join("qsortcb"))
            .args(["--seconds", "5", "--out"])
            .arg(&truth_file),
    );
    stop_daemon(s);
    let log = String::from_utf8_lossy(&k.stderr).into_owned();
    let by_tables: u64 = log.split(" walked by unwind tables").next().and_then(|l| l.rsplit('(').next()).unwrap().parse().unwrap();
    // Until the daemon has described the process (within a poll), its samples take stack copies.
    assert!(by_tables > 100, "{by_tables} stacks walked by unwind tables\n{log}");
    let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
    let pid = truth["pid"].as_u64().unwrap().to_string();
    let procs = ["main", "qsort_r", "compare", "mix"];
    let ((kt, ki), (st, si)) = (inclusive(&kdb, &pid, &procs), inclusive(&sdb, &pid, &procs));
    let report: Vec<String> = procs
        .iter()
        .zip(ki.iter().zip(&si))
        .map(|(p, (k, s))| format!("{p}: kernel {:.2}% stream {:.2}%", 100.0 * k / kt, 100.0 * s / st))
        .collect();
    eprintln!("qsortcb: {by_tables} walked by unwind tables\n{}\n{log}", report.join("\n"));
    assert!(ki[0] / kt >= 0.97, "stacks walked in the kernel reach main:\n{}", report.join("\n"));
    assert!(ki[0] / kt >= si[0] / st - 0.005, "the kernel's walk reaches main as often as DWARF stack copies:\n{}", report.join("\n"));
    // By construction every compare frame sits under qsort_r, and mix under compare or sort_all.
    assert!(ki[2] <= ki[1] && ki[1] <= ki[0], "a frame above compare was lost:\n{}", report.join("\n"));
    // record samples the workload alone, at the rate its budget allows (~150/s on a loaded 2-CPU
    // machine): 4 points is about 3 standard errors of a 90% share there.
    for (p, (k, s)) in procs.iter().zip(ki.iter().zip(&si)) {
        assert!((100.0 * k / kt - 100.0 * s / st).abs() <= 4.0, "{p} inclusive differs by more than 4 points:\n{}", report.join("\n"));
    }
}

#[test]
fn merged_epochs_answer_byte_for_byte_as_the_epochs_one_by_one() {
    // Checks, on four real recorded epochs (callstack and selftime in turns), that top and flame over all epochs
    // print the same bytes read epoch by epoch (LOUPE_MERGED=off), when the merged form is made, and when it is
    // read; and that a corrupt merged file is named, skipped (same bytes) and made again.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for i in 0..4 {
        let wl = workloads().join(if i % 2 == 0 { "callstack" } else { "selftime" });
        run_ok(loupe().args(["record", "--freq", "1000", "--db"]).arg(&db).arg("--").arg(wl).args(["--seconds", "0.7"]));
        run_ok(loupe().args(["epoch", "--db"]).arg(&db));
    }
    let questions: [&[&str]; 6] = [
        &["top", "--by", "procedure", "--format", "json"],
        &["top", "--by", "image"],
        &["top", "--by", "line", "--comm", "callstack", "--format", "json"],
        &["top", "--children", "--format", "json"],
        &["flame", "--format", "json"],
        &["flame", "--format", "json", "--inverted", "--comm", "selftime"],
    ];
    let ask = |q: &[&str], merged: bool| {
        let mut cmd = loupe();
        cmd.args(q).args(["--epoch", "all", "--db"]).arg(&db);
        if !merged {
            cmd.env("LOUPE_MERGED", "off");
        }
        let out = run_ok(&mut cmd);
        (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    let block = db.join("merged/L02-000001");
    // Kernel frames are named at read time, and BPF programs that tests beside this one load and unload come and
    // go in kallsyms: an answer is compared with answers read epoch by epoch just before and just after it.
    let bracketed = |q: &[&str], merged: &dyn Fn() -> (String, String)| {
        let before = ask(q, false).0;
        let got = merged();
        let after = ask(q, false).0;
        (got.0 == before || got.0 == after, got)
    };
    let first = ask(questions[0], false).0;
    assert!(!block.exists(), "LOUPE_MERGED=off makes no merged form");
    assert!(first.contains("\"procedure\": \"a\""), "{first}");
    for q in questions {
        let made = (0..3).any(|_| {
            let _ = std::fs::remove_dir_all(db.join("merged"));
            bracketed(q, &|| ask(q, true)).0
        });
        assert!(made, "{q:?}: the reader that makes the merged form answers as epoch by epoch");
        assert!(block.join("sources.json").exists());
        assert!((0..3).any(|_| bracketed(q, &|| ask(q, true)).0), "{q:?}: read from the merged form");
    }
    let victim = std::fs::read_dir(&block).unwrap().flatten().map(|d| d.path()).find(|p| p.to_string_lossy().ends_with(".stacks")).unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[40] ^= 0x55;
    std::fs::write(&victim, bytes).unwrap();
    let (same, (_, err)) = bracketed(questions[4], &|| ask(questions[4], true));
    assert!(same, "a corrupt merged file is skipped and its epochs read");
    assert!(err.contains(&victim.display().to_string()) && err.contains("merged form set aside"), "{err}");
    let (same, (_, err)) = bracketed(questions[4], &|| ask(questions[4], true));
    assert!(same && !err.contains("merged form"), "the next reader makes it again: {err}");
    assert!(block.join("sources.json").exists(), "made again");
}
