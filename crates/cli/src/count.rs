//! `record --count PROCEDURE`: exact execution counts of a procedure's
//! frequency classes while its command runs (`loupe_probe::count`), kept in
//! DB/counts/ for `loupe calc`, which uses them before any estimate.

use crate::procedure::Mem;
use anyhow::{anyhow, Context, Result};
use loupe_model::ImageId;
use loupe_probe::clock::ThreadClocks;
use loupe_probe::count::{self, Budget, Counts, EntryCounter, Target};
use loupe_probe::ElfAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Where the counts of `procedure` in the image at `image` are kept.
pub fn counts_path(db: &Path, image: &str, procedure: &str) -> PathBuf {
    let base = Path::new(image).file_name().map_or_else(|| image.to_string(), |n| n.to_string_lossy().into_owned());
    let safe = |s: &str| s.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect::<String>();
    db.join("counts").join(format!("{}@{}.json", safe(procedure), safe(&base)))
}

/// A procedure counted: its name, image and entry.
struct Counting2 {
    procedure: String,
    image: PathBuf,
    entry: ElfAddr,
}

/// One procedure being counted: its entry uprobe and the thread arming its windows.
struct Counting {
    procedure: String,
    image: PathBuf,
    entry: ElfAddr,
    entries: Arc<EntryCounter>,
    /// Set when the entry uprobe was disarmed at [`count::MAX_ENTRY_HITS`]: the run's entries are then unknown.
    overrun: Arc<AtomicBool>,
    windows: JoinHandle<std::io::Result<count::Windows>>,
}

/// Counting in progress for a command's procedures.
pub struct Counters {
    done: Arc<AtomicBool>,
    each: Vec<Counting>,
    started: Instant,
    /// The command: the main thread whose CPU time ends a chained count.
    pid: u32,
}

