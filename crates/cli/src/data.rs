//! `loupe data`: DProf's views of where memory time goes, by data type and
//! field rather than by code.

use crate::flags::{Allocs, DataArgs, DataCommand, Format, PidFlag, RecordArgs, ViewArgs};
use anyhow::{bail, Context, Result};
use loupe_dataprof::cache::Geometry;
use loupe_dataprof::log::{AccessRecord, Status};
use loupe_dataprof::recorder::{Meta, Recorder, Summary};
use loupe_dataprof::resolve::{infer_site_types, Area, Heap, HeapBlock, How, Resolved, Resolver};
use loupe_dataprof::views::{self, Sample};
use loupe_objects::{AllocTracker, AllocationIndex, SiteNamer, TrackerOptions};
use loupe_perf::GatedChild;
use loupe_symbolize::Symbolizer;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub fn run(a: DataArgs, out: &mut dyn Write) -> Result<u8> {
    let v = match a.cmd {
        DataCommand::History(h) => return crate::objects::history(h, out),
        DataCommand::Flow(f) => return crate::objects::flow_view(f, out),
        DataCommand::Allocs(x) => return crate::objects::allocs(x, out),
        DataCommand::Profile(ref v) | DataCommand::Classify(ref v) | DataCommand::Workingset(ref v) => v,
    };
    let progress = crate::progress::Progress::spinner("reading and typing the data accesses");
    let loaded = load(v)?;
    drop(progress);
    match a.cmd {
        DataCommand::Profile(v) => print_profile(out, &v, &loaded)?,
        DataCommand::Classify(v) => print_classify(out, &v, &loaded)?,
        DataCommand::Workingset(v) => print_workingset(out, &v, &loaded)?,
        DataCommand::History(_) | DataCommand::Flow(_) | DataCommand::Allocs(_) => unreachable!("dispatched above"),
    }
    Ok(0)
}

/// Everything the views need, resolved once.
struct Loaded {
    meta: Meta,
    records: Vec<AccessRecord>,
    resolved: Vec<Resolved>,
    /// All samples of the selected processes (memory-referencing or not).
    total: u64,
    /// Samples at memory-referencing instructions whose address could not be known.
    no_address: u64,
    /// Samples in Loupe's own allocation shim (instrumentation), left out of all the others.
    shim: u64,
    heap_note: String,
}

impl Loaded {
    fn samples(&self) -> Vec<Sample<'_>> {
        self.records.iter().zip(&self.resolved).map(|(rec, res)| Sample { rec, res }).collect()
    }

    fn classes(&self, v: &ViewArgs) -> Vec<Option<views::Class>> {
        views::classify_samples(&self.samples(), &self.meta.caches, (v.window_ms * 1e6) as u64)
    }

    fn typed(&self) -> usize {
        self.resolved.iter().filter(|r| r.how.typed()).count()
    }

    fn header(&self) -> String {
        let mem = self.records.len();
        format!(
            "# source: {}\n# {} samples, {} ({:.1}%) at memory-referencing instructions with an exact address \
             (and {} whose address was lost: base register overwritten, or TLS); {} ({:.1}%) of those typed{}\n# {}\n",
            self.meta.summary.source,
            self.total,
            mem,
            100.0 * mem as f64 / self.total.max(1) as f64,
            self.no_address,
            self.typed(),
            100.0 * self.typed() as f64 / mem.max(1) as f64,
            self.shim_note(),
            self.heap_note
        ) + &self.coverage_line()
    }

    fn shim_note(&self) -> String {
        match self.shim {
            0 => String::new(),
            n => format!("\n# {n} samples in Loupe's allocation shim left out (instrumentation, not the program)"),
        }
    }

    /// Shares of the address-bearing samples by how they were typed, and the untyped ones by reason.
    fn coverage(&self) -> (Shares, Shares) {
        let mut typed = vec![("static", 0), ("stack", 0), ("heap by allocation", 0), ("heap by type flow", 0), ("stack frame slots", 0)];
        let mut unknown: HashMap<&'static str, usize> = HashMap::new();
        for r in &self.resolved {
            let slot = match (r.how, r.area) {
                (How::Static, _) => 0,
                (How::Frame, _) => 4,
                (h, Area::Stack) if h.typed() => 1,
                (How::Alloc, _) => 2,
                (h, _) if h.typed() => 3,
                _ => {
                    *unknown.entry(r.why.map_or("no allocation or register type", |w| w.label())).or_default() += 1;
                    continue;
                }
            };
            typed[slot].1 += 1;
        }
        let mut unknown: Vec<_> = unknown.into_iter().collect();
        unknown.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        (typed, unknown)
    }

    fn coverage_json(&self) -> serde_json::Value {
        let (typed, unknown) = self.coverage();
        let obj = |v: Vec<(&str, usize)>| {
            v.into_iter().map(|(k, n)| (k.replace(' ', "_"), serde_json::json!(n))).collect::<serde_json::Map<_, _>>()
        };
        serde_json::json!({"typed": obj(typed), "untyped": obj(unknown)})
    }

    fn coverage_line(&self) -> String {
        let n = self.records.len().max(1) as f64;
        let (typed, unknown) = self.coverage();
        let part = |(k, v): &(&str, usize)| format!("{k} {:.1}%", 100.0 * *v as f64 / n);
        let typed: Vec<String> = typed.iter().map(part).collect();
        let unknown: Vec<String> = unknown.iter().map(part).collect();
        format!("# typed: {}; untyped: {}\n", typed.join(", "), if unknown.is_empty() { "none".to_string() } else { unknown.join(", ") })
    }
}

