//! `loupe locks`: per-lock hold time, wait time, acquisitions and the
//! fraction of time held, for one command or the whole machine; locks are
//! named by data symbol (static) or by where they were initialized (heap).

use crate::flags::{Format, LocksArgs};
use crate::symbols::Symbols;
use anyhow::{bail, Context, Result};
use loupe_analysis::SymbolSource;
use loupe_locks::name::{data_symbol, locate, parse_maps, Mapping};
use loupe_locks::{find_libc, LockRecord, LockTracer};
use loupe_model::{ImageId, ImageOffset};
use loupe_perf::GatedChild;
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

struct Named {
    rec: LockRecord,
    name: String,
}

/// One lock as printed, and as kept in a database's `locks/` folder.
#[derive(serde::Serialize, serde::Deserialize)]
struct Row {
    name: String,
    kind: String,
    pid: u32,
    address: String,
    acquisitions: u64,
    hold_ns: u64,
    wait_ns: u64,
    max_hold_ns: u64,
    max_wait_ns: u64,
}

impl From<&Named> for Row {
    fn from(n: &Named) -> Row {
        let r = &n.rec;
        Row {
            name: n.name.clone(),
            kind: r.kind.name().into(),
            pid: r.tgid,
            address: format!("0x{:x}", r.addr),
            acquisitions: r.acquisitions,
            hold_ns: r.hold_ns,
            wait_ns: r.wait_ns,
            max_hold_ns: r.max_hold_ns,
            max_wait_ns: r.max_wait_ns,
        }
    }
}

/// A whole result, as kept: every lock, no limit.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    duration_s: f64,
    dropped: u64,
    locks: Vec<Row>,
}

pub fn run(a: LocksArgs, out: &mut dyn Write) -> Result<u8> {
    if let (Some(db), true, None) = (&a.db, a.command.is_empty(), a.duration) {
        return show_kept(db, &a, out);
    }
    trace(a, out)
}

fn trace(a: LocksArgs, out: &mut dyn Write) -> Result<u8> {
    use loupe_collector::privilege::{require_bpf, Privileges};
    require_bpf(&Privileges::current(), "loupe locks")?;
    let libc = match &a.libc {
        Some(p) => p.clone(),
        None => find_libc().context("cannot find the C library in /proc/self/maps; name it with --libc")?,
    };
    let (status, elapsed, maps, tracer) = if a.command.is_empty() {
        let Some(secs) = a.duration else {
            bail!("give a command after `--`, or --duration SECONDS for every process (or --db DIR to show the result kept there)")
        };
        let (tracer, warnings) = LockTracer::start(&libc, None)?;
        warn(&warnings);
        let _progress = crate::progress::Progress::spinner(&format!("tracing the locks of every process for {secs} s"));
        let t0 = Instant::now();
        let mut maps = HashMap::new();
        // Processes may exit before the end: keep each one's map from when its locks first show up.
        while t0.elapsed().as_secs_f64() < secs {
            std::thread::sleep(Duration::from_secs_f64((secs - t0.elapsed().as_secs_f64()).clamp(0.0, 0.1)));
            snapshot_new(&tracer, &mut maps);
        }
        (0, t0.elapsed(), maps, tracer)
    } else {
        trace_command(&a.command, &libc)?
    };
    // After the traced program ended: its output is never mixed with the spinner.
    let progress = crate::progress::Progress::spinner("reading and naming the lock records");
    let mut records = tracer.read()?;
    records.sort_by_key(|r| std::cmp::Reverse(r.hold_ns));
    let mut syms = Symbols::for_dbs(&[]);
    let mut elves = HashMap::new();
    let named: Vec<Row> = records.into_iter().map(|rec| Row::from(&name(rec, &maps, &mut syms, &mut elves))).collect();
    drop(progress);
    let dropped = tracer.dropped();
    if dropped > 0 {
        eprintln!("loupe: {dropped} lock events found the probe tables full and were not counted");
    }
    if let Some(db) = &a.db {
        keep(db, &Kept { duration_s: elapsed.as_secs_f64(), dropped, locks: named })?;
        return show_kept(db, &a, out).map(|_| status);
    }
    print(out, &a, &named, elapsed, dropped)?;
    Ok(status)
}

