//! Object access histories (DProf §4.3): for objects chosen by allocation
//! site and size, every access to chosen offsets, from allocation to free,
//! with the instruction, thread, CPU and time of each.
//!
//! How an object is armed before its first use: the allocation probe that
//! returns a matching block stops the allocating process (SIGSTOP sent to
//! the thread from the uretprobe, taken before it executes one more user
//! instruction); user space opens breakpoints on every CPU for the chosen
//! offsets (at most four: the debug registers) and sends SIGCONT. The free
//! probe ends the history; accesses stamped after the free's entry (the
//! allocator's own writes into the freed block) are dropped. One object is
//! watched at a time, and the next one only once the cost so far — the time
//! the process was stopped plus hits times the calibrated cost of one
//! breakpoint trap — is within the budget's fraction of the elapsed time.
//!
//! Histories are appended as JSON lines to `<db>/objects/history.jsonl`
//! (a torn last line is dropped on reading).

use crate::bp::{self, Hit, Watch};
use loupe_perf::thread_cpu_ns;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const FILE: &str = "objects/history.jsonl";

/// Which objects to watch and how much it may cost.
#[derive(Clone, Debug)]
pub struct HistoryOptions {
    /// Function whose calls to the allocator allocate the objects (any image of the target).
    pub site_function: Option<String>,
    /// Exact size in bytes of the objects.
    pub size: Option<u64>,
    /// (offset, length) ranges to watch, each length 1, 2, 4 or 8 and aligned to it; at most 4.
    pub offsets: Vec<(u64, u64)>,
    pub max_objects: usize,
    /// Fraction of elapsed time the histories may cost the target.
    pub budget: f64,
    /// An object not freed within this long is let go.
    pub max_watch: Duration,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            site_function: None,
            size: None,
            offsets: vec![(0, 8)],
            max_objects: 100,
            budget: 0.05,
            max_watch: Duration::from_secs(2),
        }
    }
}

/// One line of the history file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// A watched object, at its allocation. `setup_ns`: how long its process was stopped to arm it.
    Object {
        id: u64,
        pid: u32,
        tid: u32,
        cpu: u32,
        base: u64,
        size: u64,
        site: u64,
        alloc_ns: u64,
        setup_ns: u64,
        offsets: Vec<(u64, u64)>,
    },
    /// One access: `ip` is the instruction after it (breakpoints trap after the access).
    Hit { id: u64, offset: u64, ip: u64, tid: u32, cpu: u32, time_ns: u64 },
    /// The end of a history: `freed` (with the free's caller as `site`), `timeout` or `stopped`.
    End { id: u64, why: String, time_ns: u64, tid: u32, cpu: u32, site: u64 },
    /// Run-wide figures: the calibrated cost of one breakpoint trap.
    Calibration { hit_ns: u64 },
}

/// A whole history, assembled from its lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    pub object: Line,
    pub hits: Vec<Line>,
    pub end: Option<Line>,
}

/// Reads `<db>/objects/history.jsonl`: histories in id order, and the calibrated hit cost if recorded.
pub fn read(db_dir: &Path) -> std::io::Result<(Vec<History>, Option<u64>)> {
    let text = std::fs::read_to_string(db_dir.join(FILE))?;
    Ok(assemble(text.lines().filter_map(|l| serde_json::from_str::<Line>(l).ok())))
}

/// Groups lines into histories (hits sorted by time).
pub fn assemble(lines: impl Iterator<Item = Line>) -> (Vec<History>, Option<u64>) {
    let mut by_id: std::collections::BTreeMap<u64, History> = Default::default();
    let mut hit_ns = None;
    for l in lines {
        match &l {
            Line::Object { id, .. } => {
                by_id.insert(*id, History { object: l.clone(), hits: Vec::new(), end: None });
            }
            Line::Hit { id, .. } => {
                if let Some(h) = by_id.get_mut(id) {
                    h.hits.push(l.clone());
                }
            }
            Line::End { id, .. } => {
                if let Some(h) = by_id.get_mut(id) {
                    h.end = Some(l.clone());
                }
            }
            Line::Calibration { hit_ns: n } => hit_ns = Some(*n),
        }
    }
    let mut v: Vec<History> = by_id.into_values().collect();
    for h in &mut v {
        h.hits.sort_by_key(|l| if let Line::Hit { time_ns, .. } = l { *time_ns } else { 0 });
    }
    (v, hit_ns)
}