/// Counts of samples by coverage category.
type Shares = Vec<(&'static str, usize)>;

/// A site's label and where its return address is (image, file offset).
type NamedSite = (String, Option<(String, u64)>);

/// The allocation log as the resolver's heap, naming sites once each.
struct AllocHeap {
    index: AllocationIndex,
    namer: SiteNamer,
    names: HashMap<(u32, u64), NamedSite>,
    /// (pid, return address) -> its image and file offset.
    places: HashMap<(u32, u64), Option<(String, u64)>>,
}

impl Heap for AllocHeap {
    fn block(&mut self, pid: u32, addr: u64, time_ns: u64) -> Option<HeapBlock> {
        let a = self.index.lookup(pid, addr, time_ns)?.clone();
        let (site, site_at) = match self.names.get(&(pid, a.site)) {
            Some(s) => s.clone(),
            None => {
                let loc = self.index.site_location(&a);
                let s = match &loc {
                    Some(loc) => self.namer.label(loc),
                    None => format!("{:#x}", a.site),
                };
                let named = (s, loc.map(|l| (l.path, l.offset.0)));
                self.names.insert((pid, a.site), named.clone());
                named
            }
        };
        let callers_at = a.callers.iter().take_while(|&&c| c != 0).map(|&c| self.place(pid, c, a.alloc_ns)).collect();
        Some(HeapBlock { base: a.base, size: a.size, site, site_at, callers_at })
    }
}

impl AllocHeap {
    fn place(&mut self, pid: u32, addr: u64, time_ns: u64) -> Option<(String, u64)> {
        let index = &self.index;
        self.places.entry((pid, addr)).or_insert_with(|| index.locate(pid, addr, time_ns).map(|l| (l.path, l.offset.0))).clone()
    }
}

fn load(v: &ViewArgs) -> Result<Loaded> {
    let db = &v.db.db;
    let meta = Meta::read(db)?;
    let all = loupe_dataprof::log::read(db)?;
    let all: Vec<AccessRecord> = all.into_iter().filter(|r| v.pid.is_empty() || v.pid.contains(&r.pid)).collect();
    let index = AllocationIndex::load(db).map_err(|e| anyhow::anyhow!("allocation log: {e}"))?;
    let namer = SiteNamer::new(Symbolizer::new(crate::symbols::options()));
    let mut resolver = Resolver::new(db, AllocHeap { index, namer, names: HashMap::new(), places: HashMap::new() });
    let (all, shim): (Vec<AccessRecord>, Vec<AccessRecord>) = all.into_iter().partition(|r| !in_shim(&resolver, r));
    let shim = shim.len() as u64;
    let total = all.len() as u64;
    if total == 0 {
        bail!("{}: no access samples{}", db.display(), if v.pid.is_empty() { "" } else { " of those processes" });
    }
    let no_address = all.iter().filter(|r| r.status == Status::Unknown).count() as u64;
    let records: Vec<AccessRecord> = all.into_iter().filter(|r| r.has_addr()).collect();
    let index = &resolver.heap().index;
    for bad in &index.stats.bad_files {
        eprintln!("loupe: skipped {bad}");
    }
    let heap_note = if index.is_empty() {
        "heap: no allocation log (heap objects typed only through registers)".to_string()
    } else {
        "heap: objects from the allocation log; untyped ones grouped by allocation site".to_string()
    };
    let mut resolved: Vec<Resolved> = records.iter().map(|r| resolver.resolve(r)).collect();
    infer_site_types(&mut resolved);
    for img in resolver.unreadable() {
        eprintln!("loupe: no types from {img} (unreadable or not ELF)");
    }
    Ok(Loaded { meta, records, resolved, total, no_address, shim, heap_note })
}

/// Whether the sample's instruction is in Loupe's LD_PRELOAD allocation
/// shim: its recording of allocations, not the program's own work.
fn in_shim<H: Heap>(resolver: &Resolver<H>, r: &AccessRecord) -> bool {
    let shim = std::path::Path::new(loupe_objects::preload::SHIM_FILE);
    resolver.image_path(r.pid, r.insn()).is_some_and(|p| std::path::Path::new(p).file_name() == Some(shim.as_os_str()))
}

fn print_profile(out: &mut dyn Write, v: &ViewArgs, l: &Loaded) -> Result<()> {
    let rows = views::profile(&l.samples(), &l.classes(v), l.total);
    let rows: Vec<_> = rows.into_iter().take(v.limit).collect();
    match v.format {
        Format::Json => {
            let j = serde_json::json!({
                "source": l.meta.summary.source,
                "total_samples": l.total,
                "memory_samples": l.records.len(),
                "memory_samples_without_address": l.no_address,
                "shim_samples": l.shim,
                "typed_samples": l.typed(),
                "coverage": l.coverage_json(),
                "rows": rows,
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&j)?)?;
        }
        Format::Text => {
            write!(out, "{}", l.header())?;
            writeln!(out, "{:>8} {:>7}  {:<7} {:<9} type.field +offset", "samples", "%", "bounces", "how")?;
            for r in rows {
                let name = field_name(&r.type_name, &r.field, r.offset);
                writeln!(
                    out,
                    "{:>8} {:>6.2}%  {:<7} {:<9} {}",
                    r.samples,
                    r.percent,
                    if r.bounces { "yes" } else { "" },
                    how(r.how),
                    name
                )?;
            }
        }
    }
    Ok(())
}

/// `type.field +offset` (the field's offset in its type), or the type alone.
fn field_name(type_name: &str, field: &str, offset: Option<u64>) -> String {
    match offset {
        _ if field.is_empty() => type_name.to_string(),
        Some(o) => format!("{type_name}.{field} +{o}"),
        None => format!("{type_name}.{field}"),
    }
}

fn how(h: How) -> &'static str {
    match h {
        How::Static => "static",
        How::Alloc => "alloc",
        How::Register => "register",
        How::Flow => "flow",
        How::Frame => "frame",
        How::Block => "block",
        How::Site => "site",
        How::SiteOnly => "site-only",
        How::Region => "region",
    }
}

