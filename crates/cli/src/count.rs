//! `record --count PROCEDURE`: exact execution counts of a procedure's
//! frequency classes while its command runs (`loupe_probe::count`), kept in
//! DB/counts/ for `loupe calc`, which uses them before any estimate.

use crate::procedure::Mem;
use anyhow::{anyhow, Context, Result};
use loupe_model::ImageId;
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
/// executable `exe`.
/// `pause` are the recording's sampling events, disabled while a window is armed.
pub fn start(exe: &Path, pid: i32, procedures: &[String], hits: u64, pause: Vec<std::os::fd::OwnedFd>) -> Result<Counters> {
    let pause = Arc::new(pause);
    let mut syms = loupe_symbolize::Symbolizer::new(crate::symbols::options());
    let path = exe.canonicalize().with_context(|| format!("cannot read {}", exe.display()))?;
    let image = ImageId::elf(&path.to_string_lossy(), loupe_symbolize::Symbolizer::read_build_id(&path));
    let code = syms.code(&image).map_err(|r| anyhow!("cannot read {}: {r}", path.display()))?;
    let segs = loupe_probe::segments(&path).with_context(|| format!("cannot read the segments of {}", path.display()))?;
    let done = Arc::new(AtomicBool::new(false));
    let budget = Budget { max_hits: hits, ..Budget::default() };
    let mut each = Vec::new();
    for name in procedures {
        let p = crate::procedure::find_procedure(&code, name, &image.path)?;
        let bytes = code.bytes(p.start, p.size).ok_or_else(|| anyhow!("{name} has no bytes in {}", path.display()))?;
        let points: Vec<ElfAddr> = loupe_calc::counting_points(p.start, bytes, &Mem(&code)).into_iter().map(ElfAddr).collect();
        let entry = ElfAddr(p.start);
        let off = count::file_offset(&segs, entry).ok_or_else(|| anyhow!("{name} is in no loadable segment of {}", path.display()))?;
        let entries =
            Arc::new(EntryCounter::open(&path, off, Some(pid)).with_context(|| format!("cannot count the entries of {name} (uprobe)"))?);
        let target = Target { image: path.clone(), entry, classes: points };
        let (d, quiet, e) = (done.clone(), pause.clone(), entries.clone());
        let windows = std::thread::spawn(move || {
            count::count_windows(pid as u32, &target, &budget, &quiet, &move || d.load(Ordering::Relaxed), &move || {
                e.read().unwrap_or(u64::MAX)
            })
        });
        each.push(Counting { procedure: p.name, image: path.clone(), entry, entries, windows });
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
            // The command has been reaped: its CPU time is final there, where the windows' last reading may be
            // stale (their thread can be starved on a loaded machine). Only its main thread is the whole process.
            if let (Some(t), Some(e)) = (reaped, w.end_cpu.iter_mut().find(|e| e.0 == self.pid)) {
                e.1 = e.1.max(t);
            }
            each.push((c.procedure, c.image, c.entry, c.entries, w));
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
    each: Vec<(String, PathBuf, ElfAddr, Arc<EntryCounter>, count::Windows)>,
    wall: f64,
}

impl Stopped {
    /// Reads and removes the uprobes and writes the counts under `db`.
    pub fn finish(self, db: &Path) -> Result<()> {
        let wall = self.wall;
        for (procedure, image, entry, counter, w) in self.each {
            let c = Counting2 { procedure, image, entry };
            let entries = counter.read().ok();
            drop(counter);
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
            };
            let path = counts_path(db, &counts.image, &counts.procedure);
            counts.save(&path).map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
            let whole: usize = counts.classes.iter().filter(|k| counts.executions(k.addr).is_some()).count();
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
