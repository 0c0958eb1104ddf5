//! `loupe data allocs`, `loupe data history` and `loupe data flow` end to
//! end on workloads whose allocations and accesses are known by
//! construction (testdata/workloads/allocs.cc and queue.c).

mod util;

use util::*;

#[test]
fn allocs_view_counts_the_calls_and_bytes_of_each_site() {
    // Checks the LD_PRELOAD path through the CLI: 50 rounds give make_node 50 calls of 40 bytes and make_array 50 of 128, none live.
    let db = tempfile::tempdir().unwrap();
    let tally = db.path().join("tally.txt");
    let exe = workloads().join("allocs");
    let out = run_ok(
        loupe()
            .args(["data", "allocs", "--db"])
            .arg(db.path())
            .args(["--preload", "--format", "json", "--limit", "100", "--"])
            .arg(&exe)
            .arg("50")
            .arg(&tally),
    );
    let j = json(&out);
    assert_eq!(j["source"], serde_json::json!(["LD_PRELOAD shim"]));
    let row = |f: &str| {
        j["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["site"].as_str().unwrap().starts_with(f))
            .cloned()
            .unwrap_or_else(|| panic!("no {f} row in {j}"))
    };
    assert_eq!(
        (row("make_node ")["calls"].as_u64(), row("make_node ")["bytes"].as_u64(), row("make_node ")["live"].as_u64()),
        (Some(50), Some(2000), Some(0))
    );
    assert_eq!((row("make_array ")["calls"].as_u64(), row("make_array ")["bytes"].as_u64()), (Some(50), Some(6400)));
}

#[test]
fn history_and_flow_views_show_the_queue_handoff_between_cpus() {
    // Checks test (5) through the CLI: each access's read/write kind, and watched messages going enqueue (cpu0) => dequeue (cpu1) in JSON, DOT and SVG.
    if !require_root() {
        return;
    }
    let _s = serial();
    let db = tempfile::tempdir().unwrap();
    let offs = ["--offset", "0:8", "--offset", "8:8", "--offset", "16:8", "--offset", "24:8"];
    let out = run_ok(
        loupe()
            .args(["data", "history", "--db"])
            .arg(db.path())
            .args(["--site", "make_msg", "--size", "64", "--objects", "4", "--budget", "0.5", "--format", "json"])
            .args(offs)
            .arg("--")
            .arg(workloads().join("queue"))
            .arg("30000"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let h: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    assert!(!h["histories"].as_array().unwrap().is_empty());
    assert_eq!(h["histories"][0]["site_function"], "make_msg");
    // Read or write, from the instruction before each trap IP, as queue.c is written.
    for hit in h["histories"].as_array().unwrap().iter().flat_map(|x| x["hits"].as_array().unwrap()) {
        let want = match (hit["function"].as_str().unwrap(), hit["offset"].as_u64().unwrap()) {
            ("fill_msg", 0 | 8) | ("enqueue", 16) | ("dequeue", 24) => "W",
            ("dequeue", 16) | ("consume", 0 | 8) => "R",
            other => panic!("unexpected access {other:?}"),
        };
        assert_eq!(hit["access"], want, "{hit}");
    }
    let f = json(&run_ok(loupe().args(["data", "flow", "--db"]).arg(db.path()).args(["--format", "json"])));
    let moved: Vec<(String, String)> = f["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cpu_changes"].as_u64().unwrap() > 0)
        .map(|e| (e["from"].as_str().unwrap().to_string(), e["to"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(moved, vec![("enqueue".to_string(), "dequeue".to_string())]);
    let dot = String::from_utf8(run_ok(loupe().args(["data", "flow", "--db"]).arg(db.path()).args(["--format", "dot"])).stdout).unwrap();
    assert!(dot.contains("\"enqueue\" -> \"dequeue\"") && dot.contains("color=red"), "{dot}");
    let svg = loupe().args(["data", "flow", "--db"]).arg(db.path()).args(["--format", "svg"]).output().unwrap();
    if std::process::Command::new("dot").arg("-V").output().is_ok() {
        assert!(String::from_utf8_lossy(&svg.stdout).contains("<svg"));
    } else {
        assert!(String::from_utf8_lossy(&svg.stderr).contains("graphviz `dot` not found"));
    }
}

#[test]
fn flow_on_a_database_without_histories_says_how_to_record_them() {
    // Checks the error path: a clear one-line message and a failing exit code.
    let db = tempfile::tempdir().unwrap();
    let out = loupe().args(["data", "flow", "--db"]).arg(db.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("loupe data history"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn history_hottest_watches_the_queue_message_fields_the_samples_found_hottest() {
    // Checks --hottest end to end: after `record --data` of queue.c the choice is struct msg from make_msg, 64 bytes,
    // enq_stamp (16:8) hottest (dequeue's read of it is each message's first touch on the consumer's CPU, so it takes
    // the line's transfer), every range one of the four 8-byte fields; then histories of those ranges are collected.
    if !require_root() {
        return;
    }
    let _s = serial();
    let queue = workloads().join("queue");
    let db = record_queue_until_msg_is_sampled(&queue);
    let out = run_ok(
        loupe()
            .args(["data", "history", "--hottest", "--db"])
            .arg(db.path())
            .args(["--objects", "4", "--budget", "0.5", "--format", "json", "--"])
            .arg(&queue)
            .arg("30000"),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let h: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    let c = &h["chosen"];
    assert_eq!((c["type_name"].as_str(), c["size"].as_u64()), (Some("struct msg"), Some(64)), "{c}");
    assert!(c["site"].as_str().unwrap().starts_with("make_msg "), "{c}");
    let fields = [(0, "seq"), (8, "payload"), (16, "enq_stamp"), (24, "deq_stamp")];
    let chosen: Vec<(u64, u64, String)> = c["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["offset"].as_u64().unwrap(), f["len"].as_u64().unwrap(), f["field"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(chosen[0], (16, 8, "enq_stamp".to_string()), "{c}");
    for (o, l, name) in &chosen {
        assert!(*l == 8 && fields.contains(&(*o, name.as_str())), "{c}");
    }
    let hs = h["histories"].as_array().unwrap();
    assert!(!hs.is_empty(), "no histories collected");
    for x in hs {
        assert_eq!(x["site_function"], "make_msg");
        let watched: Vec<u64> = x["offsets"].as_array().unwrap().iter().map(|r| r[0].as_u64().unwrap()).collect();
        assert_eq!(watched, chosen.iter().map(|c| c.0).collect::<Vec<_>>());
    }
    let hits: Vec<u64> = hs.iter().flat_map(|x| x["hits"].as_array().unwrap()).map(|x| x["offset"].as_u64().unwrap()).collect();
    assert!(hits.contains(&16) && hits.iter().all(|o| chosen.iter().any(|c| c.0 == *o)), "{hits:?}");
}

/// Records queue.c with access sampling until struct msg has enough samples to rank its fields (~700 on a quiet
/// machine, 60-150 on a loaded one where the two threads seldom run at once), so the pick is never judged on a tie
/// of a handful of samples.
fn record_queue_until_msg_is_sampled(queue: &std::path::Path) -> tempfile::TempDir {
    const FLOOR: u64 = 50;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let db = tempfile::tempdir().unwrap();
        run_ok(loupe().args(["record", "--data", "--freq", "4000", "--db"]).arg(db.path()).arg("--").arg(queue).arg("3000000"));
        let out = run_ok(loupe().args(["data", "profile", "--format", "json", "--db"]).arg(db.path()));
        let p: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let msg: u64 =
            p["rows"].as_array().unwrap().iter().filter(|r| r["type"] == "struct msg").map(|r| r["samples"].as_u64().unwrap()).sum();
        if msg >= FLOOR {
            return db;
        }
        seen.push(msg);
    }
    panic!("struct msg got fewer than {FLOOR} access samples in every recording: {seen:?}");
}

#[test]
fn history_hottest_without_access_samples_says_how_to_record_them() {
    // Checks the error path: no access log in --db gives a one-line message naming `loupe record --data` and a failing exit.
    let db = tempfile::tempdir().unwrap();
    let out = loupe().args(["data", "history", "--hottest", "--db"]).arg(db.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("loupe record --data"), "{}", String::from_utf8_lossy(&out.stderr));
}