fn print(out: &mut dyn Write, a: &LocksArgs, rows: &[Row], elapsed: Duration, dropped: u64) -> Result<()> {
    match a.format {
        Format::Json => print_json(out, rows, elapsed, dropped, a.limit),
        Format::Text => print_text(out, rows, elapsed, a.limit),
    }
}

/// Results are kept one file each, named by when they were taken, so the
/// newest is the last name.
fn keep(db: &std::path::Path, kept: &Kept) -> Result<()> {
    loupe_store::Database::open(db)?;
    let dir = db.join("locks");
    loupe_files::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let path = dir.join(format!("{:020}-{}.json", now.as_nanos(), std::process::id()));
    loupe_files::write(&path, serde_json::to_vec(kept)?).with_context(|| format!("cannot write {}", path.display()))
}

/// No lock result is kept in the database (`loupe serve` answers 404).
#[derive(Debug)]
pub struct NoKeptResult(String);

impl std::fmt::Display for NoKeptResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NoKeptResult {}

/// The result kept last in `db`.
fn show_kept(db: &std::path::Path, a: &LocksArgs, out: &mut dyn Write) -> Result<u8> {
    loupe_store::Database::open(db)?;
    let dir = db.join("locks");
    let newest = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .max();
    let Some(path) = newest else {
        bail!(NoKeptResult(format!("no lock results kept in {} (`loupe locks --db {} -- CMD` keeps one)", db.display(), db.display())))
    };
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let kept: Kept = serde_json::from_str(&text).with_context(|| format!("{} is not a lock result", path.display()))?;
    print(out, a, &kept.locks, Duration::from_secs_f64(kept.duration_s.max(0.0)), kept.dropped)?;
    Ok(0)
}

fn warn(warnings: &[String]) {
    for w in warnings {
        eprintln!("loupe: {w}");
    }
}

type Traced = (u8, Duration, HashMap<u32, Vec<Mapping>>, LockTracer);

/// Runs the command held at a gate until the probes are attached; keeps its
/// last address map (gone once it exits) for naming.
fn trace_command(cmd: &[String], libc: &std::path::Path) -> Result<Traced> {
    let mut child = GatedChild::spawn(&cmd[0], &cmd[1..])?;
    let (tracer, warnings) = LockTracer::start(libc, Some(child.pid as u32))?;
    warn(&warnings);
    child.release()?;
    let t0 = Instant::now();
    let mut maps = Vec::new();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{}/maps", child.pid)) {
            let m = parse_maps(&text);
            if !m.is_empty() {
                maps = m;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = t0.elapsed();
    Ok((status.clamp(0, 255) as u8, elapsed, HashMap::from([(child.pid as u32, maps)]), tracer))
}

fn snapshot_new(tracer: &LockTracer, maps: &mut HashMap<u32, Vec<Mapping>>) {
    for r in tracer.read().unwrap_or_default() {
        if let std::collections::hash_map::Entry::Vacant(e) = maps.entry(r.tgid) {
            if let Ok(text) = std::fs::read_to_string(format!("/proc/{}/maps", r.tgid)) {
                e.insert(parse_maps(&text));
            }
        }
    }
}

fn maps_of(pid: u32, saved: &HashMap<u32, Vec<Mapping>>) -> Vec<Mapping> {
    saved
        .get(&pid)
        .cloned()
        .unwrap_or_else(|| std::fs::read_to_string(format!("/proc/{pid}/maps")).map(|t| parse_maps(&t)).unwrap_or_default())
}

fn read_elf(path: &str) -> Option<&'static [u8]> {
    std::fs::read(path).ok().map(|v| &*Box::leak(v.into_boxed_slice()))
}

/// ELF files read so far, by path; each is read once and kept for the run.
type ElfCache = HashMap<String, Option<&'static [u8]>>;

