//! An allocation log file (`loupe_objects::log::decode`), as the LD_PRELOAD shim
//! of any traced process may write it, then the allocation index built from its
//! records and asked about every block, site and a few addresses around them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loupe_objects::log::{decode, Record};
use loupe_objects::AllocationIndex;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = decode(data) else { return };
    assert!(d.torn_bytes <= data.len());
    let probes: Vec<(u32, u64, u64)> = d
        .records
        .iter()
        .filter_map(|r| match *r {
            Record::Alloc { pid, time_ns, base, size, site, .. } => {
                Some([(pid, base, time_ns), (pid, base.wrapping_add(size), time_ns), (pid, site, time_ns)])
            }
            Record::Free { pid, time_ns, base, .. } => Some([(pid, base, time_ns); 3]),
            Record::Maps { .. } => None,
        })
        .flatten()
        .collect();
    let idx = AllocationIndex::from_records(d.records);
    for a in idx.allocations() {
        let _ = idx.site_location(a);
    }
    for (pid, addr, time) in probes {
        for t in [time, time.wrapping_sub(1), time.wrapping_add(1)] {
            let _ = idx.lookup(pid, addr, t);
            let _ = idx.locate(pid, addr, t);
        }
    }
});
