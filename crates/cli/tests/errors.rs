//! Bad input gets a one-line clear error.

mod util;
use util::*;

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = loupe().args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn unknown_event_lists_the_available_ones() {
    // Checks that a misspelt event is refused with the list of known events.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (code, err) = stderr_of(&["record", "--db", db.to_str().unwrap(), "-e", "cpu-clocks", "--", "true"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("cpu-clocks") && err.contains("cpu-clock") && err.contains("page-faults"), "{err}");
}

#[test]
fn missing_command_exits_127() {
    // Checks shell-like behaviour for a command that does not exist.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (code, err) = stderr_of(&["record", "--db", db.to_str().unwrap(), "--", "no-such-command-xyz"]);
    assert_eq!(code, Some(127));
    assert_eq!(err.trim(), "loupe: command not found: no-such-command-xyz");
}

#[test]
fn unwritable_database_is_one_clear_line() {
    // Checks that a database path that cannot be created names itself and the reason.
    let (code, err) = stderr_of(&["record", "--db", "/proc/loupe-db", "--duration", "1"]);
    assert_eq!(code, Some(1));
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/proc/loupe-db"), "{err}");
}

#[test]
fn malformed_option_is_a_usage_error() {
    // Checks that clap rejects a bad value with exit status 2.
    let (code, err) = stderr_of(&["top", "--by", "function"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--by"), "{err}");
    let (code, _) = stderr_of(&["record", "--freq", "0"]);
    assert_eq!(code, Some(2));
}

#[test]
fn top_on_missing_database_says_so() {
    // Checks that reading a directory that is not a database fails clearly.
    let dir = tempfile::tempdir().unwrap();
    let (code, err) = stderr_of(&["top", "--db", dir.path().join("nope").to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn unprivileged_user_is_told_what_to_change() {
    // Checks the perf_event_paranoid message when an unprivileged user samples the whole machine.
    if !require_root() {
        return;
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap();
    if paranoid.trim().parse::<i32>().unwrap() < 1 {
        eprintln!("perf_event_paranoid < 1 lets everyone sample; nothing to check");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    std::process::Command::new("chown").args(["65534:65534"]).arg(&db).status().unwrap();
    std::process::Command::new("chmod").args(["755"]).arg(dir.path()).status().unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_loupe"))
        .args(["record", "--duration", "1", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("perf_event_paranoid"), "{err}");
}
