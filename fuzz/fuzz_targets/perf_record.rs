//! One perf ring-buffer record (header included) through `loupe_perf::sample::parse_sample`
//! and `loupe_perf::record::parse`, under formats the first 40 bytes pick
//! (`sample_type`, `read_format`, `branch_sample_type`, the user and interrupt
//! register masks; a second event adds a branch stack): what a kernel, or a
//! process sharing the ring, could hand the collector. Never a panic; the
//! borrowed parts lie inside the record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_perf::record::parse;
use loupe_perf::sample::{parse_sample, Format, Layout};
use loupe_perf::sys;

fuzz_target!(|data: &[u8]| {
    let Some((head, rec)) = data.split_at_checked(40) else { return };
    let w = |i: usize| u64::from_ne_bytes(head[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    let format = Format { sample_type: w(0), read_format: w(1), branch_sample_type: w(2), regs_user: w(3), regs_intr: w(4) };
    let branches = Format { sample_type: format.sample_type | sys::SAMPLE_BRANCH_STACK, ..format };
    let layout = Layout { format, per_event: vec![(1, branches)], ids: vec![(1, 0), (2, 1)] };
    if let Ok(s) = parse_sample(&layout, rec) {
        assert!(s.callchain.map_or(0, |c| c.len()) * 8 <= rec.len());
        assert!(s.branches.map_or(0, |b| b.len()) * 24 <= rec.len());
        assert!(s.stack_user.map_or(0, |u| u.valid().len()) <= rec.len());
        assert!(s.raw.map_or(0, |r| r.len()) + s.aux.map_or(0, |a| a.len()) <= rec.len());
    }
    let _ = parse(rec, &layout);
});
