//! `loupe annotate` and `loupe calc` against workloads whose answer is
//! known: calcwork's procedures each have a stall cause by construction,
//! and callgrind gives their exact execution counts.

mod util;
use std::path::Path;
use std::sync::Mutex;
use util::*;

/// One recording at a time: the tests compare timings, and two workloads
/// on the VM's two CPUs would disturb each other.
static SERIAL: Mutex<()> = Mutex::new(());

/// Records `calcwork --only PROC --reps N` into a fresh database.
fn record(dir: &Path, proc_: &str, reps: u32) -> std::path::PathBuf {
    let db = dir.join(format!("db-{proc_}"));
    run_ok(loupe().args(["record", "--freq", "4000", "--db"]).arg(&db).arg("--").arg(workloads().join("calcwork")).args([
        "--reps",
        &reps.to_string(),
        "--only",
        proc_,
    ]));
    db
}

fn calc_json(db: &Path, proc_: &str) -> serde_json::Value {
    json(&run_ok(loupe().args(["calc", "--format", "json", "--image", "calcwork", "--procedure", proc_, "--db"]).arg(db)))
}

fn hottest(calc: &serde_json::Value) -> serde_json::Value {
    calc["instructions"].as_array().unwrap().iter().max_by_key(|x| x["samples"].as_u64().unwrap()).unwrap().clone()
}

/// The most sampled instruction that calc names a culprit for. On the AMD EPYC host of 2026-11-26 branchy's samples
/// split between the data-dependent `jne` itself (waiting to resolve, a third) and the heads of its two targets
/// (the refetch); depending on the run's frequency estimates, the `jne` shows a short stall of its own or none.
/// Either way the mispredict named is that `jne`'s.
fn hottest_stalled(calc: &serde_json::Value) -> serde_json::Value {
    let with_culprit = |x: &&serde_json::Value| x["culprits"].as_array().is_some_and(|c| !c.is_empty());
    let all = calc["instructions"].as_array().unwrap();
    all.iter()
        .filter(with_culprit)
        .max_by_key(|x| x["samples"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("no culprit named: {calc}"))
        .clone()
}

fn instruction_at<'a>(calc: &'a serde_json::Value, addr: &str) -> &'a str {
    calc["instructions"].as_array().unwrap().iter().find(|x| x["address"] == addr).map_or("", |x| x["instruction"].as_str().unwrap())
}

#[test]
fn annotate_agrees_with_top_and_marks_the_divide_line() {
    // Checks annotate's per-instruction samples sum to top's count for the procedure, and the divide's source line is hottest.
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = record(dir.path(), "divchain", 1200);
    let top = top_json(&db, &["--by", "procedure"]);
    let want = sum_rows(&top, |r| r["procedure"] == "divchain");
    let a =
        json(&run_ok(loupe().args(["annotate", "--format", "json", "--image", "calcwork", "--procedure", "divchain", "--db"]).arg(&db)));
    let got: u64 = a["instructions"].as_array().unwrap().iter().map(|x| x["samples"]["cpu-clock"].as_u64().unwrap()).sum();
    assert_eq!(got, want);
    assert!(want > 1000, "too few samples: {want}");
    let hot = &a["lines"][0];
    let src = std::fs::read_to_string(repo_root().join("testdata/workloads/calcwork.c")).unwrap();
    let text = src.lines().nth(hot["line"].as_u64().unwrap() as usize - 1).unwrap();
    assert!(text.contains("x / d"), "hottest line {hot} is {text:?}");
    let t = run_ok(loupe().args(["annotate", "--source", "--image", "calcwork", "--procedure", "divchain", "--db"]).arg(&db));
    assert!(String::from_utf8_lossy(&t.stdout).contains("x / d"));
}

