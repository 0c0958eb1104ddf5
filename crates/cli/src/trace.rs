//! `loupe trace`: check and generate from event specs, record a command's
//! events through the shared-memory buffer, dump and export traces.

use crate::flags::{
    TraceArgs, TraceClock, TraceCmd, TraceDirArg, TraceExportArgs, TraceExportFormat, TraceFormat, TraceGenArgs, TraceRecordArgs,
    TraceReportArgs, TraceSpecs,
};
use anyhow::{bail, Context, Result};
use loupe_trace::buffer::{Buffer, Geometry, ENV};
use loupe_trace::client::{pump, Client};
use loupe_trace::codegen::{generate, Lang};
use loupe_trace::counters::Counters;
use loupe_trace::spec::Spec;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often `--live` closes the open packets so that clients see events within that delay.
const LIVE_FLUSH: Duration = Duration::from_millis(50);

/// Loupe's own spec, compiled in so that every trace carries it.
const LOUPE_SPEC: &str = include_str!("../../trace/spec/loupe.xml");

pub fn run(a: TraceArgs, out: &mut dyn Write) -> Result<u8> {
    match a.cmd {
        TraceCmd::Check(s) => check(s, out),
        TraceCmd::Gen(g) => gen(g),
        TraceCmd::Record(r) => record(r),
        TraceCmd::Dump(d) => dump(d, out),
        TraceCmd::Export(e) => export(e, out),
        TraceCmd::Report(r) => report(r, out),
    }
}

fn load(specs: &[PathBuf]) -> Result<Spec> {
    let refs: Vec<&Path> = specs.iter().map(|p| p.as_path()).collect();
    loupe_trace::spec::load_files(&refs).map_err(|e| anyhow::anyhow!("invalid event spec:\n{e}"))
}

fn check(s: TraceSpecs, out: &mut dyn Write) -> Result<u8> {
    let spec = load(&s.specs)?;
    writeln!(
        out,
        "{} events valid (ids {}..={})",
        spec.events.len(),
        spec.events[0].id,
        spec.events.iter().map(|e| e.id).max().unwrap_or(0)
    )?;
    Ok(0)
}

fn gen(g: TraceGenArgs) -> Result<u8> {
    let lang = Lang::parse(&g.lang).with_context(|| format!("unknown language '{}' (c, rust, python, go, java)", g.lang))?;
    let spec = load(&g.specs.specs)?;
    let f = generate(&spec, lang);
    let path = g.out.join(&f.name);
    std::fs::create_dir_all(path.parent().unwrap()).with_context(|| format!("creating {}", g.out.display()))?;
    std::fs::write(&path, f.text).with_context(|| format!("writing {}", path.display()))?;
    println!("{}", path.display());
    if g.vectors {
        let (json, txt) = loupe_trace::vectors::files(&spec);
        let base = loupe_trace::spec::snake(&spec.name);
        std::fs::write(g.out.join(format!("{base}.json")), json)?;
        std::fs::write(g.out.join(format!("{base}.txt")), txt)?;
    }
    Ok(0)
}

fn record(r: TraceRecordArgs) -> Result<u8> {
    loupe_trace::kernel::Select::parse(&r.kernel, r.sample_hz)?;
    std::fs::create_dir(&r.out).with_context(|| format!("creating trace directory {}", r.out.display()))?;
    let spec_dir = r.out.join("spec");
    std::fs::create_dir(&spec_dir)?;
    std::fs::write(spec_dir.join("0-loupe.xml"), LOUPE_SPEC)?;
    for (i, s) in r.specs.iter().enumerate() {
        std::fs::copy(s, spec_dir.join(format!("{}-{}", i + 1, s.file_name().unwrap().to_string_lossy())))
            .with_context(|| format!("copying spec {}", s.display()))?;
    }
    // Validate before running anything: the trace must be decodable.
    let mut all = vec![spec_dir.join("0-loupe.xml")];
    all.extend(r.specs.iter().cloned());
    let spec = load(&all)?;
    std::fs::create_dir(r.out.join("ctf"))?;
    std::fs::write(r.out.join("ctf/metadata"), loupe_trace::ctf::metadata(&spec))?;
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let geo = Geometry { ncpu, nsub: r.subbufs, sub_size: r.subbuf_kib.saturating_mul(1024) };
    let shm = PathBuf::from(format!("/dev/shm/loupe-trace.{}", std::process::id()));
    let clock = match r.clock {
        TraceClock::Auto => loupe_trace::tsc::TscClock::calibrate(),
        TraceClock::Tsc => {
            loupe_trace::tsc::TscClock::calibrate().or_else(|| loupe_trace::tsc::TscClock::measure(Duration::from_millis(50)))
        }
        TraceClock::Monotonic => None,
    };
    let buf = Buffer::create_with_clock(&shm, geo, clock).with_context(|| format!("creating buffer {}", shm.display()))?;
    let status = drain_while(&buf, &r, &spec)?;
    buf.unlink().ok();
    Ok(status)
}

