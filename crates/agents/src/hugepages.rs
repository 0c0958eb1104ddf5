//! The large-page agent (PEM's example agent; TCMalloc's Temeraire does the
//! same inside one allocator). A process whose sampled data accesses touch
//! more distinct 4 KiB pages than the TLB maps (the working-set view), or
//! that faults pages in fast or misses the dTLB often (where a PMU counts
//! it), gets the 2 MiB blocks its samples fell in —
//! not its whole address space — collapsed into huge pages with
//! `process_madvise(MADV_COLLAPSE)`.
//!
//! The way back: `process_madvise(MADV_COLD)` over each huge page less its
//! last base page. On a range that covers part of a PMD-mapped huge page the
//! kernel splits the page (keeping its contents) before deactivating the
//! base pages, so the process is back on 4 KiB mappings; the pages are also
//! marked inactive, which only matters where there is swap. Under
//! `madvise` THP mode khugepaged never collapses them again, since the
//! program never asked for huge pages.

use crate::error::{Error, ErrorKind, Result};
use crate::observe::{self, AnonRange};
use crate::sys::{self, HUGE, PAGE};
use crate::target::Target;
use crate::{Action, Agent, Observation, Proposal};
use loupe_perf::counting::{per_kilo, ThreadCounter, Unavailable};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// When to act and how much.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Settings {
    /// Estimated distinct 4 KiB pages above which translations miss the TLB
    /// (2048 pages = 8 MiB; a second-level TLB of 1536-2048 entries maps 6-8 MiB).
    pub min_pages: f64,
    /// Page faults per second above which a process is a candidate too.
    pub min_faults_per_s: f64,
    /// dTLB load misses per thousand instructions above which a process is a
    /// candidate too (counted where a PMU exists; page faults stand in
    /// where none does).
    pub min_dtlb_per_kilo: f64,
    /// Fewer sampled addresses than this say nothing.
    pub min_samples: usize,
    /// Unsampled blocks between two sampled ones of one mapping are collapsed
    /// too when no more than this many (samples are sparse).
    pub gap_blocks: u64,
    /// At most this many bytes collapsed per process.
    pub max_bytes: u64,
    pub observe: Duration,
    pub freq_hz: u64,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            min_pages: 2048.0,
            min_faults_per_s: 5000.0,
            min_dtlb_per_kilo: 2.0,
            min_samples: 32,
            gap_blocks: 4,
            max_bytes: 16 << 30,
            observe: Duration::from_secs(1),
            freq_hz: 2000,
        }
    }
}

/// The process's dTLB load misses and instructions over the observation,
/// or why they cannot be counted here (no PMU: the page-fault rate stands in).
struct TlbCount(std::result::Result<(ThreadCounter, ThreadCounter), Unavailable>);

impl TlbCount {
    fn start(tids: &[u32]) -> TlbCount {
        TlbCount(ThreadCounter::open("dTLB-load-misses", tids).and_then(|m| Ok((m, ThreadCounter::open("instructions", tids)?))))
    }

    /// Misses per 1000 instructions, and the evidence to log.
    fn finish(self) -> (Option<f64>, Value) {
        match self.0 {
            Ok((misses, instructions)) => {
                let (m, i) = (misses.read(), instructions.read());
                let per_kilo = per_kilo(m, i);
                (per_kilo, json!({"misses": m, "instructions": i, "per_kilo_instructions": per_kilo}))
            }
            Err(Unavailable(why)) => (None, json!({"unavailable": format!("{why}; page faults per second used instead")})),
        }
    }
}

pub struct HugePages {
    pub settings: Settings,
    scratch: PathBuf,
}

impl HugePages {
    pub fn new(scratch: PathBuf) -> HugePages {
        HugePages { settings: Settings::default(), scratch }
    }
}

