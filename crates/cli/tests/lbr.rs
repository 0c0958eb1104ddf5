//! Branch records (LBR) without an LBR on this machine: records and straight runs constructed from the real
//! `layout` binary's own branch instructions (decoded here) are stored as the collector stores them; `loupe
//! optimize export --format bolt` must write BOLT's branch fdata with exactly those counts under BOLT's names
//! (plus the runs' fall-throughs), and the real llvm-bolt must use all of it. And `loupe record --lbr` must say
//! what is missing and record IP samples.

mod util;
use loupe_calc::decode::{decode, Flow};
use loupe_model::branches::BranchProfile;
use loupe_model::{BuildId, EventName, ImageId, ImageOffset};
use loupe_symbolize::{Symbolizer, SymbolizerOptions};
use std::collections::BTreeSet;
use std::process::Command;
use util::optimize::*;
use util::*;

const BOLT: &str = "/usr/lib/llvm-19/bin/llvm-bolt";
/// Not /usr/bin/perf2bolt-19, which acts as llvm-bolt because of its name.
const PERF2BOLT: &str = "/usr/lib/llvm-19/bin/perf2bolt";

/// One constructed record and the fdata line it must become.
struct Rec {
    from: u64,
    to: u64,
    taken: u64,
    mispredicted: u64,
    line: String,
}

/// Every direct branch and jump of `funcs` that stays in its function, the call from main into run and
/// run's return into main, each with its own count.
fn construct(code: &loupe_symbolize::Code, funcs: &[&str]) -> Vec<Rec> {
    let ranges: Vec<loupe_symbolize::ProcedureRange> = funcs.iter().map(|f| code.find(f).into_iter().next().unwrap()).collect();
    let run = ranges.iter().find(|r| r.name == "run").unwrap().clone();
    let main = ranges.iter().find(|r| r.name == "main").unwrap().clone();
    let mut out = Vec::new();
    let mut k = 0u64;
    let line = |f: &loupe_symbolize::ProcedureRange, from: u64, t: &loupe_symbolize::ProcedureRange, to: u64, m: u64, n: u64| {
        format!("1 {} {:x} 1 {} {:x} {m} {n}", f.name, from - f.start, t.name, to - t.start)
    };
    for r in &ranges {
        for i in decode(r.start, code.bytes(r.start, r.size).unwrap()) {
            if let Flow::Branch(t) | Flow::Jump(t) = i.flow {
                if (r.start..r.start + r.size).contains(&t) {
                    k += 1;
                    let (n, m) = (1000 + 37 * k, k % 5);
                    out.push(Rec { from: i.addr, to: t, taken: n, mispredicted: m, line: line(r, i.addr, r, t, m, n) });
                }
            }
        }
    }
    // The call main -> run (e8 rel32) and the return from run to just after it.
    let insns = decode(main.start, code.bytes(main.start, main.size).unwrap());
    let call = insns
        .iter()
        .find(|i| {
            let b = code.bytes(i.addr, 5).unwrap();
            i.is_call
                && i.len == 5
                && b[0] == 0xe8
                && i.addr.wrapping_add(5).wrapping_add(i32::from_le_bytes(b[1..5].try_into().unwrap()) as u64) == run.start
        })
        .expect("main calls run");
    out.push(Rec { from: call.addr, to: run.start, taken: 500, mispredicted: 0, line: line(&main, call.addr, &run, run.start, 0, 500) });
    let ret = decode(run.start, code.bytes(run.start, run.size).unwrap()).into_iter().find(|i| i.flow == Flow::Return).unwrap();
    out.push(Rec {
        from: ret.addr,
        to: call.addr + 5,
        taken: 499,
        mispredicted: 1,
        line: line(&run, ret.addr, &main, call.addr + 5, 1, 499),
    });
    out
}

