//! `loupe record --data` and `loupe data` on workloads whose answer is
//! known by construction (testdata/workloads/dataprof.c): the data each
//! mode hammers, its type and fields, and the kind of miss it causes.

mod util;

use serde_json::Value;
use std::path::Path;
use util::*;

/// Records `mode` of a dataprof binary; returns the address range it printed.
/// Only the heap mode needs allocation tracking.
fn record(db: &Path, exe: &str, mode: &str, freq: &str) -> (u64, u64) {
    record_args(db, exe, &[mode, "1.5"], freq)
}

fn record_args(db: &Path, exe: &str, args: &[&str], freq: &str) -> (u64, u64) {
    let bin = workloads().join(exe);
    let mut cmd = loupe();
    cmd.args(["record", "--data", "--freq", freq, "--db"]).arg(db);
    if args[0] != "capacity" {
        cmd.args(["--allocs", "off"]);
    }
    let out = run_ok(cmd.arg("--").arg(&bin).args(args));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("range ")).expect("workload prints its range");
    let mut f = line.split_whitespace().skip(1);
    let base = u64::from_str_radix(f.next().unwrap().trim_start_matches("0x"), 16).unwrap();
    (base, f.next().unwrap().parse().unwrap())
}

fn view(db: &Path, which: &str) -> Value {
    json(&run_ok(loupe().args(["data", which, "--format", "json", "--limit", "1000", "--db"]).arg(db)))
}

