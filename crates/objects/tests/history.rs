//! Object access histories and the data flow view against the
//! producer/consumer queue (testdata/workloads/queue.c), whose accesses
//! per message are known by construction: which function touches which
//! offset, how often, on which CPU (its threads are pinned).

mod common;

use loupe_objects::flow::{flow, steps};
use loupe_objects::history::{self, HistoryOptions, Line};
use loupe_objects::{AllocTracker, AllocationIndex, SiteNamer, TrackerOptions};
use loupe_perf::GatedChild;
use loupe_symbolize::{Symbolizer, SymbolizerOptions};
use std::collections::BTreeMap;
use std::time::Duration;

#[test]
fn queue_messages_move_from_cpu0_to_cpu1_between_enqueue_and_dequeue() {
    // Checks every watched message: exact per-function, per-offset access counts and CPUs, and that the only CPU change is enqueue -> dequeue.
    if !common::require_root() {
        return;
    }
    let exe = common::workloads().join("queue");
    let db = tempfile::tempdir().unwrap();
    let mut child = GatedChild::spawn(exe.to_str().unwrap(), &["50000".into()]).unwrap();
    let opts = HistoryOptions {
        site_function: Some("make_msg".into()),
        size: Some(64),
        offsets: vec![(0, 8), (8, 8), (16, 8), (24, 8)],
        max_objects: 8,
        budget: 0.5,
        max_watch: Duration::from_secs(1),
    };
    let tracker =
        AllocTracker::start(db.path(), &[child.pid as u32], &TrackerOptions { history: Some(opts), ..Default::default() }).unwrap();
    let t0 = std::time::Instant::now();
    child.release().unwrap();
    let st = child.wait();
    eprintln!("workload ran {:?}", t0.elapsed());
    assert_eq!(st.unwrap(), 0, "the workload checks its own checksum and pinning");
    let summary = tracker.stop().unwrap();
    eprintln!("stopped after {:?}: {summary:?}", t0.elapsed());
    assert!(summary.history_errors.is_empty(), "{:?}", summary.history_errors);

    let (histories, hit_ns) = history::read(db.path()).unwrap();
    assert!(hit_ns.is_some());
    let idx = AllocationIndex::load(db.path()).unwrap();
    let mut namer = SiteNamer::new(Symbolizer::new(SymbolizerOptions::default()));
    let mut name = |pid: u32, addr: u64| -> String {
        // Histories are named with the maps of the allocation log (the process has exited).
        idx.locate(pid, addr, u64::MAX).and_then(|l| namer.name(&l).ok()).map_or_else(|| format!("{addr:#x}"), |s| s.procedure)
    };
    let freed: Vec<_> = histories.iter().filter(|h| matches!(&h.end, Some(Line::End { why, .. }) if why == "freed")).collect();
    assert!(freed.len() >= 3, "only {} of {} histories ran to the free", freed.len(), histories.len());
    for h in &freed {
        let path: Vec<(String, u32, Vec<u64>, u64)> =
            steps(h, &mut name).into_iter().map(|s| (s.function, s.cpu, s.offsets, s.accesses)).collect();
        let want = vec![
            ("alloc make_msg".to_string(), 0, vec![], 0),
            ("fill_msg".to_string(), 0, vec![0, 8], 2),
            ("enqueue".to_string(), 0, vec![16], 1),
            ("dequeue".to_string(), 1, vec![16, 24], 2),
            ("consume".to_string(), 1, vec![0, 8], 2),
            ("free release_msg".to_string(), 1, vec![], 0),
        ];
        assert_eq!(path, want, "history {:?}", h.object);
        // Per offset: 2, 2, 2 and 1 accesses, as the workload is written.
        let mut per_offset: BTreeMap<u64, usize> = BTreeMap::new();
        for l in &h.hits {
            if let Line::Hit { offset, .. } = l {
                *per_offset.entry(*offset).or_default() += 1;
            }
        }
        assert_eq!(per_offset, BTreeMap::from([(0, 2), (8, 2), (16, 2), (24, 1)]));
    }
    let f = flow(&freed.into_iter().cloned().collect::<Vec<_>>(), &mut name);
    let moved: Vec<(&str, &str)> = f.edges.iter().filter(|e| e.cpu_changes > 0).map(|e| (e.from.as_str(), e.to.as_str())).collect();
    assert_eq!(moved, vec![("enqueue", "dequeue")]);
    assert_eq!(f.paths.len(), 1);
}
