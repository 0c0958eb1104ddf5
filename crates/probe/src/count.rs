//! Exact execution counts of one procedure's frequency classes, for
//! `loupe calc` (issue 30).
//!
//! Two exact counters, each used where it is cheap:
//! - the procedure's **entries** over the whole run, by a uprobe on its
//!   first instruction ([`EntryCounter`]; one trap per entry, 5-15 µs here);
//! - each class's **executions per entry**, by execute breakpoints on one
//!   instruction of the class armed together with one on the entry for a
//!   window ([`bounded_window`]). Within a window every execution traps
//!   (about 17 µs), so a window is bounded by hits, not by time.
//!
//! A window starts and ends mid-invocation; the executions it counts of the
//! invocation in progress at its start (a tail) and at its end (a head, whose
//! entry it counted) are, for a run that repeats itself, one invocation's
//! worth in expectation, so Σ hits / Σ entries over windows is the class's
//! executions per entry; its interval comes from the spread between windows
//! ([`ClassCount::per_entry`]). Executions = that x the entries counted.

use crate::{ElfAddr, Group, RuntimeAddr};
use loupe_perf::sys::{self, PerfEventAttr};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the kernel says the uprobe PMU's type is.
const UPROBE_TYPE: &str = "/sys/bus/event_source/devices/uprobe/type";

/// A uprobe counting executions of one file offset of an ELF file, in
/// every process on every CPU (opened before the program starts, so no
/// entry is missed). Closing it (drop) removes the probe.
pub struct EntryCounter {
    fds: Vec<OwnedFd>,
}

impl EntryCounter {
    /// Counts executions of `file_offset` in `path` from now on.
    pub fn open(path: &Path, file_offset: u64) -> io::Result<EntryCounter> {
        let ty: u32 = std::fs::read_to_string(UPROBE_TYPE)
            .map_err(|e| io::Error::new(e.kind(), format!("no uprobe PMU ({UPROBE_TYPE}: {e})")))?
            .trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{UPROBE_TYPE} holds no number")))?;
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"))?;
        let attr = PerfEventAttr {
            type_: ty,
            size: sys::ATTR_SIZE,
            // config1 is the path's address: the kernel copies the string during the call.
            config1: cpath.as_ptr() as u64,
            config2: file_offset,
            ..Default::default()
        };
        let cpus = online_cpus()?;
        let fds = cpus.into_iter().map(|cpu| sys::perf_event_open(&attr, -1, cpu, -1)).collect::<io::Result<Vec<_>>>()?;
        Ok(EntryCounter { fds })
    }

    /// Executions counted so far, all CPUs.
    pub fn read(&self) -> io::Result<u64> {
        self.fds.iter().map(|f| read_u64(f.as_raw_fd())).sum()
    }

    /// Stops counting (the count read afterwards stays).
    pub fn disable(&self) -> io::Result<()> {
        self.fds.iter().try_for_each(|f| sys::ioctl(f.as_raw_fd(), sys::IOC_DISABLE, 0))
    }
}

fn read_u64(fd: i32) -> io::Result<u64> {
    let mut v = 0u64;
    // SAFETY: the kernel writes at most 8 bytes into the u64.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// The online CPUs, from /sys/devices/system/cpu/online ("0-3,5").
fn online_cpus() -> io::Result<Vec<i32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    Ok(parse_cpu_list(&text))
}

/// "0-3,5" -> [0, 1, 2, 3, 5].
pub fn parse_cpu_list(text: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<i32>(), b.trim().parse::<i32>()) {
            out.extend(a..=b);
        }
    }
    out
}

/// The file offset of ELF address `va` in a file with loadable `segments` (`(vaddr, offset, filesz)`).
pub fn file_offset(segments: &[(u64, u64, u64)], va: ElfAddr) -> Option<u64> {
    let &(vaddr, offset, _) = segments.iter().find(|&&(v, _, size)| va.0 >= v && va.0 < v + size)?;
    Some(va.0 - vaddr + offset)
}

/// How much counting may cost.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// A window stops once one of its breakpoints has trapped this often.
    pub max_hits: u64,
    /// ... or after this long, whatever the hits.
    pub max_window: Duration,
    /// Pause between windows (the armed share of the run is about
    /// window / (window + gap)).
    pub gap: Duration,
}

impl Default for Budget {
    fn default() -> Self {
        // 2,000 hits at ~17 µs: about 35 ms of traps per window, then as long again running freely.
        Budget { max_hits: 2000, max_window: Duration::from_millis(50), gap: Duration::from_millis(50) }
    }
}

/// Arms `addrs` on thread `tid` (the first is the entry), polling every
/// millisecond, until one has trapped `max_hits` times or `max_window` has
/// passed; returns the counts and how long the window was armed.
pub fn bounded_window(tid: u32, addrs: &[RuntimeAddr], budget: &Budget) -> io::Result<(Vec<u64>, Duration)> {
    let g = Group::open(tid, addrs)?;
    let t0 = Instant::now();
    g.enable()?;
    let counts = loop {
        std::thread::sleep(Duration::from_millis(1));
        let c = g.read()?;
        if t0.elapsed() >= budget.max_window || c.iter().any(|&x| x >= budget.max_hits) {
            g.disable()?;
            break g.read()?;
        }
    };
    Ok((counts, t0.elapsed()))
}

/// One class's counts: its instruction's executions and the entry's, window by window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassCount {
    /// The instruction counted (any one of the class: all run equally often).
    pub addr: ElfAddr,
    /// (executions of `addr`, entries) per window.
    pub windows: Vec<(u64, u64)>,
}

