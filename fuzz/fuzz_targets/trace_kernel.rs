//! The trace recorder's kernel records: perf samples of page faults, tracepoints
//! and the profiler (`loupe_trace::kernel::sample::parse`, raw tracepoint fields
//! at offsets the first bytes pick, as tracefs format files give them), and the
//! block-I/O eBPF program's ring records (`kernel::block_bpf::parse`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_trace::kernel::sample::{parse, Source};
use loupe_trace::kernel::tracefs::{Field, Tracepoint};
use std::collections::HashMap;

fuzz_target!(|data: &[u8]| {
    let _ = loupe_trace::kernel::block_bpf::parse(data);
    let Some((layout, rec)) = data.split_at_checked(10) else { return };
    // Five fields, each an offset (0..64) and a size (1..16), the largest any of the tracepoints has.
    let fields: Vec<Field> = layout.chunks(2).map(|c| Field { offset: (c[0] % 64) as usize, size: 1 + (c[1] % 16) as usize }).collect();
    let tp = |n: usize| Tracepoint { id: 0, fields: fields[..n].to_vec() };
    let sources = HashMap::from([
        (1, Source::Fault),
        (2, Source::Switch(tp(4))),
        (3, Source::Syscall(tp(1))),
        (4, Source::BlockIssue(tp(5))),
        (5, Source::BlockComplete(tp(4))),
        (6, Source::Sample),
    ]);
    let _ = parse(rec, &sources);
});