/// A straight run from each conditional branch of `funcs` (not taken) to the next instruction that can leave
/// straight-line code, each with its own count.
fn construct_runs(code: &loupe_symbolize::Code, funcs: &[&str]) -> Vec<(u64, u64, u64)> {
    let mut runs = Vec::new();
    for f in funcs.iter().map(|f| code.find(f).into_iter().next().unwrap()) {
        let insns = decode(f.start, code.bytes(f.start, f.size).unwrap());
        for (k, j) in insns.iter().enumerate().filter(|(_, i)| matches!(i.flow, Flow::Branch(_))) {
            if let Some(end) = insns[k + 1..].iter().find(|i| i.flow != Flow::Next) {
                runs.push((j.addr, end.addr, 200 + runs.len() as u64));
            }
        }
    }
    runs
}

#[test]
fn constructed_lbr_records_become_branch_fdata_that_bolt_uses() {
    // Checks export from branch records: one fdata line per record with its exact counts (the return left out),
    // the runs' fall-throughs exactly as BOLT's own aggregator (perf2bolt) writes them for the same input, and
    // llvm-bolt's log shows every named function profiled and nothing ignored or stale.
    assert!(std::path::Path::new(BOLT).is_file(), "{BOLT} missing: run scripts/setup.sh (Debian package bolt-19)");
    let dir = tempfile::tempdir().unwrap();
    let (db_path, bin) = (dir.path().join("db"), dir.path().join("layout"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    let bin = bin.canonicalize().unwrap();
    let bid = BuildId(loupe_optimize::identity::read_build_id(&bin).unwrap());
    let image = ImageId::elf(&bin.display().to_string(), Some(bid.clone()));
    let mut syms = Symbolizer::new(SymbolizerOptions::default());
    let code = syms.code(&image).unwrap();
    let recs = construct(&code, &["main", "run", "mix", "step"]);
    assert!(recs.len() >= 6, "too few branches decoded: {}", recs.len());
    let runs = construct_runs(&code, &["main", "run", "mix", "step"]);
    assert!(runs.len() >= 4, "too few conditional branches decoded: {}", runs.len());

    // Stored as the collector stores them: file offsets (non-PIE: vaddr - 0x400000, checked), event cycles.
    let mut bp = BranchProfile::new(image.clone(), EventName::new("cycles"));
    for r in &recs {
        let (f, t) = (ImageOffset(r.from - 0x400000), ImageOffset(r.to - 0x400000));
        assert_eq!((code.vaddr(f), code.vaddr(t)), (Some(r.from), Some(r.to)));
        bp.add(f, t, r.taken, r.mispredicted);
    }
    for &(start, end, n) in &runs {
        bp.add_trace(ImageOffset(start - 0x400000), ImageOffset(end - 0x400000), n);
    }
    bp.stacks = 100;
    let db = loupe_store::Database::create(&db_path).unwrap();
    db.merge_branches(db.current_epoch().unwrap(), &[bp]).unwrap();

    let fdata = dir.path().join("layout.fdata");
    let out = run_ok(loupe().args(["optimize", "export", "--format", "bolt", "--db"]).arg(&db_path).arg(&bin).arg("-o").arg(&fdata));
    let err = String::from_utf8_lossy(&out.stderr);
    // The last record is run's return into main: left out, as perf2bolt leaves returns out.
    let (ret, branches) = recs.split_last().unwrap();
    let text = std::fs::read_to_string(&fdata).unwrap();
    let got: BTreeSet<&str> = text.lines().collect();
    let want: BTreeSet<&str> = branches.iter().map(|r| r.line.as_str()).collect();
    assert!(want.is_subset(&got) && !got.contains(ret.line.as_str()), "fdata:\n{text}");
    let fallthroughs: Vec<&&str> = got.difference(&want).collect();
    assert!(fallthroughs.len() >= 4 && fallthroughs.iter().all(|l| l.split(' ').nth(6) == Some("0")), "{fallthroughs:?}");
    let total: u64 = branches.iter().map(|r| r.taken).sum();
    let said = format!("functions: {} branches taken {total} times, {} fall-throughs of straight runs", branches.len(), fallthroughs.len());
    assert!(err.contains(&said) && err.contains(&format!("{} returns left out", ret.taken)), "{err}");

    // BOLT's own aggregator on the same branches and runs (perf2bolt's pre-aggregated input: `B from to count
    // mispredicted`, `F start end count`) must write the same lines.
    let mut pa = String::new();
    for r in &recs {
        pa += &format!("B {:x} {:x} {} {}\n", r.from, r.to, r.taken, r.mispredicted);
    }
    for (start, end, n) in &runs {
        pa += &format!("F {start:x} {end:x} {n}\n");
    }
    let (pa_path, pa_fdata) = (dir.path().join("preagg.txt"), dir.path().join("perf2bolt.fdata"));
    std::fs::write(&pa_path, pa).unwrap();
    run_ok(Command::new(PERF2BOLT).arg("-pa").arg("-p").arg(&pa_path).arg("-o").arg(&pa_fdata).arg(&bin));
    let theirs = std::fs::read_to_string(&pa_fdata).unwrap();
    assert_eq!(got, theirs.lines().collect::<BTreeSet<&str>>(), "ours:\n{text}\nperf2bolt's:\n{theirs}");

    let funcs: BTreeSet<&str> = text.lines().flat_map(|l| [l.split(' ').nth(1).unwrap(), l.split(' ').nth(4).unwrap()]).collect();
    let bolted = dir.path().join("layout.bolt");
    let bolt = run_ok(Command::new(BOLT).arg(&bin).arg("-o").arg(&bolted).arg(format!("-data={}", fdata.display())).args([
        "-reorder-blocks=ext-tsp",
        "-split-functions",
        "-reorder-functions=hfsort",
    ]));
    let log = String::from_utf8_lossy(&bolt.stdout).to_string() + &String::from_utf8_lossy(&bolt.stderr);
    assert!(log.contains("using branch profile reader"), "{log}");
    assert!(log.contains(&format!("{} out of", funcs.len())) && log.contains("have non-empty execution profile"), "{funcs:?}\n{log}");
    assert!(!log.contains("ignored") && !log.contains("stale"), "{log}");
    let sum = |b: &std::path::Path| String::from_utf8(run_ok(Command::new(b).arg("500")).stdout).unwrap();
    assert_eq!(sum(&bolted), sum(&bin));

    // Export by build-id once the file is gone from its path: read from the image cache (where the collector
    // preserves a replaced image), the same fdata; an unknown build is refused by name.
    std::fs::create_dir_all(db_path.join("images")).unwrap();
    std::fs::rename(&bin, db_path.join("images").join(bid.to_hex())).unwrap();
    let again = dir.path().join("again.fdata");
    let out = run_ok(
        loupe()
            .args(["optimize", "export", "--format", "bolt", "--build-id", &bid.to_hex(), "--db"])
            .arg(&db_path)
            .arg(&bin)
            .arg("-o")
            .arg(&again),
    );
    assert_eq!(std::fs::read_to_string(&again).unwrap(), text, "{}", String::from_utf8_lossy(&out.stderr));
    let other = "ab".repeat(20);
    let out = loupe().args(["optimize", "export", "--build-id", &other, "--db"]).arg(&db_path).arg(&bin).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&format!("build {other} is neither at")), "{err}");
}

