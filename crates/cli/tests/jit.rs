//! JIT frames named from the runtimes' own perf maps, against workloads
//! with a known hot method (`testdata/jit`): `hotSpin` does ten times the
//! work of `coldSpin` and nothing else runs long. The maps are deleted
//! before analysis, so the names must come from the copies kept in the
//! database.

mod util;
use std::path::Path;
use std::process::Command;
use util::*;

/// Records `cmd` (run in `dir`), deletes its perf map and jitdump, and checks its JIT samples: at
/// least 95% named, the hottest named row is `hotSpin`.
fn check_jit_profile(dir: &Path, cmd: &mut Command, hot: &str) {
    let db = dir.join("db");
    let out = run_ok(
        loupe()
            .args(["record", "--freq", "1000", "--flush-every", "600", "--db"])
            .arg(&db)
            .arg("--")
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .current_dir(dir),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let top = top_json(&db, &["--by", "procedure"]);
    let rows = top["rows"].as_array().unwrap();
    let jit_row = rows
        .iter()
        .find(|r| r["image"].as_str().unwrap().starts_with("[jit] "))
        .unwrap_or_else(|| panic!("no [jit] image:\n{top:#}\n{stderr}"));
    let image = jit_row["image"].as_str().unwrap().to_string();
    let pid = image.trim_start_matches("[jit] ").to_string();
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    let _ = std::fs::remove_file(dir.join(format!("jit-{pid}.dump")));
    let top = top_json(&db, &["--by", "procedure", "--pid", &pid]);
    let rows = top["rows"].as_array().unwrap();
    let in_anon = |r: &serde_json::Value| r["image"] == image || r["image"] == "[anon]";
    let named = |r: &serde_json::Value| r["image"] == image && !r["procedure"].as_str().unwrap().starts_with('[');
    let (jit, named_n) = (sum_rows(&top, in_anon), sum_rows(&top, named));
    let report: Vec<String> = rows.iter().filter(|r| in_anon(r)).take(5).map(|r| format!("{} {}", r["samples"], r["procedure"])).collect();
    eprintln!("{jit} JIT samples, {named_n} named:\n{}", report.join("\n"));
    assert!(jit >= 200, "too few JIT samples to judge: {jit}\n{stderr}");
    assert!(named_n as f64 >= 0.95 * jit as f64, "only {named_n} of {jit} JIT samples named:\n{}", report.join("\n"));
    let first = rows.iter().find(|r| named(r)).unwrap();
    assert!(first["procedure"].as_str().unwrap().contains(hot), "hottest JIT procedure is {}, not {hot}", first["procedure"]);
    let kept = std::fs::read_dir(db.join("jit")).unwrap().flatten().map(|e| e.path()).next().expect("a kept map or jitdump");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777, 0o600, "{kept:?} is not private");
}

#[test]
fn java_hot_method_named_from_its_perf_map_after_exit() {
    // Checks OpenJDK's map (written at exit) is kept in the database and names >= 95% of JIT samples, HotLoop.hotSpin first.
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let src = repo_root().join("testdata/jit/HotLoop.java");
    run_ok(Command::new("javac").arg("-d").arg(dir.path()).arg(&src));
    let mut java = Command::new("java");
    java.args(["-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit", "-XX:+PreserveFramePointer", "-cp"]);
    java.arg(dir.path()).args(["HotLoop", "3"]);
    check_jit_profile(dir.path(), &mut java, "HotLoop.hotSpin");
}

#[test]
fn node_hot_function_named_from_its_perf_map_after_exit() {
    // Checks Node's --perf-basic-prof map is kept in the database and names >= 95% of JIT samples, hotSpin first.
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut node = Command::new("node");
    node.arg("--perf-basic-prof").arg(repo_root().join("testdata/jit/hotloop.js")).arg("3");
    check_jit_profile(dir.path(), &mut node, "hotSpin");
}

#[test]
fn node_hot_function_named_from_its_jitdump_after_exit() {
    // Checks Node's --perf-prof jitdump (found through its mapping) is kept in the database and names >= 95% of JIT samples, hotSpin first.
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut node = Command::new("node");
    node.arg("--perf-prof").arg(repo_root().join("testdata/jit/hotloop.js")).arg("2");
    check_jit_profile(dir.path(), &mut node, "hotSpin");
    assert!(std::fs::read_dir(dir.path().join("db/jit")).unwrap().flatten().any(|e| e.path().extension().is_some_and(|x| x == "dump")));
}