/// The cost of one breakpoint trap on this machine, in ns of this thread's
/// CPU time (the trap is handled on it, so waiting for a busy CPU does not
/// count): writes to a watched word against the same writes unwatched.
pub fn calibrate_hit_ns() -> std::io::Result<u64> {
    const N: u64 = 4000;
    let cell = Box::into_raw(Box::new(0u64));
    let time_writes = |p: *mut u64| {
        let t = thread_cpu_ns();
        for i in 0..N {
            // SAFETY: p is the live boxed u64 allocated above.
            unsafe { std::ptr::write_volatile(p, i) };
        }
        thread_cpu_ns() - t
    };
    let plain = time_writes(cell);
    let watched = Watch::open(cell as u64, 8, bp::HW_BREAKPOINT_W, &loupe_perf::online_cpus()).map(|w| {
        let t = time_writes(cell);
        w.disable();
        t
    });
    // SAFETY: cell came from Box::into_raw and is freed once.
    drop(unsafe { Box::from_raw(cell) });
    Ok(watched?.saturating_sub(plain) / N)
}

/// The object being watched.
struct Current {
    id: u64,
    pid: u32,
    base: u64,
    start_ns: u64,
    setup_ns: u64,
    hits: u64,
    /// Hits read from the rings but stamped after the last ring-buffer read
    /// of the probes' events: a free that precedes them may still be unread.
    held: Vec<Line>,
}

/// Watches one object at a time inside the allocation tracker's thread.
pub struct Watcher {
    pub opts: HistoryOptions,
    out: std::fs::File,
    /// One breakpoint per watched range, opened idle up front and moved onto each object.
    slots: Vec<(u64, Watch)>,
    hit_ns: u64,
    current: Option<Current>,
    next_id: u64,
    /// Cost so far and when it may arm again.
    cost_ns: u64,
    started_ns: u64,
    pub objects: u64,
    pub errors: Vec<String>,
}

impl Watcher {
    pub fn new(db_dir: &Path, opts: HistoryOptions, now_ns: u64) -> std::io::Result<Watcher> {
        if opts.offsets.is_empty() || opts.offsets.len() > 4 {
            return Err(std::io::Error::other("watch 1 to 4 offsets (the CPU has four debug registers)"));
        }
        let path: PathBuf = db_dir.join(FILE);
        loupe_files::create_dir_all(path.parent().unwrap())?;
        let out = loupe_files::append(&path)?;
        let hit_ns = calibrate_hit_ns()?;
        let cpus = loupe_perf::online_cpus();
        // Parked on an address nobody maps (page 1), disabled until an object is armed.
        let slots =
            opts.offsets.iter().map(|&(off, len)| Ok((off, Watch::open_idle(0x1000, len, &cpus)?))).collect::<std::io::Result<Vec<_>>>()?;
        let mut w =
            Watcher { opts, out, slots, hit_ns, current: None, next_id: 1, cost_ns: 0, started_ns: now_ns, objects: 0, errors: Vec::new() };
        w.write(&Line::Calibration { hit_ns });
        Ok(w)
    }

    fn write(&mut self, l: &Line) {
        let mut s = serde_json::to_string(l).expect("history lines serialize");
        s.push('\n');
        if let Err(e) = self.out.write_all(s.as_bytes()) {
            self.errors.push(format!("writing the history: {e}"));
        }
    }

    /// Whether the tracker should ask the probes for one more object now.
    pub fn wants_object(&self, now_ns: u64) -> bool {
        self.current.is_none()
            && (self.objects as usize) < self.opts.max_objects
            && within_budget(self.cost_ns, now_ns.saturating_sub(self.started_ns), self.opts.budget)
    }

    pub fn watching(&self) -> Option<u64> {
        self.current.as_ref().map(|c| c.base)
    }

    /// A matching object was allocated and its process stopped: arm, resume, record.
    #[allow(clippy::too_many_arguments)]
    pub fn armed(&mut self, pid: u32, tid: u32, cpu: u32, base: u64, size: u64, site: u64, alloc_ns: u64, now: impl Fn() -> u64) {
        for (off, w) in &mut self.slots {
            if let Err(e) = w.retarget(base + *off, w.len, bp::HW_BREAKPOINT_RW) {
                self.errors.push(format!("breakpoint at +{off}: {e}"));
            }
        }
        // SAFETY: kill has no memory preconditions; the pid is the stopped process.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        let setup_ns = now().saturating_sub(alloc_ns);
        let id = self.next_id;
        self.next_id += 1;
        self.objects += 1;
        self.cost_ns += setup_ns;
        let offsets = self.opts.offsets.clone();
        self.write(&Line::Object { id, pid, tid, cpu, base, size, site, alloc_ns, setup_ns, offsets });
        self.current = Some(Current { id, pid, base, start_ns: alloc_ns, setup_ns, hits: 0, held: Vec::new() });
    }

