//! End to end: a C program instrumented with the generated stub
//! (testdata/workloads/trace_phases.c) runs under `loupe trace record`; the
//! trace holds exactly the events it logged, by construction: per iteration
//! a phase begin, 8 progress events (one per MiB touched), a phase end, in
//! order and time-nested, nothing dropped.

use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

// See the file comment.
#[test]
fn record_phases_workload() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("trace_phases");
    let st = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-I"])
        .arg(root().join("sdk/c"))
        .arg("-o")
        .arg(&prog)
        .arg(root().join("testdata/workloads/trace_phases.c"))
        .status()
        .unwrap();
    assert!(st.success());
    let out = dir.path().join("run.trace");
    let st =
        Command::new(env!("CARGO_BIN_EXE_loupe")).args(["trace", "record", "-o"]).arg(&out).arg("--").arg(&prog).arg("5").status().unwrap();
    assert!(st.success());
    let t = loupe_trace::tracefile::read(&out).unwrap();
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    assert_eq!(t.dropped, 0);
    let names: Vec<String> = t.entries.iter().map(|e| t.spec.by_id(e.rec.id).unwrap().specifier.clone()).collect();
    let mut want = Vec::new();
    for _ in 0..5 {
        want.push("Begin".to_string());
        want.extend(std::iter::repeat_n("Progress".to_string(), 8));
        want.push("End".to_string());
    }
    assert_eq!(names, want);
    use loupe_trace::record::Value;
    let iters: Vec<&Value> = t.entries.iter().filter(|e| e.rec.id == 1).map(|e| &e.rec.fields[1]).collect();
    assert_eq!(iters, (0..5).map(Value::U).collect::<Vec<_>>().iter().collect::<Vec<_>>());
    // The Chrome export has one B and one E slice per iteration.
    let j = loupe_trace::export::chrome(&t);
    let b = j["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "B").count();
    assert_eq!(b, 5);
    // babeltrace2 (the CTF reference reader) decodes every event with its fields.
    let bt = Command::new("babeltrace2").arg(out.join("ctf")).output().expect("babeltrace2 (scripts/setup.sh installs it)");
    assert!(bt.status.success(), "{}", String::from_utf8_lossy(&bt.stderr));
    let text = String::from_utf8(bt.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 50);
    assert_eq!(lines.iter().filter(|l| l.contains("Loupe::Phase::Begin: { cpu_id = ")).count(), 5);
    assert!(lines[1].contains("Loupe::App::Progress") && lines[1].contains("units = 1, rate = 0, _label_len = 3, label = \"MiB\""));
}