#[test]
fn calc_names_the_known_dominant_stall_first() {
    // Checks the first culprit at the hottest instruction: pointer chase -> D-cache at the load,
    // divide chain -> divider at the div, random branch -> mispredict at a conditional branch.
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    type Case<'a> = (&'a str, u32, &'a str, &'a dyn Fn(&str) -> bool);
    let cases: [Case; 3] = [
        ("chase", 800, "d-cache", &|i: &str| i.starts_with("mov (")),
        ("divchain", 1200, "divider", &|i: &str| i.starts_with("div")),
        ("branchy", 800, "branch-mispredict", &|i: &str| i.starts_with('j') && !i.starts_with("jmp")),
    ];
    for (proc_, reps, cause, is_culprit) in cases {
        let db = record(dir.path(), proc_, reps);
        let c = calc_json(&db, proc_);
        // The clock comes from the recording, not from the machine at analysis time.
        assert_eq!(c["clock_source"], "recorded", "{proc_}: {}", c["clock"]);
        let h = hottest_stalled(&c);
        let first = &h["culprits"][0];
        assert_eq!(first["cause"], cause, "{proc_}: hottest instruction {h}");
        let at = instruction_at(&c, first["at"].as_str().unwrap());
        assert!(is_culprit(at), "{proc_}: culprit instruction is {at:?}");
    }
}

#[test]
fn calc_names_icache_first_for_code_larger_than_the_icache() {
    // Checks calcwork's `icache` (a random switch over 77 KB of cases, L1i 32 KB): weighted by stall cycles,
    // I-cache is named first more than any other cause (mispredicts of the same jumps included).
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let db = record(dir.path(), "icache", 2500);
    let c = calc_json(&db, "icache");
    let mut first: std::collections::BTreeMap<String, f64> = Default::default();
    for x in c["instructions"].as_array().unwrap() {
        if let (Some(cause), Some(e)) = (x["culprits"][0]["cause"].as_str(), x["executions"].as_f64()) {
            *first.entry(cause.to_string()).or_default() += x["stall"].as_f64().unwrap() * e;
        }
    }
    let (top, _) = first.iter().max_by(|a, b| a.1.total_cmp(b.1)).unwrap();
    assert_eq!(top, "i-cache", "{first:?}");
}

#[test]
fn calc_execution_counts_against_callgrind() {
    // Checks bench/calc_accuracy.py's fast run: the divide chain's counts within 15% of callgrind's exact counts (the clock
    // is recorded with the profile, but its readings differ by up to ~10% on this busy VM), and nearly every sample whose
    // estimate is off by more than 15% labelled low confidence. Insertion sort's loop estimate is not asserted: 90% within
    // 5% on a loaded machine, 0% within 15% on a quiet one (see BENCHMARKS.md, calc section).
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = run_ok(
        std::process::Command::new("python3")
            .arg(repo_root().join("bench/calc_accuracy.py"))
            .args(["--seconds", "1", "--freq", "4000", "--cases", "calcwork", "--procs", "divchain,isort"])
            .env("LOUPE_BIN", env!("CARGO_BIN_EXE_loupe")),
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{r}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(r["procedures"]["divchain"]["within15"].as_f64().unwrap() >= 80.0, "{r}");
    assert!(r["off15_labelled_low"].as_f64().unwrap() >= 90.0, "{r}");
}

/// A copy of `db` with a constructed `event` profile added to its epoch for
/// the calcwork image: `count` samples at each ELF virtual address, each
/// standing for `period` events, in the recorded process.
fn with_events(db: &Path, dir: &Path, event: &str, at: &[(u64, u64)], period: u64) -> std::path::PathBuf {
    use loupe_model::{EventName, ImageOffset, Profile};
    let copy = dir.join(format!("{}+{event}", db.file_name().unwrap().to_str().unwrap()));
    run_ok(std::process::Command::new("cp").arg("-a").arg(db).arg(&copy));
    let store = loupe_store::Database::open(&copy).unwrap();
    let epoch = store.current_epoch().unwrap();
    let (clock, _) = store.load(epoch, &|x| x.image.path.ends_with("/calcwork") && x.event.as_str() == "cpu-clock").unwrap();
    let clock = &clock[0];
    // Profiles hold file offsets: the text segment's vaddr - offset, from one recorded sample.
    let mut syms = loupe_symbolize::Symbolizer::new(loupe_symbolize::SymbolizerOptions::default());
    let code = syms.code(&clock.image).unwrap();
    let off = clock.entries.keys().next().unwrap().1;
    let delta = code.vaddr(off).unwrap() - off.0;
    let mut p = Profile::new(clock.image.clone(), EventName::new(event));
    for &(va, n) in at {
        p.add(clock.processes[0].clone(), ImageOffset(va - delta), n, n * period);
    }
    store.merge(epoch, &[p]).unwrap();
    copy
}

fn culprits_of<'a>(calc: &'a serde_json::Value, addr: &str) -> &'a Vec<serde_json::Value> {
    let x = calc["instructions"].as_array().unwrap().iter().find(|x| x["address"] == addr).unwrap();
    x["culprits"].as_array().unwrap()
}

