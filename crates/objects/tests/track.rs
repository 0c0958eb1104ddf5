//! Allocation tracking against a workload that prints every block it
//! allocated and freed (testdata/workloads/allocs.cc): the log, written by
//! the uprobes or by the LD_PRELOAD shim, must hold exactly those blocks,
//! with their sizes, threads, allocating functions and freeing threads.

mod common;

use loupe_objects::{preload, AllocTracker, AllocationIndex, SiteNamer, Source, TrackerOptions};
use loupe_perf::GatedChild;
use loupe_symbolize::{Symbolizer, SymbolizerOptions};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type Multiset = BTreeMap<String, usize>;

fn add(m: &mut Multiset, k: String) {
    *m.entry(k).or_default() += 1;
}

/// The workload's own tally: `A func size addr tid` and `F addr tid` lines.
fn expected(out: &str) -> (Multiset, Multiset) {
    let (mut allocs, mut frees) = (Multiset::new(), Multiset::new());
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        match f.as_slice() {
            ["A", func, size, addr, tid] => add(&mut allocs, format!("{func} {size} {:#x} {tid}", hex(addr))),
            ["F", addr, tid] => add(&mut frees, format!("{:#x} {tid}", hex(addr))),
            _ => panic!("unexpected workload line {l:?}"),
        }
    }
    (allocs, frees)
}

/// The same tally from the log: blocks whose site lies in the workload
/// itself (the C library and C++ runtime allocate for themselves too).
fn logged(db: &Path, exe: &Path) -> (Multiset, Multiset, Vec<Source>) {
    let idx = AllocationIndex::load(db).unwrap();
    assert!(idx.stats.bad_files.is_empty(), "{:?}", idx.stats.bad_files);
    let mut namer = SiteNamer::new(Symbolizer::new(SymbolizerOptions::default()));
    let exe_path = exe.canonicalize().unwrap().to_string_lossy().into_owned();
    let (mut allocs, mut frees) = (Multiset::new(), Multiset::new());
    for a in idx.allocations() {
        let Some(loc) = idx.site_location(a).filter(|l| l.path == exe_path) else { continue };
        let func = namer.name(&loc).map(|s| s.procedure).unwrap_or_else(|r| format!("?{r}"));
        add(&mut allocs, format!("{func} {} {:#x} {}", a.size, a.base, a.tid));
        if let (Some(t), Some(tid)) = (a.free_ns, a.free_tid) {
            assert!(t >= a.alloc_ns, "freed before allocated: {a:?}");
            add(&mut frees, format!("{:#x} {tid}", a.base));
        }
    }
    (allocs, frees, idx.stats.sources.clone())
}

fn check(db: &Path, exe: &Path, tally: &Path, source: Source) {
    let (want_allocs, want_frees) = expected(&std::fs::read_to_string(tally).unwrap());
    assert_eq!(want_allocs.values().sum::<usize>(), 200 * 6 + 1);
    let (got_allocs, got_frees, sources) = logged(db, exe);
    assert_eq!(sources, vec![source]);
    assert_eq!(got_allocs, want_allocs);
    // Every block the workload reports freeing was freed in the log by that thread (worker blocks are freed by main).
    assert_eq!(got_frees, want_frees);
}

#[test]
fn uprobe_log_holds_exactly_the_blocks_the_workload_reports() {
    // Checks base, size, thread, allocating function and freeing thread of 1,201 blocks (malloc, calloc, realloc, new, new[]) against the workload's own print-out.
    if !common::require_root() {
        return;
    }
    let exe = common::workloads().join("allocs");
    let db = tempfile::tempdir().unwrap();
    let tally = db.path().join("tally.txt");
    let mut child = GatedChild::spawn(exe.to_str().unwrap(), &["200".into(), tally.to_str().unwrap().into()]).unwrap();
    let tracker = AllocTracker::start(db.path(), &[child.pid as u32], &TrackerOptions::default()).unwrap();
    child.release().unwrap();
    assert_eq!(child.wait().unwrap(), 0);
    assert_eq!(tracker.stop().unwrap().dropped, 0);
    check(db.path(), &exe, &tally, Source::Uprobes);
}

#[test]
fn sites_of_a_workload_that_exits_before_the_reader_runs_are_kept() {
    // Regression: maps were read from /proc only when the reader first saw a process's event, so a workload that had exited by then lost every allocation site (an empty log under load); the reader here starts only after the workload is reaped.
    if !common::require_root() {
        return;
    }
    let exe = common::workloads().join("allocs");
    let db = tempfile::tempdir().unwrap();
    let tally = db.path().join("tally.txt");
    let gate = Arc::new(AtomicBool::new(false));
    let opts = TrackerOptions { reader_gate: Some(Arc::clone(&gate)), ..Default::default() };
    let mut child = GatedChild::spawn(exe.to_str().unwrap(), &["200".into(), tally.to_str().unwrap().into()]).unwrap();
    let pid = child.pid;
    let tracker = AllocTracker::start(db.path(), &[pid as u32], &opts).unwrap();
    child.release().unwrap();
    assert_eq!(child.wait().unwrap(), 0);
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "the workload is reaped: its maps are gone");
    gate.store(true, Ordering::Release);
    assert_eq!(tracker.stop().unwrap().dropped, 0);
    check(db.path(), &exe, &tally, Source::Uprobes);
}

#[test]
fn preload_shim_log_holds_exactly_the_blocks_the_workload_reports() {
    // Checks the same 1,201 blocks through the LD_PRELOAD shim (no privileges needed).
    let exe = common::workloads().join("allocs");
    let db = tempfile::tempdir().unwrap();
    let tally = db.path().join("tally.txt");
    let env = preload::install(db.path()).unwrap();
    let st = std::process::Command::new(&exe).arg("200").arg(&tally).envs(env.vars).status().unwrap();
    assert!(st.success());
    check(db.path(), &exe, &tally, Source::Preload);
}

#[test]
fn preload_shim_keeps_the_callers_above_a_wrapped_allocation() {
    // Checks the shim's callers for dtypes' rec_a and rec_b blocks (16 and 24 bytes, from make_a/make_b through xmalloc -> xalloc, -O1 and -O2): the site is in xalloc, then xmalloc, then make_a or make_b, then main.
    for exe in ["dtypes-O1", "dtypes-O2"] {
        let exe = common::workloads().join(exe);
        let db = tempfile::tempdir().unwrap();
        let env = preload::install(db.path()).unwrap();
        let st = std::process::Command::new(&exe).args(["0.01", "wrap"]).envs(env.vars).status().unwrap();
        assert!(st.success());
        let idx = AllocationIndex::load(db.path()).unwrap();
        let mut namer = SiteNamer::new(Symbolizer::new(SymbolizerOptions::default()));
        let mut name = |pid: u32, addr: u64| -> String {
            idx.locate(pid, addr, u64::MAX).and_then(|l| namer.name(&l).ok()).map_or_else(|| format!("{addr:#x}"), |s| s.procedure)
        };
        let mut chains: Vec<(u64, Vec<String>)> = idx
            .allocations()
            .filter(|a| a.size == 16 || a.size == 24)
            .map(|a| (a.size, std::iter::once(a.site).chain(a.callers.iter().copied().take(3)).map(|pc| name(a.pid, pc)).collect()))
            .collect();
        chains.sort();
        let want = |f: &str| vec!["xalloc".to_string(), "xmalloc".into(), f.into(), "main".into()];
        assert_eq!(chains, vec![(16, want("make_a")), (24, want("make_b"))], "{}", exe.display());
    }
}
