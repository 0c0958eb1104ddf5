//! One perf ring-buffer record (header included) through `loupe_perf::record::parse`,
//! under a layout the first byte picks: what a kernel, or a process that shares
//! the ring, could hand the collector. Never a panic; nothing it returns is
//! larger than the record it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_perf::record::{parse, Layout, Record};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rec)) = data.split_first() else { return };
    let layout = Layout {
        callchain: flags & 1 != 0,
        user_stack: flags & 2 != 0,
        ids: vec![(1, 0), (2, 1)],
        branch_events: [(4, 0), (8, 1)].into_iter().filter(|(bit, _)| flags & bit != 0).map(|(_, e)| e).collect(),
    };
    if let Some(Record::Sample(s)) = parse(rec, &layout) {
        assert!(s.callchain.len() * 8 <= rec.len());
        assert!(s.branches.len() * 24 <= rec.len());
        assert!(s.user_stack.len() <= rec.len());
    }
});
