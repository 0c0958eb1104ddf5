//! `loupe optimize` end to end on the `layout` workload (linked with
//! --emit-relocs): record, export BOLT fdata, run the real llvm-bolt, and
//! check that the optimized binary computes the same checksum. By
//! construction `run`, `mix` and `step` execute and every `cold_*`
//! function never does.

mod util;
use std::path::Path;
use std::process::Command;
use util::optimize::*;
use util::*;

const BOLT: &str = "/usr/lib/llvm-19/bin/llvm-bolt";

/// llvm-bolt with Loupe's usual layout options and the profile `fdata`.
fn bolt_with(bin: &Path, fdata: &Path, out: &Path) -> std::process::Output {
    run_ok(Command::new(BOLT).arg(bin).arg("-o").arg(out).arg(format!("-data={}", fdata.display())).args([
        "-reorder-blocks=ext-tsp",
        "-split-functions",
        "-split-all-cold",
        "-reorder-functions=hfsort",
    ]))
}

fn checksum(bin: &Path, iters: &str) -> String {
    String::from_utf8(run_ok(Command::new(bin).arg(iters)).stdout).unwrap()
}

#[test]
fn export_bolt_and_validate() {
    // Checks the fdata names exactly the executed functions, BOLT accepts it for all of them, and the output is unchanged.
    if !require_root() {
        return;
    }
    // Its BOLT runs and workloads would slow one version of another test's timed trial (a manager's
    // trial once saw the candidate 12-17% slower beside them at load ~4 and installed nothing).
    let _one = serial();
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
    // `run` spans lines 47-66 of layout.c: its line offsets (from its opening line) lie in 0..=19, and its
    // dispatch loop (lines 50-64) is counted.
    let run_lines: Vec<u32> = prof
        .lines()
        .skip_while(|l| !l.starts_with("run:"))
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .map(|l| l.trim().split(':').next().unwrap().parse().unwrap())
        .collect();
    assert!(!run_lines.is_empty() && run_lines.iter().all(|&o| o <= 19), "{run_lines:?}");
    assert!(run_lines.iter().any(|&o| (3..=17).contains(&o)), "{run_lines:?}");

    let out = dir.path().join("layout.bolt");
    let bolt = bolt_with(&bin, &fdata, &out);
    let log = String::from_utf8_lossy(&bolt.stdout).to_string() + &String::from_utf8_lossy(&bolt.stderr);
    assert!(log.contains("enabling relocation mode"), "{log}");
    assert!(log.contains(&format!("{} out of", funcs.len())), "BOLT did not match every profiled function: {log}");
    assert_eq!(checksum(&out, "3000"), checksum(&bin, "3000"));
}