/// Runs the command (held at a gate until its counters exist), logs its
/// counters every interval into the buffer and drains the buffer into the
/// per-CPU stream files until it exits; then flushes and drains the rest.
fn drain_while(buf: &Buffer, r: &TraceRecordArgs, spec: &Spec) -> Result<u8> {
    let geo = buf.geometry();
    let files = (0..geo.ncpu)
        .map(|c| std::fs::File::create(r.out.join("ctf").join(format!("cpu{c}"))).map(std::io::BufWriter::new))
        .collect::<std::io::Result<Vec<_>>>()?;
    std::env::set_var(ENV, format!("/dev/shm/loupe-trace.{}", std::process::id()));
    let mut child = loupe_perf::GatedChild::spawn(&r.command[0], &r.command[1..])?;
    let (mut counters, skipped) = Counters::open(child.pid);
    if !skipped.is_empty() {
        eprintln!("loupe trace: counters not available on this machine: {}", skipped.join("; "));
    }
    let mut kernel = open_kernel(r, child.pid, spec, geo.sub_size as usize)?;
    child.release()?;
    let interval_ev = spec.by_name("HW::Counters::Interval").context("spec lacks HW::Counters::Interval")?.clone();
    let interval = Duration::from_micros(r.interval_us.max(100));
    let mut writer = StreamFiles(files);
    let mut live = Live { spec: spec.clone(), out: std::io::stdout() };
    // The kernel's events go to their own streams; `--live` prints them too.
    let mut klive = Live { spec: spec.clone(), out: std::io::stdout() };
    let mut kclients: Vec<&mut dyn Client> = if r.live { vec![&mut klive] } else { vec![] };
    let mut scratch = Vec::new();
    let mut packets = 0u64;
    let mut drain = |writer: &mut StreamFiles, flush: bool| -> Result<()> {
        let mut clients: Vec<&mut dyn Client> = vec![writer];
        if r.live {
            clients.push(&mut live);
        }
        packets += pump(buf, spec, &mut clients, flush, &mut scratch)?;
        Ok(())
    };
    let mut last = loupe_trace::buffer::now();
    let mut tick = 0u64;
    let mut last_flush = std::time::Instant::now();
    let status = loop {
        std::thread::sleep(interval);
        let exited = child.try_wait()?;
        log_counters(buf, &interval_ev, &mut counters, &mut last);
        tick += 1; // one HW::Counters::Interval logged per tick
        if let Some(k) = &mut kernel {
            k.drain(false, &mut kclients)?;
        }
        if tick.is_multiple_of(4) || exited.is_some() {
            // Online clients get partial packets too, closed every LIVE_FLUSH (which costs packet space).
            let flush = r.live && last_flush.elapsed() >= LIVE_FLUSH;
            if flush {
                last_flush = std::time::Instant::now();
            }
            drain(&mut writer, flush)?;
        }
        if let Some(st) = exited {
            break st;
        }
    };
    drain(&mut writer, true)?;
    for f in &mut writer.0 {
        f.flush()?;
    }
    if let Some(k) = &mut kernel {
        k.drain(true, &mut kclients)?;
    }
    let kernel_events = kernel.as_ref().map(|k| serde_json::json!(k.counts)).unwrap_or_else(|| serde_json::json!({}));
    let kernel_lost = kernel.as_ref().map_or(0, |k| k.lost());
    let kernel_unreadable = kernel.as_ref().map_or(0, |k| k.unreadable());
    let block_source = kernel.as_ref().and_then(|k| k.block_source());
    let dropped: Vec<u64> = (0..geo.ncpu as usize).map(|c| buf.dropped(c)).collect();
    let meta = serde_json::json!({"ncpu": geo.ncpu, "nsub": geo.nsub, "sub_size": geo.sub_size, "pid": child.pid,
        "clock": "CLOCK_MONOTONIC", "packets": packets, "dropped": dropped, "command": r.command,
        "counters": counters.names(), "counters_missing": skipped, "interval_us": r.interval_us,
        "kernel_events": kernel_events, "kernel_events_lost": kernel_lost,
        "kernel_events_unreadable": kernel_unreadable, "kernel_block_source": block_source, "intervals_logged": tick,
        "writer_clock": if buf.clock().is_some() { "tsc" } else { "clock_gettime" },
        "writer_clock_drift_ns": buf.clock().map(|c| c.drift())});
    std::fs::write(r.out.join("trace.json"), serde_json::to_string_pretty(&meta)? + "\n")?;
    eprintln!("loupe trace: {} packets, {} events dropped, in {}", packets, dropped.iter().sum::<u64>(), r.out.display());
    Ok(status as u8)
}

