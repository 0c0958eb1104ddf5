//! Exact execution counts of one procedure's frequency classes, for
//! `loupe calc` (issue 30).
//!
//! Two exact counters, each used where it is cheap:
//! - the procedure's **entries** over the whole run, by a uprobe on its
//!   first instruction ([`EntryCounter`]; one trap per entry, 5-15 µs here);
//! - each class's **executions per entry**, by execute breakpoints on one
//!   instruction of the class armed together with one on the entry for a
//!   window ([`sequence_window`]). Within a window every execution traps
//!   (about 17 µs), so a window is bounded by hits, not by time.
//!
//! A window starts and ends mid-invocation, and counting hits between its
//! ends would add a part of an invocation at each (off by up to one
//! invocation's executions per window). So every breakpoint writes a record
//! per hit into one ring, in the order they ran, and only the hits between
//! the window's first and last entry count: whole invocations
//! ([`whole_invocations`]). Σ hits / Σ invocations over windows is the
//! class's executions per entry, exact for a procedure that does the same
//! each call; its interval comes from the spread between windows
//! ([`ClassCount::per_entry`]). Executions = that x the entries counted.
//! A procedure entered too rarely for a window to hold two entries keeps
//! its estimates.

use crate::{ElfAddr, RuntimeAddr};
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
    /// Counts executions of `file_offset` in `path`: in process `pid` (not
    /// yet exec'd: from its exec on, it and its descendants, threads
    /// included), or with None in every process from now on.
    pub fn open(path: &Path, file_offset: u64, pid: Option<i32>) -> io::Result<EntryCounter> {
        let ty: u32 = std::fs::read_to_string(UPROBE_TYPE)
            .map_err(|e| io::Error::new(e.kind(), format!("no uprobe PMU ({UPROBE_TYPE}: {e})")))?
            .trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("{UPROBE_TYPE} holds no number")))?;
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"))?;
        let per_task = sys::flag::DISABLED | sys::flag::ENABLE_ON_EXEC | sys::flag::INHERIT;
        let attr = PerfEventAttr {
            type_: ty,
            size: sys::ATTR_SIZE,
            flags: if pid.is_some() { per_task } else { 0 },
            // config1 is the path's address: the kernel copies the string during the call.
            config1: cpath.as_ptr() as u64,
            config2: file_offset,
            ..Default::default()
        };
        let fds = match pid {
            Some(p) => vec![sys::perf_event_open(&attr, p, -1, -1)?],
            None => online_cpus()?.into_iter().map(|cpu| sys::perf_event_open(&attr, -1, cpu, -1)).collect::<io::Result<Vec<_>>>()?,
        };
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

/// What one window recorded: the armed slots in the order they ran, each
/// slot's span (hits and registers), and how long it was armed.
pub struct Window {
    pub seq: Vec<u8>,
    pub slots: Vec<crate::chain::SlotSpan>,
    pub armed: Duration,
    /// The thread's CPU time (ns) just before the window was enabled and just after it was disabled.
    pub cpu: Option<(u64, u64)>,
}

