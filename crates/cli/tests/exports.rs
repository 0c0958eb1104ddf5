//! Profiles as their consumers read them, against oracles: stripped code
//! (Debian's liblzma under `xz`) grouped by function where
//! `readelf --debug-dump=frames` says functions start, and a python3
//! profile whose pprof export `go tool pprof` reads with the interpreter,
//! not libpython, as the main binary.

mod util;
use util::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Deterministic text that compresses a little (so xz works for its living): words from a small LCG.
fn text(bytes: usize) -> Vec<u8> {
    let words = ["loupe", "profile", "sample", "epoch", "stack", "frame", "image", "offset", "symbol", "unwind"];
    let (mut x, mut out) = (12345u64, Vec::with_capacity(bytes + 16));
    while out.len() < bytes {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.extend(words[(x >> 33) as usize % words.len()].as_bytes());
        out.push(if (x >> 20) % 11 == 0 { b'\n' } else { b' ' });
        out.extend(format!("{}", (x >> 40) % 1000).as_bytes());
    }
    out
}

/// FDE ranges (start, end) of an ELF file as readelf prints them: "FDE cie=... pc=START..END".
fn readelf_fdes(path: &Path) -> Vec<(u64, u64)> {
    let out = Command::new("readelf").arg("--debug-dump=frames").arg(path).output().expect("readelf (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v: Vec<(u64, u64)> = text
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| {
            let (a, b) = l.split("pc=").nth(1)?.split_once("..")?;
            Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b.trim(), 16).ok()?))
        })
        .collect();
    v.sort();
    v
}

