//! A trace directory: the spec files it was recorded with (`spec/*.xml`),
//! a CTF 1.8 trace in `ctf/` (`metadata` and one stream file `cpu<N>` per
//! CPU holding the packets exactly as taken from the buffer; babeltrace2
//! reads it), and `trace.json` with the geometry and per-CPU drop counts.

use crate::buffer::{packet_header, PACKET_HEADER};
use crate::record::{decode_at, Record};
use crate::spec::Spec;
use std::io;
use std::path::Path;

/// One decoded record with the CPU buffer it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub cpu: u32,
    pub rec: Record,
}

/// Everything read from a trace directory.
pub struct Trace {
    pub spec: Spec,
    /// Records of all CPUs merged by timestamp.
    pub entries: Vec<Entry>,
    pub packets: u64,
    pub dropped: u64,
    /// Names of the values of `HW::Counters::Interval` records, in order.
    pub counters: Vec<String>,
    /// Per-record problems (the rest of the packet is skipped, other packets proceed).
    pub errors: Vec<String>,
}

/// Decodes the packets of one stream file into `out`.
pub fn decode_stream(spec: &Spec, bytes: &[u8], sub_size: usize, out: &mut Trace) {
    for (i, p) in bytes.chunks(sub_size).enumerate() {
        let Some(h) = packet_header(p) else {
            out.errors.push(format!("packet {i}: bad magic"));
            continue;
        };
        out.packets += 1;
        let mut at = PACKET_HEADER;
        // The content ends before the last record's padding (see ctf::trim_content).
        let p = &p[..h.content.next_multiple_of(8).clamp(PACKET_HEADER, p.len())];
        loop {
            match decode_at(spec, p, at) {
                Ok(Some((rec, n))) => {
                    out.entries.push(Entry { cpu: h.cpu, rec });
                    at += n;
                }
                Ok(None) => break,
                Err(e) => {
                    out.errors.push(format!("cpu {} packet {}: {e}", h.cpu, h.seq));
                    break;
                }
            }
        }
    }
}

/// Reads a trace directory.
pub fn read(dir: &Path) -> io::Result<Trace> {
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("trace.json"))?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("trace.json: {e}")))?;
    let mut specs: Vec<_> = std::fs::read_dir(dir.join("spec"))?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    specs.sort();
    let refs: Vec<&Path> = specs.iter().map(|p| p.as_path()).collect();
    let spec = crate::spec::load_files(&refs).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let sub = meta["sub_size"].as_u64().unwrap_or(0) as usize;
    let ncpu = meta["ncpu"].as_u64().unwrap_or(0);
    if sub == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "trace.json lacks sub_size"));
    }
    let counters = meta["counters"].as_array().map(|c| c.iter().filter_map(|v| v.as_str().map(String::from)).collect());
    let mut t = Trace { spec, entries: Vec::new(), packets: 0, dropped: 0, counters: counters.unwrap_or_default(), errors: Vec::new() };
    t.dropped = meta["dropped"].as_array().map(|a| a.iter().filter_map(|v| v.as_u64()).sum()).unwrap_or(0);
    let _ = ncpu;
    // Every stream: the CPU buffers' (cpu<N>) and the kernel's (kcpu<N>).
    let mut streams: Vec<_> = std::fs::read_dir(dir.join("ctf"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n != "metadata"))
        .collect();
    streams.sort();
    for path in streams {
        let bytes = std::fs::read(&path)?;
        let spec = t.spec.clone();
        decode_stream(&spec, &bytes, sub, &mut t);
    }
    t.entries.sort_by_key(|e| e.rec.ts);
    Ok(t)
}