fn name(rec: LockRecord, saved: &HashMap<u32, Vec<Mapping>>, syms: &mut Symbols, cache: &mut ElfCache) -> Named {
    let maps = maps_of(rec.tgid, saved);
    let mut elf = |p: &str| *cache.entry(p.to_string()).or_insert_with(|| read_elf(p));
    let base = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let name = if let Some((path, vaddr)) = locate(rec.addr, &maps, &mut elf) {
        let sym = elf(&path).and_then(|b| data_symbol(b, vaddr)).unwrap_or_else(|| format!("0x{vaddr:x}"));
        format!("{sym} ({})", base(&path))
    } else if let Some(site) = rec.alloc_site.and_then(|s| site_name(s, &maps, syms)) {
        format!("heap lock, allocated in {site}")
    } else if let Some(site) = rec.init_site.and_then(|s| site_name(s, &maps, syms)) {
        format!("heap lock, init in {site}")
    } else {
        format!("0x{:x}", rec.addr)
    };
    Named { rec, name }
}

/// `procedure (image)` of a code address in the process.
fn site_name(site: u64, maps: &[Mapping], syms: &mut Symbols) -> Option<String> {
    let m = maps.iter().find(|m| site >= m.start && site < m.end && m.path.starts_with('/'))?;
    let image = ImageId::elf(&m.path, None);
    let info = syms.symbolize(&image, &[ImageOffset(site - m.start + m.pgoff)], false).pop()?.ok()?;
    Some(format!("{} ({})", info.procedure, m.path.rsplit('/').next().unwrap_or(&m.path)))
}

fn fraction(ns: u64, elapsed: Duration) -> f64 {
    ns as f64 / elapsed.as_nanos().max(1) as f64
}

fn print_json(out: &mut dyn Write, rows: &[Row], elapsed: Duration, dropped: u64, limit: usize) -> Result<()> {
    let locks: Vec<serde_json::Value> = rows
        .iter()
        .take(limit)
        .map(|r| {
            serde_json::json!({ "name": r.name, "kind": r.kind, "pid": r.pid, "address": r.address,
                "acquisitions": r.acquisitions, "hold_ns": r.hold_ns, "wait_ns": r.wait_ns,
                "held_fraction": fraction(r.hold_ns, elapsed), "wait_fraction": fraction(r.wait_ns, elapsed),
                "max_hold_ns": r.max_hold_ns, "max_wait_ns": r.max_wait_ns })
        })
        .collect();
    let doc = serde_json::json!({ "duration_s": elapsed.as_secs_f64(), "dropped": dropped, "locks": locks });
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

fn print_text(out: &mut dyn Write, rows: &[Row], elapsed: Duration, limit: usize) -> Result<()> {
    writeln!(out, "# Loupe locks, {:.3} s, {} locks", elapsed.as_secs_f64(), rows.len())?;
    writeln!(out, "#")?;
    writeln!(
        out,
        "# {:>7} {:>12} {:>12} {:>10} {:>10} {:>10} {:>8} {:>7}  lock",
        "held%", "hold ms", "wait ms", "acquired", "mean us", "max us", "kind", "pid"
    )?;
    writeln!(out, "#")?;
    for r in rows.iter().take(limit) {
        let mean = if r.acquisitions > 0 { r.hold_ns as f64 / r.acquisitions as f64 / 1e3 } else { 0.0 };
        writeln!(
            out,
            "  {:>6.2}% {:>12.3} {:>12.3} {:>10} {:>10.1} {:>10.1} {:>8} {:>7}  {}",
            100.0 * fraction(r.hold_ns, elapsed),
            r.hold_ns as f64 / 1e6,
            r.wait_ns as f64 / 1e6,
            r.acquisitions,
            mean,
            r.max_hold_ns as f64 / 1e3,
            r.kind,
            r.pid,
            r.name
        )?;
    }
    if rows.len() > limit {
        writeln!(out, "# ... {} more locks (--limit)", rows.len() - limit)?;
    }
    Ok(())
}