fn rows(v: &Value) -> Vec<(String, String, String)> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["type"].as_str().unwrap().to_string(),
                r["field"].as_str().unwrap().to_string(),
                r["class"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn has(rows: &[(String, String, String)], t: &str, f: &str, c: &str) -> bool {
    rows.iter().any(|r| r.0 == t && r.1 == f && r.2 == c)
}

#[test]
fn sampled_addresses_lie_in_the_array_the_workload_walks() {
    // Checks that at least 90% of exact data addresses fall inside the 128 MiB node array the workload prints, and that they resolve to struct node.
    if !require_root() {
        return;
    }
    let _g = serial();
    let db = tempfile::tempdir().unwrap();
    let (base, size) = record(db.path(), "dataprof", "capacity", "4000");
    let recs = loupe_dataprof::log::read(db.path()).unwrap();
    let with: Vec<_> = recs.iter().filter(|r| r.has_addr()).collect();
    let inside = with.iter().filter(|r| r.addr >= base && r.addr < base + size).count();
    assert!(with.len() >= 200, "only {} samples with an address", with.len());
    assert!(inside * 10 >= with.len() * 9, "{inside} of {} addresses inside [{base:#x}, +{size})", with.len());
    let p = view(db.path(), "profile");
    assert_eq!(p["rows"][0]["type"], "struct node", "{p}");
}

#[test]
fn false_sharing_of_two_fields_disappears_when_padded() {
    // Checks two threads writing fields a and b of one struct counters: both fields top the profile and are false sharing; padded apart, no sharing at all.
    if !require_root() {
        return;
    }
    let _g = serial();
    let db = tempfile::tempdir().unwrap();
    record(db.path(), "dataprof", "falseshare", "2000");
    let p = view(db.path(), "profile");
    let top: Vec<(String, String)> = p["rows"].as_array().unwrap()[..2]
        .iter()
        .map(|r| (r["type"].as_str().unwrap().into(), r["field"].as_str().unwrap().into()))
        .collect();
    assert!(top.contains(&("struct counters".into(), "a".into())) && top.contains(&("struct counters".into(), "b".into())), "{p}");
    assert!(p["rows"][0]["bounces"].as_bool().unwrap(), "{p}");
    let c = rows(&view(db.path(), "classify"));
    assert_eq!((c[0].0.as_str(), c[0].2.as_str()), ("struct counters", "false_sharing"), "{c:?}");
    assert!(has(&c, "struct counters", "a", "false_sharing") && has(&c, "struct counters", "b", "false_sharing"), "{c:?}");
    assert!(!has(&c, "struct counters", "a", "true_sharing") && !has(&c, "struct counters", "b", "true_sharing"), "{c:?}");

    let padded = tempfile::tempdir().unwrap();
    record(padded.path(), "dataprof-padded", "falseshare", "2000");
    let c = rows(&view(padded.path(), "classify"));
    assert!(!c.iter().any(|r| r.0 == "struct counters"), "padded fields still classified: {c:?}");
}

#[test]
fn one_field_written_by_two_threads_is_true_sharing() {
    // Checks two threads writing the same field a: true sharing first, and never false sharing of struct counters.
    if !require_root() {
        return;
    }
    let _g = serial();
    let db = tempfile::tempdir().unwrap();
    record(db.path(), "dataprof", "trueshare", "2000");
    let c = rows(&view(db.path(), "classify"));
    assert_eq!(c[0], ("struct counters".into(), "a".into(), "true_sharing".into()), "{c:?}");
    assert!(!c.iter().any(|r| r.0 == "struct counters" && r.2 == "false_sharing"), "{c:?}");
}

#[test]
fn slots_four_kib_apart_are_conflict_in_their_set() {
    // Checks 24 struct slots 4 KiB apart: conflict misses of struct slot.v, in the one L1 set their address gives.
    if !require_root() {
        return;
    }
    let _g = serial();
    let db = tempfile::tempdir().unwrap();
    let (base, _) = record(db.path(), "dataprof", "conflict", "2000");
    let v = view(db.path(), "classify");
    let c = rows(&v);
    assert_eq!(c[0], ("struct slot".into(), "v".into(), "conflict".into()), "{c:?}");
    let l1 = v["caches"].as_array().unwrap().iter().find(|g| g["level"] == 1).unwrap();
    let want = (base / l1["line"].as_u64().unwrap()) % l1["sets"].as_u64().unwrap();
    assert_eq!(v["rows"][0]["sets"], serde_json::json!([want]), "{v}");
    assert_eq!(v["crowded_sets"][0]["set"], want, "{v}");
    // The 24 slots, and possibly a stack or library line that happens to share the set.
    assert!(v["crowded_sets"][0]["lines"].as_u64().unwrap() >= 24, "{v}");
}

#[test]
fn array_larger_than_the_llc_is_capacity_of_its_type() {
    // Checks random visits to an array of struct node 4x the last-level cache (at least 128 MiB; LLCs seen here: 32 and
    // 260 MiB): capacity, with struct node the dominant type. The working set is estimated from distinct lines
    // sampled (Chao1, about n^2/2 lines at most from n samples), so the run is long enough at 2000/s for an estimate
    // past the LLC: 1.5 s per 32 MiB of LLC's square root.
    if !require_root() {
        return;
    }
    let _g = serial();
    use loupe_dataprof::cache::Geometry;
    let caches = Geometry::read_sysfs();
    let llc_mib = Geometry::last(&caches).map_or(32.0, |c| c.size as f64 / (1u64 << 20) as f64);
    let (mib, secs) = ((4.0 * llc_mib).max(128.0).round(), 1.5 * (llc_mib / 32.0).sqrt().max(1.0));
    let db = tempfile::tempdir().unwrap();
    record_args(db.path(), "dataprof", &["capacity", &format!("{secs:.1}"), &format!("{mib}")], "2000");
    let c = rows(&view(db.path(), "classify"));
    assert_eq!((c[0].0.as_str(), c[0].2.as_str()), ("struct node", "capacity"), "{c:?}");
    let ws = view(db.path(), "workingset");
    assert_eq!(ws["rows"][0]["type"], "struct node", "{ws}");
}

#[test]
fn heap_struct_in_a_static_pointer_is_named_and_its_fields_false_share() {
    // Checks (issue 28) a heap struct reached through a typed static pointer, built -O1 and -O2: the profile's top rows are struct tally_pair.left/right typed at allocation, classified false sharing, and the header reports coverage.
    if !require_root() {
        return;
    }
    let _g = serial();
    for exe in ["dtypes-O1", "dtypes-O2"] {
        let db = tempfile::tempdir().unwrap();
        run_ok(loupe().args(["record", "--data", "--freq", "2000", "--db"]).arg(db.path()).arg("--").arg(workloads().join(exe)).arg("1.5"));
        let p = view(db.path(), "profile");
        let named: Vec<(&str, &str, &str)> = p["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["type"].as_str().unwrap().starts_with("struct tally_pair"))
            .map(|r| (r["type"].as_str().unwrap(), r["field"].as_str().unwrap(), r["how"].as_str().unwrap()))
            .collect();
        assert!(
            named.contains(&("struct tally_pair", "left", "alloc")) && named.contains(&("struct tally_pair", "right", "alloc")),
            "{exe}: {p}"
        );
        assert!(!p["rows"].as_array().unwrap().iter().any(|r| r["type"].as_str().unwrap().starts_with("[heap from")), "{exe}: {p}");
        assert!(p["coverage"]["typed"]["heap_by_allocation"].as_u64().unwrap() > 0, "{exe}: {p}");
        let c = rows(&view(db.path(), "classify"));
        assert!(
            has(&c, "struct tally_pair", "left", "false_sharing") && has(&c, "struct tally_pair", "right", "false_sharing"),
            "{exe}: {c:?}"
        );
        assert!(!c.iter().any(|r| r.0 == "struct tally_pair" && r.2 == "true_sharing"), "{exe}: {c:?}");
    }
}

/// Records dtypes' `wrap` case with `allocs` tracking and checks its top
/// rows are the two wrapper blocks typed at allocation through the callers.
fn wrapper_blocks_are_typed(exe: &str, allocs: &str) {
    let db = tempfile::tempdir().unwrap();
    run_ok(
        loupe()
            .args(["record", "--data", "--freq", "2000", "--allocs", allocs, "--db"])
            .arg(db.path())
            .arg("--")
            .arg(workloads().join(exe))
            .args(["1", "wrap"]),
    );
    let p = view(db.path(), "profile");
    let top: Vec<(&str, &str, u64, &str)> = p["rows"].as_array().unwrap()[..2]
        .iter()
        // A row without a field or offset (untyped) shows in the failure with the whole profile.
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or("");
            (s("type"), s("field"), r["offset"].as_u64().unwrap_or(u64::MAX), s("how"))
        })
        .collect();
    assert!(
        top.contains(&("struct rec_a", "hits", 8, "alloc")) && top.contains(&("struct rec_b", "total", 16, "alloc")),
        "{exe} {allocs}: {p}"
    );
    let text = String::from_utf8(run_ok(loupe().args(["data", "profile", "--db"]).arg(db.path())).stdout).unwrap();
    assert!(text.contains("struct rec_a.hits +8") && text.contains("struct rec_b.total +16"), "{exe} {allocs}: {text}");
}