/// The kernel layer asked for by --kernel/--page-faults, or None; what
/// cannot be opened is said on stderr and left out.
fn open_kernel(r: &TraceRecordArgs, pid: i32, spec: &Spec, sub_size: usize) -> Result<Option<loupe_trace::kernel::Kernel>> {
    let mut sel = loupe_trace::kernel::Select::parse(&r.kernel, r.sample_hz)?;
    sel.faults |= r.page_faults;
    if !sel.any() {
        return Ok(None);
    }
    match loupe_trace::kernel::Kernel::open(pid, sel, spec, &r.out.join("ctf"), sub_size) {
        Ok(k) => {
            if !k.skipped.is_empty() {
                eprintln!("loupe trace: kernel events left out: {}", k.skipped.join("; "));
            }
            if let Some(why) = &k.block_fallback {
                eprintln!("loupe trace: block events from perf, which misses completions in idle context (BPF: {why})");
            }
            Ok(Some(k))
        }
        Err(e) => {
            eprintln!("loupe trace: no kernel events (perf_event_open: {e})");
            Ok(None)
        }
    }
}

/// The trace writer: packets go to the CPU's CTF stream file as they are.
struct StreamFiles(Vec<std::io::BufWriter<std::fs::File>>);

impl Client for StreamFiles {
    fn packet(&mut self, cpu: usize, bytes: &[u8]) -> std::io::Result<()> {
        self.0[cpu].write_all(bytes)
    }
}

/// `--live`: every application event printed as its packet arrives.
struct Live {
    spec: Spec,
    out: std::io::Stdout,
}

impl Client for Live {
    fn record(&mut self, cpu: usize, rec: &loupe_trace::record::Record) {
        let Some(ev) = self.spec.by_id(rec.id) else { return };
        if ev.class == "Counters" {
            return;
        }
        let fields: Vec<String> = ev.fields.iter().zip(&rec.fields).map(|(f, v)| format!("{}={v}", f.name)).collect();
        let _ = writeln!(self.out.lock(), "{} cpu{cpu} {} {}", rec.ts, ev.full_name(), fields.join(" "));
    }
    fn wants_records(&self) -> bool {
        true
    }
}

/// One `HW::Counters::Interval` record: the deltas since the previous one.
fn log_counters(buf: &Buffer, ev: &loupe_trace::spec::Event, c: &mut Counters, last: &mut u64) {
    use loupe_trace::record::{encode, Value};
    let deltas = c.deltas();
    let now = loupe_trace::buffer::now();
    let vals = [Value::U(u32::MAX as u64), Value::U(now - *last), Value::List(deltas.into_iter().map(Value::U).collect())];
    *last = now;
    let rec = encode(ev, 0, &vals);
    buf.log(rec.len(), |b, ts| {
        b.copy_from_slice(&rec);
        b[0..8].copy_from_slice(&ts.to_le_bytes());
    });
}

fn read(dir: &Path) -> Result<loupe_trace::tracefile::Trace> {
    let t = loupe_trace::tracefile::read(dir).with_context(|| format!("reading trace {}", dir.display()))?;
    for e in &t.errors {
        eprintln!("loupe trace: skipped: {e}");
    }
    Ok(t)
}

fn dump(d: TraceDirArg, out: &mut dyn Write) -> Result<u8> {
    let t = read(&d.dir)?;
    let t0 = t.entries.first().map_or(0, |e| e.rec.ts);
    for e in &t.entries {
        let Some(ev) = t.spec.by_id(e.rec.id) else { bail!("unknown id {}", e.rec.id) };
        let fields: Vec<String> = ev.fields.iter().zip(&e.rec.fields).map(|(f, v)| format!("{}={v}", f.name)).collect();
        writeln!(out, "{:>14.6} cpu{} {} {}", (e.rec.ts - t0) as f64 / 1e9, e.cpu, ev.full_name(), fields.join(" "))?;
    }
    writeln!(out, "# {} events, {} packets, {} dropped", t.entries.len(), t.packets, t.dropped)?;
    Ok(0)
}

fn export(e: TraceExportArgs, out: &mut dyn Write) -> Result<u8> {
    let t = read(&e.dir)?;
    let bytes = match e.format {
        TraceExportFormat::Chrome => serde_json::to_vec(&loupe_trace::export::chrome(&t))?,
        TraceExportFormat::Perfetto => {
            let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(e.dir.join("trace.json"))?).unwrap_or_default();
            let command = meta["command"][0].as_str().map_or("traced command", |c| c.rsplit('/').next().unwrap_or(c));
            loupe_trace::perfetto::perfetto(&t, command, meta["pid"].as_i64().unwrap_or(0) as i32)
        }
    };
    out.write_all(&bytes)?;
    eprintln!("loupe trace: {} events written to {}", t.entries.len(), e.out.display());
    Ok(0)
}

fn report(a: TraceReportArgs, out: &mut dyn Write) -> Result<u8> {
    let t = read(&a.dir)?;
    let r = loupe_trace::report::report(&t, &t.counters, (a.interval_ms * 1e6).max(1000.0) as u64);
    if let Some(svg) = &a.svg {
        std::fs::write(svg, loupe_trace::render::svg(&r)).with_context(|| format!("writing {}", svg.display()))?;
    }
    if let Some(png) = &a.png {
        std::fs::write(png, loupe_trace::raster::png(&r)).with_context(|| format!("writing {}", png.display()))?;
    }
    match a.format {
        TraceFormat::Text => write!(out, "{}", loupe_trace::render::text(&r))?,
        TraceFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&loupe_trace::render::to_json(&r))?)?,
    }
    Ok(0)
}