/// Opens the entry uprobes on the gated child `pid` (before it runs, so no
/// entry is missed) and starts the windows, for each procedure of the
/// executable `exe`, or of the image named after an `@` (`PROC@IMAGE`: a
/// path, or a file name looked up in PATH, such as a program the command
/// runs or a shared library it loads; its processes among the command's
/// descendants are counted).
/// `pause` are the recording's sampling events, disabled while a window is armed.
pub fn start(exe: &Path, pid: i32, procedures: &[String], hits: u64, pause: Vec<std::os::fd::OwnedFd>) -> Result<Counters> {
    let pause = Arc::new(pause);
    let mut syms = loupe_symbolize::Symbolizer::new(crate::symbols::options());
    let done = Arc::new(AtomicBool::new(false));
    let budget = Budget { max_hits: hits, ..Budget::default() };
    let mut each = Vec::new();
    for spec in procedures {
        let (name, file) = match spec.rsplit_once('@') {
            Some((n, i)) if !n.is_empty() && !i.is_empty() => {
                (n, crate::collect::find_command(i).ok_or_else(|| anyhow!("--count {spec}: no image {i} (a path, or a file in PATH)"))?)
            }
            _ => (spec.as_str(), exe.to_path_buf()),
        };
        let path = file.canonicalize().with_context(|| format!("cannot read {}", file.display()))?;
        let image = ImageId::elf(&path.to_string_lossy(), loupe_symbolize::Symbolizer::read_build_id(&path));
        let code = syms.code(&image).map_err(|r| anyhow!("cannot read {}: {r}", path.display()))?;
        let segs = loupe_probe::segments(&path).with_context(|| format!("cannot read the segments of {}", path.display()))?;
        let p = crate::procedure::find_procedure(&code, name, &image.path)?;
        let bytes = code.bytes(p.start, p.size).ok_or_else(|| anyhow!("{name} has no bytes in {}", path.display()))?;
        let ladder = loupe_calc::counting_ladder(p.start, bytes, &Mem(&code));
        let points: Vec<ElfAddr> = ladder.iter().map(|x| ElfAddr(x.0)).collect();
        let (depths, heads) = ladder.iter().map(|x| (x.1, x.2)).unzip();
        let entry = ElfAddr(p.start);
        let off = count::file_offset(&segs, entry).ok_or_else(|| anyhow!("{name} is in no loadable segment of {}", path.display()))?;
        // In the command's own executable, per task from its exec on. In another image, on every CPU (every
        // process that runs it): an inherited uprobe event is set up again in each forked child from the path's
        // address in the child's memory, where it is not, and the fork fails ("Cannot fork").
        let scope = (path == exe.canonicalize().unwrap_or_default()).then_some(pid);
        let entries =
            Arc::new(EntryCounter::open(&path, off, scope).with_context(|| format!("cannot count the entries of {name} (uprobe)"))?);
        let target = Target { image: path.clone(), entry, classes: points, depths, heads };
        let (d, quiet, e, e2) = (done.clone(), pause.clone(), entries.clone(), entries.clone());
        let overrun = Arc::new(AtomicBool::new(false));
        let over = overrun.clone();
        // Opened while the command is gated: its main thread's whole CPU time is counted.
        let clocks = ThreadClocks::open(&[pid as u32]);
        let windows = std::thread::spawn(move || {
            // A procedure entered tens of millions of times (Lua's luaH_getshortstr: 32 million a second) would spend
            // the run in its entry uprobe (15 µs a hit): past the cap it is removed and the windows stop.
            let done = move || {
                if !over.load(Ordering::Relaxed) && e2.read().is_ok_and(|n| n >= count::MAX_ENTRY_HITS) {
                    e2.close();
                    over.store(true, Ordering::Relaxed);
                }
                d.load(Ordering::Relaxed) || over.load(Ordering::Relaxed)
            };
            let entries = move || e.read().unwrap_or(u64::MAX);
            let w = count::count_windows(pid as u32, &target, &budget, &quiet, &done, &entries, clocks);
            // The windows may end long before the run (every group settled): the uprobe stays, and so does its cap.
            while !done() {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            w
        });
        each.push(Counting { procedure: p.name, image: path.clone(), entry, entries, overrun, windows });
    }
    Ok(Counters { done, each, started: Instant::now(), pid: pid as u32 })
}

impl Counters {
    /// Stops the windows (the command has exited: its breakpoints went with
    /// its threads) and waits for them, so that none re-enables sampling
    /// after the recording has stopped it.
    pub fn stop(self) -> Result<Stopped> {
        self.done.store(true, Ordering::Relaxed);
        let wall = self.started.elapsed().as_secs_f64();
        let mut each = Vec::new();
        let reaped = children_cpu_ns();
        for c in self.each {
            let mut w = c.windows.join().map_err(|_| anyhow!("the counting thread of {} panicked", c.procedure))??;
            // Read from schedstat, the windows' last reading may be stale (gone once the command was reaped); its
            // reaped CPU time is final. Only its main thread is the whole process. A task clock read last after the
            // exit is final itself, and another clock (the scheduler's) would part from it by a fraction of a percent.
            if let (Some(t), Some(e), Some(_)) = (reaped, w.end_cpu.iter_mut().find(|e| e.0 == self.pid), &w.clock_fallback) {
                e.1 = e.1.max(t);
            }
            let overrun = c.overrun.load(Ordering::Relaxed);
            each.push((c.procedure, c.image, c.entry, c.entries, overrun, w));
        }
        Ok(Stopped { each, wall })
    }
}

/// The CPU time (ns) of the reaped children of loupe: `record`'s command.
fn children_cpu_ns() -> Option<u64> {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN is a valid selector.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return None;
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Some(ns(ru.ru_utime) + ns(ru.ru_stime))
}

/// Counting over: what each procedure's windows counted.
pub struct Stopped {
    each: Vec<(String, PathBuf, ElfAddr, Arc<EntryCounter>, bool, count::Windows)>,
    wall: f64,
}

impl Stopped {
    /// Reads and removes the uprobes and writes the counts under `db`.
    pub fn finish(self, db: &Path) -> Result<()> {
        let wall = self.wall;
        for (procedure, image, entry, counter, overrun, w) in self.each {
            let c = Counting2 { procedure, image, entry };
            if let Some(why) = &w.clock_fallback {
                eprintln!("loupe: counting {}: {why}", c.procedure);
            }
            let not_counted = overrun.then(|| {
                format!(
                    "its entry uprobe was disarmed after {} hits (about {:.0} s of traps at 15 us): the run's entries are unknown",
                    count::MAX_ENTRY_HITS,
                    count::MAX_ENTRY_HITS as f64 * 15e-6
                )
            });
            let entries = counter.read().ok().filter(|_| !overrun);
            drop(counter);
            if let Some(why) = &not_counted {
                eprintln!("loupe: counting {}: {why}", c.procedure);
            }
            let counts = Counts {
                procedure: c.procedure.clone(),
                image: c.image.to_string_lossy().into_owned(),
                entry: c.entry,
                entries,
                classes: w.classes,
                spans: w.spans,
                end_cpu: w.end_cpu,
                armed_secs: w.armed_secs,
                traps: w.traps,
                wall_secs: wall,
                not_counted,
            };
            let path = counts_path(db, &counts.image, &counts.procedure);
            counts.save(&path).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
            let counted = counts.all_executions();
            let whole: usize = counts.classes.iter().filter(|k| counted.iter().any(|c| c.0 == k.addr)).count();
            eprintln!(
                "loupe: counted {}: {} entries, {whole} of {} classes in {} windows; armed {:.2} s of {wall:.2} s ({:.0}%), {} breakpoint traps \
                 (about {:.2} s at 17 us) + {} uprobe hits; counts in {}",
                counts.procedure,
                entries.map_or("?".into(), |e| e.to_string()),
                counts.classes.len(),
                w.windows,
                w.armed_secs,
                100.0 * w.armed_secs / wall.max(1e-9),
                w.traps,
                w.traps as f64 * 17e-6,
                entries.unwrap_or(0),
                path.display()
            );
        }
        Ok(())
    }
}