    /// Records the hits queued so far; lets an object go after `max_watch`.
    /// Returns true when it let one go (the probes must forget it too).
    /// `safe_ns`: when the probes' events were last read; every free before
    /// it has been seen, so hits before it belong to the object.
    pub fn poll(&mut self, now_ns: u64, safe_ns: u64) -> bool {
        self.drain(safe_ns);
        // A field written in a hot loop traps on every iteration: stop once its traps pass the budget.
        let over = self.current.as_ref().is_some_and(|c| {
            let before = self.cost_ns.saturating_sub(c.setup_ns);
            over_budget(before, c.hits + c.held.len() as u64, self.hit_ns, now_ns.saturating_sub(self.started_ns), self.opts.budget)
        });
        if over {
            self.finish(BUDGET, now_ns, 0, 0, 0);
            return true;
        }
        let timed_out = self.current.as_ref().is_some_and(|c| now_ns.saturating_sub(c.start_ns) > self.opts.max_watch.as_nanos() as u64);
        if timed_out {
            self.finish("timeout", now_ns, 0, 0, 0);
        }
        timed_out
    }

    /// Writes the hits stamped before `until_ns`, holds later ones back.
    fn drain(&mut self, until_ns: u64) {
        let Some(mut c) = self.current.take() else { return };
        for (off, w) in &mut self.slots {
            let mut hits: Vec<Hit> = Vec::new();
            w.drain(&mut hits);
            for h in hits.into_iter().filter(|h| h.pid == c.pid && h.time_ns >= c.start_ns) {
                c.held.push(Line::Hit { id: c.id, offset: *off, ip: h.ip, tid: h.tid, cpu: h.cpu, time_ns: h.time_ns });
            }
        }
        let stamp = |l: &Line| if let Line::Hit { time_ns, .. } = l { *time_ns } else { 0 };
        let (lines, held): (Vec<Line>, Vec<Line>) = c.held.drain(..).partition(|l| stamp(l) < until_ns);
        c.held = held;
        c.hits += lines.len() as u64;
        for l in &lines {
            self.write(l);
        }
        self.current = Some(c);
    }

    /// The watched object was freed (or is let go): last hits, end line, cost.
    pub fn finish(&mut self, why: &str, time_ns: u64, tid: u32, cpu: u32, site: u64) {
        if self.current.is_some() {
            for (_, w) in &self.slots {
                w.disable();
            }
        }
        self.drain(time_ns);
        let Some(c) = self.current.take() else { return };
        self.cost_ns += c.hits * self.hit_ns;
        let _ = c.setup_ns;
        self.write(&Line::End { id: c.id, why: why.to_string(), time_ns, tid, cpu, site });
    }

    pub fn hit_ns(&self) -> u64 {
        self.hit_ns
    }
}

/// The end reason of an object let go because its traps passed the budget.
pub const BUDGET: &str = "trap budget reached";

/// Whether the object being watched must be let go: the cost before it
/// (its own set-up aside, already paid) plus its traps so far exceed the
/// budget's share of the time since collection began.
pub fn over_budget(cost_before_ns: u64, hits: u64, hit_ns: u64, elapsed_ns: u64, budget: f64) -> bool {
    !within_budget(cost_before_ns + hits * hit_ns, elapsed_ns, budget)
}

/// Whether collection that has cost the target `cost_ns` over `elapsed_ns`
/// may take one more object: the cost stays within `budget` of the time.
pub fn within_budget(cost_ns: u64, elapsed_ns: u64, budget: f64) -> bool {
    cost_ns as f64 <= budget * elapsed_ns as f64
}

/// The runtime address range of function `name` in a process, from its
/// maps text and the symbol tables of its mapped files.
pub fn function_range(maps: &str, name: &str) -> Option<(u64, u64)> {
    let mut seen = std::collections::HashSet::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(path) = f.get(5).filter(|p| p.starts_with('/')) else { continue };
        if !seen.insert(*path) {
            continue;
        }
        let Ok(bytes) = std::fs::read(path) else { continue };
        let Some((off, size)) = symbol_file_range(&bytes, name) else { continue };
        // The mapping of this file that covers that file offset.
        for l in maps.lines().filter(|l| l.ends_with(*path)) {
            let g: Vec<&str> = l.split_whitespace().collect();
            let (s, e) = g[0].split_once('-')?;
            let (start, end, pgoff) =
                (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?, u64::from_str_radix(g[2], 16).ok()?);
            if off >= pgoff && off < pgoff + (end - start) {
                let lo = start + off - pgoff;
                return Some((lo, lo + size));
            }
        }
    }
    None
}