/// Arms `addrs` on thread `tid` (the first is the procedure's entry), each
/// breakpoint writing one record per execution into one ring, with the
/// thread's registers ([`crate::chain::INDUCTION_REGS`]), so the window
/// returns the order they ran in (indices into `addrs`) and each slot's
/// span. Polls every millisecond and stops once `max_hits` have trapped or
/// `max_window` has passed.
pub fn sequence_window(tid: u32, addrs: &[RuntimeAddr], budget: &Budget) -> io::Result<Window> {
    let mut fds: Vec<OwnedFd> = Vec::with_capacity(addrs.len());
    for (i, &a) in addrs.iter().enumerate() {
        let leader = fds.first().map_or(-1, |f| f.as_raw_fd());
        fds.push(sys::perf_event_open(&sequence_attr(a, i == 0), tid as i32, -1, leader)?);
    }
    // Room for every hit of the window plus a few milliseconds past the bound (header, ip, abi and 15 registers).
    let pages = ((budget.max_hits as usize + 1000) * 144).div_ceil(loupe_perf::ring::page_size()).next_power_of_two();
    let mut ring = loupe_perf::ring::Ring::map(fds[0].as_raw_fd(), pages)?;
    for f in &fds[1..] {
        sys::ioctl(f.as_raw_fd(), sys::IOC_SET_OUTPUT, fds[0].as_raw_fd() as libc::c_ulong)?;
    }
    let layout = loupe_perf::Layout::new(loupe_perf::Format::of(&sequence_attr(addrs[0], true)));
    let mut w = Window { seq: Vec::new(), slots: vec![Default::default(); addrs.len()], armed: Duration::ZERO, cpu: None };
    let t0 = Instant::now();
    let mut drain = |w: &mut Window| {
        ring.read(|rec| {
            let Ok(s) = loupe_perf::parse_sample(&layout, rec) else { return };
            let Some(k) = s.ip.and_then(|ip| addrs.iter().position(|a| a.0 == ip)) else { return };
            w.seq.push(k as u8);
            let regs: Vec<u64> = s.regs_user.map_or(vec![], |r| r.values.iter().collect());
            w.slots[k].add(&regs);
        })
    };
    // Read next to the enable and disable: the thread runs untrapped until the one and after the other.
    let cpu0 = thread_cpu(tid);
    sys::ioctl(fds[0].as_raw_fd(), sys::IOC_ENABLE, IOC_FLAG_GROUP)?;
    loop {
        std::thread::sleep(Duration::from_millis(1));
        drain(&mut w);
        if t0.elapsed() >= budget.max_window || w.seq.len() as u64 >= budget.max_hits {
            break;
        }
    }
    sys::ioctl(fds[0].as_raw_fd(), sys::IOC_DISABLE, IOC_FLAG_GROUP)?;
    w.cpu = cpu0.zip(thread_cpu(tid));
    w.armed = t0.elapsed();
    drain(&mut w);
    Ok(w)
}

/// PERF_IOC_FLAG_GROUP: enable or disable the leader's whole group at once.
const IOC_FLAG_GROUP: libc::c_ulong = 1;

/// An execute breakpoint that records its instruction pointer at every execution.
fn sequence_attr(addr: RuntimeAddr, leader: bool) -> PerfEventAttr {
    const PERF_TYPE_BREAKPOINT: u32 = 5;
    const HW_BREAKPOINT_X: u32 = 4;
    PerfEventAttr {
        type_: PERF_TYPE_BREAKPOINT,
        size: sys::ATTR_SIZE,
        sample_period_or_freq: 1,
        sample_type: sys::SAMPLE_IP | sys::SAMPLE_REGS_USER,
        sample_regs_user: crate::chain::INDUCTION_REGS,
        flags: sys::flag::EXCLUDE_KERNEL | sys::flag::EXCLUDE_HV | if leader { sys::flag::DISABLED } else { 0 },
        // Polled, never woken.
        wakeup_events_or_watermark: 1 << 30,
        bp_type: HW_BREAKPOINT_X,
        config1: addr.0,
        config2: std::mem::size_of::<libc::c_long>() as u64,
        ..Default::default()
    }
}

