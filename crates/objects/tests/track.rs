//! Allocation tracking against a workload that prints every block it
//! allocated and freed (testdata/workloads/allocs.cc): the log must hold
//! exactly those blocks, with their sizes, threads, allocating functions
//! and freeing threads.

mod common;

use loupe_objects::{AllocTracker, AllocationIndex, SiteNamer, TrackerOptions};
use loupe_perf::GatedChild;
use loupe_symbolize::{Symbolizer, SymbolizerOptions};
use std::collections::BTreeMap;

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

#[test]
fn uprobe_log_holds_exactly_the_blocks_the_workload_reports() {
    // Checks base, size, thread, allocating function and freeing thread of 1,201 blocks (malloc, calloc, realloc, new, new[]) against the workload's own print-out.
    if !common::require_root() {
        return;
    }
    let exe = common::workloads().join("allocs");
    let db = tempfile::tempdir().unwrap();
    let out = db.path().join("tally.txt");
    let mut child = GatedChild::spawn(exe.to_str().unwrap(), &["200".into(), out.to_str().unwrap().into()]).unwrap();
    let tracker = AllocTracker::start(db.path(), &[child.pid as u32], &TrackerOptions::default()).unwrap();
    child.release().unwrap();
    assert_eq!(child.wait().unwrap(), 0);
    let summary = tracker.stop().unwrap();
    assert_eq!(summary.dropped, 0);

    let (want_allocs, want_frees) = expected(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(want_allocs.values().sum::<usize>(), 200 * 6 + 1);
    let idx = AllocationIndex::load(db.path()).unwrap();
    let mut namer = SiteNamer::new(Symbolizer::new(SymbolizerOptions::default()));
    let exe_path = exe.canonicalize().unwrap().to_string_lossy().into_owned();
    let (mut got_allocs, mut got_frees) = (Multiset::new(), Multiset::new());
    for a in idx.allocations() {
        let Some(loc) = idx.site_location(a) else { continue };
        // Only the workload's own call sites: the C library and C++ runtime allocate for themselves too.
        if loc.path != exe_path {
            continue;
        }
        let func = namer.name(&loc).map(|s| s.procedure).unwrap_or_else(|r| format!("?{r}"));
        add(&mut got_allocs, format!("{func} {} {:#x} {}", a.size, a.base, a.tid));
        if let (Some(_), Some(t)) = (a.free_ns, a.free_tid) {
            assert!(a.free_ns.unwrap() >= a.alloc_ns);
            add(&mut got_frees, format!("{:#x} {t}", a.base));
        }
    }
    assert_eq!(got_allocs, want_allocs);
    // Every block the workload reports freeing was freed in the log by that thread (worker blocks are freed by main).
    assert_eq!(got_frees, want_frees);
}
