//! `loupe serve` end to end: a real server on an ephemeral 127.0.0.1 port
//! over a real recording of `callstack` (two epochs), asked over plain
//! HTTP. Every `/api/<command>` answer, parsed, must equal what the CLI
//! prints with `--format json` for the same flags; errors must be JSON with
//! the right status; the limits and the token must hold.

mod util;
use util::*;

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// A `loupe serve` child, killed when dropped.
struct Served {
    child: Child,
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `loupe serve` on port 0 and reads the port from its first line.
fn serve(args: &[&str]) -> Served {
    let mut child = loupe().arg("serve").args(args).args(["--listen", "127.0.0.1:0"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.split_whitespace().nth(1).unwrap_or_else(|| panic!("no URL in {line:?}"));
    assert!(line.starts_with("Serving http://127.0.0.1:"), "{line}");
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
    Served { child, addr }
}

/// One raw request; (status, body).
fn request(addr: &str, raw: &str) -> (u16, Vec<u8>) {
    let (status, _, body) = request_head(addr, raw);
    (status, body)
}

/// One raw request; (status, head, body).
fn request_head(addr: &str, raw: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(raw.as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&resp[..split]).to_string();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, resp[split + 4..].to_vec())
}

fn get(addr: &str, target: &str) -> (u16, Value) {
    let (status, body) = request(addr, &format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"));
    (status, serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{target}: not JSON ({e}): {}", String::from_utf8_lossy(&body))))
}

fn cli(args: &[&str]) -> Value {
    json(&run_ok(loupe().args(args)))
}

/// Two epochs of `callstack` in one database.
fn record(dir: &Path) -> PathBuf {
    let db = dir.join("db");
    for i in 0..2 {
        if i > 0 {
            run_ok(loupe().args(["epoch", "--db"]).arg(&db));
        }
        run_ok(
            loupe()
                .args(["record", "--freq", "1000", "--db"])
                .arg(&db)
                .arg("--")
                .arg(workloads().join("callstack"))
                .args(["--seconds", "1", "--out"])
                .arg(dir.join(format!("truth{i}.json"))),
        );
    }
    db
}

#[test]
fn the_api_answers_what_the_cli_prints() {
    // Checks every served command against the CLI's JSON for the same flags, then errors, limits and the token.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = record(dir.path());
    let d = db.to_str().unwrap();
    let s = serve(&["--db", &format!("main={d}")]);
    let dd1 = format!("{d}:1");
    let dd2 = format!("{d}:2");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("/api/top?by=image&epoch=all", vec!["top", "--by", "image", "--epoch", "all"]),
        ("/api/top?by=procedure&epoch=1&limit=5", vec!["top", "--by", "procedure", "--epoch", "1", "--limit", "5"]),
        ("/api/top?by=line&epoch=all&image=callstack", vec!["top", "--by", "line", "--epoch", "all", "--image", "callstack"]),
        ("/api/top?children=&epoch=all", vec!["top", "--children", "--epoch", "all"]),
        ("/api/top?callers=c_work&epoch=all", vec!["top", "--callers", "c_work", "--epoch", "all"]),
        ("/api/flame?epoch=all&comm=callstack", vec!["flame", "--epoch", "all", "--comm", "callstack"]),
        ("/api/flame?epoch=2&inverted=true", vec!["flame", "--epoch", "2", "--inverted"]),
        ("/api/flame?epoch=all&min-share=0.02", vec!["flame", "--epoch", "all", "--min-share", "0.02"]),
        ("/api/epochs", vec!["epochs"]),
        ("/api/diff?a=1&b=main:2&mode=weighted&by=procedure", vec!["diff", &dd1, &dd2, "--mode", "weighted", "--by", "procedure"]),
        ("/api/stats?run=1&run=2&limit=5", vec!["stats", &dd1, &dd2, "--limit", "5"]),
        (
            "/api/annotate?image=callstack&procedure=b&epoch=all",
            vec!["annotate", "--image", "callstack", "--procedure", "b", "--epoch", "all"],
        ),
    ];
    let (_, doc) = get(&s.addr, "/api/openapi.json");
    for (target, args) in &cases {
        let (status, api) = get(&s.addr, target);
        assert_eq!(status, 200, "{target}: {api}");
        let path = target.split('?').next().unwrap();
        let schema = &doc["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"];
        conforms(&doc, schema, &api, path).unwrap_or_else(|e| panic!("{target}: the answer is not the documented shape: {e}"));
        let mut full: Vec<&str> = args.clone();
        full.extend(["--format", "json"]);
        if !matches!(args[0], "diff" | "stats") {
            full.extend(["--db", d]);
        }
        assert_eq!(api, cli(&full), "{target} differs from loupe {}", full.join(" "));
    }
    check_flame_and_epochs(&s.addr);
    check_errors(&s.addr);
}

/// Checks `v` against an OpenAPI schema of `doc`: type, nullable, required
/// keys, properties, items, additionalProperties, $ref (what the answers'
/// schemas use).
fn conforms(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return conforms(doc, &doc["components"]["schemas"][name], v, at);
    }
    if v.is_null() && schema["nullable"] == true {
        return Ok(());
    }
    let ok = match schema["type"].as_str() {
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("array") => v.is_array(),
        Some("object") => v.is_object(),
        None => true,
        Some(t) => return Err(format!("{at}: unknown schema type {t}")),
    };
    if !ok {
        return Err(format!("{at}: {v} is not {}", schema["type"]));
    }
    if let Some(items) = v.as_array() {
        for (i, x) in items.iter().enumerate() {
            conforms(doc, &schema["items"], x, &format!("{at}[{i}]"))?;
        }
    }
    if let Some(o) = v.as_object() {
        for k in schema["required"].as_array().into_iter().flatten() {
            if !o.contains_key(k.as_str().unwrap()) {
                return Err(format!("{at}: no key {k}"));
            }
        }
        for (k, x) in o {
            match (schema["properties"].get(k), schema.get("additionalProperties")) {
                (Some(s), _) | (None, Some(s)) => conforms(doc, s, x, &format!("{at}.{k}"))?,
                _ => {}
            }
        }
    }
    Ok(())
}

/// The new JSON shapes hold what they promise: the tree's totals add up, the epochs' counts match top's.
fn check_flame_and_epochs(addr: &str) {
    let (_, f) = get(addr, "/api/flame?epoch=all");
    let root = &f["root"];
    assert_eq!((root["name"].as_str(), root["total"].as_u64()), (Some("all"), f["total"].as_u64()));
    fn check(n: &Value) {
        let kids: u64 = n["children"].as_array().unwrap().iter().map(|c| c["total"].as_u64().unwrap()).sum();
        assert_eq!(n["total"].as_u64().unwrap(), n["self"].as_u64().unwrap() + kids, "{}", n["name"]);
        n["children"].as_array().unwrap().iter().for_each(check);
    }
    check(root);
    assert!(f["root"]["children"].to_string().contains("\"name\":\"c_work\""));
    let (_, e) = get(addr, "/api/epochs");
    let e = e.as_array().unwrap();
    assert_eq!(e.iter().map(|x| x["id"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2]);
    for x in e {
        let (_, top) = get(addr, &format!("/api/top?by=image&limit=100000&epoch={}", x["id"]));
        assert_eq!(x["samples"], top["total_samples"], "epoch {}", x["id"]);
        let images: u64 = x["images"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(images, x["samples"].as_u64().unwrap());
    }
    assert_eq!((e[0]["end"].clone(), e[1]["end"].is_null()), (e[1]["start"].clone(), true));
}

fn check_errors(addr: &str) {
    for (target, status) in [
        ("/api/top?epoch=99", 404),
        ("/api/calc?image=no-such-image&procedure=b", 404),
        ("/api/annotate?image=callstack&procedure=no_such_procedure", 404),
        ("/api/top?db=other", 404),
        ("/api/nosuchcommand", 404),
        ("/api/top?bogus=1", 400),
        ("/api/top?by=nope", 400),
        ("/api/top?output=/tmp/x", 400),
        ("/api/top?format=text", 400),
        ("/api/diff?a=1&b=/etc", 404),
    ] {
        let (got, body) = get(addr, target);
        assert_eq!(got, status, "{target}: {body}");
        assert!(body["error"].as_str().is_some_and(|m| !m.is_empty()), "{target}: {body}");
    }
    let (status, _) = request(addr, "POST /api/top HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(status, 405);
    let big = format!("GET /api/top HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(request(addr, &big).0, 431);
    let (status, doc) = get(addr, "/api/openapi.json");
    assert_eq!(status, 200);
    let by = doc["paths"]["/api/top"]["get"]["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "by").cloned().unwrap();
    // `--by` also takes label:KEY and host, so it has no closed list of values: its help names the groupings.
    let listed = by["schema"]["enum"].as_array().is_some_and(|v| v.iter().any(|v| v == "procedure"));
    assert!(listed || by.to_string().contains("procedure"), "{by}");
    let (status, page) = request(addr, "GET / HTTP/1.1\r\n\r\n");
    assert_eq!((status, String::from_utf8_lossy(&page).contains("<html")), (200, true));
}

#[test]
fn exports_locks_and_optimization_decisions_are_served() {
    // Checks /api/export's bytes and type against `loupe export`, and /api/locks and /api/optimize/status against the CLI's JSON.
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = record(dir.path());
    let d = db.to_str().unwrap();
    let s = serve(&["--db", d]);
    for (format, ty) in [("collapsed", "text/plain"), ("pprof", "application/gzip"), ("speedscope", "application/json")] {
        let (status, head, body) = request_head(&s.addr, &format!("GET /api/export?format={format}&epoch=all HTTP/1.1\r\n\r\n"));
        assert_eq!(status, 200, "{format}: {}", String::from_utf8_lossy(&body));
        assert!(head.contains(&format!("Content-Type: {ty}")) && head.contains("Content-Disposition: attachment"), "{head}");
        let want = run_ok(loupe().args(["export", "--format", format, "--epoch", "all", "--db", d]));
        assert_eq!(body, want.stdout, "{format} differs from loupe export");
    }
    assert_eq!(get(&s.addr, "/api/export?format=collapsed&output=/tmp/x").0, 400);
    check_progress(d);
    // No lock result kept yet: 404 saying how to keep one; then a real traced run, kept in the database.
    let (status, body) = get(&s.addr, "/api/locks");
    assert_eq!(status, 404, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--db"), "{body}");
    let truth = dir.path().join("locks-truth.json");
    let traced =
        json(&run_ok(loupe().args(["locks", "--format", "json", "--db", d, "--"]).arg(workloads().join("locks")).arg("--out").arg(&truth)));
    let (status, served) = get(&s.addr, "/api/locks");
    assert_eq!((status, &served), (200, &traced));
    assert!(served["locks"].as_array().unwrap().iter().any(|l| l["name"].as_str().unwrap().starts_with("lock_hot")), "{served}");
    assert_eq!(served, cli(&["locks", "--format", "json", "--db", d]));
    assert_eq!(get(&s.addr, "/api/locks?duration=1").0, 400, "tracing is never started over HTTP");
    let (status, st) = get(&s.addr, "/api/optimize/status?image=/usr/bin/true");
    assert_eq!(status, 200, "{st}");
    assert_eq!(st, cli(&["optimize", "status", "/usr/bin/true", "--format", "json", "--db", d]));
    assert_eq!((st["image"].as_str(), st["decisions"].as_array().map(Vec::len)), (Some("/usr/bin/true"), Some(0)));
    let (_, doc) = get(&s.addr, "/api/openapi.json");
    for path in ["/api/locks", "/api/optimize/status", "/api/export"] {
        assert!(doc["paths"][path]["get"].is_object(), "{path} missing from the OpenAPI document");
    }
    conforms(&doc, &serde_json::json!({ "$ref": "#/components/schemas/LocksAnswer" }), &served, "locks").unwrap();
    conforms(&doc, &serde_json::json!({ "$ref": "#/components/schemas/OptimizeStatusAnswer" }), &st, "optimize/status").unwrap();
    // Every listing command's --format json parses (those needing other recordings are parsed by their own tests:
    // wall in offcpu.rs, data in data.rs/objects.rs, trace dump/report in trace.rs and perfflags.rs, calc in calc.rs).
    for args in [
        vec!["epochs"],
        vec!["events"],
        vec!["top", "--by", "image"],
        vec!["top", "--by", "procedure"],
        vec!["top", "--by", "line"],
        vec!["top", "--by", "instruction"],
        vec!["top", "--callees", "b"],
        vec!["flame"],
        vec!["locks"],
        vec!["optimize", "status", "/usr/bin/true"],
    ] {
        let mut full = args.clone();
        full.extend(["--format", "json"]);
        if args[0] != "events" {
            full.extend(["--db", d]);
        }
        let v = cli(&full);
        assert!(v.is_object() || v.is_array(), "loupe {}: {v}", full.join(" "));
    }
}

/// Progress goes to a terminal only: nothing on a pipe, a spinner naming the stage under a pseudo-terminal
/// (util-linux `script`), cleared before the result.
fn check_progress(d: &str) {
    let piped = run_ok(loupe().args(["export", "--format", "collapsed", "--epoch", "all", "--db", d]));
    let err = String::from_utf8_lossy(&piped.stderr);
    assert!(!err.contains('\r') && !err.contains('\x1b') && !err.contains("reading the stacks"), "progress on a pipe: {err:?}");
    let cmd = format!("{} export --format collapsed --epoch all --db {d} -o /dev/null", env!("CARGO_BIN_EXE_loupe"));
    let tty = std::process::Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().expect("script (util-linux)");
    assert!(tty.status.success(), "{}", String::from_utf8_lossy(&tty.stderr));
    let shown = String::from_utf8_lossy(&tty.stdout);
    assert!(shown.contains("reading the stacks") || shown.contains("naming the stacks"), "no progress at a terminal: {shown:?}");
}

#[test]
fn tokens_and_addresses() {
    // Checks that a non-loopback address without a token is refused, and that a token is required once given.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    loupe_store::Database::create(&db).unwrap();
    let out = loupe().args(["serve", "--db"]).arg(&db).args(["--listen", "0.0.0.0:0"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token"), "{}", String::from_utf8_lossy(&out.stderr));
    let s = serve(&["--db", db.to_str().unwrap(), "--token", "sesame"]);
    assert_eq!(get(&s.addr, "/api/epochs").0, 401);
    assert_eq!(get(&s.addr, "/api/epochs?token=wrong").0, 401);
    assert_eq!(get(&s.addr, "/api/epochs?token=sesame").0, 200);
    let (status, _) = request(&s.addr, "GET /api/epochs HTTP/1.1\r\nAuthorization: Bearer sesame\r\n\r\n");
    assert_eq!(status, 200);
}

#[test]
fn output_flag_writes_a_private_file_and_nothing_on_failure() {
    // Checks -o: the file holds exactly what stdout would, is 0600, and a failing command leaves none.
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    loupe_store::Database::create(&db).unwrap();
    let file = dir.path().join("epochs.json");
    // The first read of a new database starts its first epoch.
    run_ok(loupe().args(["epochs", "--db"]).arg(&db));
    let stdout = run_ok(loupe().args(["epochs", "--format", "json", "--db"]).arg(&db)).stdout;
    run_ok(loupe().args(["epochs", "--format", "json", "--db"]).arg(&db).arg("-o").arg(&file));
    assert_eq!(std::fs::read(&file).unwrap(), stdout);
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    let failed = dir.path().join("top.json");
    let out = loupe().args(["top", "--epoch", "99", "--db"]).arg(&db).arg("-o").arg(&failed).output().unwrap();
    assert!(!out.status.success() && !failed.exists());
}
