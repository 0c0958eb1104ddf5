//! Writes the seed corpus, `corpus/<target>/seed-*`: small valid inputs of
//! every target, made with the crates' own encoders (and, for ELF files and
//! BOLT's table, the C compiler and llvm-bolt when present). Run from `fuzz/`:
//! `cargo run --example seeds`. The seeds are committed; libFuzzer's finds are not.

use loupe_model::branches::BranchProfile;
use loupe_model::stacks::StackProfile;
use loupe_model::{BuildId, EventName, ImageId, ImageOffset, ProcessKey, Profile};
use loupe_objects::log::{self, AllocFn, Record as Alloc, Source};
use loupe_trace::buffer::{Buffer, Geometry};
use loupe_trace::record::{encode, Value};
use std::path::Path;
use std::process::Command;

/// A perf seed: the five format words of the perf_record target (sample_type, read_format,
/// branch_sample_type, user and interrupt register masks), then a record that parses under them.
fn put_perf(name: &str, sample_type: u64, rec: &[u8]) {
    use loupe_perf::sample::{Format, Layout};
    let format = Format { sample_type, regs_user: loupe_perf::sys::USER_REGS_MASK, ..Format::default() };
    let branches = Format { sample_type: sample_type | loupe_perf::sys::SAMPLE_BRANCH_STACK, ..format };
    let layout = Layout { format, per_event: vec![(1, branches)], ids: vec![(1, 0), (2, 1)] };
    assert!(loupe_perf::record::parse(rec, &layout).is_some(), "seed {name} does not parse");
    let head = words(&[sample_type, 0, 0, loupe_perf::sys::USER_REGS_MASK, 0]);
    put("perf_record", name, &[&head[..], rec].concat());
}

fn put(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
}