#[test]
fn inferred_counts_conserve_flow_and_leave_the_cold_cases_out() {
    // `--infer` (minimum-cost flow): in `run`, every block's count equals the flow into it and out of it, what
    // comes from or goes outside the graph included; no block the graph gives no way in but the entry (nop
    // padding: never run) has a count; no call to a never-run `cold_*` function carries a count (they run 0
    // times by construction), and BOLT accepts the edge profile with an unchanged result.
    if !require_root() {
        return;
    }
    // Its BOLT runs and workloads would slow one version of another test's timed trial (a manager's
    // trial once saw the candidate 12-17% slower beside them at load ~4 and installed nothing).
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("layout"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    // 4000/s: at 1000/s (~1,050 samples) 2-3 blocks were confidently cold, and once none.
    run_ok(loupe().args(["record", "--freq", "4000", "--db"]).arg(&db).arg("--").arg(&bin).arg("8000"));
    let json = json(&run_ok(loupe().args(["optimize", "export", "--format", "json", "--infer", "--db"]).arg(&db).arg(&bin)));
    let run = json["functions"].as_array().unwrap().iter().find(|f| f["name"] == "run").unwrap();
    let blocks = run["blocks"].as_array().unwrap();
    let edges = run["edges"].as_array().unwrap();
    let top = blocks.iter().map(|b| b["count"].as_f64().unwrap()).fold(0.0, f64::max);
    assert!(top > 0.0, "{run}");
    assert_eq!(run["missing_edges"], false, "the jump table of `run` is resolved");
    // Flow is integral in units of top / 1e6: only the sums' rounding separates the two sides.
    let eps = 1e-9 * top;
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    for (k, b) in blocks.iter().enumerate() {
        let (off, count) = (b["offset"].as_u64().unwrap(), f(b, "count"));
        let into: f64 = edges.iter().filter(|e| e["to"] == off).map(|e| f(e, "count")).sum();
        let out: f64 = edges.iter().filter(|e| e["from"] == off).map(|e| f(e, "count")).sum();
        assert!((into + f(b, "entered") - count).abs() <= eps, "block {off:#x}: count {count}, flow in {into} + {b}");
        assert!((out + f(b, "left") - count).abs() <= eps, "block {off:#x}: count {count}, flow out {out} + {b}");
        // Regression: nop padding after a jump (block 0x117) fed the next handler from nowhere at no cost.
        if k > 0 && !edges.iter().any(|e| e["to"] == off) {
            assert_eq!(count, 0.0, "block {off:#x} has no way in and never runs: {b}");
        }
    }
    let syms = symbols(&bin);
    let cold: Vec<u64> = syms.iter().filter(|(n, _)| n.starts_with("cold_")).map(|(_, &a)| a).collect();
    assert!(!cold.is_empty());
    for c in run["calls"].as_array().unwrap() {
        assert!(!cold.contains(&c["target"].as_u64().unwrap()), "a never-run cold_* call got a count: {c}");
    }
    assert!(blocks.iter().any(|b| b["cold"] == true), "no block of run is confidently cold");

    let fdata = dir.path().join("layout.fdata");
    run_ok(loupe().args(["optimize", "export", "--format", "bolt-edges", "--infer", "--db"]).arg(&db).arg(&bin).arg("-o").arg(&fdata));
    let out = dir.path().join("layout.bolt");
    bolt_with(&bin, &fdata, &out);
    assert_eq!(checksum(&out, "3000"), checksum(&bin, "3000"));
}

#[test]
fn refuses_profile_of_another_build() {
    // Checks that samples of one build are never applied to a different binary at the same path.
    if !require_root() {
        return;
    }
    // One at a time: the manager test below needs the CPU to finish in time.
    let _one = serial();
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
    // One at a time: the manager test below needs the CPU to finish in time.
    let _one = serial();
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
    // The candidate's own identity: derived from the original's build-id and the profile BOLT was given.
    let fdata = std::fs::read(dir.path().join("layout.loupe-bolt.fdata")).unwrap();
    let orig = loupe_optimize::identity::read_build_id(&bin).unwrap();
    let want: String = loupe_optimize::identity::derived_build_id(&orig, &fdata, orig.len()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(d["candidate_build_id"], want.as_str());
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

/// The newest decision of `action` for `image` in the manager's log.
fn decision(db: &Path, image: &Path, action: &str) -> Option<serde_json::Value> {
    let log = std::fs::read_to_string(db.join("optimize/decisions.jsonl")).unwrap_or_default();
    log.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|d| d["image"] == image.display().to_string() && d["action"] == action)
}

#[test]
fn daemon_optimizes_installs_and_rolls_back_by_itself() {
    // Checks the unattended loop: with `loupe daemon --optimize`, a program run repeatedly is
    // optimized, validated, installed by rename and then run by later execs; a slower version
    // installed by someone else is measured and rolled back; a slower candidate is discarded.
    if !require_root() {
        return;
    }
    let _one = serial();
    let t0 = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (db, good, slow) = (dir.path().join("db"), dir.path().join("good"), dir.path().join("slow"));
    std::fs::copy(workloads().join("layout"), &good).unwrap();
    std::fs::copy(workloads().join("layout"), &slow).unwrap();
    // `slow` starts with BOLT's instrumented build installed over it (about 10x slower, same output).
    let instr = dir.path().join("instr");
    run_ok(
        Command::new(BOLT)
            .arg(&slow)
            .arg("-instrument")
            .arg(format!("-instrumentation-file={}/i.fdata", dir.path().display()))
            .arg("-o")
            .arg(&instr),
    );
    std::fs::hard_link(&slow, dir.path().join("slow.loupe-orig")).unwrap();
    std::fs::rename(&instr, &slow).unwrap();
    // `slow`'s manager-made candidates are instrumented builds too, so they must be discarded.
    let cfg = dir.path().join("optimize.json");
    let conf = serde_json::json!({
        // Niceness 0: on a loaded test machine a niced manager may not get the CPU to finish in time.
        "interval": 1, "min_share": 0.002, "min_samples": 2000, "half_life": 0, "nice": 0, "regrow_factor": 0,
        "programs": [
            // 12 rounds: significance needs 10 faster (sign test p = 0.019), so one or two rounds lost to a loaded
            // machine do not discard a good candidate, as 6 rounds (all 6 needed) did at load 8.
            {"path": good, "check": "{} 300 3", "bench": "{} 2500 2", "rounds": 12},
            {"path": slow, "check": "{} 100 3", "bench": "{} 100 2", "rounds": 5,
             "bolt_opts": ["-instrument", format!("-instrumentation-file={}/c.fdata", dir.path().display())]},
        ]
    });
    std::fs::write(&cfg, conf.to_string()).unwrap();
    // Flat profiles are all the manager reads: without stacks the samples are aggregated in the kernel, and a
    // loaded machine does not lose them (with stacks, 31,550 records were lost in one loaded run).
    let daemon = OptimizeDaemon::spawn(&db, &cfg, &[]);
    // Run both programs until the manager has installed `good`, rolled back `slow` and discarded its candidate.
    let done = || {
        decision(&db, &good, "installed").is_some()
            && decision(&db, &slow, "rolled-back").is_some()
            && decision(&db, &slow, "discarded").is_some()
    };
    while !done() && t0.elapsed().as_secs() < 80 {
        checksum(&good, "2000");
        // Not checked: an instrumented build fails at exit when its file was renamed away while it ran.
        // (Fewer iterations while the 10x slower build is installed.)
        let n = if dir.path().join("slow.loupe-orig").exists() { "300" } else { "2000" };
        let _ = Command::new(&slow).arg(n).output();
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    // Later runs exec the installed file: their samples carry the optimized build's id.
    for _ in 0..5 {
        checksum(&good, "3000");
    }
    run_ok(loupe().args(["flush", "--db"]).arg(&db));
    let log = daemon.stop();
    assert!(done(), "the manager did not finish in time:\n{log}");

    let inst = decision(&db, &good, "installed").unwrap();
    let m = &inst["measurement"];
    assert!(m["ratio_median"].as_f64().unwrap() < 1.0 && m["p_value"].as_f64().unwrap() < 0.05, "{inst}");
    let installed_bid = inst["candidate_build_id"].as_str().unwrap().to_string();
    assert_ne!(installed_bid, inst["build_id"].as_str().unwrap());
    assert!(dir.path().join("good.loupe-orig").exists());
    assert_eq!(checksum(&good, "3000"), checksum(&dir.path().join("good.loupe-orig"), "3000"));
    let used = json(&run_ok(loupe().args(["optimize", "export", "--format", "json", "--db"]).arg(&db).arg(&good)));
    assert_eq!(used["build_id"], installed_bid.as_str());
    assert!(used["raw_samples"].as_u64().unwrap() > 100, "later runs did not run the installed file: {used}");

    let rb = decision(&db, &slow, "rolled-back").unwrap();
    assert!(rb["measurement"]["ratio_median"].as_f64().unwrap() > 2.0, "{rb}");
    let disc = decision(&db, &slow, "discarded").unwrap();
    assert!(disc["reason"].as_str().unwrap().contains("not significantly faster"), "{disc}");
    assert!(!dir.path().join("slow.loupe-orig").exists() && !dir.path().join("slow.loupe-bolt").exists());
    eprintln!("manager loop finished in {:.1} s; its decisions:", t0.elapsed().as_secs_f64());
    for l in std::fs::read_to_string(db.join("optimize/decisions.jsonl")).unwrap().lines() {
        let d: serde_json::Value = serde_json::from_str(l).unwrap();
        eprintln!("  {} {} {}: {}", d["unix_time"], d["image"], d["action"], d["reason"]);
    }
}

#[test]
fn optimized_binarys_samples_feed_the_originals_profile() {
    // Checks that runs of Loupe's BOLT output alone (the original never runs) give the original's exported
    // profile exactly the functions that ran, at the original's addresses, once the decision log says Loupe
    // made that output from this build; and that without that record they are not used.
    if !require_root() {
        return;
    }
    // Its BOLT runs and workloads would slow one version of another test's timed trial (a manager's
    // trial once saw the candidate 12-17% slower beside them at load ~4 and installed nothing).
    let _one = serial();
    use loupe_optimize::bolt_names;
    let dir = tempfile::tempdir().unwrap();
    let (db, bin, cand) = (dir.path().join("db"), dir.path().join("layout"), dir.path().join("layout.loupe-bolt"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    bolt_layout(dir.path(), &bin, &cand);
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(&cand).arg("8000"));

    let out = loupe().args(["optimize", "export", "--format", "json", "--db"]).arg(&db).arg(&bin).output().unwrap();
    assert!(!out.status.success(), "samples of a binary Loupe has no record of making were used");

    log_decision(&db, &bin, "accepted", &build_id_hex(&bin), &build_id_hex(&cand));
    let json = json(&run_ok(loupe().args(["optimize", "export", "--format", "json", "--db"]).arg(&db).arg(&bin)));
    assert_eq!(json["build_id"], build_id_hex(&bin));
    let orig: std::collections::HashMap<String, u64> =
        bolt_names::read_symbols(&bin).unwrap().into_iter().map(|s| (s.name, s.address)).collect();
    let opt: std::collections::HashMap<String, u64> =
        bolt_names::read_symbols(&cand).unwrap().into_iter().map(|s| (s.name, s.address)).collect();
    let funcs = json["functions"].as_array().unwrap();
    let names: Vec<&str> = funcs.iter().map(|f| f["name"].as_str().unwrap()).collect();
    for want in ["run", "mix", "step"] {
        let f = funcs.iter().find(|f| f["name"] == want).unwrap_or_else(|| panic!("{want} missing: {names:?}"));
        assert_eq!(f["start"].as_u64(), Some(orig[want]), "{want}");
        assert_ne!(orig[want], opt[want], "BOLT did not move {want}: the test proves nothing");
    }
    assert!(names.iter().all(|n| !n.starts_with("cold_")), "never-run functions in the profile: {names:?}");
    let run = funcs.iter().find(|f| f["name"] == "run").unwrap();
    assert!(run["samples"].as_f64().unwrap() > 100.0, "{run}");
}

/// The `modes` workload's hot functions per mode (testdata/workloads/modes.c): disjoint by construction.
const MODE_A: [&str; 3] = ["run_a", "mix_a", "step_a"];
const MODE_B: [&str; 3] = ["run_b", "fold_b", "twist_b"];

/// Function name -> address in an ELF file's symbol table.
fn symbols(bin: &Path) -> std::collections::HashMap<String, u64> {
    loupe_optimize::bolt_names::read_symbols(bin).unwrap().into_iter().map(|s| (s.name, s.address)).collect()
}

#[test]
fn installed_builds_samples_feed_the_saved_originals_profile() {
    // Checks the installed case: the original runs in mode 0 at PATH, Loupe's BOLT output is installed over
    // PATH (original kept as PATH.loupe-orig), then only the installed file runs, in mode 1. The export of
    // PATH.loupe-orig holds both: mode 0's functions from the original's own samples, mode 1's (which the
    // original build never executed) mapped back from the installed build, all at the original's addresses.
    if !require_root() {
        return;
    }
    use loupe_optimize::{manage, tool};
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("modes"));
    std::fs::copy(workloads().join("modes"), &bin).unwrap();
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(&bin).args(["3000", "0"]));
    // A profile of both modes' functions, so BOLT moves all of them (the original's export of mode 0, plus
    // mode 1's functions at their entries).
    let fdata = dir.path().join("p.fdata");
    run_ok(loupe().args(["optimize", "export", "--format", "bolt", "--db"]).arg(&db).arg(&bin).arg("-o").arg(&fdata));
    let mut text = std::fs::read_to_string(&fdata).unwrap();
    for f in MODE_B {
        text += &format!("1 {f} 0 1000\n");
    }
    std::fs::write(&fdata, text).unwrap();
    let cand = dir.path().join("modes.loupe-bolt");
    let report = tool::run_bolt(&tool::find_bolt(None).unwrap(), &bin, &fdata, &cand).unwrap();
    let (orig_bid, cand_bid) = (build_id_hex(&bin), build_id_hex(&cand));
    assert_eq!(report.build_id.as_deref(), Some(cand_bid.as_str()));
    manage::install(&bin, &cand).unwrap();
    let saved = manage::saved_original(&bin);
    assert_eq!((build_id_hex(&saved), build_id_hex(&bin)), (orig_bid.clone(), cand_bid.clone()));
    log_decision(&db, &bin, "installed", &orig_bid, &cand_bid);
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(&bin).args(["6000", "1"]));

    let out = run_ok(loupe().args(["optimize", "export", "--format", "json", "--db"]).arg(&db).arg(&saved));
    let json = json(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(json["build_id"], orig_bid.as_str());
    let (orig, opt) = (symbols(&saved), symbols(&bin));
    let funcs = json["functions"].as_array().unwrap();
    let names: Vec<&str> = funcs.iter().map(|f| f["name"].as_str().unwrap()).collect();
    for want in MODE_A.iter().chain(&MODE_B) {
        let f = funcs.iter().find(|f| f["name"] == *want).unwrap_or_else(|| panic!("{want} missing: {names:?}\n{err}"));
        assert_eq!(f["start"].as_u64(), Some(orig[*want]), "{want}");
        assert_ne!(orig[*want], opt[*want], "BOLT did not move {want}: the test proves nothing");
    }
    assert!(names.iter().all(|n| !n.starts_with("cold_")), "never-run functions in the profile: {names:?}");
    let samples = |set: &[&str]| -> f64 {
        funcs.iter().filter(|f| set.contains(&f["name"].as_str().unwrap())).map(|f| f["samples"].as_f64().unwrap()).sum()
    };
    let (a, b) = (samples(&MODE_A), samples(&MODE_B));
    assert!(a > 100.0 && b > 100.0, "mode 0 {a:.0}, mode 1 {b:.0} samples\n{err}");
    // Nearly every sample of the installed build landed in code the table maps back, and mode 1's functions
    // hold nearly all of them (the rest: main).
    let line = err.lines().find(|l| l.contains("mapped back through BOLT's address table")).unwrap_or_else(|| panic!("{err}"));
    let nums: Vec<u64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert!(nums.len() == 2 && nums[1] * 20 < nums[0], "{line}");
    assert!(b <= nums[0] as f64 && b >= 0.9 * nums[0] as f64, "mode 1 {b:.0} samples; {line}");
    eprintln!("saved original's profile: mode 0 {a:.0}, mode 1 {b:.0} samples; {line}");
    reinstall_from_saved_original(&db, &bin, &orig_bid, &cand_bid);
}

/// `optimize run PATH.loupe-orig --install` on a program whose optimized build `cand_bid` is installed at `bin`
/// (original `orig_bid` at PATH.loupe-orig): the new candidate, built from the saved original, must be renamed
/// over PATH (a new inode; a handle open on the old version still reads it whole; nothing left beside it; the
/// saved original untouched), logged, shown by `status PATH`; `rollback PATH` then puts the original back. The
/// bench runs the candidate on a tenth of the work, so the install decision is certain by construction: the
/// test is about installation, not speed.
fn reinstall_from_saved_original(db: &Path, bin: &Path, orig_bid: &str, cand_bid: &str) {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let saved = manage_saved(bin);
    let (old_ino, saved_ino) = (std::fs::metadata(bin).unwrap().ino(), std::fs::metadata(&saved).unwrap().ino());
    let old_bytes = std::fs::read(bin).unwrap();
    let mut old_handle = std::fs::File::open(bin).unwrap();
    let bench = "case {} in *.loupe-bolt) n=300;; *) n=3000;; esac; {} $n 1 >/dev/null";
    let out = run_ok(loupe().args(["optimize", "run", "--db"]).arg(db).arg(&saved).args([
        "--check",
        "{} 300 1",
        "--bench",
        bench,
        "--rounds",
        "5",
        "--min-samples",
        "100",
        "--install",
    ]));
    let said = String::from_utf8_lossy(&out.stdout);
    let new_bid = build_id_hex(bin);
    assert_ne!(new_bid, cand_bid, "{said}");
    assert_eq!(build_id_hex(&saved), orig_bid);
    assert_eq!(std::fs::metadata(&saved).unwrap().ino(), saved_ino, "the saved original was replaced");
    assert_ne!(std::fs::metadata(bin).unwrap().ino(), old_ino, "the new version was written in place");
    let cand = std::path::PathBuf::from(format!("{}.loupe-bolt", saved.display()));
    assert_eq!(std::fs::read(bin).unwrap(), std::fs::read(&cand).unwrap());
    let mut held = Vec::new();
    old_handle.read_to_end(&mut held).unwrap();
    assert!(held == old_bytes, "a handle on the old version saw the new one");
    let dir = bin.parent().unwrap();
    let left: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".loupe-new"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(checksum_mode(bin, "1"), checksum_mode(&saved, "1"));
    let d = decisions(db, &saved).pop().unwrap();
    assert_eq!((d["action"].as_str(), d["candidate_build_id"].as_str()), (Some("installed"), Some(new_bid.as_str())), "{d}");
    assert!(d["reason"].as_str().unwrap().contains(&format!("renamed over {}", bin.display())), "{d}");

    let status = |db: &Path| String::from_utf8(run_ok(loupe().args(["optimize", "status", "--db"]).arg(db).arg(bin)).stdout).unwrap();
    let st = status(db);
    assert!(st.contains(&format!("optimized version installed, original at {}", saved.display())), "{st}");
    assert!(st.lines().any(|l| l.contains("installed") && l.contains(orig_bid) && l.contains("renamed over")), "{st}");
    run_ok(loupe().args(["optimize", "rollback", "--db"]).arg(db).arg(bin));
    assert_eq!(build_id_hex(bin), orig_bid);
    assert!(!saved.exists());
    let st = status(db);
    assert!(st.contains("original in place") && st.lines().last().unwrap().contains("rolled-back"), "{st}");
}

/// Every decision logged for `image`, oldest first.
fn decisions(db: &Path, image: &Path) -> Vec<serde_json::Value> {
    let log = std::fs::read_to_string(db.join("optimize/decisions.jsonl")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|d| d["image"] == image.display().to_string())
        .collect()
}

/// The manager's decisions, a line each, for assertion messages.
fn summarize(all: &[serde_json::Value]) -> String {
    let lines: Vec<String> = all.iter().map(|d| format!("  {} {}: {}", d["action"], d["candidate_build_id"], d["reason"])).collect();
    lines.join("\n")
}

#[test]
fn drift_reoptimizes_from_the_installed_builds_samples() {
    // Checks Morph's loop without putting the original back: `modes` runs in mode 0 until the manager installs
    // a version optimized for it; then usage switches to mostly mode 1. The manager must see the drift in the
    // installed build's samples mapped back to the original and build a second version from them (its profile
    // holds mode 1's functions, which only the installed build ran), validated against the original: installed
    // over the first when significantly faster, else discarded with the first left running. Either way PATH
    // never holds the original's build again and no decision restores it. (Whether the second version wins is
    // not asserted: profiles mapped back from an optimized build are distorted by its layout, see docs/optimize.md's
    // regrow_factor note; in the 2026-11-23 runs 7 of 9 installed one.)
    if !require_root() {
        return;
    }
    let _one = serial();
    let t0 = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("modes"));
    std::fs::copy(workloads().join("modes"), &bin).unwrap();
    let orig_bid = build_id_hex(&bin);
    let cfg = dir.path().join("optimize.json");
    let conf = serde_json::json!({
        // Niceness 0: on a loaded test machine a niced manager may not get the CPU to finish in time.
        // 8000 samples (at 4000/s): BOLT's layouts from 2000 were hit or miss (candidates from 0.955 to 0.64 of the
        // original's time), so validations failed and retries ran past the time limit.
        "interval": 1, "min_share": 0.002, "min_samples": 8000, "max_drift": 0.25, "half_life": 0, "nice": 0, "regrow_factor": 0,
        // The check covers both modes, the bench mode 0. 12 rounds: 10 faster needed (sign test p = 0.019), so a
        // round or two lost to a loaded machine is no harm.
        "programs": [{"path": bin, "check": "{} 300 0 && {} 300 1", "bench": "{} 2500 0", "rounds": 12}]
    });
    std::fs::write(&cfg, conf.to_string()).unwrap();
    let daemon = OptimizeDaemon::spawn(&db, &cfg, &["--freq", "4000"]);
    let installed = || decisions(&db, &bin).into_iter().filter(|d| d["action"] == "installed").collect::<Vec<_>>();
    // 150 s: on 2026-11-26 one run of four saw no first version within 100 s (its candidates not significantly
    // faster, each retry waiting for twice the samples); the other three installed one within 13-37 s.
    let deadline = 150;
    // Phase 1: mode 0 only, until the first optimized version is installed.
    while installed().is_empty() && t0.elapsed().as_secs() < deadline {
        let _ = Command::new(&bin).args(["2000", "0"]).output();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let phase1 = t0.elapsed().as_secs_f64();
    // Phase 2: mostly mode 1, until a second version replaces the first or two re-optimizations were discarded.
    // The file at PATH is read each round.
    let mut at_path = std::collections::BTreeSet::new();
    let discarded = || decisions(&db, &bin).into_iter().filter(|d| d["action"] == "discarded").count();
    // Discards of first candidates do not count: on 2026-11-26 two of them (0.97 and 0.91 of the original, not
    // significant) ended phase 2 as soon as it began, before any drift could be seen.
    let before = discarded();
    while !installed().is_empty() && installed().len() < 2 && discarded() - before < 2 && t0.elapsed().as_secs() < deadline {
        at_path.insert(build_id_hex(&bin));
        // About a quarter of the time in mode 0, which the bench measures.
        let _ = Command::new(&bin).args(["1500", "0"]).output();
        let _ = Command::new(&bin).args(["3000", "1"]).output();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    at_path.insert(build_id_hex(&bin));
    let log = daemon.stop();
    let all = decisions(&db, &bin);
    let summary = summarize(&all);
    let inst = installed();
    assert!(!inst.is_empty(), "no first version installed within {deadline} s:\n{summary}\n{log}");
    let a = inst[0]["candidate_build_id"].as_str().unwrap();
    // The original was never put back: no such decision, and PATH never held it after the first install.
    assert!(all.iter().all(|d| d["action"] != "rolled-back" && d["action"] != "reprofile"), "{summary}");
    assert!(!at_path.contains(&orig_bid) && at_path.contains(a), "builds seen at PATH: {at_path:?}");
    assert_eq!(build_id_hex(&manage_saved(&bin)), orig_bid);
    let why = all.iter().find(|d| d["action"] == "reoptimize").map(|d| d["reason"].as_str().unwrap().to_string());
    assert!(why.as_deref().is_some_and(|w| w.contains("usage drifted") && w.contains("mapped back")), "{summary}\n{log}");
    // The re-optimization's profile holds mode 1's interpreter, at the original's names. It is built from the
    // epochs since the first installation, in which only the installed build ran mode 1 (the original ran it
    // before, in the manager's check, and after only at PATH.loupe-orig): it came through the table.
    let fdata = std::fs::read_to_string(db.join(format!("optimize/work/{orig_bid}.fdata"))).unwrap();
    assert!(fdata.contains("1 run_b ") && fdata.contains("1 run_a "), "{fdata}");
    if inst.len() < 2 {
        // Discarded: measured against the original and not significantly faster; the first version still runs.
        let d: Vec<_> = all.iter().filter(|d| d["action"] == "discarded").collect();
        assert!(!d.is_empty() && d.iter().all(|d| d["reason"].as_str().unwrap().contains("not significantly faster")), "{summary}");
        assert_eq!(build_id_hex(&bin), a);
        eprintln!("first version after {phase1:.1} s; its re-optimizations were discarded; decisions:\n{summary}");
        return;
    }

    let (first, second) = (&inst[0], &inst[1]);
    let (a, b) = (first["candidate_build_id"].as_str().unwrap(), second["candidate_build_id"].as_str().unwrap());
    assert!(first["replaces"].is_null() && second["replaces"] == a, "{summary}");
    assert!(a != b && a != orig_bid && b != orig_bid && second["build_id"] == orig_bid.as_str(), "{summary}");
    // Validated against the original: significantly faster.
    let m = &second["measurement"];
    assert!(m["ratio_median"].as_f64().unwrap() < 1.0 && m["p_value"].as_f64().unwrap() < 0.05, "{second}");
    assert_eq!(build_id_hex(&bin), b);
    // Same results as the original in both modes.
    for mode in ["0", "1"] {
        assert_eq!(checksum_mode(&bin, mode), checksum_mode(&manage_saved(&bin), mode));
    }
    eprintln!("first version after {phase1:.1} s, second after {:.1} s; decisions:\n{summary}", t0.elapsed().as_secs_f64());
}

#[test]
fn regrown_profile_reoptimizes_against_the_installed_version() {
    // Checks the regrow rule end to end: once the installed build's samples mapped back to the original hold
    // regrow_factor (3) times the N its version was built from, the manager logs a regrow "from N to M" and
    // times a new candidate against the INSTALLED version. Whichever way that goes (an optimized build is hard
    // to beat with the same workload), the outcome names the installed version as the baseline, and a discarded
    // candidate leaves it at PATH. The first version is installed here as the manager installs one (BOLT on a
    // recorded mode-0 profile, with BOLT's address table, original kept beside it, decision and state logged):
    // whether a BOLT build beats the original in a timed trial is the CPU's and the load's to say (a CI machine
    // discarded every candidate of this program from 57,000 samples on, 17% slower in 8 of 8 rounds, and the
    // first install never came), and the manager's own first install is `daemon_optimizes_installs_and_rolls_back_by_itself`'s
    // to check. `modes` runs in mode 0 only, so usage never drifts.
    use loupe_optimize::tool;
    if !require_root() {
        return;
    }
    let _one = serial();
    let t0 = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("modes"));
    std::fs::copy(workloads().join("modes"), &bin).unwrap();
    // The first version: a recorded mode-0 profile of N samples, BOLTed and installed.
    run_ok(loupe().args(["record", "--no-stacks", "--freq", "4000", "--db"]).arg(&db).arg("--").arg(&bin).args(["2000", "0"]));
    let (fdata, cand) = (dir.path().join("p.fdata"), dir.path().join("modes.first"));
    // N: the recorded samples of the program, and its function shares (mode 0's by construction: run_a and its
    // helpers), as the manager remembers an installed version's.
    let top = run_ok(loupe().args(["top", "--by", "procedure", "--format", "json", "--db"]).arg(&db));
    let rows: serde_json::Value = serde_json::from_slice(&top.stdout).unwrap();
    let mut fingerprint = serde_json::Map::new();
    let mut total = 0.0;
    for r in rows["rows"].as_array().unwrap().iter().filter(|r| r["image"].as_str().is_some_and(|i| i.ends_with("/modes"))) {
        let n = r["samples"].as_f64().unwrap();
        total += n;
        fingerprint.insert(r["procedure"].as_str().unwrap().to_string(), n.into());
    }
    for v in fingerprint.values_mut() {
        *v = (v.as_f64().unwrap() / total).into();
    }
    let n0 = total;
    assert!(n0 >= 500.0 && fingerprint.get("run_a").and_then(|v| v.as_f64()).unwrap_or(0.0) > 0.5, "{fingerprint:?}");
    run_ok(
        loupe().args(["optimize", "export", "--format", "bolt-edges", "--half-life", "0", "--db"]).arg(&db).arg("-o").arg(&fdata).arg(&bin),
    );
    tool::run_bolt_with(&tool::find_bolt(None).unwrap(), &bin, &fdata, &cand, &tool::default_opts()).unwrap();
    let (orig_bid, first_bid) = (build_id_hex(&bin), build_id_hex(&cand));
    loupe_optimize::manage::install(&bin, &cand).unwrap();
    log_decision(&db, &bin, "installed", &orig_bid, &first_bid);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let state = serde_json::json!({ bin.display().to_string(): {
        "original_build": orig_bid, "from_epoch": 0, "last_discard_samples": null, "last_wait": "",
        "installed": {"build": first_bid, "verified_unix": now, "since_epoch": 0, "fingerprint": fingerprint,
                      "built_from_samples": n0}}});
    std::fs::write(db.join("optimize/state.json"), state.to_string()).unwrap();

    let cfg = dir.path().join("optimize.json");
    let conf = serde_json::json!({
        "interval": 1, "min_share": 0.002, "min_samples": 4000, "max_drift": 0.25, "half_life": 0, "nice": 0, "regrow_factor": 3,
        "programs": [{"path": bin, "check": "{} 300 0", "bench": "{} 2500 0", "rounds": 8}]
    });
    std::fs::write(&cfg, conf.to_string()).unwrap();
    let daemon = OptimizeDaemon::spawn(&db, &cfg, &["--freq", "4000"]);
    let acted = |d: &serde_json::Value| d["action"] == "installed" || d["action"] == "discarded";
    // Done once the regrow's attempt has an outcome. The 2N more samples it needs are ~1 s of the loop's CPU
    // (~1,700 samples a run); a suite at a load of 18 on 2 CPUs gives the loop a fraction of that.
    let done = |all: &[serde_json::Value]| all.iter().position(|d| d["action"] == "regrow").is_some_and(|i| all[i..].iter().any(acted));
    let deadline = 300.0;
    loop {
        if done(&decisions(&db, &bin)) || t0.elapsed().as_secs_f64() > deadline {
            break;
        }
        let _ = Command::new(&bin).args(["2000", "0"]).output();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let log = daemon.stop();
    let all = decisions(&db, &bin);
    let summary = summarize(&all);
    let i =
        all.iter().position(|d| d["action"] == "regrow").unwrap_or_else(|| panic!("no regrow within {deadline:.0} s:\n{summary}\n{log}"));
    // The first version's profile: the count the regrow starts from, and 3x that mapped back at least.
    let why = all[i]["reason"].as_str().unwrap();
    assert!(why.starts_with(&format!("from {n0:.0} to ")) && why.contains("profile grew") && all[i]["replaces"] == first_bid, "{summary}");
    let grown: f64 = why.split(" to ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap();
    assert!(grown >= 3.0 * n0, "{summary}");
    assert!(all.iter().all(|d| d["action"] != "reoptimize" && d["action"] != "reprofile"), "no drift expected:\n{summary}");
    let outcome =
        all[i..].iter().find(|d| acted(d)).unwrap_or_else(|| panic!("no outcome of the regrow within {deadline:.0} s:\n{summary}\n{log}"));
    assert_eq!(outcome["replaces"], first_bid, "{summary}");
    let reason = outcome["reason"].as_str().unwrap();
    if outcome["action"] == "installed" {
        assert!(reason.contains("faster than the installed version"), "{summary}");
        assert_eq!(build_id_hex(&bin), outcome["candidate_build_id"].as_str().unwrap());
    } else {
        assert!(
            reason.contains("measured against the installed version") && reason.contains(&format!("installed build {first_bid} stays")),
            "{summary}"
        );
        assert_eq!(build_id_hex(&bin), first_bid);
    }
    // Whatever is installed computes what the original does.
    assert_eq!(checksum_mode(&bin, "0"), checksum_mode(&manage_saved(&bin), "0"));
    eprintln!("regrow outcome after {:.1} s; decisions:\n{summary}", t0.elapsed().as_secs_f64());
}

fn manage_saved(bin: &Path) -> std::path::PathBuf {
    loupe_optimize::manage::saved_original(bin)
}

fn checksum_mode(bin: &Path, mode: &str) -> String {
    String::from_utf8(run_ok(Command::new(bin).args(["500", mode])).stdout).unwrap()
}

#[test]
fn unmappable_installed_version_falls_back_to_reprofiling() {
    // Checks the fallback: an installed version Loupe made but without BOLT's address table (BOLT run without
    // -enable-bat) whose usage drifted cannot be re-optimized from its samples, so one manager pass puts the
    // original back, starts a new epoch and logs why.
    if !require_root() {
        return;
    }
    use loupe_optimize::{manage, tool};
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (db, bin, cand) = (dir.path().join("db"), dir.path().join("modes"), dir.path().join("modes.loupe-bolt"));
    std::fs::copy(workloads().join("modes"), &bin).unwrap();
    let fdata = dir.path().join("p.fdata");
    std::fs::write(&fdata, "no_lbr loupe-block-counts\n1 run_a 0 1000\n1 mix_a 0 500\n1 step_a 0 500\n").unwrap();
    let opts: Vec<String> = tool::default_opts().into_iter().filter(|o| o != "-enable-bat").collect();
    tool::run_bolt_with(&tool::find_bolt(None).unwrap(), &bin, &fdata, &cand, &opts).unwrap();
    let (orig_bid, cand_bid) = (build_id_hex(&bin), build_id_hex(&cand));
    manage::install(&bin, &cand).unwrap();
    // Usage now: mode 1 only, on the installed file.
    run_ok(loupe().args(["record", "--freq", "4000", "--db"]).arg(&db).arg("--").arg(&bin).args(["4000", "1"]));
    log_decision(&db, &bin, "installed", &orig_bid, &cand_bid);
    // The manager's memory of it: verified just now, built from a mode-0 profile.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let state = serde_json::json!({ bin.display().to_string(): {
        "original_build": orig_bid, "from_epoch": 0, "last_discard_samples": null, "last_wait": "",
        "installed": {"build": cand_bid, "verified_unix": now, "since_epoch": 0,
                      "fingerprint": {"run_a": 0.8, "mix_a": 0.1, "step_a": 0.1}}}});
    std::fs::write(db.join("optimize/state.json"), state.to_string()).unwrap();
    let cfg = dir.path().join("optimize.json");
    let conf = serde_json::json!({"min_share": 0.002, "min_samples": 300, "nice": 0, "regrow_factor": 0,
        "programs": [{"path": bin, "check": "{} 300 0", "bench": "{} 2500 0"}]});
    std::fs::write(&cfg, conf.to_string()).unwrap();
    run_ok(loupe().args(["optimize", "manage", "--once", "--db"]).arg(&db).arg("--config").arg(&cfg));

    let all = decisions(&db, &bin);
    let last = all.last().unwrap();
    assert_eq!(last["action"], "reprofile", "{all:?}");
    let why = last["reason"].as_str().unwrap();
    assert!(why.contains("usage drifted") && why.contains("no .note.bolt_bat section") && why.contains("original restored"), "{why}");
    assert_eq!(last["candidate_build_id"], cand_bid.as_str());
    assert_eq!(build_id_hex(&bin), orig_bid);
    assert!(!manage::saved_original(&bin).exists());
}