#[test]
fn record_lbr_says_what_is_missing_and_keeps_ip_samples() {
    // Checks --lbr against the machine: without a branch stack one specific warning and a normal IP profile, no
    // branch files; with one, branch files of the workload.
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let has_lbr = loupe_perf::probe_branch_stack(loupe_perf::sys::branch::ANY | loupe_perf::sys::branch::USER).is_ok();
    let out =
        run_ok(loupe().args(["record", "--lbr", "--no-stacks", "--db"]).arg(&db).arg("--").arg(workloads().join("layout")).arg("1500"));
    let err = String::from_utf8_lossy(&out.stderr);
    let epoch = db.join("epochs/000001");
    let branch_files =
        std::fs::read_dir(&epoch).unwrap().filter(|d| d.as_ref().unwrap().file_name().to_string_lossy().ends_with(".branches")).count();
    let top = top_json(&db, &[]);
    assert!(sum_rows(&top, |r| ["run", "mix", "step"].iter().any(|p| r["procedure"] == *p)) > 0, "{err}");
    if has_lbr {
        assert!(branch_files > 0 && err.contains("branch records:"), "{err}");
    } else {
        assert_eq!(err.matches("this CPU or VM exposes no branch stack (LBR)").count(), 1, "{err}");
        assert!(err.contains("recording IP samples only"), "{err}");
        assert_eq!(branch_files, 0);
    }
}