/// What the samples say of a process's pages.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PageView {
    /// Samples with an address in an anonymous mapping.
    pub samples: usize,
    pub distinct_pages: usize,
    /// Chao1 over the 4 KiB pages sampled.
    pub estimated_pages: f64,
    /// Sampled 2 MiB blocks: block start, samples.
    pub blocks: BTreeMap<u64, u64>,
}

/// Counts the sampled addresses that fall in `ranges` by page and block.
pub fn page_view(addrs: &[u64], ranges: &[AnonRange]) -> PageView {
    let mut pages: BTreeMap<u64, u64> = BTreeMap::new();
    let mut v = PageView::default();
    for &a in addrs.iter().filter(|&&a| ranges.iter().any(|r| r.start <= a && a < r.end)) {
        v.samples += 1;
        *pages.entry(a / PAGE).or_default() += 1;
        *v.blocks.entry(a & !(HUGE - 1)).or_default() += 1;
    }
    v.distinct_pages = pages.len();
    v.estimated_pages = observe::chao1(pages.values().copied());
    // DProf's rule (dataprof.md): 32 or more samples of which at most 1% repeat a page cannot bound the use
    // below the mappings they fell in, so those count whole.
    if v.samples >= 32 && (v.samples - v.distinct_pages) * 100 <= v.samples {
        let whole: u64 =
            ranges.iter().filter(|r| v.blocks.keys().any(|&b| b + HUGE > r.start && b < r.end)).map(|r| (r.end - r.start) / PAGE).sum();
        v.estimated_pages = v.estimated_pages.max(whole as f64);
    }
    v
}

/// The ranges to collapse: runs of sampled 2 MiB blocks (gaps of up to
/// `gap` blocks filled) lying wholly inside one anonymous mapping, densest
/// runs first up to `max_bytes`, returned in address order.
pub fn choose_ranges(blocks: &BTreeMap<u64, u64>, ranges: &[AnonRange], gap: u64, max_bytes: u64) -> Vec<(u64, u64, u64)> {
    let mut runs: Vec<(u64, u64, u64)> = Vec::new(); // start, end, samples
    for r in ranges {
        let (lo, hi) = (r.start.next_multiple_of(HUGE), r.end & !(HUGE - 1));
        if lo >= hi {
            // No whole 2 MiB block inside (regression: a 1 MiB mapping panicked the range query).
            continue;
        }
        for (&b, &n) in blocks.range(lo..hi) {
            match runs.last_mut() {
                Some(last) if last.1 >= lo && b <= last.1 + gap * HUGE => {
                    last.1 = b + HUGE;
                    last.2 += n;
                }
                _ => runs.push((b, b + HUGE, n)),
            }
        }
    }
    runs.sort_by(|a, b| ((b.2 as f64) / (b.1 - b.0) as f64).total_cmp(&((a.2 as f64) / (a.1 - a.0) as f64)));
    let mut total = 0;
    let mut out: Vec<(u64, u64, u64)> = runs
        .into_iter()
        .filter(|r| {
            let fits = total + (r.1 - r.0) <= max_bytes;
            if fits {
                total += r.1 - r.0;
            }
            fits
        })
        .collect();
    out.sort();
    out
}

