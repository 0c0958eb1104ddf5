//! End to end: a C program instrumented with the generated stub
//! (testdata/workloads/trace_phases.c) runs under `loupe trace record`; the
//! trace holds exactly the events it logged, by construction: per iteration
//! a phase begin, 64 progress events (one per 256 KiB of 16 MiB processed in
//! one pass), a phase end, in order, nothing dropped; the recorder's
//! counter intervals besides; and with --page-faults every page fault.

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
    let st = Command::new(env!("CARGO_BIN_EXE_loupe"))
        .args(["trace", "record", "--page-faults", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .arg("5")
        .arg("1")
        .status()
        .unwrap();
    assert!(st.success());
    let t = loupe_trace::tracefile::read(&out).unwrap();
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    assert_eq!(t.dropped, 0);
    // Kernel layer: every page fault, 4096 per iteration's 16 MiB plus the program's start-up, on the same clock.
    let faults: Vec<&loupe_trace::tracefile::Entry> = t.entries.iter().filter(|e| e.rec.id == 32).collect();
    assert!((5 * 4096..5 * 4096 + 3000).contains(&faults.len()), "{} page-fault events", faults.len());
    let (first, last) =
        (t.entries.iter().find(|e| e.rec.id == 1).unwrap().rec.ts, t.entries.iter().rfind(|e| e.rec.id == 2).unwrap().rec.ts);
    let inside = faults.iter().filter(|e| (first..=last).contains(&e.rec.ts)).count();
    assert!(inside >= 5 * 4096, "only {inside} page faults between the first phase begin and the last phase end");
    let names: Vec<String> = t
        .entries
        .iter()
        .map(|e| t.spec.by_id(e.rec.id).unwrap().specifier.clone())
        .filter(|n| n != "Interval" && n != "PageFault")
        .collect();
    let mut want = Vec::new();
    for _ in 0..5 {
        want.push("Begin".to_string());
        want.extend(std::iter::repeat_n("Progress".to_string(), 64));
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
    assert_eq!(lines.len(), t.entries.len());
    assert_eq!(lines.iter().filter(|l| l.contains("Loupe::Phase::Begin: { cpu_id = ")).count(), 5);
    let first = lines.iter().find(|l| l.contains("Loupe::App::Progress")).unwrap();
    assert!(
        first.contains("{ units = 1, rate = 0, _label_len = 6, label = \"chunks\", _deltas_len = 1, deltas = [ [0] = 1 ] }"),
        "{first}"
    );
}

// PEM's demonstration (§4.1): 12 iterations that each fault in 16 MiB of fresh memory and then compute over it.
// The report must show the page-fault peak early in each iteration and progress late, a clearly negative
// correlation between page faults and progress, a page-fault period (found without the markers, on the
// program's CPU time) near the iteration length, and every event decoded by babeltrace2.
#[test]
fn pem_page_faults_against_progress() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("trace_phases");
    let st = Command::new("gcc")
        .args(["-O2", "-I"])
        .arg(root().join("sdk/c"))
        .arg("-o")
        .arg(&prog)
        .arg(root().join("testdata/workloads/trace_phases.c"))
        .status()
        .unwrap();
    assert!(st.success());
    let out = dir.path().join("pem.trace");
    let loupe = env!("CARGO_BIN_EXE_loupe");
    let st = Command::new(loupe).args(["trace", "record", "-o"]).arg(&out).arg("--").arg(&prog).arg("12").status().unwrap();
    assert!(st.success());
    let rep = Command::new(loupe).args(["trace", "report", "--interval-ms", "2", "--format", "json"]).arg(&out).output().unwrap();
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
    let r: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    let names: Vec<&str> = r["series"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    let pf = names.iter().position(|n| *n == "page-faults").expect("page-faults series");
    let pr = names.iter().position(|n| *n == "Loupe::App::Progress").expect("progress series");
    let iters = r["iterations"].as_array().unwrap();
    assert_eq!(iters.len(), 12);
    // Each iteration faults in 4096 pages: the counters must have seen at least that many faults in total.
    let faults: f64 = r["series"][pf]["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum();
    assert!(faults >= 12.0 * 4096.0, "{faults} page faults");
    let corr = r["correlation"][pf][pr].as_f64().unwrap();
    assert!(corr < -0.3, "page faults vs progress correlation {corr}");
    let (peak_pf, peak_pr) = (r["peak_position"][pf].as_f64().unwrap(), r["peak_position"][pr].as_f64().unwrap());
    assert!(peak_pf < 0.5 && peak_pr > 0.5, "peaks at {peak_pf} (faults) and {peak_pr} (progress)");
    let period = r["period_ns"][pf].as_f64().expect("a page-fault period");
    let iteration = r["median_iteration_ns"].as_f64().unwrap();
    assert!((0.7..1.3).contains(&(period / iteration)), "page-fault period {period} ns vs median iteration {iteration} ns");
    let t = loupe_trace::tracefile::read(&out).unwrap();
    let bt = Command::new("babeltrace2").arg(out.join("ctf")).output().unwrap();
    assert!(bt.status.success());
    assert_eq!(String::from_utf8(bt.stdout).unwrap().lines().count(), t.entries.len());
    // The text report and the SVG render.
    let svg = dir.path().join("s.svg");
    let txt = Command::new(loupe).args(["trace", "report"]).arg(&out).arg("--svg").arg(&svg).output().unwrap();
    assert!(String::from_utf8(txt.stdout).unwrap().contains("iteration starts"));
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}

// The generated Go stub logs into the same buffer: sdk/go/cmd/tracedemo's 3 iterations of 100 progress
// events arrive complete and in order, timestamps never decrease per CPU, and babeltrace2 reads them.
#[test]
fn go_stub_logs_into_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let prog = dir.path().join("tracedemo");
    let st = Command::new("go").args(["build", "-o"]).arg(&prog).arg("./cmd/tracedemo").current_dir(root().join("sdk/go")).status();
    assert!(st.expect("go (scripts/setup.sh installs golang-go)").success());
    let out = dir.path().join("go.trace");
    let st = Command::new(env!("CARGO_BIN_EXE_loupe")).args(["trace", "record", "-o"]).arg(&out).arg("--").arg(&prog).status().unwrap();
    assert!(st.success());
    let t = loupe_trace::tracefile::read(&out).unwrap();
    assert_eq!(t.dropped, 0);
    use loupe_trace::record::Value;
    let app: Vec<(u16, u64)> = t
        .entries
        .iter()
        .filter(|e| e.rec.id != 16)
        .map(|e| {
            (
                e.rec.id,
                match (e.rec.id, &e.rec.fields[..]) {
                    (49, [Value::U(k), ..]) | (_, [_, Value::U(k)]) => *k,
                    _ => u64::MAX,
                },
            )
        })
        .collect();
    let mut want = Vec::new();
    for it in 0..3 {
        want.push((1, it));
        want.extend((0..100).map(|k| (49, k)));
        want.push((2, it));
    }
    assert_eq!(app, want);
    // In buffer order (read() sorts by time, so decode the stream files directly).
    for cpu in 0..2 {
        let bytes = std::fs::read(out.join(format!("ctf/cpu{cpu}"))).unwrap_or_default();
        let mut raw = loupe_trace::tracefile::Trace {
            entries: vec![],
            errors: vec![],
            counters: vec![],
            spec: t.spec.clone(),
            packets: 0,
            dropped: 0,
        };
        loupe_trace::tracefile::decode_stream(&t.spec, &bytes, 256 * 1024, &mut raw);
        assert!(raw.errors.is_empty());
        assert!(raw.entries.windows(2).all(|w| w[0].rec.ts <= w[1].rec.ts), "cpu {cpu}");
    }
    let bt = Command::new("babeltrace2").arg(out.join("ctf")).output().unwrap();
    assert!(bt.status.success());
}

// The generated Java class logs into the same buffer: sdk/java/TraceDemo's events arrive complete and in order.
#[test]
fn java_stub_logs_into_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let java = root().join("sdk/java");
    let st = Command::new("javac").arg("-d").arg(dir.path()).arg(java.join("LoupeEvents.java")).arg(java.join("TraceDemo.java")).status();
    assert!(st.expect("javac (scripts/setup.sh installs default-jdk-headless)").success());
    let out = dir.path().join("java.trace");
    let st = Command::new(env!("CARGO_BIN_EXE_loupe"))
        .args(["trace", "record", "-o"])
        .arg(&out)
        .args(["--", "java", "-cp"])
        .arg(dir.path())
        .arg("TraceDemo")
        .status()
        .unwrap();
    assert!(st.success());
    let t = loupe_trace::tracefile::read(&out).unwrap();
    assert_eq!(t.dropped, 0);
    use loupe_trace::record::Value;
    let app: Vec<(u16, u64)> = t
        .entries
        .iter()
        .filter(|e| e.rec.id != 16)
        .map(|e| {
            (
                e.rec.id,
                match (e.rec.id, &e.rec.fields[..]) {
                    (49, [Value::U(k), ..]) | (_, [_, Value::U(k)]) => *k,
                    _ => u64::MAX,
                },
            )
        })
        .collect();
    let mut want = Vec::new();
    for it in 0..3 {
        want.push((1, it));
        want.extend((0..100).map(|k| (49, k)));
        want.push((2, it));
    }
    assert_eq!(app, want);
    assert!(t.entries.iter().any(|e| e.rec.fields.get(2) == Some(&Value::Str("java".into()))));
}