/// A call: (its address, its caller's start, its callee's start).
type Site = (u64, u64, u64);

/// The file offset of virtual address `va` in an ELF file (its loadable segment's).
fn file_offset(elf: &std::path::Path, va: u64) -> u64 {
    use object::{Object, ObjectSegment};
    let data = std::fs::read(elf).unwrap();
    let f = object::File::parse(&*data).unwrap();
    let seg = f.segments().find(|s| (s.address()..s.address() + s.size()).contains(&va)).unwrap();
    seg.file_range().0 + (va - seg.address())
}

/// Direct calls (e8 rel32) in `caller` of `code`: (call address, target).
fn calls_in(code: &loupe_symbolize::Code, caller: &loupe_symbolize::ProcedureRange) -> Vec<(u64, u64)> {
    decode(caller.start, code.bytes(caller.start, caller.size).unwrap())
        .into_iter()
        .filter(|i| i.is_call && i.len == 5 && code.bytes(i.addr, 1).unwrap()[0] == 0xe8)
        .map(|i| {
            let rel = i32::from_le_bytes(code.bytes(i.addr + 1, 4).unwrap().try_into().unwrap());
            (i.addr, i.addr.wrapping_add(5).wrapping_add(rel as u64))
        })
        .collect()
}

/// Installs a BOLT output (with its address table) of the `layout` copy at `bin` as Loupe would: original kept
/// at `bin`.loupe-orig, the decision log recording Loupe made it. Returns (original's, optimized's build-id).
fn install_bolted_layout(dir: &std::path::Path, db: &std::path::Path, bin: &std::path::Path) -> (String, String) {
    let cand = dir.join("layout.loupe-bolt");
    bolt_layout(dir, bin, &cand);
    let (orig, opt) = (build_id_hex(bin), build_id_hex(&cand));
    loupe_optimize::manage::install(bin, &cand).unwrap();
    log_decision(db, bin, "installed", &orig, &opt);
    (orig, opt)
}

