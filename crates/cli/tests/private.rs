//! Private databases and unprivileged use (issue 27): modes of what
//! `record` writes whatever the umask, `--group`, another user (`nobody`,
//! through `runuser`) refused with the path named, user-space-only
//! recording at `kernel.perf_event_paranoid = 2` checked against
//! `selftime`'s own measurement, refusals that name the capability or
//! sysctl, failed runs that leave nothing, and messages with the real cause.

mod util;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use util::*;

const PROCEDURES: [&str; 4] = ["hot_alpha", "hot_beta", "hot_gamma", "lib_spin"];
const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

/// Sets `kernel.perf_event_paranoid` for a test and puts the machine's
/// value back when dropped.
struct Paranoid(String);

impl Paranoid {
    fn set(value: &str) -> Paranoid {
        let old = std::fs::read_to_string(PARANOID).unwrap();
        std::fs::write(PARANOID, value).unwrap();
        Paranoid(old)
    }
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        let _ = std::fs::write(PARANOID, self.0.trim());
    }
}

/// A directory every user may use, holding copies of loupe and of
/// `selftime` (the checkout may sit where `nobody` cannot reach).
struct Shared {
    dir: tempfile::TempDir,
}

impl Shared {
    fn new() -> Shared {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::copy(env!("CARGO_BIN_EXE_loupe"), dir.path().join("loupe")).unwrap();
        for f in ["selftime", "libselftime.so"] {
            std::fs::copy(workloads().join(f), dir.path().join(f)).unwrap();
        }
        Shared { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `loupe ARGS` as `nobody`, from the shared directory.
    fn as_nobody(&self, args: &[&str]) -> Output {
        Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(self.path("loupe"))
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("runuser")
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every directory and file under `root` with its mode and group.
fn modes(root: &Path) -> Vec<(PathBuf, u32, u32, bool)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        out.push((p.clone(), m.mode() & 0o7777, m.gid(), m.is_dir()));
        if m.is_dir() {
            todo.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
    }
    out
}

/// `record` of `selftime` for `seconds` into `db`, under umask 000.
fn record_selftime(shared: &Shared, db: &Path, extra: &[&str]) {
    let cmd = format!(
        "umask 000; exec {} record --freq 2000 {} --db {} -- {} --seconds 0.5 >/dev/null",
        shared.path("loupe").display(),
        extra.join(" "),
        db.display(),
        shared.path("selftime").display()
    );
    run_ok(Command::new("sh").args(["-c", &cmd]));
}

#[test]
fn databases_are_private_whatever_the_umask_and_nobody_cannot_read_them() {
    // Checks 0700/0600 for every entry of a recorded database under umask 000, and that `nobody` is refused naming the path.
    if !require_root() {
        return;
    }
    let shared = Shared::new();
    let db = shared.path("rootdb");
    record_selftime(&shared, &db, &[]);
    let entries = modes(&db);
    assert!(entries.len() > 6, "a recorded database has epochs, index, profiles: {entries:?}");
    for (p, mode, _, dir) in &entries {
        assert_eq!(*mode, if *dir { 0o700 } else { 0o600 }, "{}", p.display());
    }
    let out = shared.as_nobody(&["top", "--db", db.to_str().unwrap()]);
    assert!(!out.status.success() && out.stdout.is_empty(), "nobody read root's database: {}", String::from_utf8_lossy(&out.stdout));
    let err = stderr(&out);
    assert!(err.contains("permission denied") && err.contains(db.to_str().unwrap()), "{err}");
}

#[test]
fn group_shares_the_database_with_that_group_only() {
    // Checks --group: directories 2750, files 0640 in group nogroup, and nobody (whose group it is) can read it.
    if !require_root() {
        return;
    }
    let shared = Shared::new();
    let db = shared.path("groupdb");
    record_selftime(&shared, &db, &["--group", "nogroup"]);
    let gid = std::fs::metadata(&db).unwrap().gid();
    assert_ne!(gid, 0);
    for (p, mode, g, dir) in modes(&db) {
        assert_eq!((mode, g), (if dir { 0o2750 } else { 0o640 }, gid), "{}", p.display());
    }
    let out = shared.as_nobody(&["top", "--db", db.to_str().unwrap(), "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let top: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(top["total_samples"].as_u64().unwrap() > 0);
    let bad = loupe()
        .args(["record", "--group", "no-such-group-loupe", "--db"])
        .arg(shared.path("g2"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert!(!bad.status.success() && stderr(&bad).contains("no-such-group-loupe"), "{}", stderr(&bad));
    assert!(!shared.path("g2").exists(), "a refused --group created the database");
}

/// Per-procedure shares of user-space samples, with `selftime`'s own
/// shares of user CPU time beside them.
fn user_shares(loupe: &Path, db: &Path, truth: &Path) -> Vec<(f64, f64)> {
    let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(truth).unwrap()).unwrap();
    let pid = truth["pid"].as_u64().unwrap().to_string();
    let out = run_ok(
        Command::new(loupe).args(["top", "--by", "procedure", "--format", "json", "--limit", "100000", "--pid", &pid, "--db"]).arg(db),
    );
    let top = json(&out);
    let user = (top["total_samples"].as_u64().unwrap() - sum_rows(&top, |r| r["image"] == "[kernel]")) as f64;
    assert!(user > 2_000.0, "too few user-space samples to judge: {user}");
    let utime = truth["utime"].as_f64().unwrap();
    PROCEDURES
        .iter()
        .map(|p| (100.0 * sum_rows(&top, |r| r["procedure"] == *p) as f64 / user, 100.0 * truth["procedures"][p].as_f64().unwrap() / utime))
        .collect()
}

#[test]
fn nobody_profiles_own_command_in_user_space_like_root() {
    // Checks unprivileged record at paranoid 2: one note, no kernel samples, user-space shares within 2 points of selftime's and of root's.
    if !require_root() {
        return;
    }
    let _one = serial();
    let _p = Paranoid::set("2");
    let shared = Shared::new();
    let run = |db: &str, truth: &str, nobody: bool| {
        let args = ["record", "--freq", "4000", "--db", db, "--", "./selftime", "--seconds", "3", "--out", truth];
        let out = if nobody {
            shared.as_nobody(&args)
        } else {
            Command::new(shared.path("loupe")).args(args).current_dir(shared.dir.path()).output().unwrap()
        };
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    let err = run("userdb", "user.json", true);
    assert_eq!(err.matches("profiling user space only").count(), 1, "{err}");
    assert!(err.contains("kernel.perf_event_paranoid <= 1 (it is 2)"), "{err}");
    assert!(!err.contains("unavailable here") && !err.contains("falling back"), "{err}");
    run("rootdb", "root.json", false);
    let loupe = shared.path("loupe");
    let kernel = sum_rows(&top_json(&shared.path("userdb"), &[]), |r| r["image"] == "[kernel]");
    assert_eq!(kernel, 0, "user-space-only recording has kernel samples");
    let user = user_shares(&loupe, &shared.path("userdb"), &shared.path("user.json"));
    let root = user_shares(&loupe, &shared.path("rootdb"), &shared.path("root.json"));
    let mut report = String::new();
    for (p, ((u, ut), (r, rt))) in PROCEDURES.iter().zip(user.iter().zip(&root)) {
        report += &format!("{p}: nobody {u:.2}% (truth {ut:.2}%), root {r:.2}% (truth {rt:.2}%)\n");
    }
    eprintln!("{report}");
    for ((u, ut), (r, rt)) in user.iter().zip(&root) {
        assert!((u - ut).abs() <= 2.0 && (r - rt).abs() <= 2.0, "shares off their truth by more than 2 points:\n{report}");
        assert!((u - r).abs() <= 2.0 + (ut - rt).abs(), "nobody's shares differ from root's:\n{report}");
    }
}

#[test]
fn refusals_name_the_capability_or_sysctl_and_leave_nothing() {
    // Checks system-wide record, daemon, --backend bpf and locks as nobody at paranoid 2: each names what it needs, none creates its database.
    if !require_root() {
        return;
    }
    let _one = serial();
    let _p = Paranoid::set("2");
    let shared = Shared::new();
    let cases: [(&[&str], &[&str]); 4] = [
        (&["record", "--duration", "1", "--db", "sw"], &["CAP_PERFMON", "kernel.perf_event_paranoid <= 0 (it is 2)"]),
        (&["daemon", "--db", "sw"], &["CAP_PERFMON", "kernel.perf_event_paranoid <= 0"]),
        (&["record", "--backend", "bpf", "--db", "sw", "--", "/bin/true"], &["CAP_BPF", "CAP_PERFMON"]),
        (&["locks", "--", "/bin/true"], &["loupe locks loads eBPF", "CAP_BPF"]),
    ];
    for (args, needs) in cases {
        let out = shared.as_nobody(args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} ran as nobody: {err}");
        assert!(needs.iter().all(|n| err.contains(n)), "{args:?}: {err}");
        assert!(!shared.path("sw").exists(), "{args:?} left its database behind");
    }
}

#[test]
fn failed_run_removes_only_what_it_created() {
    // Checks that a run failing after creating its database removes it (and its new parents) but keeps a directory that existed.
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new/db");
    let out = loupe().args(["record", "-e", "no-such-event", "--db"]).arg(&new).args(["--", "/bin/true"]).output().unwrap();
    assert!(!out.status.success() && stderr(&out).contains("no-such-event"), "{}", stderr(&out));
    assert!(!dir.path().join("new").exists(), "the failed run left {}", new.display());
    let old = dir.path().join("old");
    std::fs::create_dir(&old).unwrap();
    let out = loupe().args(["record", "-e", "no-such-event", "--db"]).arg(&old).args(["--", "/bin/true"]).output().unwrap();
    assert!(!out.status.success());
    assert!(old.is_dir(), "a directory that existed before was removed");
}

#[test]
fn messages_name_the_real_cause() {
    // Checks "no database at PATH" and, on a database with no samples, "no samples in the selected epochs" from flame and export.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let out = loupe().args(["top", "--db"]).arg(&missing).output().unwrap();
    assert!(stderr(&out).contains(&format!("no database at {}", missing.display())), "{}", stderr(&out));
    if !require_root() {
        return;
    }
    // A database with no samples: one clock sample a second, of a command that lives a millisecond.
    let empty = dir.path().join("empty");
    run_ok(loupe().args(["record", "--freq", "1", "--db"]).arg(&empty).args(["--", "/bin/true"]));
    for cmd in [&["flame"][..], &["export", "--format", "collapsed"][..]] {
        let out = loupe().args(cmd).arg("--db").arg(&empty).output().unwrap();
        let err = stderr(&out);
        assert!(!out.status.success() && err.contains("no samples in the selected epochs"), "{cmd:?}: {err}");
        assert!(!err.contains("no-stacks"), "{cmd:?}: {err}");
    }
}