#[test]
fn stripped_liblzma_is_grouped_by_function() {
    // Checks that xz's samples in Debian's stripped liblzma form one row per function named image+0xSTART,
    // START an FDE start per readelf, and that each row holds exactly the samples of the addresses its FDE spans.
    if !require_root() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.txt");
    std::fs::write(&input, text(2 << 20)).unwrap();
    let db = dir.path().join("db");
    run_ok(loupe().args(["record", "--db"]).arg(&db).args(["--", "xz", "-6", "-T1", "-k"]).arg(&input));
    let by_proc = top_json(&db, &["--by", "procedure", "--image", "liblzma"]);
    let rows = by_proc["rows"].as_array().unwrap();
    let path = rows.first().expect("no liblzma samples")["image"].as_str().unwrap().to_string();
    let fdes = readelf_fdes(Path::new(&path));
    assert!(fdes.len() > 50, "readelf shows {} FDEs in {path}", fdes.len());
    // Where readelf's addresses and the file offsets in names meet: liblzma's code segment has offset = address.
    let base = Path::new(&path).file_name().unwrap().to_str().unwrap().to_string() + "+0x";
    let mut row_of: BTreeMap<u64, u64> = BTreeMap::new();
    for r in rows {
        let name = r["procedure"].as_str().unwrap();
        let Some(hex) = name.strip_prefix(&base) else { continue };
        row_of.insert(u64::from_str_radix(hex, 16).unwrap(), r["samples"].as_u64().unwrap());
    }
    let total: u64 = row_of.values().sum();
    assert!(total > 200, "only {total} unnamed liblzma samples:\n{by_proc}");
    let by_insn = top_json(&db, &["--by", "instruction", "--image", "liblzma"]);
    let mut in_fde: BTreeMap<u64, u64> = BTreeMap::new();
    let mut addresses = 0;
    for r in by_insn["rows"].as_array().unwrap().iter().filter(|r| r["procedure"].as_str().is_some_and(|p| p.starts_with(&base))) {
        let a = u64::from_str_radix(r["address"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        let (start, _) = *fdes.iter().find(|(s, e)| (*s..*e).contains(&a)).unwrap_or_else(|| panic!("{a:#x} in no FDE"));
        *in_fde.entry(start).or_default() += r["samples"].as_u64().unwrap();
        addresses += 1;
    }
    assert_eq!(row_of, in_fde, "rows by procedure differ from samples summed per readelf FDE");
    assert!(addresses > 2 * row_of.len(), "{addresses} sampled addresses in {} functions: nothing was grouped", row_of.len());
}

#[test]
fn python3_pprof_names_the_interpreter_as_main_binary() {
    // Checks with `go tool pprof -raw` that a python3 profile's first mapping is the python3 executable (not
    // libpython) and its values are samples and cpu nanoseconds.
    if !require_root() {
        return;
    }
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let script = "import time\nt = time.time()\nwhile time.time() - t < 1.5: sum(i * i for i in range(10000))\n";
    run_ok(loupe().args(["record", "--db"]).arg(&db).args(["--", "python3", "-c", script]));
    let pb = dir.path().join("py.pb.gz");
    run_ok(loupe().args(["export", "--format", "pprof", "-o"]).arg(&pb).arg("--db").arg(&db));
    let raw = Command::new("go").args(["tool", "pprof", "-raw"]).arg(&pb).output().expect("go (scripts/setup.sh installs golang-go)");
    let s = String::from_utf8_lossy(&raw.stdout);
    assert!(raw.status.success(), "{}", String::from_utf8_lossy(&raw.stderr));
    assert!(s.lines().any(|l| l.trim() == "samples/count cpu/nanoseconds[dflt]"), "{s}");
    let first = s.split("Mappings\n").nth(1).and_then(|m| m.lines().next()).expect("Mappings section");
    let file = first.split_whitespace().nth(2).and_then(|p| p.rsplit('/').next()).unwrap_or("");
    assert!(file.starts_with("python3") && !file.contains(".so"), "first mapping: {first}");
    let when = s.lines().find_map(|l| l.strip_prefix("Time: ")).expect("Time line");
    assert!(!when.starts_with("1970"), "time_nanos unset: {when}");
}

#[test]
fn pprof_duration_is_the_recordings_and_a_second_reader_agrees() {
    // Checks duration_nanos from the epoch end the store keeps: at least the workload's own run, at most the
    // wall time of `loupe record`; DataDog's pprof-format (JavaScript) reads the same value types and totals.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let t0 = std::time::Instant::now();
    run_ok(loupe().args(["record", "--db"]).arg(&db).arg("--").arg(workloads().join("selftime")).args(["--seconds", "1"]));
    let wall = t0.elapsed().as_nanos() as u64;
    let pb = dir.path().join("p.pb.gz");
    run_ok(loupe().args(["export", "--format", "pprof", "-o"]).arg(&pb).arg("--db").arg(&db));
    let reader = repo_root().join("web/tests/pprof-read.mjs");
    assert!(
        repo_root().join("web/node_modules/pprof-format").is_dir(),
        "web/node_modules has no pprof-format: run `npm ci` in web/ (building loupe does it for a fresh clone)"
    );
    let out = Command::new("node").arg(&reader).arg(&pb).output().expect("node (scripts/setup.sh installs nodejs)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p = json(&out);
    let duration = p["duration_nanos"].as_u64().unwrap();
    assert!((1_000_000_000..=wall).contains(&duration), "duration {duration} ns, workload 1 s, record took {wall} ns");
    assert_eq!(p["sample_types"], serde_json::json!(["samples/count", "cpu/nanoseconds"]));
    assert_eq!(p["period_type"], "cpu/nanoseconds");
    let flame = json(&run_ok(loupe().args(["flame", "--format", "json", "--db"]).arg(&db)));
    assert_eq!(p["sums"][0], flame["total"], "pprof's samples against the flame tree's total");
    let ns = p["sums"][1].as_u64().unwrap() as f64;
    let per = ns / p["sums"][0].as_u64().unwrap() as f64;
    assert!((per - p["period"].as_u64().unwrap() as f64).abs() <= 0.5 * per, "cpu ns per sample {per} vs period {}", p["period"]);
    let unix_now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let time = p["time_nanos"].as_u64().unwrap();
    assert!(time <= unix_now && unix_now - time <= wall + 60_000_000_000, "time_nanos {time}");
}