#[test]
fn optimized_builds_branch_records_map_back_to_the_original() {
    // Checks that branch records of Loupe's installed BOLT output fold into the original's branch fdata through
    // BOLT's table: ground truth from both ELFs' symbol tables and decoded code, not from the table: each call
    // between main, run, mix and step (callee's start; the caller's one call to it, in the optimized and in the
    // original code) must come out at the original's call site with the optimized build's count plus the
    // original build's own; a record into the PLT (no function, no original) and one from a jump BOLT inserted
    // (no original instruction) are counted and left out.
    let dir = tempfile::tempdir().unwrap();
    let (db_path, bin) = (dir.path().join("db"), dir.path().join("layout"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    let bin = bin.canonicalize().unwrap();
    let db = loupe_store::Database::create(&db_path).unwrap();
    let (orig_bid, opt_bid) = install_bolted_layout(dir.path(), &db_path, &bin);
    let saved = loupe_optimize::manage::saved_original(&bin);
    let mut syms = Symbolizer::new(SymbolizerOptions::default());
    let names = ["main", "run", "mix", "step"];
    let image = |bid: &str, at: &std::path::Path| ImageId::elf(&at.display().to_string(), Some(BuildId::from_hex(bid).unwrap()));
    let range = |code: &loupe_symbolize::Code, n: &str| code.find(n).into_iter().find(|r| r.name == n).unwrap();
    // (caller, callee) -> (call address, caller's start, callee's start) per build, for the pairs with exactly one
    // direct call (in the caller or its split-off parts, NAME.cold.N).
    let sites = |code: &loupe_symbolize::Code| {
        let starts: Vec<(u64, &str)> = names.iter().map(|n| (range(code, n).start, *n)).collect();
        let mut out: std::collections::BTreeMap<(&str, &str), Vec<Site>> = Default::default();
        for caller in names {
            let start = range(code, caller).start;
            let cold = format!("{caller}.cold.");
            for r in code.find("").into_iter().filter(|r| r.name == caller || r.name.starts_with(&cold)) {
                for (at, to) in calls_in(code, &r) {
                    if let Some(&(_, callee)) = starts.iter().find(|s| s.0 == to) {
                        out.entry((caller, callee)).or_default().push((at, start, to));
                    }
                }
            }
        }
        out.into_iter().filter(|(_, v)| v.len() == 1).map(|(k, v)| (k, v[0])).collect::<std::collections::BTreeMap<_, _>>()
    };
    let opt_image = image(&opt_bid, &bin);
    let opt_sites = sites(&syms.code(&opt_image).unwrap());
    let orig_sites = sites(&syms.code(&image(&orig_bid, &saved)).unwrap());
    let both: Vec<_> = opt_sites.keys().filter(|k| orig_sites.contains_key(*k)).copied().collect();
    assert!(both.len() >= 3, "calls found once in both builds: {opt_sites:?} {orig_sites:?}");
    assert!(both.iter().all(|k| opt_sites[k].0 != orig_sites[k].0), "BOLT moved no call site");
    // The PLT has no function symbol: no original can be named for an address in it.
    let plt = {
        use object::{Object, ObjectSection};
        let data = std::fs::read(&bin).unwrap();
        object::File::parse(&*data).unwrap().section_by_name(".plt").unwrap().address()
    };
    // A jump BOLT inserted in `run` (it made a fall-through explicit): reading the table as for IP samples puts
    // it inside an instruction of the original's decoded code, so it has no original instruction.
    let orig_starts: std::collections::HashSet<u64> = {
        let code = syms.code(&image(&orig_bid, &saved)).unwrap();
        let r = range(&code, "run");
        decode(r.start, code.bytes(r.start, r.size).unwrap()).iter().map(|i| i.addr).collect()
    };
    let t = loupe_optimize::bat::Translator::open(&bin, &saved).unwrap();
    let inserted = {
        let code = syms.code(&opt_image).unwrap();
        let r = range(&code, "run");
        decode(r.start, code.bytes(r.start, r.size).unwrap())
            .into_iter()
            .find_map(|i| match i.flow {
                Flow::Jump(to) if t.to_original(i.addr).is_some_and(|o| !orig_starts.contains(&o)) => Some((i.addr, to)),
                _ => None,
            })
            .expect("BOLT inserted a jump in run")
    };

    // The optimized build's records at PATH (file offsets of its own layout), the original's own from before the
    // installation at PATH too, all in one epoch.
    let mut opt_bp = BranchProfile::new(opt_image.clone(), EventName::new("cycles"));
    let mut orig_bp = BranchProfile::new(image(&orig_bid, &bin), EventName::new("cycles"));
    let mut want = BTreeSet::new();
    for (j, k) in both.iter().enumerate() {
        let ((oa, _, ot), (a, start, t)) = (opt_sites[k], orig_sites[k]);
        let (n, m, own) = (700 + 11 * j as u64, j as u64 % 3, 100 + j as u64);
        opt_bp.add(ImageOffset(file_offset(&bin, oa)), ImageOffset(file_offset(&bin, ot)), n, m);
        orig_bp.add(ImageOffset(file_offset(&saved, a)), ImageOffset(file_offset(&saved, t)), own, 1);
        want.insert(format!("1 {} {:x} 1 {} 0 {} {}", k.0, a - start, k.1, m + 1, n + own));
    }
    let main_call = opt_sites[&("main", "run")].0;
    opt_bp.add(ImageOffset(file_offset(&bin, main_call)), ImageOffset(file_offset(&bin, plt)), 50, 0);
    opt_bp.add(ImageOffset(file_offset(&bin, inserted.0)), ImageOffset(file_offset(&bin, inserted.1)), 30, 0);
    db.merge_branches(db.current_epoch().unwrap(), &[opt_bp, orig_bp]).unwrap();

    let fdata = dir.path().join("orig.fdata");
    let out = run_ok(loupe().args(["optimize", "export", "--format", "bolt", "--db"]).arg(&db_path).arg(&saved).arg("-o").arg(&fdata));
    let err = String::from_utf8_lossy(&out.stderr);
    let text = std::fs::read_to_string(&fdata).unwrap();
    assert_eq!(text.lines().map(str::to_string).collect::<BTreeSet<_>>(), want, "fdata:\n{text}\n{err}");
    let mapped: u64 = (0..both.len() as u64).map(|j| 700 + 11 * j).sum();
    let said =
        format!("{mapped} branch/run execution(s) of optimized build {opt_bid} mapped back through BOLT's address table, 80 left out");
    assert!(err.contains(&said), "{err}");
}

#[test]
fn manager_gives_bolt_the_branch_records() {
    // Checks that the manager's candidate is built from branch records when the database holds some: with
    // constructed records of `layout` (as above) and real IP samples, one pass writes, as the profile it gives
    // BOLT, exactly the fdata `optimize export --format bolt` writes from the records (which the first test
    // holds to perf2bolt's), and its decision names that form with the records' counts.
    if !require_root() {
        return;
    }
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let (db_path, bin) = (dir.path().join("db"), dir.path().join("layout"));
    std::fs::copy(workloads().join("layout"), &bin).unwrap();
    let bin = bin.canonicalize().unwrap();
    run_ok(loupe().args(["record", "--freq", "4000", "--db"]).arg(&db_path).arg("--").arg(&bin).arg("1500"));
    let bid = BuildId(loupe_optimize::identity::read_build_id(&bin).unwrap());
    let image = ImageId::elf(&bin.display().to_string(), Some(bid.clone()));
    let mut syms = Symbolizer::new(SymbolizerOptions::default());
    let code = syms.code(&image).unwrap();
    let recs = construct(&code, &["main", "run", "mix", "step"]);
    let mut bp = BranchProfile::new(image.clone(), EventName::new("cycles"));
    for r in &recs {
        bp.add(ImageOffset(r.from - 0x400000), ImageOffset(r.to - 0x400000), r.taken, r.mispredicted);
    }
    let db = loupe_store::Database::open(&db_path).unwrap();
    db.merge_branches(db.current_epoch().unwrap(), &[bp]).unwrap();
    let exported =
        String::from_utf8(run_ok(loupe().args(["optimize", "export", "--format", "bolt", "--db"]).arg(&db_path).arg(&bin)).stdout).unwrap();
    let (_, branches) = recs.split_last().unwrap();
    assert!(branches.iter().all(|r| exported.lines().any(|l| l == r.line)), "{exported}");

    let cfg = dir.path().join("optimize.json");
    let conf = serde_json::json!({"min_share": 0.002, "min_samples": 300, "nice": 0,
        "programs": [{"path": bin, "check": "{} 200", "bench": "{} 300", "rounds": 5, "min_gain": 0.0}]});
    std::fs::write(&cfg, conf.to_string()).unwrap();
    let out = run_ok(loupe().args(["optimize", "manage", "--once", "--db"]).arg(&db_path).arg("--config").arg(&cfg));
    let err = String::from_utf8_lossy(&out.stderr);
    let given =
        std::fs::read_to_string(db_path.join(format!("optimize/work/{}.fdata", bid.to_hex()))).unwrap_or_else(|e| panic!("{e}\n{err}"));
    assert_eq!(given, exported);
    let log = std::fs::read_to_string(db_path.join("optimize/decisions.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    let total: u64 = branches.iter().map(|r| r.taken).sum();
    let form = format!("given to BOLT as branch records (LBR): {} branches taken {total} times", branches.len());
    assert!(["installed", "discarded"].contains(&last["action"].as_str().unwrap()), "{log}");
    assert!(last["reason"].as_str().unwrap().contains(&form), "{log}");
}