fn print_classify(out: &mut dyn Write, v: &ViewArgs, l: &Loaded) -> Result<()> {
    let samples = l.samples();
    let classes = l.classes(v);
    let rows: Vec<_> = views::classify(&samples, &classes, &l.meta.caches).into_iter().take(v.limit).collect();
    let l1 = Geometry::level(&l.meta.caches, 1);
    let crowded = l1.map(|g| views::crowded_sets(&samples, g)).unwrap_or_default();
    match v.format {
        Format::Json => {
            let j = serde_json::json!({
                "source": l.meta.summary.source,
                "window_ms": v.window_ms,
                "caches": l.meta.caches,
                "crowded_sets": crowded.iter().map(|(s, n)| serde_json::json!({"set": s, "lines": n})).collect::<Vec<_>>(),
                "rows": rows,
            });
            writeln!(out, "{}", serde_json::to_string_pretty(&j)?)?;
        }
        Format::Text => {
            write!(out, "{}", l.header())?;
            if let Some(g) = l1 {
                writeln!(out, "# L1d: {} KiB, {} ways, {} sets of {} B lines", g.size >> 10, g.ways, g.sets, g.line)?;
            }
            if !crowded.is_empty() {
                let c: Vec<String> = crowded.iter().map(|(s, n)| format!("{s} ({n} lines)")).collect();
                writeln!(out, "# crowded L1 sets: {}", c.join(", "))?;
            }
            writeln!(out, "{:>8} {:>7}  {:<14} type.field +offset", "samples", "share", "class")?;
            for r in rows {
                let name = field_name(&r.type_name, &r.field, r.offset);
                let sets = if r.sets.is_empty() { String::new() } else { format!("  sets {:?}", r.sets) };
                writeln!(out, "{:>8} {:>6.2}%  {:<14} {name}{sets}", r.samples, 100.0 * r.share, r.class.name())?;
            }
        }
    }
    Ok(())
}