impl Agent for HugePages {
    fn name(&self) -> &'static str {
        "hugepages"
    }

    fn unavailable(&self) -> Option<String> {
        sys::collapse_unavailable()
    }

    fn before_after(&self) -> bool {
        true
    }

    fn observe(&mut self, t: &Target, stop: &AtomicBool) -> Result<Observation> {
        if let Some(why) = sys::collapse_unavailable() {
            return Ok(Observation::LeaveAlone { why, evidence: Value::Null });
        }
        let s = self.settings.clone();
        let faults0 = (observe::faults(t.pid), Instant::now());
        let tlb = TlbCount::start(&t.threads());
        let (recs, taken) = observe::sample_accesses(&self.scratch, &t.threads(), s.observe, s.freq_hz, stop)?;
        let fault_rate = observe::faults(t.pid).saturating_sub(faults0.0) as f64 / faults0.1.elapsed().as_secs_f64();
        let (dtlb, dtlb_evidence) = tlb.finish();
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", t.pid))
            .map_err(|e| Error::new(ErrorKind::Process, format!("/proc/{}/maps: {e}", t.pid)))?;
        let ranges = observe::anon_ranges(&maps);
        let addrs: Vec<u64> = recs.iter().filter(|r| r.pid == t.pid).map(|r| r.addr).collect();
        let view = page_view(&addrs, &ranges);
        let evidence = json!({
            "samples_taken": taken,
            "samples_with_address": addrs.len(),
            "samples_in_anonymous_memory": view.samples,
            "distinct_pages_sampled": view.distinct_pages,
            "estimated_pages": view.estimated_pages.round(),
            "estimated_bytes": (view.estimated_pages * PAGE as f64).round(),
            "blocks_sampled": view.blocks.len(),
            "page_faults_per_s": fault_rate.round(),
            "dtlb": dtlb_evidence,
            "thresholds": {"pages": s.min_pages, "faults_per_s": s.min_faults_per_s, "dtlb_per_kilo_instructions": s.min_dtlb_per_kilo,
                "samples": s.min_samples},
            "anon_huge_bytes": observe::anon_huge_bytes(t.pid),
        });
        let spread = view.samples >= s.min_samples && view.estimated_pages >= s.min_pages;
        let faulting = fault_rate >= s.min_faults_per_s && !view.blocks.is_empty();
        let walking = dtlb.is_some_and(|d| d >= s.min_dtlb_per_kilo) && !view.blocks.is_empty();
        let tlb_words = match dtlb {
            Some(d) => format!("{d:.2} dTLB misses per 1000 instructions (threshold {})", s.min_dtlb_per_kilo),
            None => "dTLB misses not counted (see evidence.dtlb)".to_string(),
        };
        if !spread && !faulting && !walking {
            let why = if view.samples < s.min_samples {
                format!(
                    "too few sampled accesses in anonymous memory to judge ({} of {} samples, {} needed); {:.0} page faults/s; {tlb_words}",
                    view.samples, taken, s.min_samples, fault_rate
                )
            } else {
                format!(
                    "small working set: its {} sampled accesses touch about {:.0} distinct 4 KiB pages ({:.1} MiB, Chao1), within the TLB's \
                     reach ({} pages); {:.0} page faults/s (threshold {}); {tlb_words}",
                    view.samples,
                    view.estimated_pages,
                    view.estimated_pages * PAGE as f64 / (1 << 20) as f64,
                    s.min_pages,
                    fault_rate,
                    s.min_faults_per_s
                )
            };
            return Ok(Observation::LeaveAlone { why, evidence });
        }
        let chosen = choose_ranges(&view.blocks, &ranges, s.gap_blocks, s.max_bytes);
        if chosen.is_empty() {
            let why = "no sampled 2 MiB block lies wholly inside an anonymous mapping".to_string();
            return Ok(Observation::LeaveAlone { why, evidence });
        }
        let bytes: u64 = chosen.iter().map(|r| r.1 - r.0).sum();
        let what = format!(
            "collapse {} MiB in {} range(s) chosen from {} sampled blocks into 2 MiB pages: {}",
            bytes >> 20,
            chosen.len(),
            view.blocks.len(),
            if spread {
                format!(
                    "about {:.0} distinct pages ({:.0} MiB) are in use",
                    view.estimated_pages,
                    view.estimated_pages * PAGE as f64 / (1u64 << 20) as f64
                )
            } else if walking {
                tlb_words
            } else {
                format!("{fault_rate:.0} page faults/s")
            }
        );
        let mut evidence = evidence;
        evidence["ranges"] = json!(chosen
            .iter()
            .map(|r| json!({"start": format!("{:#x}", r.0), "end": format!("{:#x}", r.1), "samples": r.2}))
            .collect::<Vec<_>>());
        let action = Collapse { pid: t.pid, fd: sys::pidfd(t.pid)?, ranges: chosen.iter().map(|r| (r.0, r.1)).collect() };
        Ok(Observation::Propose(Proposal { what, evidence, action: Box::new(action) }))
    }

    fn undo(&mut self, t: &Target, way_back: &Value) -> Result<Value> {
        let ranges = ranges_of(way_back).ok_or_else(|| Error::new(ErrorKind::Revert, format!("unreadable way back {way_back}")))?;
        split(t.pid, &sys::pidfd(t.pid)?, &ranges)
    }
}

