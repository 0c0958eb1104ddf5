//! The daemon under churn, crashes and corrupt files.

mod util;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

struct Daemon {
    child: Child,
}

impl Daemon {
    fn start(db: &Path, extra: &[&str]) -> Daemon {
        let child = loupe().args(["daemon", "--db"]).arg(db).args(extra).stderr(Stdio::piped()).spawn().unwrap();
        let sock = db.join("daemon.sock");
        let t = Instant::now();
        while !sock.exists() {
            assert!(t.elapsed() < Duration::from_secs(20), "daemon did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn status_kib(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = s.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    fn stop(mut self) -> String {
        // SAFETY: sending SIGTERM to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap()).wait_with_output().unwrap();
        assert!(out.status.success(), "daemon exit {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn total(db: &Path) -> u64 {
    top_json(db, &["--by", "image", "--epoch", "all"])["total_samples"].as_u64().unwrap()
}

#[test]
fn churn_of_short_lived_processes_stays_attributed_and_bounded() {
    // Checks unknown < 0.5% and bounded daemon memory while 2000+ processes come and go.
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // The budget is not under test here: under a loaded CI machine it would lower the rate and starve the count.
    let d = Daemon::start(&db, &["--flush-every", "2", "--max-overhead", "off"]);
    let churn = workloads().join("churn");
    let out = run_ok(Command::new(&churn).args(["--count", "2000"]));
    eprintln!("churn: {}", String::from_utf8_lossy(&out.stdout).trim());
    let peak_kib = d.status_kib("VmHWM:");
    run_ok(loupe().args(["flush", "--db"]).arg(&db));
    d.stop();
    let top = top_json(&db, &["--by", "image", "--epoch", "all"]);
    let (all, unknown) = (top["total_samples"].as_u64().unwrap(), top["unknown_samples"].as_u64().unwrap());
    let spin = top_json(&db, &["--by", "procedure", "--comm", "churn-child"]);
    let spin_samples = spin["total_samples"].as_u64().unwrap();
    eprintln!("samples {all}, unknown {unknown}, churn-child samples {spin_samples}, daemon peak RSS {peak_kib} KiB");
    assert!(spin_samples > 1000, "the short-lived processes must be sampled: {spin_samples}");
    assert!((unknown as f64) < 0.005 * all as f64, "unknown {unknown} of {all}");
    assert!(peak_kib < 100 * 1024, "daemon peak RSS {peak_kib} KiB");
}

#[test]
fn kill_9_loses_at_most_the_last_flush_interval() {
    // Checks that after SIGKILL the database opens and holds all but the last ~flush interval of samples.
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let cpus = std::thread::available_parallelism().unwrap().get();
    // Every CPU busy for the whole run, so rate x CPUs x seconds samples are
    // taken by construction (an idle CPU in a deep sleep state takes fewer
    // timer samples, and a quiet machine would make the figure a guess).
    let mut busy = busy_every_cpu(cpus, 8);
    let d = Daemon::start(&db, &["--flush-every", "1", "--freq", "500", "--max-overhead", "off"]);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let mut child = std::mem::replace(&mut std::mem::ManuallyDrop::new(d).child, Command::new("true").spawn().unwrap());
    child.kill().unwrap();
    let ran = started.elapsed().as_secs_f64();
    child.wait().unwrap();
    let _ = busy.kill();
    let _ = busy.wait();
    let expected_min = 500.0 * cpus as f64 * (ran - 2.5);
    let got = total(&db) as f64;
    assert!(got >= expected_min, "only {got} samples survived; expected at least {expected_min:.0}");
    let d2 = Daemon::start(&db, &["--flush-every", "1"]);
    // A loaded machine may hold the new daemon's first samples back for a while: ask it to flush until they land.
    let restarted = Instant::now();
    while total(&db) as f64 <= got && restarted.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(500));
        let _ = loupe().args(["flush", "--db"]).arg(&db).output();
    }
    d2.stop();
    assert!(total(&db) as f64 > got, "restarted daemon must add to the same database");
}

#[test]
fn the_default_daemon_loses_no_record_with_every_cpu_busy() {
    // Checks that the default daemon (call stacks, --max-overhead 1) with a busy thread on every CPU loses nothing
    // over 4 s: the kernel's lost-record counts it reports (PERF_RECORD_LOST, and the events' own lost-sample
    // counters) are 0, its closing line says "0 lost", and `top` has no loss line. The start-up calibration it
    // replaced sampled at 5000/s with 16 KiB stack copies and overran the rings (30-44% of a 10 s run lost).
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let cpus = std::thread::available_parallelism().unwrap().get();
    let mut busy = busy_every_cpu(cpus, 8);
    std::thread::sleep(Duration::from_millis(200));
    let d = Daemon::start(&db, &["--flush-every", "1"]);
    std::thread::sleep(Duration::from_secs(4));
    let stderr = d.stop();
    let _ = busy.kill();
    let _ = busy.wait();
    let report = stderr.lines().find_map(|l| l.strip_prefix("loupe: daemon stopped: ")).expect("final report");
    let report: serde_json::Value = serde_json::from_str(report).unwrap();
    let losses = &report["losses"];
    eprintln!("rate {} /s, samples {}, losses {losses}", report["rate_hz"], report["stats"]["samples"]);
    assert_eq!(report["kernel_lost"].as_u64(), Some(0), "PERF_RECORD_LOST counts: {stderr}");
    assert_eq!((losses["ring_overrun"].as_u64(), losses["map_full"].as_u64()), (Some(0), Some(0)), "{stderr}");
    let samples = report["stats"]["samples"].as_u64().unwrap();
    assert!(samples >= 2 * cpus as u64 * 10, "only {samples} samples");
    let closing = stderr.lines().rfind(|l| l.contains(" samples in ") && l.contains(" -> ")).expect("closing line");
    // "0 lost", then the destination or further notes (unwind-table walks that stopped early are not losses).
    assert!(closing.contains("), 0 lost -> ") || closing.contains("), 0 lost, "), "{closing}");
    let top = run_ok(loupe().args(["top", "--db"]).arg(&db).args(["--by", "image"]));
    assert!(!String::from_utf8_lossy(&top.stdout).contains("lost"), "{}", String::from_utf8_lossy(&top.stdout));
}

#[test]
fn corrupt_profile_is_named_and_the_rest_still_reads() {
    // Checks that a flipped byte in one profile file is reported by name and skipped.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(workloads().join("selftime")).args(["--seconds", "1"]));
    let epoch_dir = std::fs::read_dir(db.join("epochs")).unwrap().next().unwrap().unwrap().path();
    let mut profs: Vec<_> =
        std::fs::read_dir(&epoch_dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "prof")).collect();
    profs.sort();
    assert!(profs.len() >= 3, "expected several profiles, got {profs:?}");
    let victim = profs.iter().find(|p| p.to_string_lossy().contains("selftime-")).unwrap().clone();
    let mut bytes = std::fs::read(&victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x5a;
    std::fs::write(&victim, bytes).unwrap();
    let out = loupe().args(["top", "--db"]).arg(&db).args(["--by", "procedure"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "top must still succeed: {stderr}");
    assert!(stderr.contains(victim.file_name().unwrap().to_str().unwrap()), "stderr must name the file: {stderr}");
    assert!(stdout.contains("[kernel]") || stdout.contains("libselftime.so"), "the rest must show: {stdout}");
}

#[test]
fn flush_and_epoch_commands_reach_the_daemon() {
    // Checks that `loupe flush` writes data now and `loupe epoch` starts epoch 2 with new samples.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let d = Daemon::start(&db, &["--flush-every", "3600"]);
    std::thread::sleep(Duration::from_millis(800));
    run_ok(loupe().args(["flush", "--db"]).arg(&db));
    let after_flush = total(&db);
    assert!(after_flush > 0, "flush must write samples");
    let out = run_ok(loupe().args(["epoch", "--db"]).arg(&db));
    assert!(String::from_utf8_lossy(&out.stdout).contains("epoch 2"));
    std::thread::sleep(Duration::from_millis(800));
    run_ok(loupe().args(["epoch", "--db"]).arg(&db));
    // Epochs 1 and 2 are closed: the daemon sums them into one merged block
    // in the background (issue 23), written whole (its sources list last).
    let block = db.join("merged").join("L01-000001").join("sources.json");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while !block.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    d.stop();
    assert!(block.exists(), "no merged block of epochs 1-2 after the daemon closed them");
    let e1 = top_json(&db, &["--by", "image", "--epoch", "1"])["total_samples"].as_u64().unwrap();
    let e2 = top_json(&db, &["--by", "image", "--epoch", "2"])["total_samples"].as_u64().unwrap();
    assert!(e1 >= after_flush && e2 > 0, "epoch 1 {e1}, epoch 2 {e2}");
    let e3 = top_json(&db, &["--by", "image", "--epoch", "3"])["total_samples"].as_u64().unwrap();
    let all = top_json(&db, &["--by", "image", "--epoch", "all"])["total_samples"].as_u64().unwrap();
    assert_eq!(all, e1 + e2 + e3, "the merged block holds exactly its epochs' samples");
}

#[test]
fn epochs_rotate_on_time_and_lose_nothing_between_them() {
    // Checks --epoch-every: a new epoch about every second while a workload runs, each starting after the last, and the
    // workload's samples over all of them match the CPU time it measured itself (1000/s, within 10%).
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let d = Daemon::start(&db, &["--epoch-every", "1", "--flush-every", "0.5", "--max-overhead", "off"]);
    let truth_file = dir.path().join("truth.json");
    run_ok(Command::new(workloads().join("selftime")).args(["--seconds", "3", "--out"]).arg(&truth_file));
    let log = d.stop();
    let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
    let epochs = json(&run_ok(loupe().args(["epochs", "--format", "json", "--db"]).arg(&db)));
    let starts: Vec<u64> = epochs.as_array().unwrap().iter().map(|e| e["start_unix_ns"].as_u64().unwrap()).collect();
    // The workload's 3 CPU-seconds take at least 3 s: two rotations at least (more on a loaded machine).
    assert!(starts.len() >= 3, "epochs {starts:?}\n{log}");
    assert!(starts.windows(2).all(|w| w[1] > w[0]), "epochs start in order: {starts:?}");
    assert!(log.contains("started (--epoch-every)"), "{log}");
    let pid = truth["pid"].as_u64().unwrap().to_string();
    let samples = top_json(&db, &["--by", "image", "--epoch", "all", "--pid", &pid])["total_samples"].as_u64().unwrap() as f64;
    let want = truth["total_cpu"].as_f64().unwrap() * 1000.0;
    assert!((samples / want - 1.0).abs() < 0.1, "workload samples over all epochs {samples}, its CPU time says {want}\n{log}");
    // Every epoch's end flushes everything: the process keeps its name in the epochs after (it lost it once). The
    // few samples between its fork and its exec carry the parent's name.
    let by_comm = top_json(&db, &["--by", "image", "--epoch", "all", "--comm", "selftime"])["total_samples"].as_u64().unwrap() as f64;
    assert!(by_comm <= samples && samples - by_comm <= 5.0, "samples of comm selftime {by_comm} vs of its pid {samples}");
}

/// `selftime` with one busy thread per CPU for `seconds`, so every CPU takes
/// its timer samples whatever else the machine is doing.
fn busy_every_cpu(cpus: usize, seconds: u32) -> std::process::Child {
    Command::new(workloads().join("selftime"))
        .args(["--seconds", &seconds.to_string(), "--threads", &cpus.to_string(), "--out", "/dev/null"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}
