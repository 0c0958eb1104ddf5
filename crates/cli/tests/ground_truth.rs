//! Attribution against workloads whose answer is known by construction:
//! `selftime` measures its own CPU time per procedure with
//! CLOCK_THREAD_CPUTIME_ID and its user/system split with getrusage.

mod util;
use util::*;

const PROCEDURES: [&str; 4] = ["hot_alpha", "hot_beta", "hot_gamma", "lib_spin"];

#[test]
fn procedure_and_kernel_shares_match_self_measured_cpu_time() {
    // Checks per-procedure shares within 2 points, the kernel share within 3, and library/kernel image attribution (BPF backend).
    shares_match_truth("bpf");
}

#[test]
fn streaming_backend_matches_self_measured_cpu_time_too() {
    // Checks the same ground truth through the fallback backend (every sample through the perf rings).
    shares_match_truth("stream");
}

fn shares_match_truth(backend: &str) {
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let truth_file = dir.path().join("truth.json");
    let w = workloads();
    run_ok(
        loupe()
            .args(["record", "--freq", "4000", "--backend", backend])
            .args(if backend == "bpf" { &["--no-stacks"][..] } else { &[][..] })
            .arg("--db")
            .arg(&db)
            .arg("--")
            .arg(w.join("selftime"))
            .args(["--seconds", "5", "--out"])
            .arg(&truth_file),
    );
    let truth: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth_file).unwrap()).unwrap();
    let pid = truth["pid"].as_u64().unwrap().to_string();
    let total_cpu = truth["total_cpu"].as_f64().unwrap();
    let top = top_json(&db, &["--by", "procedure", "--pid", &pid]);
    let total = top["total_samples"].as_u64().unwrap() as f64;
    assert!(total > 2_000.0, "too few samples to judge: {total}");
    // Sampling error of a share q over n samples is sqrt(q(1-q)/n): 2 points is 4.3 of them for q = 0.3 at the 10k
    // samples a quiet machine gives; a loaded one leaves the workload less CPU, so fewer samples, so a wider bound.
    let bound = |q: f64, points: f64, n: f64| points.max(4.3 * 100.0 * (q * (1.0 - q) / n).sqrt());
    let mut report = String::new();
    for p in PROCEDURES {
        let truth_share = 100.0 * truth["procedures"][p].as_f64().unwrap() / total_cpu;
        let got = 100.0 * sum_rows(&top, |r| r["procedure"] == p) as f64 / total;
        report += &format!("{p}: loupe {got:.2}% truth {truth_share:.2}%\n");
        let tolerance = bound(truth_share / 100.0, 2.0, total);
        assert!((got - truth_share).abs() <= tolerance, "{p} off by more than {tolerance:.2} points:\n{report}");
    }
    let kernel = 100.0 * sum_rows(&top, |r| r["image"] == "[kernel]") as f64 / total;
    let kernel_truth = 100.0 * truth["stime"].as_f64().unwrap() / total_cpu;
    eprintln!("{report}kernel: loupe {kernel:.2}% truth {kernel_truth:.2}%");
    // stime is itself a sample: getrusage splits user/system at each scheduler tick (CONFIG_HZ, 250 on Debian), so
    // its own error over total_cpu * 250 ticks is added to the 3 points.
    let ticks = total_cpu * 250.0;
    let q = kernel_truth / 100.0;
    let tolerance = bound(q, 3.0, total) + 3.0 * 100.0 * (q * (1.0 - q) / ticks).sqrt();
    assert!(
        (kernel - kernel_truth).abs() <= tolerance,
        "kernel share {kernel:.2}% vs stime share {kernel_truth:.2}% (bound {tolerance:.2})"
    );
    let lib_rows: Vec<&serde_json::Value> = top["rows"].as_array().unwrap().iter().filter(|r| r["procedure"] == "lib_spin").collect();
    assert!(
        lib_rows.iter().all(|r| r["image"].as_str().unwrap().ends_with("libselftime.so")),
        "lib_spin must land in the library image: {lib_rows:?}"
    );
    let unknown = top["unknown_samples"].as_u64().unwrap() as f64;
    assert!(unknown / total < 0.005, "unknown fraction {}", unknown / total);
}