fn print_workingset(out: &mut dyn Write, v: &ViewArgs, l: &Loaded) -> Result<()> {
    let rows: Vec<_> = views::working_set(&l.samples(), &l.meta.caches).into_iter().take(v.limit).collect();
    match v.format {
        Format::Json => {
            let j = serde_json::json!({"source": l.meta.summary.source, "caches": l.meta.caches, "rows": rows});
            writeln!(out, "{}", serde_json::to_string_pretty(&j)?)?;
        }
        Format::Text => {
            write!(out, "{}", l.header())?;
            let caches: Vec<String> = l.meta.caches.iter().map(|c| format!("L{} {} KiB", c.level, c.size >> 10)).collect();
            writeln!(out, "# caches: {}", caches.join(", "))?;
            writeln!(
                out,
                "{:>8} {:>8} {:>8} {:>12} {:>8}  {:<24} type",
                "samples", "objects", "lines", "est. bytes", "L1 lines", "crowded L1 sets"
            )?;
            for r in rows {
                let sets: Vec<String> = r.crowded_sets.iter().map(|s| s.to_string()).collect();
                writeln!(
                    out,
                    "{:>8} {:>8} {:>8} {:>12} {:>8}  {:<24} {}",
                    r.samples,
                    r.objects,
                    r.lines_sampled,
                    human(r.estimated_bytes),
                    r.l1_resident_lines,
                    sets.join(","),
                    r.type_name
                )?;
            }
        }
    }
    Ok(())
}

fn human(b: f64) -> String {
    match b {
        b if b >= (1u64 << 30) as f64 => format!("{:.1} GiB", b / (1u64 << 30) as f64),
        b if b >= (1u64 << 20) as f64 => format!("{:.1} MiB", b / (1u64 << 20) as f64),
        b if b >= 1024.0 => format!("{:.1} KiB", b / 1024.0),
        b => format!("{b:.0} B"),
    }
}