/// File offset and size of a function symbol.
fn symbol_file_range(elf: &[u8], name: &str) -> Option<(u64, u64)> {
    use object::{Object, ObjectSegment, ObjectSymbol};
    let file = object::File::parse(elf).ok()?;
    let sym = file.symbols().chain(file.dynamic_symbols()).find(|s| s.name().ok() == Some(name) && s.size() > 0)?;
    let seg = file.segments().find(|s| sym.address() >= s.address() && sym.address() < s.address() + s.size())?;
    Some((sym.address() - seg.address() + seg.file_range().0, sym.size()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembles_histories_from_interleaved_lines_and_sorts_hits_by_time() {
        // Checks grouping by id, hit order by time, the end line and the calibration figure.
        let lines = vec![
            Line::Calibration { hit_ns: 900 },
            Line::Object {
                id: 1,
                pid: 5,
                tid: 5,
                cpu: 0,
                base: 0x1000,
                size: 64,
                site: 0xa,
                alloc_ns: 10,
                setup_ns: 3,
                offsets: vec![(0, 8)],
            },
            Line::Hit { id: 1, offset: 0, ip: 0xb, tid: 6, cpu: 1, time_ns: 30 },
            Line::Hit { id: 1, offset: 0, ip: 0xc, tid: 5, cpu: 0, time_ns: 20 },
            Line::End { id: 1, why: "freed".into(), time_ns: 40, tid: 6, cpu: 1, site: 0xd },
            Line::Hit { id: 9, offset: 0, ip: 0xe, tid: 5, cpu: 0, time_ns: 20 },
        ];
        let (h, cal) = assemble(lines.into_iter());
        assert_eq!((h.len(), cal), (1, Some(900)));
        let ips: Vec<u64> = h[0].hits.iter().map(|l| if let Line::Hit { ip, .. } = l { *ip } else { 0 }).collect();
        assert_eq!(ips, vec![0xc, 0xb]);
        assert!(matches!(&h[0].end, Some(Line::End { why, .. }) if why == "freed"));
    }

    #[test]
    fn takes_the_next_object_only_once_the_cost_fits_the_budget() {
        // Checks the rate limit: 1 ms of cost at a 5% budget needs 20 ms of elapsed time.
        assert!(!within_budget(1_000_000, 19_999_999, 0.05));
        assert!(within_budget(1_000_000, 20_000_000, 0.05));
        assert!(within_budget(0, 0, 0.05));
    }

    #[test]
    fn a_hot_watch_is_let_go_once_its_traps_pass_the_budget() {
        // Checks the mid-watch limit: at 5% of 100 ms (5 ms), 299 traps of 16.7 us fit and 300 do not; earlier objects' cost counts.
        assert!(!over_budget(0, 299, 16_700, 100_000_000, 0.05));
        assert!(over_budget(0, 300, 16_700, 100_000_000, 0.05));
        assert!(over_budget(4_000_000, 60, 16_700, 100_000_000, 0.05));
    }

    #[test]
    fn serializes_lines_with_a_kind_tag() {
        // Checks the JSON shape of a hit line (what other tools read).
        let s = serde_json::to_string(&Line::Hit { id: 2, offset: 8, ip: 16, tid: 3, cpu: 1, time_ns: 99 }).unwrap();
        assert_eq!(s, r#"{"kind":"hit","id":2,"offset":8,"ip":16,"tid":3,"cpu":1,"time_ns":99}"#);
    }

    #[test]
    fn finds_a_function_of_this_test_binary_in_its_own_maps() {
        // Checks symbol -> file offset -> runtime range on this process: the range holds the function's address.
        #[no_mangle]
        #[inline(never)]
        extern "C" fn loupe_objects_probe_target() -> u64 {
            std::hint::black_box(42)
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let (lo, hi) = function_range(&maps, "loupe_objects_probe_target").expect("found");
        let f = loupe_objects_probe_target as *const () as u64;
        assert!(lo <= f && f < hi, "{lo:#x}..{hi:#x} vs {f:#x}");
        assert_eq!(loupe_objects_probe_target(), 42);
    }
}
