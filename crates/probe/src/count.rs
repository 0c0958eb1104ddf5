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

use crate::clock::ThreadClocks;
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
    /// Emptied by [`EntryCounter::close`].
    fds: std::sync::Mutex<Vec<OwnedFd>>,
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
        Ok(EntryCounter { fds: std::sync::Mutex::new(fds) })
    }

    /// Executions counted so far, all CPUs.
    pub fn read(&self) -> io::Result<u64> {
        let fds = self.fds.lock().unwrap_or_else(|e| e.into_inner());
        if fds.is_empty() {
            return Err(io::Error::other("the entry uprobe was closed"));
        }
        fds.iter().map(|f| read_u64(f.as_raw_fd())).sum()
    }

    /// Stops counting (the count read afterwards stays).
    pub fn disable(&self) -> io::Result<()> {
        self.fds.lock().unwrap_or_else(|e| e.into_inner()).iter().try_for_each(|f| sys::ioctl(f.as_raw_fd(), sys::IOC_DISABLE, 0))
    }

    /// Removes the probe now (a disabled uprobe still traps: its breakpoint
    /// stays in the text until the event is closed); reads fail afterwards.
    pub fn close(&self) {
        self.fds.lock().unwrap_or_else(|e| e.into_inner()).clear();
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
pub fn sequence_window(tid: u32, addrs: &[RuntimeAddr], budget: &Budget, clocks: &mut ThreadClocks) -> io::Result<Window> {
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
    let cpu0 = clocks.read(tid);
    sys::ioctl(fds[0].as_raw_fd(), sys::IOC_ENABLE, IOC_FLAG_GROUP)?;
    loop {
        std::thread::sleep(Duration::from_millis(1));
        drain(&mut w);
        if t0.elapsed() >= budget.max_window || w.seq.len() as u64 >= budget.max_hits {
            break;
        }
    }
    sys::ioctl(fds[0].as_raw_fd(), sys::IOC_DISABLE, IOC_FLAG_GROUP)?;
    w.cpu = cpu0.zip(clocks.read(tid));
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

/// A class is counted from a class armed beside it once the windows held at
/// least this many whole intervals of that class.
pub const MIN_INTERVALS: u64 = 10;

/// A level chained up the ladder counts only when its 95% half-width is at most this share of it.
pub const MAX_RELATIVE_HW: f64 = 0.05;

/// A group led by a class other than the entry settles once each of its
/// classes' ratio to the leader is this precise (95% half-width over the
/// ratio), or after [`LADDER_WINDOWS`] windows, precise or not.
pub const SETTLED_PRECISION: f64 = 0.01;
pub const LADDER_WINDOWS: usize = 48;

/// A class's counted executions and their 95% half-width.
pub type Level = (ElfAddr, (f64, f64));

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
    /// Why nothing was counted, when the counting gave up (the entry uprobe's cost).
    #[serde(default)]
    pub not_counted: Option<String>,
}

impl Counts {
    /// The counted executions of the class at `addr` and their 95% half-width.
    pub fn executions(&self, addr: ElfAddr) -> Option<(f64, f64)> {
        self.all_executions().into_iter().find(|x| x.0 == addr).map(|x| x.1)
    }

    /// Every class counted, with its executions and their 95% half-width:
    /// the entry by its uprobe; a class armed beside the entry over whole
    /// calls, entries x its executions per call; in a run of one call, by
    /// chaining (`one_call`); the rest, deeper in the procedure's
    /// loops, by their hits between the hits of a class already counted that
    /// was armed beside them (the ladder of groups, [`groups`]), pooled over
    /// windows ([`crate::chain::ratio_level`]), rung by rung. A count the
    /// windows cannot support is left out ([`Counts::refused`] says why).
    pub fn all_executions(&self) -> Vec<(ElfAddr, (f64, f64))> {
        self.levels().0
    }

    /// The classes whose windows gave a count too uncertain or unrepresentative
    /// to report as counted, each with the reason (they keep calc's estimate).
    pub fn refused(&self) -> Vec<(ElfAddr, String)> {
        self.levels().1
    }

    /// [`Counts::all_executions`] and [`Counts::refused`].
    fn levels(&self) -> (Vec<Level>, Vec<(ElfAddr, String)>) {
        let Some(entries) = self.entries else { return (vec![], vec![]) };
        let mut known = vec![(self.entry, (entries as f64, 0.0))];
        let (mut todo, mut refused) = (Vec::new(), Vec::new());
        for c in self.classes.iter().filter(|c| c.addr != self.entry) {
            let whole = self.per_call_level(c, entries);
            match whole.or_else(|| self.one_call(c.addr).map(Ok)) {
                Some(Ok(l)) => known.push((c.addr, l)),
                Some(Err(why)) => refused.push((c.addr, why)),
                None => todo.push(c.addr),
            }
        }
        loop {
            let before = todo.len();
            let mut i = 0;
            while i < todo.len() {
                match self.level_by_rung_below(todo[i], &known) {
                    Some(Ok(l)) => known.push((todo.swap_remove(i), l)),
                    Some(Err(why)) => refused.push((todo.swap_remove(i), why)),
                    None => i += 1,
                }
            }
            if todo.len() == before {
                return (known, refused);
            }
        }
    }

    /// Entries x the class's executions per whole call in the windows led by
    /// the entry, when those support it ([`supported`]): Err(why) when not,
    /// None when no window held a whole call. A class never run in them
    /// counts 0 with an upper end of three runs in all the calls seen (the
    /// Poisson 95% bound for none observed).
    fn per_call_level(&self, c: &ClassCount, entries: u64) -> Option<Result<(f64, f64), String>> {
        let (r, h) = c.per_entry()?;
        let calls: u64 = c.windows.iter().map(|w| w.1).sum();
        let n = entries as f64;
        let level = if r == 0.0 { (0.0, 3.0 * n / calls.max(1) as f64) } else { (r * n, h * n) };
        Some(supported(&self.spans, self.entry, c.addr, level, c.windows.len()).map(|_| level))
    }

    /// Executions of `addr` from its hits between the hits of the counted
    /// class armed beside it in windows holding the most of that class's
    /// whole intervals (at least [`MIN_INTERVALS`] over two windows or more).
    fn level_by_rung_below(&self, addr: ElfAddr, known: &[(ElfAddr, (f64, f64))]) -> Option<Result<(f64, f64), String>> {
        // Per known anchor: its whole intervals and windows beside addr.
        let mut beside: Vec<(ElfAddr, u64, usize)> = Vec::new();
        for w in self.spans.iter().filter(|w| w.addrs.contains(&addr)) {
            for (a, &anchor) in w.addrs.iter().enumerate().filter(|(_, &x)| x != addr) {
                let n = w.inside.get(a).and_then(|r| r.get(a)).copied().unwrap_or(0);
                if n == 0 || !known.iter().any(|k| k.0 == anchor) {
                    continue;
                }
                match beside.iter_mut().find(|b| b.0 == anchor) {
                    Some(b) => (b.1, b.2) = (b.1 + n, b.2 + 1),
                    None => beside.push((anchor, n, 1)),
                }
            }
        }
        let &(anchor, _, windows) = beside.iter().filter(|b| b.1 >= MIN_INTERVALS && b.2 >= 2).max_by_key(|b| b.1)?;
        let level = known.iter().find(|k| k.0 == anchor)?.1;
        // Executions per interval that vary with the phase of the call (an insertion sort's inner loop grows with
        // the outer index) spread the windows far apart: such a level is no count, whatever its mean.
        let l = crate::chain::ratio_level(&self.spans, addr, anchor, level)?;
        Some(supported(&self.spans, anchor, addr, l, windows).map(|_| l))
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

/// Whether the windows support `level` (executions of `addr` and their 95%
/// half-width, from its hits within whole intervals of `anchor` armed beside
/// it in `windows` windows): Err(why) when they do not. Three ways they fail:
/// one window (no spread to tell the error by); a half-width above
/// [`MAX_RELATIVE_HW`] of the count; or hits of `addr` outside the anchor's
/// whole intervals (before its first hit or after its last in a window)
/// beyond [`OUTSIDE_INTERVALS`] intervals' worth a window. A window cut at
/// random holds about one interval's worth there; far more means the
/// intervals the windows held whole were not those that run `addr`: a
/// window bounded by hits holds short calls whole and cuts the long ones
/// (SQLite's VDBE: a class run 47 million times in long calls counted 0
/// from the short calls the windows held).
fn supported(spans: &[crate::chain::WindowSpan], anchor: ElfAddr, addr: ElfAddr, level: (f64, f64), windows: usize) -> Result<(), String> {
    let (mut whole, mut intervals, mut outside, mut armed) = (0u64, 0u64, 0u64, 0u64);
    for w in spans {
        let (Some(a), Some(c)) = (w.addrs.iter().position(|&x| x == anchor), w.addrs.iter().position(|&x| x == addr)) else { continue };
        let inside = |i: usize, j: usize| w.inside.get(i).and_then(|r| r.get(j)).copied().unwrap_or(0);
        whole += inside(a, c);
        intervals += inside(a, a);
        outside += w.slots.get(c).map_or(0, |s| s.hits).saturating_sub(inside(a, c));
        armed += 1;
    }
    if windows < 2 {
        return Err("one window".into());
    }
    if level.1 > MAX_RELATIVE_HW * level.0 && level.0 > 0.0 {
        return Err(format!("windows spread +-{:.0}%", 100.0 * level.1 / level.0));
    }
    let per_interval = whole as f64 / intervals.max(1) as f64;
    let allowed = OUTSIDE_INTERVALS * armed as f64 * per_interval + OUTSIDE_SLACK;
    if outside as f64 > allowed {
        return Err(format!("{outside} hits outside the whole calls held ({:.1} a call inside): the long calls were cut", per_interval));
    }
    Ok(())
}

/// Hits of a class outside its anchor's whole intervals in a window, in
/// intervals' worth (head and tail together: about one when cut at random),
/// above which the intervals held whole do not represent the class.
pub const OUTSIDE_INTERVALS: f64 = 3.0;
/// ... plus this many hits in all (a rare class's few stray hits).
pub const OUTSIDE_SLACK: f64 = 10.0;

/// The procedure to count: its image, entry and one instruction per class.
#[derive(Clone, Debug)]
pub struct Target {
    pub image: std::path::PathBuf,
    pub entry: ElfAddr,
    pub classes: Vec<ElfAddr>,
    /// Each class's loop depth (0 outside every loop): classes of like depth are armed together.
    pub depths: Vec<u32>,
    /// Whether each class holds a loop's header (it runs every iteration): a deeper group's leader.
    pub heads: Vec<bool>,
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
    /// Why some thread's CPU time came from schedstat, up to a tick late ([`crate::clock`]), if any did.
    pub clock_fallback: Option<String>,
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
/// `clocks` read the threads' CPU time (open them on the command before it
/// runs: its whole CPU time is then exact).
pub fn count_windows(
    root: u32,
    t: &Target,
    budget: &Budget,
    quiet: &[OwnedFd],
    done: &dyn Fn() -> bool,
    entries: &dyn Fn() -> u64,
    mut clocks: ThreadClocks,
) -> io::Result<Windows> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&t.image)?.ino();
    let segs = crate::segments(&t.image)?;
    let groups = groups(t.entry, &t.classes, &t.depths, &t.heads);
    // Per group, its leader's whole intervals and the windows that held any; per window, each class's hits in them.
    let mut held = vec![(0u64, 0usize); groups.len()];
    let mut per_window: Vec<Vec<(Vec<u64>, u64)>> = vec![Vec::new(); groups.len()];
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
            let counted = sequence_window(tid, &rt, &b, &mut clocks);
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
                    // Led by the entry, the hits are per call; led by another class, per interval of it (the
                    // windows' spans keep them for [`Counts::all_executions`]).
                    for (&addr, &h) in g[1..].iter().zip(&hits).filter(|_| g[0] == t.entry) {
                        if let Some(c) = out.classes.iter_mut().find(|c| c.addr == addr) {
                            c.windows.push((h, calls));
                        }
                    }
                    held[k] = (held[k].0 + calls, held[k].1 + 1);
                    per_window[k].push((hits, calls));
                    // Settled: enough whole calls (intervals) in enough windows; the rest of the run goes uncounted.
                    // Led by another class than the entry, also precise (or hopelessly spread).
                    let precise = g[0] == t.entry || held[k].1 >= LADDER_WINDOWS || precise_ratios(&per_window[k]);
                    if held[k].1 >= SETTLED_WINDOWS && held[k].0 >= SETTLED_CALLS && precise {
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
            if let Some(c) = last_tid.and_then(|t| clocks.read(t).map(|c| (t, c))) {
                out.end_cpu.retain(|e| e.0 != c.0);
                out.end_cpu.push(c);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // The last thread's total: its counter keeps it once the thread has exited (schedstat: only until reaped).
    if let Some(c) = last_tid.and_then(|t| clocks.read(t).map(|c| (t, c))) {
        out.end_cpu.retain(|e| e.0 != c.0);
        out.end_cpu.push(c);
    }
    out.clock_fallback = clocks.fallback;
    Ok(out)
}

/// Whether every class's hits per leader interval, pooled over the windows, is within [`SETTLED_PRECISION`].
fn precise_ratios(windows: &[(Vec<u64>, u64)]) -> bool {
    let classes = windows.first().map_or(0, |w| w.0.len());
    (0..classes).all(|c| {
        let pairs: Vec<(f64, f64)> = windows.iter().map(|w| (w.0[c] as f64, w.1 as f64)).collect();
        crate::chain::ratio_with_interval(&pairs).is_some_and(|(r, h)| h <= SETTLED_PRECISION * r)
    })
}

/// A group stops once each of its classes has been counted over this many
/// whole calls in at least [`SETTLED_WINDOWS`] windows: a call that does the
/// same each time is exact after one, and the windows' spread (the interval)
/// needs a few.
pub const SETTLED_CALLS: u64 = 50;
pub const SETTLED_WINDOWS: usize = 5;

/// The entry uprobe is disarmed after this many hits (about 60 s of traps at
/// 15 µs), and the procedure left estimated: Lua's luaH_getshortstr, entered
/// 32 million times a second, kept a 0.5 s run under the uprobe for 30 minutes.
pub const MAX_ENTRY_HITS: u64 = 4_000_000;

/// The hits a window of a settled chained group takes: enough to carry its registers across the run, cheap.
pub const KEEPALIVE_HITS: u64 = 32;

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

/// The groups to arm, a ladder: the classes in order of loop depth
/// (`depths`, parallel to `classes`), up to [`crate::SLOTS`] a group, each
/// group led by the entry (classes outside loops or in the outermost ones:
/// a window holds whole calls; one loop deep first) or else by a loop header
/// a rung up (`heads`: the last before the group's first class, else any
/// class a rung up), and holding classes at most one loop deeper than its leader. A
/// window traps on every hit, so a group of the entry and an inner loop run
/// thousands of times a call holds no whole call within any budget; one
/// loop deeper than the leader, it holds tens of the leader's intervals,
/// and the counts chain up the ladder from the entry's.
pub fn groups(entry: ElfAddr, classes: &[ElfAddr], depths: &[u32], heads: &[bool]) -> Vec<Vec<ElfAddr>> {
    let mut ladder: Vec<(u32, ElfAddr, bool)> = classes
        .iter()
        .enumerate()
        .filter(|x| *x.1 != entry)
        .map(|(i, &c)| (depths.get(i).copied().unwrap_or(0), c, heads.get(i).copied().unwrap_or(false)))
        .collect();
    // One loop deep before outside every loop: the entry's first group holds the outer loops' classes together
    // (a chained count needs its classes armed in the same windows); the rarer classes outside fill the rest.
    ladder.sort_by_key(|x| if x.0 <= 1 { 1 - x.0 } else { x.0 });
    let (mut out, mut cur, mut lead_depth) = (Vec::new(), vec![entry], 0);
    let mut last_depth = 0;
    for i in 0..ladder.len() {
        let (d, c, _) = ladder[i];
        if cur.len() > 1 && (cur.len() == crate::SLOTS || d > lead_depth + 1) {
            let up = ladder[..i].iter().rev().filter(|x| x.0 + 1 == d);
            let header = up.clone().filter(|x| x.2);
            let (lead, depth) = match header.clone().find(|x| x.1 <= c).or_else(|| header.clone().next()).or_else(|| up.clone().next()) {
                _ if d <= 1 => (entry, 0),
                Some(h) => (h.1, h.0),
                None => (*cur.last().expect("a class"), last_depth),
            };
            out.push(std::mem::replace(&mut cur, vec![lead]));
            lead_depth = depth;
        }
        cur.push(c);
        last_depth = d;
    }
    if cur.len() > 1 {
        out.push(cur);
    }
    out
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
    fn groups_climb_the_loop_nest_a_rung_at_a_time() {
        // Checks grouping: outside loops and one loop deep the entry leads each group of up to four (a class equal
        // to the entry is not repeated); deeper, the previous group's deepest class leads, and a group holds
        // classes at most one loop deeper than its leader.
        let e = ElfAddr(0);
        let cs: Vec<ElfAddr> = (0..5).map(ElfAddr).collect();
        let g = groups(e, &cs, &[0; 5], &[]);
        assert_eq!(g, vec![vec![e, ElfAddr(1), ElfAddr(2), ElfAddr(3)], vec![e, ElfAddr(4)]]);
        // A matrix multiply: entry and exit, i loop (depth 1), j loop (2), k loop (3, two classes).
        let a = |x: u64| ElfAddr(x);
        let g = groups(e, &[e, a(1), a(2), a(3), a(4), a(5)], &[0, 0, 1, 2, 3, 3], &[]);
        assert_eq!(g, vec![vec![e, a(2), a(1)], vec![a(2), a(3)], vec![a(3), a(4), a(5)]]);
        // Insertion sort: the outer loop's header (2) leads the inner loop's classes, not the outer loop's rare
        // early exit (5) that sorts last among depth 1.
        let g =
            groups(e, &[e, a(1), a(2), a(3), a(4), a(5), a(6)], &[0, 0, 1, 2, 2, 1, 1], &[false, false, true, false, true, false, false]);
        assert_eq!(g, vec![vec![e, a(2), a(5), a(6)], vec![e, a(1)], vec![a(2), a(3), a(4)]]);
    }

    /// Counts of entry (slot 0) and one class (slot 1) from windows' hit sequences, with `entries` by the uprobe.
    fn counts_from(seqs: &[Vec<u8>], entries: u64) -> Counts {
        let (e, c) = (ElfAddr(0x10), ElfAddr(0x20));
        let mut k = ClassCount { addr: c, windows: vec![] };
        let mut spans = Vec::new();
        for seq in seqs {
            if let Some((hits, calls)) = whole_invocations(seq, 2) {
                k.windows.push((hits[0], calls));
            }
            let mut slots = vec![crate::chain::SlotSpan::default(); 2];
            seq.iter().for_each(|&i| slots[i as usize].add(&[]));
            spans.push(crate::chain::WindowSpan { addrs: vec![e, c], inside: crate::chain::between(seq, 2), slots, ..Default::default() });
        }
        Counts { entry: e, entries: Some(entries), classes: vec![k], spans, ..Default::default() }
    }

    #[test]
    fn counts_the_windows_cannot_support_are_left_out_with_a_reason() {
        // Checks Counts::refused on sequences built by hand. Calls of exactly 5 hits each, windows cut anywhere: 5 per
        // call x 1,000 entries, counted. Short calls of no hits held whole, then a long call of 300 hits cut by the
        // window (a hit-bounded window holds the short calls and cuts the long): 0 per whole call, refused for the
        // hits outside. Calls of 1 or 9 hits in turn, one window: refused (no spread); calls of 1 then 9 in two
        // windows: +-100% spread, refused.
        let call = |n: usize| std::iter::once(0u8).chain(std::iter::repeat_n(1u8, n)).collect::<Vec<u8>>();
        let regular = |calls: usize, cut: usize| -> Vec<u8> { (0..calls).flat_map(|_| call(5)).skip(cut).collect() };
        let c = counts_from(&[regular(40, 3), regular(30, 1), regular(50, 4)], 1000);
        assert_eq!(c.refused(), vec![]);
        let (n, hw) = c.executions(ElfAddr(0x20)).unwrap();
        assert!((n - 5000.0).abs() < 1e-9 && hw < 1e-9, "{n} +- {hw}");
        let biased: Vec<u8> = (0..20).flat_map(|_| call(0)).chain(call(300)).collect();
        let c = counts_from(&[biased.clone(), biased.clone(), biased], 1000);
        assert_eq!(c.executions(ElfAddr(0x20)), None);
        assert!(c.refused()[0].1.contains("outside the whole calls"), "{:?}", c.refused());
        let alternating: Vec<u8> = (0..20).flat_map(|i| call(if i % 2 == 0 { 1 } else { 9 })).collect();
        assert_eq!(counts_from(&[alternating], 1000).refused()[0].1, "one window");
        let (ones, nines): (Vec<u8>, Vec<u8>) = ((0..20).flat_map(|_| call(1)).collect(), (0..20).flat_map(|_| call(9)).collect());
        let c = counts_from(&[ones, nines], 1000);
        assert!(c.refused()[0].1.starts_with("windows spread"), "{:?}", c.refused());
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
        let seq = sequence_window(tid, &addrs, &budget, &mut ThreadClocks::default()).unwrap().seq;
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
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            // Blocked until its CPU-time reader is open (as record's command is gated until its counters are).
            go_rx.recv().unwrap();
            let x = one_long_call(N);
            // The thread stays (idle: its CPU time stands) until read, as an exited process stays until reaped.
            done_tx.send(()).unwrap();
            stay_rx.recv().unwrap();
            x
        });
        let tid = rx.recv().unwrap();
        let mut clocks = ThreadClocks::open(&[tid]);
        go_tx.send(()).unwrap();
        let rt = |f: fn(u64) -> u64| RuntimeAddr(f as usize as u64);
        let addrs = [rt(one_long_call), rt(step)];
        let elf = [ElfAddr(addrs[0].0), ElfAddr(addrs[1].0)];
        let budget = Budget { max_hits: 300, max_window: Duration::from_secs(1), gap: Duration::ZERO };
        let (mut spans, mut end) = (Vec::new(), 0);
        while done_rx.try_recv().is_err() {
            let Ok(w) = sequence_window(tid, &addrs, &budget, &mut clocks) else { break };
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
                end = clocks.read(tid).unwrap_or(end);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        end = clocks.read(tid).unwrap_or(end);
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