#[test]
fn calc_bounds_culprits_by_hardware_event_samples() {
    // Checks DCPI §6.3's bounds on recorded cpu-clock profiles of calcwork's branchy and chase plus a constructed
    // branch-misses profile (no PMU here): 500 samples of period 100,000 at branchy's data-dependent jne bound its
    // mispredict culprit at 500 x 100,000 x 18 cycles; chase's mispredict culprit, with no branch-miss sample where
    // hundreds were expected, is ruled out while D-cache stays first and unbounded; without the events, no culprit is
    // bounded and the estimates are the same.
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (branchy, chase) = (record(dir.path(), "branchy", 800), record(dir.path(), "chase", 800));
    let plain = calc_json(&branchy, "branchy");
    let h = hottest_stalled(&plain);
    assert_eq!(h["culprits"][0]["cause"], "branch-mispredict", "{h}");
    let jne_at = h["culprits"][0]["at"].as_str().unwrap().to_string();
    let jne = u64::from_str_radix(&jne_at, 16).unwrap();
    let events = [(jne, 500)];
    // Without events: nothing bounded, nothing ruled out, the header says so.
    for c in [&plain, &calc_json(&chase, "chase")] {
        for x in c["instructions"].as_array().unwrap() {
            for k in x["culprits"].as_array().unwrap() {
                assert!(k["bound_cycles"].is_null() && k["ruled_out"] == false && k["evidence"] == serde_json::json!([]), "{k}");
            }
        }
    }
    let text = |db: &Path, p: &str| {
        String::from_utf8(run_ok(loupe().args(["calc", "--image", "calcwork", "--procedure", p, "--db"]).arg(db)).stdout).unwrap()
    };
    let t = text(&branchy, "branchy");
    assert!(t.contains("No hardware event samples") && !t.contains("at most") && !t.contains("ruled out"), "{t}");

    let bdb = with_events(&branchy, dir.path(), "branch-misses", &events, 100_000);
    let b = calc_json(&bdb, "branchy");
    let same = |c: &serde_json::Value| c["instructions"].as_array().unwrap().iter().map(|x| x["executions"].clone()).collect::<Vec<_>>();
    assert_eq!(same(&b), same(&plain), "the events change no estimate");
    let p = culprits_of(&b, h["address"].as_str().unwrap()).iter().find(|k| k["cause"] == "branch-mispredict").unwrap();
    assert_eq!(p["at"], jne_at.as_str());
    assert_eq!(p["bound_cycles"].as_f64(), Some(500.0 * 100_000.0 * 18.0), "{p}");
    assert_eq!(p["ruled_out"], false);
    assert_eq!((p["evidence"][0]["event"].as_str(), p["evidence"][0]["samples"].as_u64()), (Some("branch-misses"), Some(500)));
    let t = text(&bdb, "branchy");
    assert!(t.contains("branch-misses (18cy each) bounds p") && t.contains("at most") && t.contains("bounded by branch-misses"), "{t}");

    let cdb = with_events(&chase, dir.path(), "branch-misses", &events, 100_000);
    let c = calc_json(&cdb, "chase");
    let h = hottest(&c);
    let ks = culprits_of(&c, h["address"].as_str().unwrap());
    assert_eq!(ks[0]["cause"], "d-cache", "{h}");
    assert!(ks[0]["bound_cycles"].is_null() && ks[0]["ruled_out"] == false, "{h}");
    let p = ks.iter().find(|k| k["cause"] == "branch-mispredict").expect("chase's loop head keeps a mispredict suspect without events");
    assert_eq!(p["ruled_out"], true, "{p}");
    assert_eq!(p["evidence"][0]["samples"], 0);
    assert!(p["evidence"][0]["expected_samples"].as_f64().unwrap() >= 3.0, "{p}");
    assert_eq!(ks.last().unwrap()["cause"], "branch-mispredict", "ruled-out culprits come last");
    assert!(text(&cdb, "chase").contains("ruled out: p [branch-misses 0 samples"));
}