/// Per slot after the entry (slot 0), its executions within the complete
/// invocations of a window's sequence (from the first entry to the last),
/// and how many invocations that is. A window with fewer than two entries
/// holds no complete invocation: None.
pub fn whole_invocations(seq: &[u8], slots: usize) -> Option<(Vec<u64>, u64)> {
    let first = seq.iter().position(|&k| k == 0)?;
    let last = seq.iter().rposition(|&k| k == 0)?;
    if last == first {
        return None;
    }
    let inside = &seq[first..last];
    let calls = inside.iter().filter(|&&k| k == 0).count() as u64;
    let hits = (1..slots).map(|j| inside.iter().filter(|&&k| k as usize == j).count() as u64).collect();
    Some((hits, calls))
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
    /// The windows, for a run spent in one long call ([`crate::chain`]).
    #[serde(default)]
    pub spans: Vec<crate::chain::WindowSpan>,
    /// Per thread, its CPU time (ns) at the last reading.
    #[serde(default)]
    pub end_cpu: Vec<(u32, u64)>,
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
        match self.classes.iter().find(|c| c.addr == addr).and_then(ClassCount::per_entry) {
            Some((r, h)) => Some((r * entries, h * entries)),
            None => self.one_call(addr),
        }
    }

    /// Executions of `addr` in a run spent in one call on one thread (too
    /// long for a window to hold): chained by its own induction register, else
    /// its ratio to the chained class it shared the most windows with.
    fn one_call(&self, addr: ElfAddr) -> Option<(f64, f64)> {
        let tid = self.spans.first()?.tid;
        let end = self.end_cpu.iter().find(|e| e.0 == tid)?.1;
        if self.entries != Some(1) {
            return None;
        }
        if let Some(l) = crate::chain::chain_level(&self.spans, addr, end) {
            return Some(l);
        }
        let shared = |a: ElfAddr| self.spans.iter().filter(|w| w.addrs.contains(&a) && w.addrs.contains(&addr)).count();
        self.classes
            .iter()
            .filter(|c| c.addr != addr && shared(c.addr) > 0)
            .filter_map(|c| {
                let l = crate::chain::chain_level(&self.spans, c.addr, end)?;
                Some((shared(c.addr), crate::chain::ratio_level(&self.spans, addr, c.addr, l)?))
            })
            .max_by_key(|x| x.0)
            .map(|x| x.1)
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

/// The procedure to count: its image, entry and one instruction per class.
#[derive(Clone, Debug)]
pub struct Target {
    pub image: std::path::PathBuf,
    pub entry: ElfAddr,
    pub classes: Vec<ElfAddr>,
}

/// What the windows counted: per class, and their cost.
#[derive(Clone, Debug, Default)]
pub struct Windows {
    pub classes: Vec<ClassCount>,
    /// Every window, for counts that chain across them ([`crate::chain`]).
    pub spans: Vec<crate::chain::WindowSpan>,
    /// Per thread, its CPU time (ns) at the last reading.
    pub end_cpu: Vec<(u32, u64)>,
    pub armed_secs: f64,
    pub traps: u64,
    pub windows: u64,
}

/// Arms the target's groups in turn on the threads of `root` and its
/// descendants that map the image, a window at a time with `budget.gap`
/// (or the window's length, if longer) between, until `done()` says the
/// run is over. A group whose window held no whole call gets twice the
/// budget next time, up to [`MAX_SCALE`] times; one that holds none even
/// then is not armed again (its classes keep their estimates), nor is one
/// whose classes are settled ([`SETTLED_CALLS`]); when no group is left the
/// windows end. A thread that ends
/// mid-window takes its breakpoints with it (they are its own events); the
/// window is dropped.
///
/// `quiet` are sampling events to disable while a window is armed: its
/// traps would otherwise draw samples (trap time) to the armed instructions.
/// `entries()` is the procedure's entries so far: while it is 1, a window
/// without a whole call does not grow (the one call outlasts any window) and
/// its classes chain by induction registers ([`crate::chain`]).
pub fn count_windows(
    root: u32,
    t: &Target,
    budget: &Budget,
    quiet: &[OwnedFd],
    done: &dyn Fn() -> bool,
    entries: &dyn Fn() -> u64,
) -> io::Result<Windows> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&t.image)?.ino();
    let segs = crate::segments(&t.image)?;
    let groups = groups(t.entry, &t.classes);
    let mut out = Windows { classes: t.classes.iter().map(|&addr| ClassCount { addr, windows: vec![] }).collect(), ..Default::default() };
    // Per group, how many times the budget its windows get: doubled after a window without a whole call.
    let mut scale = vec![1u32; groups.len()];
    // Per group, windows whose counts chain by an induction register (no whole call needed).
    let mut chained = vec![0usize; groups.len()];
    // Per group, windows in a row in which none of its classes ran.
    let mut idle_windows = vec![0usize; groups.len()];
    let (mut turn, mut last_tid) = (0usize, None);
    while !done() {
        let threads = threads_of(root, inode, &segs, t.entry);
        let mut pause = budget.gap;
        if scale.iter().all(|&s| s == 0) {
            break;
        }
        if let (Some(&(tid, bias)), false) = (threads.get(turn % threads.len().max(1)), groups.is_empty()) {
            // The next group still armed.
            let k = (0..groups.len()).map(|j| (turn + j) % groups.len()).find(|&j| scale[j] > 0).unwrap_or(0);
            turn = k;
            let g = &groups[k];
            let rt: Vec<RuntimeAddr> = g.iter().map(|&a| crate::runtime(a, bias)).collect();
            let b = match chained[k] {
                // A settled chain only needs a few hits a window to carry its registers across the run.
                n if n >= SETTLED_WINDOWS => Budget { max_hits: KEEPALIVE_HITS, ..*budget },
                _ => Budget { max_hits: budget.max_hits * scale[k] as u64, max_window: budget.max_window * scale[k], ..*budget },
            };
            let toggle = |req| quiet.iter().for_each(|f| drop(sys::ioctl(f.as_raw_fd(), req, 0)));
            toggle(sys::IOC_DISABLE);
            let counted = sequence_window(tid, &rt, &b);
            toggle(sys::IOC_ENABLE);
            if let Ok(w) = counted {
                out.armed_secs += w.armed.as_secs_f64();
                out.traps += w.seq.len() as u64;
                out.windows += 1;
                // As long a pause as the window: the program runs at least half the time at full speed.
                pause = pause.max(w.armed);
                let whole = whole_invocations(&w.seq, g.len());
                // A register stepping alike at every hit of a class: the group's counts chain across windows without whole calls.
                let strided = w.slots[1..].iter().any(|s| s.stride.iter().any(|d| d.is_some_and(|d| d != 0)));
                // No class of the group ran while armed: a longer window would not help; after a few such, it is dropped.
                let idle = w.slots[1..].iter().all(|s| s.hits == 0);
                idle_windows[k] = if idle { idle_windows[k] + 1 } else { 0 };
                match (&whole, scale[k], strided && entries() <= 1) {
                    _ if idle_windows[k] >= SETTLED_WINDOWS => scale[k] = 0,
                    _ if idle => {}
                    // One call so far, longer than the window: a longer window would not hold it either.
                    (None, _, true) => chained[k] += 1,
                    // Calls too long to count whole at any budget: this group is not armed again.
                    (None, MAX_SCALE, false) => scale[k] = 0,
                    (None, _, false) => scale[k] *= 2,
                    _ => {}
                }
                out.spans.push(crate::chain::WindowSpan {
                    tid,
                    addrs: g.clone(),
                    cpu: w.cpu.unwrap_or_default(),
                    inside: crate::chain::between(&w.seq, g.len()),
                    slots: w.slots,
                });
                if let Some((hits, calls)) = whole {
                    for (&addr, &h) in g[1..].iter().zip(&hits) {
                        if let Some(c) = out.classes.iter_mut().find(|c| c.addr == addr) {
                            c.windows.push((h, calls));
                        }
                    }
                    // Settled: enough whole calls in enough windows; the rest of the run goes uncounted, at full speed.
                    let settled = |a: &ElfAddr| {
                        out.classes.iter().find(|c| c.addr == *a).is_some_and(|c| {
                            c.windows.len() >= SETTLED_WINDOWS && c.windows.iter().map(|w| w.1).sum::<u64>() >= SETTLED_CALLS
                        })
                    };
                    if g[1..].iter().all(settled) {
                        scale[k] = 0;
                    }
                }
            }
            last_tid = Some(tid);
        }
        turn += 1;
        // The pause, reading the last thread's CPU time now and then: the chain scales its tail up to the last reading.
        let t0 = Instant::now();
        while t0.elapsed() < pause && !done() {
            if let Some(c) = last_tid.and_then(|t| thread_cpu(t).map(|c| (t, c))) {
                out.end_cpu.retain(|e| e.0 != c.0);
                out.end_cpu.push(c);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    Ok(out)
}

/// A group stops once each of its classes has been counted over this many
/// whole calls in at least [`SETTLED_WINDOWS`] windows: a call that does the
/// same each time is exact after one, and the windows' spread (the interval)
/// needs a few.
pub const SETTLED_CALLS: u64 = 50;
pub const SETTLED_WINDOWS: usize = 5;

/// The hits a window of a settled chained group takes: enough to carry its registers across the run, cheap.
pub const KEEPALIVE_HITS: u64 = 32;

/// The CPU time of thread `tid` in ns (/proc/TID/schedstat), while it lives or awaits reaping.
fn thread_cpu(tid: u32) -> Option<u64> {
    // The thread's CPU clock (the kernel's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)), read up to date;
    // /proc/TID/schedstat lags a running thread by up to a scheduler tick (4 ms), as much as a gap between windows.
    let clock = ((!(tid as libc::clockid_t)) << 3) | 6;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec we pass.
    if unsafe { libc::clock_gettime(clock, &mut ts) } == 0 {
        return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
    }
    std::fs::read_to_string(format!("/proc/{tid}/schedstat")).ok()?.split_whitespace().next()?.parse().ok()
}

/// A group's windows grow to at most this many times the budget (32 x 2,000
/// hits: about a second of traps) while they catch no whole call.
pub const MAX_SCALE: u32 = 32;

/// Threads (with their process's load bias) of `root` and its descendants
/// that map the file with `inode`.
fn threads_of(root: u32, inode: u64, segs: &[(u64, u64, u64)], probe: ElfAddr) -> Vec<(u32, i64)> {
    let ids = |dir: &str| -> Vec<u32> {
        std::fs::read_dir(dir).map_or(vec![], |d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
    };
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let under_root = |mut pid: u32| {
        for _ in 0..64 {
            if pid == root {
                return true;
            }
            match parent(pid) {
                Some(p) if p > 1 => pid = p,
                _ => return false,
            }
        }
        false
    };
    let mut out = Vec::new();
    for pid in ids("/proc").into_iter().filter(|&p| under_root(p)) {
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { continue };
        let Some(bias) = crate::load_bias(&loupe_model::maps::parse_maps(&maps), inode, segs, probe) else { continue };
        out.extend(ids(&format!("/proc/{pid}/task")).into_iter().map(|tid| (tid, bias)));
    }
    out.sort();
    out
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
    fn only_hits_between_the_first_and_last_entry_count() {
        // Checks whole_invocations on a sequence cut mid-call at both ends: 1 1 | 0 1 1 2 | 0 1 1 | 0 1 — two whole
        // calls hold 4 hits of slot 1 and 1 of slot 2; with one entry there is no whole call.
        let seq = [1, 1, 0, 1, 1, 2, 0, 1, 1, 0, 1];
        assert_eq!(whole_invocations(&seq, 3), Some((vec![4, 1], 2)));
        assert_eq!(whole_invocations(&[1, 0, 1, 1], 2), None);
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

    #[inline(never)]
    fn inner(i: u64) -> u64 {
        std::hint::black_box(i ^ 0x55)
    }

    #[inline(never)]
    fn outer(n: u64) -> u64 {
        (0..n).fold(0, |a, i| a ^ inner(i))
    }

    #[test]
    fn a_window_counts_whole_calls_exactly() {
        // Checks sequence_window end to end: a thread calling outer(7) (7 calls of inner each) without pause, cut
        // at arbitrary times, gives exactly 7 inner executions per whole call of outer, in a window bounded by hits.
        if !crate::privileged_test() {
            return;
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s2 = stop.clone();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let mut x = 0;
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                x ^= outer(7);
            }
            x
        });
        let tid = rx.recv().unwrap();
        let addrs = [RuntimeAddr(outer as fn(u64) -> u64 as usize as u64), RuntimeAddr(inner as fn(u64) -> u64 as usize as u64)];
        let budget = Budget { max_hits: 400, max_window: Duration::from_secs(20), gap: Duration::ZERO };
        let seq = sequence_window(tid, &addrs, &budget).unwrap().seq;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        worker.join().unwrap();
        assert!(seq.len() >= 400 && seq.len() < 4000, "{} hits", seq.len());
        let (hits, calls) = whole_invocations(&seq, 2).unwrap();
        assert!(calls >= 40, "{calls} whole calls");
        assert_eq!(hits[0], 7 * calls);
    }

    #[inline(never)]
    fn step(i: u64) -> u64 {
        std::hint::black_box(i.wrapping_mul(0x9e37_79b9))
    }

    #[inline(never)]
    fn one_long_call(n: u64) -> u64 {
        (0..n).fold(0, |a, i| a ^ step(i))
    }

    #[test]
    fn a_single_call_that_outlasts_every_window_is_counted_by_its_induction_register() {
        // Checks windows + chain_level end to end: a thread makes one call of one_long_call(N), N = 10^8 calls of
        // step(i) (i in the argument register), far longer than any window; windows of 300 hits every 10 ms chain
        // step's count through the register, the head and tail scaled by the gaps' rate: within 1% of N.
        if !crate::privileged_test() {
            return;
        }
        const N: u64 = 100_000_000;
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let (stay_tx, stay_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let x = one_long_call(N);
            // The thread stays (idle: its CPU time stands) until read, as an exited process stays until reaped.
            done_tx.send(()).unwrap();
            stay_rx.recv().unwrap();
            x
        });
        let tid = rx.recv().unwrap();
        let rt = |f: fn(u64) -> u64| RuntimeAddr(f as usize as u64);
        let addrs = [rt(one_long_call), rt(step)];
        let elf = [ElfAddr(addrs[0].0), ElfAddr(addrs[1].0)];
        let budget = Budget { max_hits: 300, max_window: Duration::from_secs(1), gap: Duration::ZERO };
        let (mut spans, mut end) = (Vec::new(), 0);
        while done_rx.try_recv().is_err() {
            let Ok(w) = sequence_window(tid, &addrs, &budget) else { break };
            if let (Some(cpu), true) = (w.cpu, w.seq.len() >= 2) {
                spans.push(crate::chain::WindowSpan {
                    tid,
                    addrs: elf.to_vec(),
                    cpu,
                    inside: crate::chain::between(&w.seq, 2),
                    slots: w.slots,
                });
            }
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(10) {
                end = thread_cpu(tid).unwrap_or(end);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        end = thread_cpu(tid).unwrap_or(end);
        stay_tx.send(()).unwrap();
        worker.join().unwrap();
        assert!(spans.len() >= 5, "{} windows", spans.len());
        let (n, hw) = crate::chain::chain_level(&spans, elf[1], end).expect("a chain through the argument register");
        eprintln!("counted {n} +- {hw} of {N} in {} windows", spans.len());
        assert!((n / N as f64 - 1.0).abs() <= 0.01, "counted {n} +- {hw}, exactly {N}");
    }

    #[test]
    fn uprobe_counts_every_entry_of_a_function_in_this_test_binary() {
        // Checks EntryCounter end to end: counted_call entered exactly 5,000 times by this thread counts 5,000.
        if !crate::privileged_test() {
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
        let c = EntryCounter::open(&exe, off, None).unwrap();
        let x: u64 = (0..5000).map(|i| counted_call(i % 7)).sum();
        std::hint::black_box(x);
        c.disable().unwrap();
        assert_eq!(c.read().unwrap(), 5000);
    }
}