#[test]
fn record_returns_the_command_status_and_passes_output_through() {
    // Checks that record exits with the command's status and leaves stdout untouched.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = loupe()
        .args(["record", "--db"])
        .arg(dir.path().join("db"))
        .args(["--", "/bin/sh", "-c", "echo hello-from-child; exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello-from-child\n");
}

#[test]
fn recording_twice_sums_into_the_current_epoch() {
    // Checks DCPI's behaviour: several runs into one database add up in one epoch.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let run = || {
        run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(workloads().join("selftime")).args(["--seconds", "1"]));
    };
    run();
    let first = top_json(&db, &["--by", "image"])["total_samples"].as_u64().unwrap();
    run();
    let second = top_json(&db, &["--by", "image"])["total_samples"].as_u64().unwrap();
    assert!(first > 500, "first run gave {first} samples");
    assert!(second as f64 > first as f64 * 1.6, "second run must add to the first: {first} then {second}");
    let epochs = run_ok(loupe().args(["epochs", "--db"]).arg(&db));
    assert_eq!(String::from_utf8_lossy(&epochs.stdout).lines().count(), 1);
}

#[test]
fn binary_deleted_while_running_still_symbolizes() {
    // Checks that a program and library deleted while they run are kept in the image cache and still named.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for f in ["selftime", "libselftime.so"] {
        std::fs::copy(workloads().join(f), dir.path().join(f)).unwrap();
    }
    let db = dir.path().join("db");
    let script =
        format!("{d}/selftime --seconds 4 > /dev/null & sleep 1; rm {d}/selftime {d}/libselftime.so; wait", d = dir.path().display());
    run_ok(loupe().args(["record", "--db"]).arg(&db).args(["--", "/bin/sh", "-c", &script]));
    assert!(!dir.path().join("selftime").exists());
    let top = top_json(&db, &["--by", "procedure", "--comm", "selftime"]);
    let total = top["total_samples"].as_u64().unwrap() as f64;
    let alpha = sum_rows(&top, |r| r["procedure"] == "hot_alpha") as f64;
    let lib = sum_rows(&top, |r| r["procedure"] == "lib_spin") as f64;
    assert!(alpha / total > 0.25 && lib / total > 0.05, "deleted images lost their names: {top}");
}

#[test]
fn top_says_why_samples_of_a_stripped_binary_have_no_name() {
    // A copy of `burn` stripped of every symbol and its debug info can name none of its own samples:
    // `top` counts each of them as "stripped, no debug info", exactly as many as its image has.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (db, bin) = (dir.path().join("db"), dir.path().join("burn-stripped"));
    std::fs::copy(workloads().join("burn"), &bin).unwrap();
    let st = std::process::Command::new("strip").arg("--strip-all").arg(&bin).status().unwrap();
    assert!(st.success());
    run_ok(loupe().args(["record", "--db"]).arg(&db).args(["--", bin.to_str().unwrap(), "--iterations", "300000000"]));
    let image = bin.to_str().unwrap();
    let by_image = top_json(&db, &["--by", "image"]);
    let own = sum_rows(&by_image, |r| r["image"] == image);
    assert!(own > 100, "too few samples in the stripped image to judge: {own}");
    let top = top_json(&db, &["--by", "procedure", "--image", image]);
    let unnamed = &top["unnamed_samples"];
    assert_eq!(unnamed["stripped, no debug info"].as_u64(), Some(own), "{unnamed}");
    let text = String::from_utf8(run_ok(loupe().args(["top", "--by", "procedure", "--image", image, "--db"]).arg(&db)).stdout).unwrap();
    assert!(text.contains(&format!("# Unnamed: {own} samples")), "{text}");
}