fn ranges_of(v: &Value) -> Option<Vec<(u64, u64)>> {
    v["split"].as_array()?.iter().map(|r| Some((r.get(0)?.as_u64()?, r.get(1)?.as_u64()?))).collect()
}

/// Collapse `ranges` of one process (held by a pidfd: a later process with
/// the same number is never touched).
pub struct Collapse {
    pid: u32,
    fd: OwnedFd,
    ranges: Vec<(u64, u64)>,
}

/// Pieces collapsed per call: a failure (no free huge page) costs one piece.
const CHUNK: u64 = 32 << 20;

impl Action for Collapse {
    fn way_back(&self) -> Value {
        json!({"split": self.ranges.iter().map(|r| [r.0, r.1]).collect::<Vec<_>>(), "how": "process_madvise MADV_COLD over each 2 MiB page less 4 KiB"})
    }

    fn apply(&mut self) -> Result<Value> {
        let started = Instant::now();
        let before = observe::anon_huge_bytes(self.pid);
        let (mut done, mut asked, mut pieces, mut failed) = (0u64, 0u64, 0usize, Vec::new());
        for &(s, e) in &self.ranges {
            let mut a = s;
            while a < e {
                let len = CHUNK.min(e - a);
                asked += len;
                pieces += 1;
                match sys::process_madvise(&self.fd, a, len, sys::MADV_COLLAPSE) {
                    Ok(n) => done += n,
                    Err(err) => failed.push(format!("{a:#x}+{}M: {err}", len >> 20)),
                }
                a += len;
            }
        }
        let after = observe::anon_huge_bytes(self.pid);
        let report = json!({"bytes_asked": asked, "bytes_collapsed": done, "failed": failed, "anon_huge_before": before,
            "anon_huge_after": after, "seconds": started.elapsed().as_secs_f64()});
        if done == 0 {
            let first = failed.first().cloned().unwrap_or_default();
            return Err(Error::new(
                ErrorKind::Apply,
                format!("MADV_COLLAPSE collapsed nothing ({} of {pieces} pieces failed; first: {first})", failed.len()),
            ));
        }
        Ok(report)
    }

    fn revert(&mut self) -> Result<Value> {
        split(self.pid, &self.fd, &self.ranges)
    }
}

