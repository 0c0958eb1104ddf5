//! `loupe optimize` end to end on the `layout` workload (linked with
//! --emit-relocs): record, export BOLT fdata, run the real llvm-bolt, and
//! check that the optimized binary computes the same checksum. By
//! construction `run`, `mix` and `step` execute and every `cold_*`
//! function never does.

mod util;
use std::path::Path;
use std::process::Command;
use util::*;

const BOLT: &str = "/usr/lib/llvm-19/bin/llvm-bolt";

fn checksum(bin: &Path, iters: &str) -> String {
    String::from_utf8(run_ok(Command::new(bin).arg(iters)).stdout).unwrap()
}

#[test]
fn export_bolt_and_validate() {
    // Checks the fdata names exactly the executed functions, BOLT accepts it for all of them, and the output is unchanged.
    if !require_root() {
        return;
    }
    assert!(Path::new(BOLT).is_file(), "{BOLT} missing: run scripts/setup.sh (Debian package bolt-19)");
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("layout"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(&bin).arg("8000"));

    let fdata = dir.path().join("layout.fdata");
    run_ok(loupe().args(["optimize", "export", "--format", "bolt", "--db"]).arg(&db).arg(&bin).arg("-o").arg(&fdata));
    let text = std::fs::read_to_string(&fdata).unwrap();
    assert!(text.starts_with("no_lbr loupe-block-counts\n"), "{text}");
    let funcs: std::collections::BTreeSet<&str> = text.lines().skip(1).map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert!(funcs.contains("run") && funcs.contains("mix") && funcs.contains("step"), "{funcs:?}");
    assert!(funcs.iter().all(|f| !f.starts_with("cold_")), "never-run functions in the profile: {funcs:?}");

    let json = json(&run_ok(loupe().args(["optimize", "export", "--format", "json", "--db"]).arg(&db).arg(&bin)));
    let run = json["functions"].as_array().unwrap().iter().find(|f| f["name"] == "run").unwrap();
    assert!(run["blocks"].as_array().unwrap().iter().any(|b| b["cold"] == true), "no block of run is confidently cold");

    let prof = run_ok(loupe().args(["optimize", "export", "--format", "llvm-sample", "--db"]).arg(&db).arg(&bin));
    let prof = String::from_utf8(prof.stdout).unwrap();
    let heads: Vec<&str> = prof.lines().filter(|l| !l.starts_with(' ')).map(|l| l.split(':').next().unwrap()).collect();
    assert!(heads.contains(&"run") && heads.iter().all(|f| !f.starts_with("cold_")), "{prof}");

    let out = dir.path().join("layout.bolt");
    let bolt = run_ok(Command::new(BOLT).arg(&bin).arg("-o").arg(&out).arg(format!("-data={}", fdata.display())).args([
        "-reorder-blocks=ext-tsp",
        "-split-functions",
        "-split-all-cold",
        "-reorder-functions=hfsort",
    ]));
    let log = String::from_utf8_lossy(&bolt.stdout).to_string() + &String::from_utf8_lossy(&bolt.stderr);
    assert!(log.contains("enabling relocation mode"), "{log}");
    assert!(log.contains(&format!("{} out of", funcs.len())), "BOLT did not match every profiled function: {log}");
    assert_eq!(checksum(&out, "3000"), checksum(&bin, "3000"));
}

#[test]
fn refuses_profile_of_another_build() {
    // Checks that samples of one build are never applied to a different binary at the same path.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("prog"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(&bin).arg("2000"));
    std::fs::copy(workloads().join("calcwork"), &bin).unwrap();
    let out = loupe().args(["optimize", "export", "--db"]).arg(&db).arg(&bin).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refusing to apply it"), "{err}");
}

#[test]
fn run_checks_and_measures_then_records_the_decision() {
    // Checks `optimize run` end to end: BOLT, the same-output check, alternating timing, a logged decision, status.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("layout"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(&bin).arg("5000"));
    // Two rounds can never be significant (p >= 0.25): the candidate must be discarded for that reason, after the check passed.
    let out = loupe()
        .args(["optimize", "run", "--db"])
        .arg(&db)
        .arg(&bin)
        .args(["--check", "{} 300", "--bench", "{} 300", "--rounds", "2", "--install", "--min-samples", "100"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("discarded (not significantly faster"), "{stdout}");
    assert!(!dir.path().join("layout.loupe-orig").exists(), "a discarded candidate was installed");
    let log = std::fs::read_to_string(db.join("optimize/decisions.jsonl")).unwrap();
    let d: serde_json::Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(d["measurement"]["rounds"], 2);
    assert_ne!(d["candidate_build_id"], d["build_id"]);
    let st = run_ok(loupe().args(["optimize", "status", "--db"]).arg(&db).arg(&bin));
    // A profile below --min-samples is not used.
    let sparse = loupe()
        .args(["optimize", "run", "--db"])
        .arg(&db)
        .arg(&bin)
        .args(["--check", "{} 1", "--bench", "{} 1", "--min-samples", "1e9"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&sparse.stderr).contains("not mature"), "{}", String::from_utf8_lossy(&sparse.stderr));
    assert!(String::from_utf8_lossy(&st.stdout).contains("original in place"));
}
