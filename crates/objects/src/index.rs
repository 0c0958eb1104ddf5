//! Heap address -> object -> allocation site, from the allocation logs of a
//! record database. Pure over the decoded records (loading is the only IO).

use crate::log::{self, AllocFn, Callers, Record, Source};
use loupe_model::maps::{parse_maps, Mapping};
use loupe_model::ImageOffset;
use std::collections::HashMap;
use std::path::Path;

/// One heap block's life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub pid: u32,
    /// The thread that allocated it.
    pub tid: u32,
    pub base: u64,
    pub size: u64,
    /// Return address of the call into the allocator (runtime address).
    pub site: u64,
    /// Return addresses above the site, when the log kept them (0 past the last).
    pub callers: Callers,
    pub func: AllocFn,
    /// CLOCK_MONOTONIC ns.
    pub alloc_ns: u64,
    /// `None`: still live when the log ended.
    pub free_ns: Option<u64>,
    pub free_tid: Option<u32>,
}

impl Allocation {
    pub fn contains(&self, addr: u64, time_ns: u64) -> bool {
        addr >= self.base && addr - self.base < self.size.max(1) && time_ns >= self.alloc_ns && self.free_ns.is_none_or(|f| time_ns < f)
    }
}

/// An allocation site placed in its image: the file and the file offset of
/// the return address (symbolize `offset - 1` to name the calling line).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteLocation {
    pub path: String,
    pub offset: ImageOffset,
}

/// One process's blocks sorted by base, with the running maximum of their
/// ends so a lookup can stop scanning backwards early.
#[derive(Default)]
struct ProcessBlocks {
    blocks: Vec<Allocation>,
    max_end: Vec<u64>,
    /// (time, mappings) snapshots, oldest first.
    maps: Vec<(u64, Vec<Mapping>)>,
}

/// What loading found besides the allocations, for the caller to report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    pub files: usize,
    pub sources: Vec<Source>,
    pub torn_bytes: usize,
    pub unknown_records: usize,
    /// Frees of blocks the log never saw allocated (allocated before tracking began).
    pub unmatched_frees: usize,
    /// Files that were not allocation logs, with why.
    pub bad_files: Vec<String>,
}

#[derive(Default)]
pub struct AllocationIndex {
    procs: HashMap<u32, ProcessBlocks>,
    pub stats: LoadStats,
}

impl AllocationIndex {
    /// Every `<db_dir>/allocs/*.alog`; a bad file is named in `stats` and
    /// skipped, the rest load. No logs: an empty index.
    pub fn load(db_dir: &Path) -> Result<AllocationIndex, log::Error> {
        let mut records = Vec::new();
        let mut stats = LoadStats::default();
        for f in log::files(db_dir)? {
            match log::read_file(&f) {
                Ok(d) => {
                    stats.files += 1;
                    if !stats.sources.contains(&d.source) {
                        stats.sources.push(d.source);
                    }
                    stats.torn_bytes += d.torn_bytes;
                    stats.unknown_records += d.unknown;
                    records.extend(d.records);
                }
                Err(e) => stats.bad_files.push(e.to_string()),
            }
        }
        let mut idx = AllocationIndex::from_records(records);
        let unmatched = idx.stats.unmatched_frees;
        idx.stats = LoadStats { unmatched_frees: unmatched, ..stats };
        Ok(idx)
    }

