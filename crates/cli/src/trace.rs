//! `loupe trace`: check and generate from event specs, record a command's
//! events through the shared-memory buffer, dump and export traces.

use crate::flags::{TraceArgs, TraceCmd, TraceDirArg, TraceExportArgs, TraceGenArgs, TraceRecordArgs, TraceSpecs};
use anyhow::{bail, Context, Result};
use loupe_trace::buffer::{Buffer, Geometry, ENV};
use loupe_trace::codegen::{generate, Lang};
use loupe_trace::spec::Spec;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Loupe's own spec, compiled in so that every trace carries it.
const LOUPE_SPEC: &str = include_str!("../../trace/spec/loupe.xml");

pub fn run(a: TraceArgs) -> Result<u8> {
    match a.cmd {
        TraceCmd::Check(s) => check(s),
        TraceCmd::Gen(g) => gen(g),
        TraceCmd::Record(r) => record(r),
        TraceCmd::Dump(d) => dump(d),
        TraceCmd::Export(e) => export(e),
    }
}

fn load(specs: &[PathBuf]) -> Result<Spec> {
    let refs: Vec<&Path> = specs.iter().map(|p| p.as_path()).collect();
    loupe_trace::spec::load_files(&refs).map_err(|e| anyhow::anyhow!("invalid event spec:\n{e}"))
}

fn check(s: TraceSpecs) -> Result<u8> {
    let spec = load(&s.specs)?;
    println!("{} events valid (ids {}..={})", spec.events.len(), spec.events[0].id, spec.events.iter().map(|e| e.id).max().unwrap_or(0));
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
    let buf = Buffer::create(&shm, geo).with_context(|| format!("creating buffer {}", shm.display()))?;
    let status = drain_while(&buf, &r)?;
    buf.unlink().ok();
    Ok(status)
}

/// Runs the command and drains the buffer into per-CPU stream files until it
/// exits; then flushes and drains what is left.
fn drain_while(buf: &Buffer, r: &TraceRecordArgs) -> Result<u8> {
    let geo = buf.geometry();
    let mut files = (0..geo.ncpu)
        .map(|c| std::fs::File::create(r.out.join("ctf").join(format!("cpu{c}"))).map(std::io::BufWriter::new))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut child = std::process::Command::new(&r.command[0])
        .args(&r.command[1..])
        .env(ENV, format!("/dev/shm/loupe-trace.{}", std::process::id()))
        .spawn()
        .with_context(|| format!("running {}", r.command[0]))?;
    let mut p = Vec::new();
    let mut packets = 0u64;
    let mut drain = |files: &mut Vec<std::io::BufWriter<std::fs::File>>, flush: bool| -> Result<()> {
        for (cpu, file) in files.iter_mut().enumerate() {
            if flush {
                buf.flush(cpu);
            }
            while buf.take(cpu, &mut p) {
                file.write_all(&p)?;
                packets += 1;
            }
        }
        Ok(())
    };
    let status = loop {
        drain(&mut files, false)?;
        if let Some(st) = child.try_wait()? {
            break st;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    drain(&mut files, true)?;
    for f in &mut files {
        f.flush()?;
    }
    let dropped: Vec<u64> = (0..geo.ncpu as usize).map(|c| buf.dropped(c)).collect();
    let meta = serde_json::json!({"ncpu": geo.ncpu, "nsub": geo.nsub, "sub_size": geo.sub_size,
        "clock": "CLOCK_MONOTONIC", "packets": packets, "dropped": dropped, "command": r.command});
    std::fs::write(r.out.join("trace.json"), serde_json::to_string_pretty(&meta)? + "\n")?;
    eprintln!("loupe trace: {} packets, {} events dropped, in {}", packets, dropped.iter().sum::<u64>(), r.out.display());
    Ok(status.code().map_or(1, |c| c as u8))
}

fn read(dir: &Path) -> Result<loupe_trace::tracefile::Trace> {
    let t = loupe_trace::tracefile::read(dir).with_context(|| format!("reading trace {}", dir.display()))?;
    for e in &t.errors {
        eprintln!("loupe trace: skipped: {e}");
    }
    Ok(t)
}

fn dump(d: TraceDirArg) -> Result<u8> {
    let t = read(&d.dir)?;
    let mut out = std::io::stdout().lock();
    let t0 = t.entries.first().map_or(0, |e| e.rec.ts);
    for e in &t.entries {
        let Some(ev) = t.spec.by_id(e.rec.id) else { bail!("unknown id {}", e.rec.id) };
        let fields: Vec<String> = ev.fields.iter().zip(&e.rec.fields).map(|(f, v)| format!("{}={v}", f.name)).collect();
        writeln!(out, "{:>14.6} cpu{} {} {}", (e.rec.ts - t0) as f64 / 1e9, e.cpu, ev.full_name(), fields.join(" "))?;
    }
    writeln!(out, "# {} events, {} packets, {} dropped", t.entries.len(), t.packets, t.dropped)?;
    Ok(0)
}

fn export(e: TraceExportArgs) -> Result<u8> {
    let t = read(&e.dir)?;
    let json = loupe_trace::export::chrome(&t);
    std::fs::write(&e.out, serde_json::to_string(&json)?).with_context(|| format!("writing {}", e.out.display()))?;
    eprintln!("loupe trace: {} events written to {}", t.entries.len(), e.out.display());
    Ok(0)
}