/// Store files without their frame (magic, version, kind and checksum): what the framed targets take.
fn body(file: &[u8]) -> &[u8] {
    &file[12..file.len() - 4]
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// A perf record: header (type, misc, size), body, and a `sample_id_all` trailer for non-samples.
fn perf(kind: u32, misc: u16, body: &[u8], trailer: bool) -> Vec<u8> {
    let mut b = body.to_vec();
    if trailer {
        b.extend(words(&[(8u64 << 32) | 7, 999, 0, 1]));
    }
    let mut r = kind.to_ne_bytes().to_vec();
    r.extend(misc.to_ne_bytes());
    r.extend(((8 + b.len()) as u16).to_ne_bytes());
    r.extend(b);
    r
}

fn perf_records() {
    use loupe_perf::sys::*;
    const BASE: u64 = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_PERIOD;
    // IDENTIFIER, IP, TID, TIME, CPU, PERIOD.
    let fixed = |id: u64| words(&[id, 0x401000, (43u64 << 32) | 42, 1234, 1, 1_000_000]);
    put_perf("sample", BASE, &perf(9, 2, &fixed(1), false));
    let mut s = fixed(2);
    s.extend(words(&[3, -512i64 as u64, 0x401000, 0x402000])); // call chain with a context marker
    s.extend(words(&[1, 0x401005, 0x401040, 1 | (37 << 4)])); // one branch
    s.extend(words(&[2, 0x7ffd_0010, 0x7ffd_0000, 0x401010, 16])); // user regs, 16 bytes of stack
    s.extend(0u8..16);
    s.extend(words(&[12]));
    put_perf("sample-chain-branches-stack", BASE | SAMPLE_CALLCHAIN | SAMPLE_REGS_USER | SAMPLE_STACK_USER, &perf(9, 2, &s, false));
    let mut m = Vec::new();
    m.extend(7u32.to_ne_bytes());
    m.extend(8u32.to_ne_bytes());
    m.extend(words(&[0x7f00_0000_0000, 0x2000, 0x1000]));
    let mut ids = [0u8; 24];
    ids[0] = 20;
    ids[4..].fill(0xab);
    m.extend(ids);
    m.extend(5u32.to_ne_bytes());
    m.extend(2u32.to_ne_bytes());
    m.extend(b"/usr/lib/libc.so.6\0\0\0\0\0\0");
    put_perf("mmap2", BASE, &perf(10, 1 << 14, &m, true));
    let mut c = 3u32.to_ne_bytes().repeat(2);
    c.extend(b"selftime\0\0\0\0\0\0\0\0");
    put_perf("comm", BASE, &perf(3, 1 << 13, &c, true));
    let mut f: Vec<u8> = [10u32, 9, 10, 9].iter().flat_map(|v| v.to_ne_bytes()).collect();
    f.extend(words(&[66]));
    put_perf("fork", BASE, &perf(7, 0, &f, true));
    put_perf("lost", BASE, &perf(2, 0, &words(&[1, 12]), true));
}

fn store() {
    let img = ImageId { content_hash: Some(7), ..ImageId::elf("/usr/lib/libc.so.6", Some(BuildId(vec![0xab; 20]))) };
    let mut p = Profile::new(img.clone(), EventName::new("cpu-clock"));
    p.add(ProcessKey::new(10, "a"), ImageOffset(0x1000), 3, 0);
    p.add(ProcessKey::new(11, "b"), ImageOffset(0x2000), 1, 0);
    p.add(ProcessKey::new(10, "a"), ImageOffset(0x1004), 1 << 40, 0);
    p.period_sum = 123_456;
    let flat = loupe_store::format::encode(&p);
    put("store_profile", "body", body(&flat));
    put("store_profile", "file", &flat);

    let mut s = StackProfile::new(EventName::new("cpu-clock"));
    let k = ImageId::kernel(None);
    s.add(&ProcessKey::new(7, "app"), &[(k, ImageOffset(0xffff)), (img.clone(), ImageOffset(0x1000))], 3);
    s.add(&ProcessKey::new(8, "b"), &[(img.clone(), ImageOffset(0x1004)), (img.clone(), ImageOffset(0x2000))], 5);
    s.period_sum = 42;
    let stacks = loupe_store::stacks::encode(&s);
    put("store_stacks", "body", body(&stacks));
    put("store_stacks", "file", &stacks);

    let mut b = BranchProfile::new(img, EventName::new("cycles"));
    b.add(ImageOffset(0x1005), ImageOffset(0x1040), 1000, 12);
    b.add(ImageOffset(0x2000), ImageOffset(0x1000), 7, 7);
    b.add_trace(ImageOffset(0x1040), ImageOffset(0x1100), 900);
    b.stacks = 99;
    let branches = loupe_store::branches::encode(&b);
    put("store_branches", "body", body(&branches));
    put("store_branches", "file", &branches);

    // A real epoch's index.json and epoch.json, as a merge writes them.
    let root = std::env::temp_dir().join(format!("loupe-seeds-{}", std::process::id()));
    let db = loupe_store::Database::create(&root).unwrap();
    let e = db.current_epoch().unwrap();
    db.merge(e, &[p]).unwrap();
    db.set_epoch_meta(e, "clock", "monotonic").unwrap();
    let dir = root.join("epochs").join(format!("{:06}", e.0));
    let mut idx = std::fs::read(dir.join("index.json")).unwrap();
    idx.push(0xff);
    idx.extend(std::fs::read(dir.join("epoch.json")).unwrap());
    put("store_index", "epoch", &idx);
    std::fs::remove_dir_all(&root).unwrap();
}

fn alloc_log() {
    let maps = "55000000-55001000 r--p 00000000 08:01 1 /bin/x\n55001000-55003000 r-xp 00001000 08:01 1 /bin/x\n";
    let records = [
        Alloc::Maps { pid: 7, time_ns: 1, text: maps.into() },
        Alloc::Alloc { func: AllocFn::Malloc, pid: 7, tid: 8, time_ns: 10, base: 0x1000, size: 64, site: 0x55001234 },
        Alloc::Alloc { func: AllocFn::Calloc, pid: 7, tid: 8, time_ns: 11, base: 0x2000, size: 16, site: 0x55001300 },
        Alloc::Free { func: AllocFn::Free, pid: 7, tid: 9, time_ns: 20, base: 0x1000 },
        Alloc::Alloc { func: AllocFn::New, pid: 7, tid: 8, time_ns: 30, base: 0x1000, size: 8, site: 0x55001234 },
    ];
    let mut b = log::header(Source::Preload).to_vec();
    records.iter().for_each(|r| b.extend(log::encode(r)));
    put("alloc_log", "preload", &b);
}

fn trace() {
    let spec = loupe_fuzz::spec::spec();
    let scalars = spec.by_name("A::B::Scalars").unwrap();
    let text = spec.by_name("A::B::Text").unwrap();
    let recs = [
        encode(scalars, 100, &[Value::U(1), Value::I(-2), Value::U(3), Value::I(-4), Value::F(0.5)]),
        encode(text, 200, &[Value::Str("hello".into()), Value::List(vec![Value::U(1), Value::U(2)]), Value::List(vec![Value::I(-1)])]),
        encode(spec.by_name("A::B::Empty").unwrap(), 300, &[]),
    ];
    // Packets as the recorder writes them: header, records, zeros; sealed and trimmed. 512-byte packets.
    let mut stream = Vec::new();
    for cpu in 0..2u32 {
        let mut p = vec![0u8; 512];
        p[0..4].copy_from_slice(&loupe_trace::buffer::PACKET_MAGIC.to_le_bytes());
        p[8..16].copy_from_slice(&[cpu.to_le_bytes(), cpu.to_le_bytes()].concat());
        p[16..24].copy_from_slice(&100u64.to_le_bytes());
        let mut at = loupe_trace::buffer::PACKET_HEADER;
        for r in &recs {
            p[at..at + r.len()].copy_from_slice(r);
            at += r.len();
        }
        loupe_trace::buffer::seal(&mut p, 0);
        loupe_trace::ctf::trim_content(&spec, &mut p);
        stream.extend(p);
    }
    let mut t = loupe_trace::tracefile::Trace {
        spec: spec.clone(),
        entries: Vec::new(),
        packets: 0,
        dropped: 0,
        counters: Vec::new(),
        errors: Vec::new(),
    };
    loupe_trace::tracefile::decode_stream(spec, &stream, 512, &mut t);
    assert_eq!((t.entries.len(), t.errors.len()), (6, 0), "{:?}", t.errors);
    put("trace_ctf", "two-packets", &[&[(512 / 8 - 1) as u8][..], &stream].concat());

    // A live buffer of the trace_buffer target's geometry: CPU 0's first packet closed by a flush (three
    // records, then zeros), CPU 0's head in its second packet, CPU 1 untouched.
    let path = std::env::temp_dir().join(format!("loupe-seeds-buffer-{}", std::process::id()));
    let buf = Buffer::create_with_clock(&path, Geometry { ncpu: 2, nsub: 2, sub_size: 32768 }, None).unwrap();
    for r in &recs {
        buf.log_on(0, r.len(), |b, _| b.copy_from_slice(r));
    }
    buf.flush(0);
    let file = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    // Both CPUs' control blocks, then the data as far as written (the target zero-fills the rest).
    let ctl = &file[4096..4096 + 512];
    let used = file.iter().rposition(|&b| b != 0).unwrap() + 1;
    put("trace_buffer", "flushed-packet", &[ctl, &file[8192..used]].concat());

    let xml = std::fs::read_to_string("../crates/trace/spec/loupe.xml").unwrap();
    put("trace_spec", "loupe", xml.as_bytes());
    put("trace_spec", "fuzz", loupe_fuzz::spec::XML.as_bytes());

    // Layout bytes of sched_switch-like fields, then a page-fault sample and a tracepoint sample.
    let layout = [24u8, 3, 56, 3, 32, 7, 40, 15, 8, 15];
    let sample = |id: u64, raw: &[u8]| {
        let mut r = 9u32.to_ne_bytes().to_vec();
        r.extend([0u8; 4]);
        r.extend(words(&[id, 0x401000, (8u64 << 32) | 108, 123, 0x7f00_0000_1000]));
        r.extend((raw.len() as u32).to_ne_bytes());
        r.extend(raw);
        r
    };
    put("trace_kernel", "fault", &[&layout[..], &sample(1, &[0; 4])].concat());
    let mut raw = vec![0u8; 64];
    raw[40..47].copy_from_slice(b"swapper");
    put("trace_kernel", "switch", &[&layout[..], &sample(2, &raw)].concat());
}

/// A small static ELF with a build-id, and the notes of the running kernel.
fn elf() {
    if let Ok(notes) = std::fs::read("/sys/kernel/notes") {
        put("elf_notes", "kernel-notes", &notes);
    }
    let dir = std::env::temp_dir().join(format!("loupe-seeds-elf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.c"), "void _start(void) { for (;;) ; }\n").unwrap();
    let out = dir.join("t");
    let ok = Command::new("cc")
        .args(["-Os", "-nostdlib", "-static", "-s", "-Wl,--build-id=sha1", "-Wl,-z,norelro", "-Wl,-z,noseparate-code", "-o"])
        .arg(&out)
        .arg(dir.join("t.c"))
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        put("elf_notes", "static-elf", &std::fs::read(&out).unwrap());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The table of the hand-built example in `loupe_optimize::bat`'s tests, without its note header.
fn bat() {
    let mut d = vec![1u8, 0x80, 0x20];
    d.extend([0; 8]);
    d.extend([3, 0, 3, 1, 0, 0]);
    d.extend([0; 8]);
    d.push(0);
    d.extend([0x10, 0xc1, 0x00, 0x08, 0x3f]);
    d.extend([0; 8]);
    d.push(1);
    d.extend([1, 0xe8, 0x1f, 0, 0x60, 1, 1, 0, 0]);
    d.extend([0; 8]);
    d.push(0);
    put("bolt_bat", "hand-built", &d);
}

fn main() {
    perf_records();
    store();
    alloc_log();
    trace();
    elf();
    bat();
}