#[test]
fn blocks_from_a_void_wrapper_are_typed_where_its_caller_stores_them() {
    // Checks (issue 28) blocks from a two-level `void *` wrapper (xmalloc -> xalloc), touched only through a `void *`, built -O1 and -O2: the top rows are struct rec_a.hits +8 and struct rec_b.total +16 typed at allocation through the callers, in JSON and text.
    if !require_root() {
        return;
    }
    let _g = serial();
    for exe in ["dtypes-O1", "dtypes-O2"] {
        wrapper_blocks_are_typed(exe, "shim");
    }
}

#[test]
fn uprobes_unwind_the_callers_of_a_void_wrapper() {
    // Checks (issue 28) the same wrapper blocks typed with `--allocs uprobes`: the callers come from the probe's stack copy unwound by .eh_frame (dtypes-O2 has no frame pointers).
    if !require_root() {
        return;
    }
    let _g = serial();
    for exe in ["dtypes-O1", "dtypes-O2"] {
        wrapper_blocks_are_typed(exe, "uprobes");
    }
}

#[test]
fn an_object_allocated_in_the_first_millisecond_is_watched() {
    // Checks (issue 28) `data history` watches dtypes' `pair`, allocated first thing in main (no `late` delay): one object from alloc_static whose hits are bump_left at +0 and bump_right at +8.
    if !require_root() {
        return;
    }
    let _g = serial();
    let db = tempfile::tempdir().unwrap();
    let out = run_ok(
        loupe()
            .args(["data", "history", "--db"])
            .arg(db.path())
            .args(["--site", "alloc_static", "--size", "64", "--offset", "0:8", "--offset", "8:8", "--format", "json"])
            .arg("--")
            .arg(workloads().join("dtypes-O2"))
            .arg("0.3"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let h: Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let hs = h["histories"].as_array().unwrap();
    assert_eq!(hs.len(), 1, "{h}");
    let hits: Vec<(&str, u64)> =
        hs[0]["hits"].as_array().unwrap().iter().map(|x| (x["function"].as_str().unwrap(), x["offset"].as_u64().unwrap())).collect();
    assert!(hits.contains(&("bump_left", 0)) && hits.contains(&("bump_right", 8)), "{h}");
    assert!(hits.iter().all(|&(f, o)| matches!((f, o), ("bump_left", 0) | ("bump_right", 8) | ("main", _))), "{hits:?}");
}

#[test]
fn samples_in_the_allocation_shim_are_not_the_programs() {
    // Checks (issue 28) on allocbench (malloc/free pairs, the shim records each) that samples whose instruction is in Loupe's LD_PRELOAD shim are counted apart: total + shim equals what the recorder sampled, some were the shim's, and no row is the shim's own `struct record`.
    if !require_root() {
        return;
    }
    let _g = serial();
    let db = tempfile::tempdir().unwrap();
    let out = run_ok(
        loupe()
            .args(["record", "--data", "--freq", "1000", "--db"])
            .arg(db.path())
            .arg("--")
            .arg(workloads().join("allocbench"))
            .arg("1000000"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let sampled: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("loupe: ")?.split_once(" samples, ")?.0.parse().ok())
        .unwrap_or_else(|| panic!("recorder's sample count in: {err}"));
    let p = view(db.path(), "profile");
    let (total, shim) = (p["total_samples"].as_u64().unwrap(), p["shim_samples"].as_u64().unwrap());
    assert_eq!(total + shim, sampled, "{p}");
    assert!(shim > 0, "{p}");
    assert!(rows(&p).iter().all(|(t, _, _)| t != "struct record"), "{p}");
}