#[test]
fn calc_reads_recorded_cache_misses_or_says_there_are_none() {
    // Checks `record -e cpu-clock -e L1-dcache-load-misses` on chase: without a PMU (this VM) record falls back to
    // cpu-clock saying why and calc says its culprits are unbounded; with one, chase's real L1 misses bound its
    // D-cache culprit (some samples in its window) without ruling it out.
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let events = String::from_utf8(run_ok(loupe().arg("events")).stdout).unwrap();
    let pmu = events.lines().any(|l| l.starts_with("L1-dcache-load-misses") && l.ends_with("available"));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = run_ok(
        loupe()
            .args(["record", "--freq", "4000", "-e", "cpu-clock", "-e", "L1-dcache-load-misses", "--db"])
            .arg(&db)
            .arg("--")
            .arg(workloads().join("calcwork"))
            .args(["--reps", "400", "--only", "chase"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let c = calc_json(&db, "chase");
    let h = hottest(&c);
    let d = culprits_of(&c, h["address"].as_str().unwrap()).iter().find(|k| k["cause"] == "d-cache").unwrap().clone();
    if pmu {
        assert_eq!(d["ruled_out"], false, "{d}");
        assert!(d["evidence"][0]["samples"].as_u64().unwrap() > 0, "{d}");
    } else {
        assert!(
            err.contains("L1-dcache-load-misses is not available on this machine (no hardware PMU); falling back to cpu-clock"),
            "{err}"
        );
        assert!(c["hardware_events"].is_null() && d["bound_cycles"].is_null() && d["ruled_out"] == false, "{d}");
    }
}

/// Executions and how of the instruction at index `i` of calc's listing.
fn counted_row(c: &serde_json::Value, i: usize) -> (f64, String) {
    let x = &c["instructions"][i];
    (x["executions"].as_f64().unwrap_or(-1.0), x["how"].as_str().unwrap_or("none").to_string())
}

#[test]
fn record_count_gives_known_loop_and_branch_counts_and_leaves_the_output_alone() {
    // Checks issue 30 on the counted workload: count_loop called M times, its loop run N times a call and its `if`
    // taken K of them; `record --count` makes calc's entry exactly M, the loop N x M and the taken arm K x M within
    // 1%, labelled counted; the workload prints the same with and without counting, and a run shorter than a
    // window (it exits mid-window) still ends normally with its output intact.
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (m, n, k) = (30_000u64, 400u64, 100u64);
    let bin = workloads().join("counted");
    let args = [m.to_string(), n.to_string(), k.to_string()];
    let plain = run_ok(std::process::Command::new(&bin).args(&args)).stdout;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = run_ok(loupe().args(["record", "--freq", "4000", "--count", "count_loop", "--db"]).arg(&db).arg("--").arg(&bin).args(&args));
    assert_eq!(out.stdout, plain, "counting changed what the program printed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loupe: counted count_loop:") && err.contains(&format!("{m} entries")), "{err}");
    let c = json(&run_ok(loupe().args(["calc", "--format", "json", "--image", "counted", "--procedure", "count_loop", "--db"]).arg(&db)));
    let insns = c["instructions"].as_array().unwrap();
    let text = |i: usize| insns[i]["instruction"].as_str().unwrap().to_string();
    let div = (0..insns.len()).find(|&i| text(i).starts_with("div")).expect("the loop's divide");
    let jae = (div..insns.len()).find(|&i| text(i).starts_with("jae")).expect("the if's branch");
    assert_eq!(counted_row(&c, 0), (m as f64, "counted".to_string()), "entry: {}", insns[0]);
    for (i, want) in [(div, n * m), (jae + 1, k * m)] {
        let (e, how) = counted_row(&c, i);
        assert_eq!(how, "counted", "{}", insns[i]);
        assert!((e / want as f64 - 1.0).abs() <= 0.01, "{} counted {e}, exactly {want}", text(i));
    }
    assert!(c["counting"]["traps"].as_u64().unwrap() > 0, "{}", c["counting"]);
    // A run far shorter than a window: the windows stop with it and leave nothing behind.
    let short = ["50".to_string(), n.to_string(), k.to_string()];
    let plain = run_ok(std::process::Command::new(&bin).args(&short)).stdout;
    let db2 = dir.path().join("db2");
    let out = run_ok(loupe().args(["record", "--count", "count_loop", "--db"]).arg(&db2).arg("--").arg(&bin).args(&short));
    assert_eq!(out.stdout, plain);
}

#[test]
fn record_count_chains_a_single_call_that_lasts_the_whole_run() {
    // Checks issue 30 on a call no window can hold: `counted once N` calls long_loop once, its loop run exactly N
    // times and its `if` taken 3N/8; `record --count long_loop` gives the entry 1, the loop N and the arm 3N/8 within
    // 3% (1% where nothing else runs), counted (chained by the loop counter's register across windows), no instruction above N, and the same output.
    if !require_root() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = 1u64 << 28;
    let bin = workloads().join("counted");
    let args = ["once".to_string(), n.to_string()];
    let plain = run_ok(std::process::Command::new(&bin).args(&args)).stdout;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = run_ok(loupe().args(["record", "--freq", "4000", "--count", "long_loop", "--db"]).arg(&db).arg("--").arg(&bin).args(&args));
    assert_eq!(out.stdout, plain, "counting changed what the program printed");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loupe: counted long_loop: 1 entries"), "{err}");
    let c = json(&run_ok(loupe().args(["calc", "--format", "json", "--image", "counted", "--procedure", "long_loop", "--db"]).arg(&db)));
    let insns = c["instructions"].as_array().unwrap();
    assert_eq!(counted_row(&c, 0), (1.0, "counted".to_string()), "entry: {}", insns[0]);
    let near = |want: f64| -> Vec<(usize, (f64, String))> {
        (0..insns.len()).map(|i| (i, counted_row(&c, i))).filter(|(_, (e, _))| (e / want - 1.0).abs() <= 0.2).collect()
    };
    for want in [n as f64, 3.0 * n as f64 / 8.0] {
        let rows = near(want);
        assert!(!rows.is_empty(), "no instruction near {want}: {}", c["instructions"]);
        for (i, (e, how)) in rows {
            assert_eq!(how, "counted", "{e} near {want}");
            // The stretches before the first window and after the last are scaled by the rate the gaps
            // measured (executions per ns of the thread's CPU time): within 0.3% here, but a fully loaded suite
            // (a hog per CPU beside it) moved that rate enough to put one count 1.9% low.
            assert!((e / want - 1.0).abs() <= 0.03, "counted {e}, exactly {want}: {}", insns[i]);
        }
    }
    let most = (0..insns.len()).map(|i| counted_row(&c, i).0).fold(0.0, f64::max);
    assert!(most <= 1.01 * n as f64, "{most} executions, the loop runs {n} times");
}
