//! The agents end to end (issue 29): a real daemon with agents on, real
//! workloads that report their own throughput and check their own results.

mod util;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::*;

/// One test at a time: each measures throughput, and two at once would
/// measure each other.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Daemon(Child);

impl Daemon {
    fn start(db: &Path, extra: &[&str]) -> Daemon {
        let child = loupe()
            .args(["daemon", "--max-overhead", "off", "--freq", "99", "--no-stacks", "--db"])
            .arg(db)
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !db.join("daemon.sock").exists() {
            assert!(t.elapsed() < Duration::from_secs(30), "daemon did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon(child)
    }

    fn stop(mut self) -> String {
        // SAFETY: SIGTERM to our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let out = std::mem::replace(&mut self.0, Command::new("true").spawn().unwrap()).wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "daemon exit {:?}: {err}", out.status);
        err
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A workload reporting into its counter file.
struct Workload {
    child: Child,
    counter: PathBuf,
}

impl Workload {
    fn start(dir: &Path, name: &str, args: &[&str]) -> Workload {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let counter = dir.join(format!("{name}-{}.count", N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        let child = Command::new(workloads().join(name)).args(args).arg("--counter").arg(&counter).stdout(Stdio::piped()).spawn().unwrap();
        // Running once it reports (randaccess fills its memory first).
        let t = Instant::now();
        while std::fs::read_to_string(&counter).map_or(true, |s| s.trim().parse::<u64>().unwrap_or(0) == 0) {
            assert!(t.elapsed() < Duration::from_secs(60), "{name} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Workload { child, counter }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its own closing line: the work done and the errors it found.
    fn finish(self) -> serde_json::Value {
        let out = self.child.wait_with_output().unwrap();
        assert!(out.status.success(), "workload failed: {:?} {}", out.status, String::from_utf8_lossy(&out.stdout));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn log(db: &Path) -> Vec<serde_json::Value> {
    let out = run_ok(loupe().args(["agents", "log", "--format", "json", "--db"]).arg(db));
    json(&out).as_array().unwrap().clone()
}

fn about(entries: &[serde_json::Value], pid: u32) -> Vec<serde_json::Value> {
    entries.iter().filter(|e| e["target"]["pid"] == pid).cloned().collect()
}

/// Waits until the log has an entry about `pid` with one of `events`.
fn wait_for(db: &Path, pid: u32, events: &[&str], limit: Duration) -> serde_json::Value {
    let t = Instant::now();
    loop {
        if let Some(e) = about(&log(db), pid).into_iter().find(|e| events.contains(&e["event"].as_str().unwrap_or(""))) {
            return e;
        }
        assert!(t.elapsed() < limit, "no {events:?} entry for pid {pid} in {limit:?}: {:#?}", log(db));
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn anon_huge_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    s.lines().find(|l| l.starts_with("AnonHugePages:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn thp_usable() -> bool {
    let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let ok = mode.contains("[madvise]") || mode.contains("[always]");
    if !ok {
        eprintln!("skipping: transparent huge pages are not in madvise or always mode ({})", mode.trim());
    }
    ok
}

const TRIAL: &[&str] = &["--agents-interval", "1", "--agents-rounds", "2", "--agents-windows", "4", "--agents-window", "0.5"];

#[test]
fn hugepages_agent_speeds_up_random_access_and_leaves_the_rest_alone() {
    // Checks: a 128 MiB random-read workload gets its hot ranges collapsed and the trial decides: kept only with a
    // significant median gain and huge pages in place, else reverted with the huge pages split back; every read
    // still right; a 2 MiB one is left alone with the reason logged; a large one not on the allow-list is never
    // touched. Whether the gain reaches significance is the machine's: a before/after trial at load ~13 (a fresh
    // clone's CI beside other builds) saw +22% in 11 of 16 pairs, p = 0.105, the windows drifting with the load;
    // the gain itself is `bench/agents.py hugepages`'s figure.
    if !require_root() || !thp_usable() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let big = Workload::start(dir.path(), "randaccess", &["--mib", "128", "--seconds", "60"]);
    let small = Workload::start(dir.path(), "randaccess", &["--mib", "2", "--seconds", "60"]);
    let other = Workload::start(dir.path(), "randaccess", &["--mib", "128", "--seconds", "60"]);
    // CPU time per read, not reads per second: three busy processes and the daemon share two CPUs here, and a rate
    // per second moved 2x between windows with the CPU share (a CI run missed the gain that way).
    let metric = format!("cpu-per-work:{}/by-pid-{{pid}}.count", dir.path().display());
    // One metric for every process: each counter linked under its pid for the {pid} pattern.
    for w in [&big, &small, &other] {
        std::os::unix::fs::symlink(&w.counter, dir.path().join(format!("by-pid-{}.count", w.pid()))).unwrap();
    }
    let (pb, ps) = (format!("pid:{}", big.pid()), format!("pid:{}", small.pid()));
    let mut args = vec!["--agents-enable", "hugepages", "--agents-allow", &pb, "--agents-allow", &ps, "--agents-metric", &metric];
    // 16 windows before and after, not 8: with a load average of ~19 here, 8 pairs missed a +27% median gain.
    args.extend_from_slice(&["--agents-interval", "1", "--agents-rounds", "4", "--agents-windows", "4", "--agents-window", "0.5"]);
    let d = Daemon::start(&db, &args);
    let verdict = wait_for(&db, big.pid(), &["kept", "reverted", "error", "left-alone"], Duration::from_secs(150));
    let left = wait_for(&db, small.pid(), &["left-alone", "kept", "reverted"], Duration::from_secs(60));
    let huge_kib = anon_huge_kib(big.pid());
    let other_kib = anon_huge_kib(other.pid());
    d.stop();
    let entries = log(&db);
    // The collapse was done: the trial measured the action, not nothing.
    let on = verdict["evidence"]["switches"].as_array().unwrap().iter().find(|s| s["on"] == true).cloned().unwrap_or_default();
    assert!(on["result"]["anon_huge_after"].as_u64().unwrap_or(0) >= 32 << 20, "no collapse during the trial: {verdict:#}");
    let v = &verdict["evidence"]["verdict"];
    match verdict["event"].as_str().unwrap() {
        "kept" => {
            assert!(v["median_ratio"].as_f64().unwrap() > 1.0 && v["p_better"].as_f64().unwrap() <= 0.05, "{v:#}");
            assert!(huge_kib >= 32 * 1024, "only {huge_kib} KiB in huge pages after the agent kept its collapse");
        }
        "reverted" => {
            // Reverted only when the windows did not show a significant gain of at least 2%.
            let (p, m) = (v["p_better"].as_f64().unwrap(), v["median_ratio"].as_f64().unwrap());
            assert!(p > 0.05 || m < 1.02, "a significant gain was reverted: {v:#}");
            assert!(huge_kib < 32 * 1024, "{huge_kib} KiB still in huge pages after the agent reverted: {verdict:#}");
        }
        _ => panic!("{verdict:#}"),
    }
    assert_eq!(left["event"], "left-alone", "{left:#}");
    assert!(left["summary"].as_str().unwrap().contains("small working set"), "{left:#}");
    assert!(left["summary"].as_str().unwrap().contains("dTLB"), "the dTLB count (or why there is none) is not said: {left:#}");
    assert!(about(&entries, other.pid()).is_empty(), "a process not on the allow-list appears in the log");
    assert_eq!(other_kib, 0, "a process not on the allow-list got huge pages");
    for w in [big, small, other] {
        assert_eq!(w.finish()["errors"], 0);
    }
}

#[test]
fn placement_of_a_producer_consumer_pair_is_kept_only_with_a_gain_else_reverted() {
    // Checks: two threads handing items through a queue share its lines and are placed together; the trial on
    // their own item count decides. Kept: significant (p <= 0.05), median gain above 1, threads on the logged CPUs.
    // Reverted (no gain or a regression): the log says why and every thread has its CPUs back. Placed on one CPU
    // (the smallest cache domain of a 2-CPU VM) the spinning hand-offs each wait a time slice, a regression by
    // construction at any load, so there the action must be reverted by itself. Every item arrives right.
    if !require_root() {
        return;
    }
    if std::fs::read_to_string("/sys/devices/system/cpu/online").is_ok_and(|s| s.trim() == "0") {
        eprintln!("skipping: one CPU");
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let w = Workload::start(dir.path(), "pcqueue", &["--wait", "spin", "--seconds", "60"]);
    let metric = format!("counter:{}", w.counter.display());
    let allow = format!("pid:{}", w.pid());
    let mut args = vec!["--agents-enable", "placement", "--agents-allow", &allow, "--agents-metric", &metric];
    args.extend_from_slice(TRIAL);
    let before: Vec<String> = threads(w.pid()).iter().map(|t| cpus_allowed(w.pid(), *t)).collect();
    let d = Daemon::start(&db, &args);
    let applied = wait_for(&db, w.pid(), &["applied", "left-alone"], Duration::from_secs(60));
    if applied["event"] == "left-alone" {
        // At load ~13 both threads can run in turns on one CPU for the whole observation (CPU share 0.21 each, last
        // CPU 0 for both): then no line is seen written from two CPUs, and leaving them alone is the right call. The
        // agent must say so, with the evidence behind it.
        d.stop();
        let sharing = &applied["evidence"]["sharing"];
        assert_eq!(sharing["true_lines"].as_u64().unwrap() + sharing["false_lines"].as_u64().unwrap(), 0, "{applied:#}");
        assert!(applied["summary"].as_str().unwrap().contains("from two CPUs"), "{applied:#}");
        assert_eq!(w.finish()["errors"], 0);
        return;
    }
    let verdict = wait_for(&db, w.pid(), &["kept", "reverted", "revert-failed"], Duration::from_secs(60));
    let after: Vec<String> = threads(w.pid()).iter().map(|t| cpus_allowed(w.pid(), *t)).collect();
    d.stop();
    let one_cpu = applied["evidence"]["placement"].as_object().unwrap().values().all(|c| c.as_array().unwrap().len() == 1);
    if one_cpu {
        assert_eq!(verdict["event"], "reverted", "spinning hand-offs placed on one CPU were kept: {verdict:#}");
        assert!(verdict["evidence"]["verdict"]["median_ratio"].as_f64().unwrap() < 1.0, "{verdict:#}");
    }
    match verdict["event"].as_str().unwrap() {
        "kept" => {
            let v = &verdict["evidence"]["verdict"];
            assert!(v["p_better"].as_f64().unwrap() <= 0.05 && v["median_ratio"].as_f64().unwrap() > 1.0, "{v:#}");
            let placed = applied["evidence"]["placement"].as_object().unwrap();
            for (tid, cpus) in placed {
                let list: Vec<String> = cpus.as_array().unwrap().iter().map(|c| c.to_string()).collect();
                let now = cpus_allowed(w.pid(), tid.parse().unwrap());
                assert!(now.ends_with(&list.join(",")) || list.len() > 1, "thread {tid} is not on {list:?}: {now}");
            }
        }
        _ => {
            assert!(verdict["summary"].as_str().unwrap().starts_with("reverted:"), "{verdict:#}");
            assert_eq!(before, after, "the threads did not get their CPUs back");
        }
    }
    assert_eq!(w.finish()["errors"], 0);
}

#[test]
fn daemon_killed_mid_trial_leaves_the_process_running_and_the_next_one_undoes() {
    // Checks: SIGKILL to the daemon during a large-page trial leaves the workload running with every read right;
    // the next daemon finds the action pending in the log and undoes it (huge pages split back) before anything else.
    if !require_root() || !thp_usable() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let w = Workload::start(dir.path(), "randaccess", &["--mib", "128", "--seconds", "60"]);
    let metric = format!("counter:{}", w.counter.display());
    let allow = format!("pid:{}", w.pid());
    let mut args = vec!["--agents-enable", "hugepages", "--agents-allow", &allow, "--agents-metric", &metric];
    args.extend_from_slice(TRIAL);
    let mut d = Daemon::start(&db, &args);
    wait_for(&db, w.pid(), &["applied"], Duration::from_secs(60));
    // Into the phase with the action on (off, then on): the collapse is done or under way.
    let t = Instant::now();
    while anon_huge_kib(w.pid()) == 0 && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    d.0.kill().unwrap();
    d.0.wait().unwrap();
    assert!(Path::new(&format!("/proc/{}", w.pid())).exists(), "the workload died with the daemon");
    assert!(anon_huge_kib(w.pid()) > 0, "the kill came before the collapse; the test proves nothing");
    // The next daemon, observing only (no metric): it must still undo what is pending.
    let d2 = Daemon::start(&db, &["--agents-enable", "hugepages", "--agents-allow", &allow, "--agents-interval", "60"]);
    let rec = wait_for(&db, w.pid(), &["recovered", "revert-failed"], Duration::from_secs(30));
    let kib = anon_huge_kib(w.pid());
    d2.stop();
    assert_eq!(rec["event"], "recovered", "{rec:#}");
    assert_eq!(kib, 0, "huge pages left after the undo");
    assert_eq!(w.finish()["errors"], 0);
}

fn threads(pid: u32) -> Vec<u32> {
    let mut t: Vec<u32> =
        std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    t.sort();
    t
}

fn cpus_allowed(pid: u32, tid: u32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).unwrap();
    s.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap().to_string()
}
