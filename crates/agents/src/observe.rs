//! What agents see of a process: sampled data accesses (Loupe's data
//! profiler: timer samples with the data address by instruction
//! interpretation, or a memory-sampling PMU where one exists), its
//! anonymous mappings, page-fault and context-switch rates.

use crate::error::{Error, ErrorKind, Result};
use loupe_dataprof::log::{AccessRecord, Status};
use loupe_dataprof::recorder::Recorder;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Samples the data accesses of threads `tids` for `window` at `freq_hz`;
/// returns the samples whose address is known, and the number taken.
/// Each thread gets its own events (a per-task event follows one thread).
pub fn sample_accesses(
    scratch: &Path,
    tids: &[u32],
    window: Duration,
    freq_hz: u64,
    stop: &AtomicBool,
) -> Result<(Vec<AccessRecord>, u64)> {
    let bad = |what: String, e: &dyn std::fmt::Display| Error::new(ErrorKind::Observe, format!("{what}: {e}"));
    let mut recs = Vec::new();
    for &tid in tids {
        let dir = scratch.join(tid.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        loupe_files::create_dir_all(&dir).map_err(|e| bad(format!("creating {}", dir.display()), &e))?;
        let r = Recorder::open(&dir, Some(tid as i32), freq_hz, true).map_err(|e| bad(format!("sampling thread {tid}"), &e))?;
        r.enable().map_err(|e| bad(format!("sampling thread {tid}"), &e))?;
        recs.push((dir, r));
    }
    let end = Instant::now() + window;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        for (_, r) in recs.iter_mut() {
            r.pump(Duration::from_millis(20)).map_err(|e| bad("reading samples".into(), &e))?;
        }
    }
    let mut out = Vec::new();
    let mut taken = 0;
    for (dir, r) in recs {
        let s = r.finish().map_err(|e| bad("finishing the samples".into(), &e))?;
        taken += s.samples;
        let all = loupe_dataprof::log::read(&dir).map_err(|e| bad(format!("reading {}", dir.display()), &e))?;
        out.extend(all.into_iter().filter(|a| a.status == Status::Ok && a.has_addr()));
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok((out, taken))
}

/// One anonymous, private, writable mapping (heap and `mmap` memory): what
/// huge pages can back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AnonRange {
    pub start: u64,
    pub end: u64,
}

/// The anonymous private writable mappings of a /proc/PID/maps text
/// (stacks left out: they grow down and are per thread).
pub fn anon_ranges(maps: &str) -> Vec<AnonRange> {
    maps.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (range, perms) = (f.first()?, f.get(1)?);
            let name = f.get(5).copied().unwrap_or("");
            if !perms.starts_with("rw") || !perms.ends_with('p') || !(name.is_empty() || name == "[heap]") {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            Some(AnonRange { start: u64::from_str_radix(a, 16).ok()?, end: u64::from_str_radix(b, 16).ok()? })
        })
        .collect()
}

/// Chao1's estimate of how many distinct items a population holds from a
/// sample's counts per item: d + f1² / (2 f2) (bias-corrected when no item
/// was seen twice). DProf's working-set estimate (dataprof.md).
pub fn chao1(counts: impl IntoIterator<Item = u64>) -> f64 {
    let (mut d, mut f1, mut f2) = (0.0, 0.0, 0.0);
    for c in counts {
        d += 1.0;
        f1 += (c == 1) as u8 as f64;
        f2 += (c == 2) as u8 as f64;
    }
    if f2 > 0.0 {
        d + f1 * f1 / (2.0 * f2)
    } else {
        d + f1 * (f1 - 1.0) / 2.0
    }
}

/// Minor + major page faults of a /proc/PID/stat line (fields 10 and 12).
pub fn faults_of(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(7)?.parse::<u64>().ok()? + f.get(9)?.parse::<u64>().ok()?)
}

pub fn faults(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| faults_of(&s)).unwrap_or(0)
}

/// `AnonHugePages` of /proc/PID/smaps_rollup, bytes.
pub fn anon_huge_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Heap and nameless private writable mappings count; files, stacks, shared and read-only ones do not.
    #[test]
    fn anonymous_ranges_from_maps() {
        let maps = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0040000000 rw-p 00000000 00:00 0 
7f0040000000-7f0040001000 r--p 00000000 00:00 0 
7f0050000000-7f0050100000 rw-s 00000000 00:01 5                          /dev/zero (deleted)
7f0060000000-7f0060001000 rw-p 00002000 08:01 123                        /usr/lib/libc.so.6
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";
        let got = anon_ranges(maps);
        assert_eq!(
            got,
            vec![AnonRange { start: 0x55d0c0000000, end: 0x55d0c0021000 }, AnonRange { start: 0x7f0000000000, end: 0x7f0040000000 }]
        );
    }

    // Chao1: every item seen twice means all were seen; singletons imply unseen items.
    #[test]
    fn chao1_estimates() {
        assert_eq!(chao1([2, 2, 2]), 3.0);
        assert_eq!(chao1([1, 1, 2, 2]), 4.0 + 1.0);
        assert_eq!(chao1([1, 1, 1]), 3.0 + 3.0);
        assert_eq!(chao1([]), 0.0);
    }

    // Fields 10 (minflt) and 12 (majflt) after a comm with spaces.
    #[test]
    fn faults_from_stat() {
        let line = "42 (a b) S 1 42 42 0 -1 4194304 100 0 5 0 7 3 0 0 20 0 1 0 12345";
        assert_eq!(faults_of(line), Some(105));
    }
}