impl ClassCount {
    /// Executions per entry and its 95% half-width, from the ratio of the
    /// sums and the spread of the windows around it (the ratio estimator's
    /// standard error); None before any window has counted an entry.
    pub fn per_entry(&self) -> Option<(f64, f64)> {
        let n = self.windows.len() as f64;
        let (y, x) = self.windows.iter().fold((0.0, 0.0), |(a, b), &(h, e)| (a + h as f64, b + e as f64));
        if x <= 0.0 {
            return None;
        }
        let r = y / x;
        if n < 2.0 {
            return Some((r, r));
        }
        let ss: f64 = self.windows.iter().map(|&(h, e)| (h as f64 - r * e as f64).powi(2)).sum();
        let se = (ss / (n * (n - 1.0))).sqrt() / (x / n);
        Some((r, 1.96 * se))
    }
}

/// What a counting run measured, kept beside the database for `loupe calc`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// The procedure and the image it is in.
    pub procedure: String,
    pub image: String,
    /// Its first instruction.
    pub entry: ElfAddr,
    /// Entries over the whole run (the uprobe), when it counted the whole run.
    pub entries: Option<u64>,
    pub classes: Vec<ClassCount>,
    /// Windows armed, their total length, the traps they took, and the run's wall time.
    pub armed_secs: f64,
    pub traps: u64,
    pub wall_secs: f64,
}

impl Counts {
    /// The counted executions of the class at `addr` and their 95% half-width.
    pub fn executions(&self, addr: ElfAddr) -> Option<(f64, f64)> {
        let entries = self.entries? as f64;
        if addr == self.entry {
            return Some((entries, 0.0));
        }
        let (r, h) = self.classes.iter().find(|c| c.addr == addr)?.per_entry()?;
        Some((r * entries, h * entries))
    }

    /// Writes the counts (private, written whole then renamed).
    pub fn save(&self, path: &Path) -> io::Result<()> {
        if let Some(d) = path.parent() {
            loupe_files::create_dir_all(d)?;
        }
        let tmp = path.with_extension("json.tmp");
        loupe_files::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, path)
    }

    /// The counts at `path`; None where there are none.
    pub fn load(path: &Path) -> io::Result<Option<Counts>> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The groups to arm: the entry and three classes at a time.
pub fn groups(entry: ElfAddr, classes: &[ElfAddr]) -> Vec<Vec<ElfAddr>> {
    let others: Vec<ElfAddr> = classes.iter().copied().filter(|&c| c != entry).collect();
    others.chunks(crate::SLOTS - 1).map(|ch| std::iter::once(entry).chain(ch.iter().copied()).collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_expand() {
        // Checks the kernel's CPU list format: ranges and singles.
        assert_eq!(parse_cpu_list("0-3,5\n"), vec![0, 1, 2, 3, 5]);
        assert_eq!(parse_cpu_list("0\n"), vec![0]);
    }

    #[test]
    fn ratio_of_sums_with_an_interval_from_the_windows() {
        // Checks per_entry on windows cut mid-invocation of a loop of 100 per entry: (250, 2), (150, 2), (200, 2)
        // sum to 600 / 6 = 100 per entry; residuals 50, -50, 0 give se = sqrt(5000 / 6) / 2, half-width 1.96 se.
        let c = ClassCount { addr: ElfAddr(1), windows: vec![(250, 2), (150, 2), (200, 2)] };
        let (r, h) = c.per_entry().unwrap();
        assert!((r - 100.0).abs() < 1e-9);
        assert!((h - 1.96 * (5000.0f64 / 6.0).sqrt() / 2.0).abs() < 1e-9, "{h}");
        assert_eq!(ClassCount { addr: ElfAddr(1), windows: vec![(5, 0)] }.per_entry(), None);
    }

    #[test]
    fn every_group_holds_the_entry() {
        // Checks grouping: the entry leads each group of up to four; a class equal to the entry is not repeated.
        let e = ElfAddr(0);
        let cs: Vec<ElfAddr> = (0..5).map(ElfAddr).collect();
        let g = groups(e, &cs);
        assert_eq!(g, vec![vec![e, ElfAddr(1), ElfAddr(2), ElfAddr(3)], vec![e, ElfAddr(4)]]);
    }

    #[inline(never)]
    fn counted_call(n: u64) -> u64 {
        (0..n).fold(1u64, |a, i| std::hint::black_box(a.wrapping_mul(31) ^ i))
    }

    #[test]
    fn uprobe_counts_every_entry_of_a_function_in_this_test_binary() {
        // Checks EntryCounter end to end: counted_call entered exactly 5,000 times by this thread counts 5,000.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("LOUPE_ALLOW_UNPRIVILEGED").is_some(), "privileged test: run as root (CI does)");
            return;
        }
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = loupe_model::maps::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let segs = crate::segments(&exe).unwrap();
        let rt = counted_call as fn(u64) -> u64 as usize as u64;
        // The ELF address: the runtime address less the bias of the mapping that holds it.
        let m = maps.iter().find(|m| rt >= m.start && rt < m.end).unwrap();
        let off = rt - m.start + m.pgoff;
        let &(vaddr, seg_off, _) = segs.iter().find(|&&(_, o, s)| off >= o && off < o + s).unwrap();
        assert_eq!(file_offset(&segs, ElfAddr(off - seg_off + vaddr)), Some(off));
        let c = EntryCounter::open(&exe, off).unwrap();
        let x: u64 = (0..5000).map(|i| counted_call(i % 7)).sum();
        std::hint::black_box(x);
        c.disable().unwrap();
        assert_eq!(c.read().unwrap(), 5000);
    }
}