    /// Builds the index from records in any order (several files interleave).
    pub fn from_records(mut records: Vec<Record>) -> AllocationIndex {
        records.sort_by_key(|r| match r {
            // Frees before allocs at equal times: a moving realloc frees the old block first.
            Record::Maps { time_ns, .. } => (*time_ns, 0),
            Record::Free { time_ns, .. } => (*time_ns, 1),
            Record::Alloc { time_ns, .. } => (*time_ns, 2),
        });
        let mut procs: HashMap<u32, ProcessBlocks> = HashMap::new();
        // Live blocks per (pid, base): index into that process's block list.
        let mut live: HashMap<(u32, u64), usize> = HashMap::new();
        let mut unmatched = 0;
        for r in records {
            match r {
                Record::Alloc { func, pid, tid, time_ns, base, size, site, callers } => {
                    let p = procs.entry(pid).or_default();
                    let a = Allocation { pid, tid, base, size, site, callers, func, alloc_ns: time_ns, free_ns: None, free_tid: None };
                    // A block allocated again without a free seen: the free was missed; end it here.
                    if let Some(old) = live.insert((pid, base), p.blocks.len()) {
                        p.blocks[old].free_ns.get_or_insert(time_ns);
                    }
                    p.blocks.push(a);
                }
                Record::Free { pid, tid, time_ns, base, .. } => match live.remove(&(pid, base)) {
                    Some(i) => {
                        let b = &mut procs.get_mut(&pid).unwrap().blocks[i];
                        b.free_ns = Some(time_ns);
                        b.free_tid = Some(tid);
                    }
                    None if base != 0 => unmatched += 1,
                    None => {}
                },
                Record::Maps { pid, time_ns, text } => procs.entry(pid).or_default().maps.push((time_ns, parse_maps(&text))),
            }
        }
        for p in procs.values_mut() {
            p.blocks.sort_by_key(|a| (a.base, a.alloc_ns));
            let mut m = 0;
            p.max_end = p
                .blocks
                .iter()
                .map(|a| {
                    // A block may reach the top of the address space (a log says any size): its end saturates.
                    m = m.max(a.base.saturating_add(a.size.max(1)));
                    m
                })
                .collect();
        }
        AllocationIndex { procs, stats: LoadStats { unmatched_frees: unmatched, ..Default::default() } }
    }

    /// The block of process `pid` that held `address` at `time_ns`.
    pub fn lookup(&self, pid: u32, address: u64, time_ns: u64) -> Option<&Allocation> {
        let p = self.procs.get(&pid)?;
        let mut i = p.blocks.partition_point(|a| a.base <= address);
        while i > 0 {
            i -= 1;
            if p.max_end[i] <= address {
                return None;
            }
            if p.blocks[i].contains(address, time_ns) {
                return Some(&p.blocks[i]);
            }
        }
        None
    }

    /// Every allocation, process by process, by base then time.
    pub fn allocations(&self) -> impl Iterator<Item = &Allocation> {
        self.procs.values().flat_map(|p| p.blocks.iter())
    }

    pub fn is_empty(&self) -> bool {
        self.procs.values().all(|p| p.blocks.is_empty())
    }

    /// The image and file offset of an allocation's site, from the maps
    /// snapshot of its process nearest before the allocation (else any).
    pub fn site_location(&self, a: &Allocation) -> Option<SiteLocation> {
        self.locate(a.pid, a.site, a.alloc_ns)
    }

    /// The image and file offset of any code address of process `pid` at a time.
    pub fn locate(&self, pid: u32, addr: u64, time_ns: u64) -> Option<SiteLocation> {
        locate(&self.procs.get(&pid)?.maps, addr, time_ns)
    }
}