/// `loupe record --data`: access samples (and heap allocations) of a
/// command and its children, or of every process for --duration seconds.
pub fn record(a: RecordArgs) -> Result<u8> {
    let db = a.db.db.clone();
    loupe_files::create_dir_all(&db).with_context(|| format!("cannot create {}", db.display()))?;
    let stop = crate::collect::stop_flag()?;
    let freq = a.sampling.freq;
    let (status, summary) = match a.command.split_first() {
        Some((cmd, args)) => {
            if crate::collect::find_command(cmd).is_none() {
                eprintln!("loupe: command not found: {cmd}");
                return Ok(127);
            }
            if a.allocs == Allocs::Shim {
                let env = loupe_objects::preload::install(&db).context("installing the allocation shim")?;
                for (k, v) in env.vars {
                    // The gated child inherits this environment; loupe itself is already loaded.
                    std::env::set_var(k, v);
                }
            }
            let mut child = GatedChild::spawn(cmd, args)?;
            let mut rec = Recorder::open(&db, Some(child.pid), freq, true)?;
            eprintln!("loupe: data source: {}", rec.path().describe());
            // Heap blocks and their allocation sites, so heap samples find their objects.
            let tracker = match a.allocs {
                Allocs::Off => None,
                Allocs::Shim => {
                    eprintln!(
                        "loupe: allocation tracking by LD_PRELOAD shim (statically linked allocators are not seen; --allocs uprobes)"
                    );
                    None
                }
                Allocs::Uprobes => {
                    match AllocTracker::start(&db, &[child.pid as u32], &TrackerOptions { callers: true, ..Default::default() }) {
                        Ok(t) => {
                            for w in &t.warnings {
                                eprintln!("loupe: allocation tracking: {w}");
                            }
                            Some(t)
                        }
                        Err(e) => {
                            eprintln!("loupe: no allocation tracking ({e}); heap objects are typed only through registers");
                            None
                        }
                    }
                }
            };
            child.release()?;
            let status = loop {
                rec.pump(Duration::from_millis(50))?;
                if let Some(s) = child.try_wait()? {
                    break s;
                }
                if stop.load(Ordering::Relaxed) {
                    // SAFETY: signalling our own child by pid.
                    unsafe { libc::kill(child.pid, libc::SIGTERM) };
                }
            };
            // Sampling's own cost is read in finish(), before detaching the allocation probes (which takes seconds).
            let summary = rec.finish()?;
            if let Some(t) = tracker {
                match t.stop() {
                    Ok(sum) => eprintln!("loupe: {} allocations, {} frees tracked, {} dropped", sum.allocs, sum.frees, sum.dropped),
                    Err(e) => eprintln!("loupe: allocation tracking: {e}"),
                }
            }
            (status, summary)
        }
        None => {
            let Some(secs) = a.duration else { bail!("give a command after `--`, or --duration SECONDS for every process") };
            eprintln!("loupe: every process: no allocation tracking (it follows a command's process tree)");
            let rec = Recorder::open(&db, None, freq, true)?;
            eprintln!("loupe: data source: {}", rec.path().describe());
            rec.enable()?;
            let mut rec = rec;
            let t0 = Instant::now();
            while t0.elapsed().as_secs_f64() < secs && !stop.load(Ordering::Relaxed) {
                rec.pump(Duration::from_millis(50))?;
            }
            (0, rec.finish()?)
        }
    };
    report(&summary);
    Ok(status.clamp(0, 255) as u8)
}

fn report(s: &Summary) {
    let pct = if s.samples > 0 { 100.0 * s.with_address as f64 / s.samples as f64 } else { 0.0 };
    eprintln!(
        "loupe: {} samples, {} ({pct:.1}%) at memory-referencing instructions with an exact address, {} lost",
        s.samples, s.with_address, s.lost
    );
    let per = s.self_cpu_ns as f64 / s.samples.max(1) as f64 / 1000.0;
    eprintln!(
        "loupe: recorder CPU {:.1} ms while sampling ({per:.1} us per sample; the allocation tracking thread included)",
        s.self_cpu_ns as f64 / 1e6
    );
}

/// The access samples of `db` that fell in heap blocks of its allocation
/// log, as `history --hottest` chooses from them.
pub(crate) fn heap_accesses(db: &crate::flags::DbArg) -> Result<Vec<loupe_dataprof::hottest::HeapAccess>> {
    let v =
        ViewArgs { db: db.clone(), limit: 0, format: Format::Text, window_ms: 0.0, pid: PidFlag::default(), output: Default::default() };
    let l = load(&v)?;
    Ok(l.samples()
        .iter()
        .filter_map(|s| {
            // A site means the sample hit a block of the allocation log, and `object` is that block.
            let (site, (base, size)) = (s.res.site.clone()?, s.res.object?);
            Some(loupe_dataprof::hottest::HeapAccess {
                type_name: s.res.type_name.clone(),
                field: s.res.field.clone(),
                site,
                size,
                offset: s.rec.addr.checked_sub(base)?,
                width: s.rec.size as u64,
            })
        })
        .collect())
}