/// Splits every huge page in `ranges` back into base pages.
fn split(pid: u32, fd: &OwnedFd, ranges: &[(u64, u64)]) -> Result<Value> {
    let started = Instant::now();
    let mut failed = Vec::new();
    for &(s, e) in ranges {
        let mut a = s;
        while a < e {
            if let Err(err) = sys::process_madvise(fd, a, HUGE - PAGE, sys::MADV_COLD) {
                failed.push(format!("{a:#x}: {err}"));
            }
            a += HUGE;
        }
    }
    let after = observe::anon_huge_bytes(pid);
    if !failed.is_empty() {
        return Err(Error::new(
            ErrorKind::Revert,
            format!("splitting huge pages of process {pid} failed at {} of its 2 MiB blocks (first: {})", failed.len(), failed[0]),
        ));
    }
    Ok(json!({"anon_huge_after": after, "seconds": started.elapsed().as_secs_f64()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtlb_counts_or_says_why_not() {
        // Checks: on this thread the dTLB count gives a rate with its counts, or (no PMU) no rate and the reason,
        // with the page-fault fallback named.
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let (rate, evidence) = TlbCount::start(&[me]).finish();
        match rate {
            Some(r) => assert!(r >= 0.0 && evidence["instructions"].as_u64().unwrap() > 0, "{evidence}"),
            None => {
                let why = evidence["unavailable"].as_str().unwrap_or_default();
                assert!(why.contains("cannot be counted") && why.ends_with("page faults per second used instead"), "{evidence}");
            }
        }
    }

    const M: u64 = 1 << 20;

    // Addresses outside anonymous memory are not counted; pages and blocks are.
    #[test]
    fn page_view_counts() {
        let ranges = [AnonRange { start: 0x4000_0000, end: 0x4000_0000 + 64 * M }];
        let v = page_view(&[0x4000_0000, 0x4000_0008, 0x4000_1000, 0x4020_0000, 0x1000], &ranges);
        assert_eq!((v.samples, v.distinct_pages), (4, 3));
        assert_eq!(v.blocks.values().copied().collect::<Vec<_>>(), vec![3, 1]);
    }

    // Sampled blocks join across small gaps, never across a mapping's edge or a large gap; unaligned ends are trimmed.
    #[test]
    fn ranges_from_blocks() {
        let base = 0x4000_0000u64;
        let ranges = [
            AnonRange { start: base + 4096, end: base + 40 * M },
            AnonRange { start: base + 50 * M + 4096, end: base + 51 * M },
            AnonRange { start: base + 64 * M, end: base + 80 * M },
        ];
        let blocks: BTreeMap<u64, u64> =
            [(base, 9), (base + 2 * M, 1), (base + 8 * M, 1), (base + 30 * M, 1), (base + 64 * M, 2)].into_iter().collect();
        let got = choose_ranges(&blocks, &ranges, 1, u64::MAX);
        // The first block starts below the mapping's first aligned address: left out.
        assert_eq!(
            got,
            vec![
                (base + 2 * M, base + 4 * M, 1),
                (base + 8 * M, base + 10 * M, 1),
                (base + 30 * M, base + 32 * M, 1),
                (base + 64 * M, base + 66 * M, 2)
            ]
        );
        let joined = choose_ranges(&blocks, &ranges, 2, u64::MAX);
        assert_eq!(joined[0], (base + 2 * M, base + 10 * M, 2));
        // The byte cap keeps the densest runs.
        let capped = choose_ranges(&blocks, &ranges, 0, 2 * M);
        assert_eq!(capped, vec![(base + 64 * M, base + 66 * M, 2)]);
    }

    // 40 samples on 40 different pages of a 64 MiB mapping: the whole mapping counts, as DProf counts such objects.
    #[test]
    fn unrepeated_samples_count_the_whole_mapping() {
        let ranges = [AnonRange { start: 0x4000_0000, end: 0x4000_0000 + 64 * M }, AnonRange { start: 0x1000_0000, end: 0x1000_0000 + M }];
        let addrs: Vec<u64> = (0..40).map(|i| 0x4000_0000 + i * 1_600_000).collect();
        let v = page_view(&addrs, &ranges);
        assert_eq!(v.estimated_pages, (64 * M / PAGE) as f64);
        // Repeats bound it: the same 20 pages twice each is 20 pages.
        let twice: Vec<u64> = (0..40).map(|i| 0x4000_0000 + (i % 20) * 8192).collect();
        assert_eq!(page_view(&twice, &ranges).estimated_pages, 20.0);
    }

    // The way back lists the ranges and reads back.
    #[test]
    fn way_back_round_trip() {
        let v = json!({"split": [[1, 2], [3, 4]]});
        assert_eq!(ranges_of(&v), Some(vec![(1, 2), (3, 4)]));
        assert_eq!(ranges_of(&json!({})), None);
    }
}