fn locate(snapshots: &[(u64, Vec<Mapping>)], addr: u64, time_ns: u64) -> Option<SiteLocation> {
    let before = snapshots.iter().rev().filter(|(t, _)| *t <= time_ns);
    let after = snapshots.iter().filter(|(t, _)| *t > time_ns);
    before.chain(after).find_map(|(_, maps)| {
        let m = maps.iter().find(|m| addr >= m.start && addr < m.end && m.path.starts_with('/'))?;
        Some(SiteLocation { path: m.path.clone(), offset: ImageOffset((addr - m.start).checked_add(m.pgoff)?) })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(time_ns: u64, base: u64, size: u64, site: u64) -> Record {
        Record::Alloc { func: AllocFn::Malloc, pid: 1, tid: 2, time_ns, base, size, site, callers: [0; log::CALLERS] }
    }
    fn free(time_ns: u64, base: u64) -> Record {
        Record::Free { func: AllocFn::Free, pid: 1, tid: 3, time_ns, base }
    }

    #[test]
    fn finds_the_block_live_at_the_time_among_reuses_of_one_address() {
        // Checks address reuse: 0x1000 holds a 64-byte block in [10,20) and a 16-byte block from 30 on.
        let idx = AllocationIndex::from_records(vec![alloc(10, 0x1000, 64, 0xa), free(20, 0x1000), alloc(30, 0x1000, 16, 0xb)]);
        assert_eq!(idx.lookup(1, 0x1020, 15).map(|a| a.site), Some(0xa));
        assert_eq!(idx.lookup(1, 0x1020, 25), None, "freed, not yet reused");
        assert_eq!(idx.lookup(1, 0x1020, 35), None, "past the end of the 16-byte block");
        assert_eq!(idx.lookup(1, 0x1008, 35).map(|a| (a.site, a.free_ns)), Some((0xb, None)));
        assert_eq!(idx.lookup(2, 0x1008, 35), None, "another process");
        assert_eq!(idx.lookup(1, 0x1020, 15).unwrap().free_tid, Some(3));
    }

    #[test]
    fn scans_back_past_small_blocks_to_a_large_one_that_covers_the_address() {
        // Checks the running-max early stop: a 4 KiB block at 0x1000 contains 0x1800 although two small blocks start in between.
        let idx = AllocationIndex::from_records(vec![alloc(1, 0x1000, 4096, 0xa), alloc(2, 0x1100, 16, 0xb), alloc(3, 0x1200, 16, 0xc)]);
        assert_eq!(idx.lookup(1, 0x1800, 5).map(|a| a.site), Some(0xa));
        assert_eq!(idx.lookup(1, 0x1204, 5).map(|a| a.site), Some(0xc));
        assert_eq!(idx.lookup(1, 0x3000, 5), None);
    }

    #[test]
    fn a_moving_realloc_frees_then_allocates_at_the_same_time() {
        // Checks the equal-time ordering: the old block ends at 50, the new one starts at 50, out-of-order input.
        let idx = AllocationIndex::from_records(vec![alloc(50, 0x2000, 128, 0xc), free(50, 0x1000), alloc(10, 0x1000, 64, 0xa)]);
        assert_eq!(idx.lookup(1, 0x1000, 50), None);
        assert_eq!(idx.lookup(1, 0x2000, 50).map(|a| a.site), Some(0xc));
        assert_eq!(idx.stats.unmatched_frees, 0);
    }

    #[test]
    fn counts_frees_of_blocks_allocated_before_tracking() {
        // Checks that a free with no alloc is counted, and free(NULL) is not.
        let idx = AllocationIndex::from_records(vec![free(5, 0x9000), free(6, 0)]);
        assert_eq!(idx.stats.unmatched_frees, 1);
        assert!(idx.is_empty());
    }

    #[test]
    fn block_reaching_the_top_of_the_address_space_ends_there() {
        // Checks a logged block whose base + size passes 2^64 (fuzz target alloc_log): its end saturates instead of
        // overflowing, and it is still found.
        let idx = AllocationIndex::from_records(vec![alloc(10, u64::MAX - 15, 64, 0xa), alloc(11, 0x1000, 16, 0xb)]);
        assert_eq!(idx.lookup(1, u64::MAX - 1, 15).map(|a| a.site), Some(0xa));
        assert_eq!(idx.lookup(1, 0x1008, 15).map(|a| a.site), Some(0xb));
        assert_eq!(idx.lookup(1, u64::MAX - 16, 15), None);
    }

    #[test]
    fn site_in_a_mapping_whose_file_offset_overflows_has_no_location() {
        // Checks a maps line with pgoff near 2^64 (review of the alloc_log target): no location rather than a wrapped offset.
        let maps = "55001000-55003000 r-xp fffffffffffff000 08:01 1 /bin/x\n";
        let idx =
            AllocationIndex::from_records(vec![Record::Maps { pid: 1, time_ns: 1, text: maps.into() }, alloc(10, 0x1000, 8, 0x55002234)]);
        let a = idx.lookup(1, 0x1000, 10).unwrap();
        assert_eq!(idx.site_location(a), None);
    }

    #[test]
    fn places_a_site_in_its_image_by_the_maps_snapshot() {
        // Checks file offset = addr - start + pgoff for a site in the second mapping of /bin/x.
        let maps = "55000000-55001000 r--p 00000000 08:01 1 /bin/x\n55001000-55003000 r-xp 00001000 08:01 1 /bin/x\n";
        let idx =
            AllocationIndex::from_records(vec![Record::Maps { pid: 1, time_ns: 1, text: maps.into() }, alloc(10, 0x1000, 8, 0x55001234)]);
        let a = idx.lookup(1, 0x1000, 10).unwrap();
        assert_eq!(idx.site_location(a), Some(SiteLocation { path: "/bin/x".into(), offset: ImageOffset(0x1234) }));
    }
}
