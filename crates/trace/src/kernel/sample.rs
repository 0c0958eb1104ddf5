//! The perf records of the kernel layer and the spec events they become.
//! Every source samples with the same `sample_type` so that one parser reads
//! a CPU's whole ring; the IDENTIFIER says which source a record is from.

use super::tracefs::{self, Tracepoint};
use super::Select;
use crate::record::Value;
use loupe_perf::sample::{parse_sample, Format, Layout, Sample};
use loupe_perf::sys;
use std::collections::HashMap;

/// IDENTIFIER, IP, TID, TIME, ADDR, RAW: in the record, in the ABI's order
/// id, ip, pid+tid, time, addr, raw size + raw bytes.
pub const SAMPLE_TYPE: u64 =
    sys::SAMPLE_IDENTIFIER | sys::SAMPLE_IP | sys::SAMPLE_TID | sys::SAMPLE_TIME | sys::SAMPLE_ADDR | sys::SAMPLE_RAW;

/// How every source's samples are laid out.
const LAYOUT: Layout = Layout::new(Format::new(SAMPLE_TYPE));

/// A kernel event source; tracepoints carry their raw-field layout.
#[derive(Clone, Debug)]
pub enum Source {
    Fault,
    Switch(Tracepoint),
    Syscall(Tracepoint),
    BlockIssue(Tracepoint),
    BlockComplete(Tracepoint),
    Sample,
}

impl Source {
    /// The spec event this source's records become.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Fault => "OS::Memory::PageFault",
            Source::Switch(_) => "OS::Sched::Switch",
            Source::Syscall(_) => "OS::Syscall::Enter",
            Source::BlockIssue(_) => "OS::Block::Issue",
            Source::BlockComplete(_) => "OS::Block::Complete",
            Source::Sample => "Loupe::Profile::Sample",
        }
    }

    /// The event's field values from one sample (None if the raw data is short).
    fn values(&self, s: &Sample) -> Option<Vec<Value>> {
        let (raw, pid, tid, ip) = (s.raw?, s.pid? as u64, s.tid? as u64, s.ip?);
        let f = |tp: &Tracepoint, i: usize| tp.fields[i].uint(raw);
        Some(match self {
            Source::Fault => vec![Value::U(tid), Value::U(s.addr?), Value::U(ip)],
            Source::Sample => vec![Value::U(pid), Value::U(tid), Value::U(ip), Value::U(0)],
            Source::Switch(tp) => {
                vec![Value::U(f(tp, 0)?), Value::U(f(tp, 1)?), Value::I(f(tp, 2)? as i64), Value::Str(tp.fields[3].text(raw)?)]
            }
            Source::Syscall(tp) => vec![Value::U(tid), Value::I(f(tp, 0)? as i64)],
            Source::BlockIssue(tp) => {
                let text = |i: usize| tp.fields[i].text(raw);
                vec![
                    Value::U(f(tp, 0)?),
                    Value::U(f(tp, 1)?),
                    Value::U(f(tp, 2)?),
                    Value::Str(text(3)?),
                    Value::U(tid),
                    Value::Str(text(4)?),
                ]
            }
            Source::BlockComplete(tp) => {
                // Sectors to bytes; a count too large for that is no real request.
                let bytes = f(tp, 2)?.checked_mul(512)?;
                vec![Value::U(f(tp, 0)?), Value::U(f(tp, 1)?), Value::U(bytes), Value::I(f(tp, 3)? as i32 as i64)]
            }
        })
    }
}

/// Whether wanted, tracefs system and name, raw fields in the event's order, and the source it makes.
type TracepointWanted = (bool, &'static str, &'static str, &'static [&'static str], fn(Tracepoint) -> Source);

/// The sources `sel` asks for, and for each tracepoint group that cannot be
/// found (no tracefs, unknown tracepoint) why it is left out.
pub fn sources(sel: Select) -> (Vec<Source>, Vec<String>) {
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    if sel.faults {
        out.push(Source::Fault);
    }
    let tps: Vec<TracepointWanted> = vec![
        (sel.sched, "sched", "sched_switch", &["prev_pid", "next_pid", "prev_state", "next_comm"], Source::Switch),
        (sel.syscalls, "raw_syscalls", "sys_enter", &["id"], Source::Syscall),
        (sel.block, "block", "block_rq_issue", &["dev", "sector", "bytes", "rwbs", "comm"], Source::BlockIssue),
        (sel.block, "block", "block_rq_complete", &["dev", "sector", "nr_sector", "error"], Source::BlockComplete),
    ];
    if tps.iter().any(|t| t.0) {
        match tracefs::root() {
            Ok(root) => {
                for (_, sys, name, fields, make) in tps.into_iter().filter(|t| t.0) {
                    match tracefs::lookup(&root, sys, name, fields) {
                        Ok(tp) => out.push(make(tp)),
                        Err(e) => skipped.push(format!("{sys}:{name}: {e}")),
                    }
                }
            }
            Err(e) => skipped.push(format!("tracepoints: {e}")),
        }
    }
    if sel.sample_hz > 0 {
        out.push(Source::Sample);
    }
    (out, skipped)
}

/// What one ring record is.
pub enum Parsed {
    Event {
        time: u64,
        name: &'static str,
        values: Vec<Value>,
    },
    Lost(u64),
    /// A sample that cannot become an event (unknown id, short or truncated data):
    /// counted, so that no event vanishes silently.
    Unreadable,
}

/// A ring record as a spec event of its source, a count of lost records, an
/// unreadable sample, or None for other records.
pub fn parse(r: &[u8], sources: &HashMap<u64, Source>) -> Option<Parsed> {
    let kind = u32::from_ne_bytes(r.get(0..4)?.try_into().ok()?);
    match kind {
        sys::RECORD_SAMPLE => {
            let event = |s: Sample| {
                let src = sources.get(&s.identifier?)?;
                Some(Parsed::Event { time: s.time?, name: src.name(), values: src.values(&s)? })
            };
            Some(parse_sample(&LAYOUT, r).ok().and_then(event).unwrap_or(Parsed::Unreadable))
        }
        sys::RECORD_LOST => Some(Parsed::Lost(u64::from_ne_bytes(r.get(16..24)?.try_into().ok()?))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::tracefs::Field;

    /// A sample record as the kernel lays it out for [`SAMPLE_TYPE`].
    fn record(id: u64, ip: u64, tid: u32, time: u64, addr: u64, raw: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; 8];
        r[0..4].copy_from_slice(&sys::RECORD_SAMPLE.to_ne_bytes());
        for v in [id, ip] {
            r.extend_from_slice(&v.to_ne_bytes());
        }
        r.extend_from_slice(&(tid + 100).to_ne_bytes());
        r.extend_from_slice(&tid.to_ne_bytes());
        for v in [time, addr] {
            r.extend_from_slice(&v.to_ne_bytes());
        }
        r.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        r.extend_from_slice(raw);
        r
    }

    // A page-fault sample gives tid, address and ip; a sched_switch's raw fields are read at their format offsets.
    #[test]
    fn samples_become_events() {
        let switch = Tracepoint {
            id: 372,
            fields: vec![
                Field { offset: 24, size: 4 },
                Field { offset: 56, size: 4 },
                Field { offset: 32, size: 8 },
                Field { offset: 40, size: 16 },
            ],
        };
        let sources = HashMap::from([(7, Source::Fault), (9, Source::Switch(switch))]);
        let Some(Parsed::Event { time, name, values }) = parse(&record(7, 0x401000, 8, 123, 0x7f00_0000_1000, &[0; 4]), &sources) else {
            panic!()
        };
        assert_eq!((time, name), (123, "OS::Memory::PageFault"));
        assert_eq!(values, vec![Value::U(8), Value::U(0x7f00_0000_1000), Value::U(0x401000)]);
        let mut raw = vec![0u8; 64];
        raw[24..28].copy_from_slice(&8u32.to_le_bytes());
        raw[32..40].copy_from_slice(&1u64.to_le_bytes());
        raw[40..47].copy_from_slice(b"swapper");
        raw[56..60].copy_from_slice(&0u32.to_le_bytes());
        let Some(Parsed::Event { name, values, .. }) = parse(&record(9, 0, 8, 5, 0, &raw), &sources) else { panic!() };
        assert_eq!(name, "OS::Sched::Switch");
        assert_eq!(values, vec![Value::U(8), Value::U(0), Value::I(1), Value::Str("swapper".into())]);
        // Unknown ids and short raw data are unreadable samples, counted by the caller; other records are none.
        assert!(matches!(parse(&record(3, 0, 8, 5, 0, &raw), &sources), Some(Parsed::Unreadable)));
        assert!(matches!(parse(&record(9, 0, 8, 5, 0, &raw[..30]), &sources), Some(Parsed::Unreadable)));
        let mut comm = record(9, 0, 8, 5, 0, &raw);
        comm[0..4].copy_from_slice(&3u32.to_ne_bytes()); // PERF_RECORD_COMM
        assert!(parse(&comm, &sources).is_none());
    }

    // A block completion whose sector count overflows when turned into bytes (an 8-byte nr_sector field, as the
    // fuzz target trace_kernel lays it out) is an unreadable sample, not an overflow.
    #[test]
    fn block_completion_with_a_sector_count_overflowing_bytes_is_unreadable() {
        let fields = [(0, 4), (8, 8), (16, 8), (24, 4)].map(|(offset, size)| Field { offset, size }).to_vec();
        let sources = HashMap::from([(5, Source::BlockComplete(Tracepoint { id: 0, fields }))]);
        let mut raw = vec![0u8; 32];
        raw[16..24].copy_from_slice(&(u64::MAX / 256).to_le_bytes());
        assert!(matches!(parse(&record(5, 0, 8, 5, 0, &raw), &sources), Some(Parsed::Unreadable)));
        raw[16..24].copy_from_slice(&8u64.to_le_bytes());
        let Some(Parsed::Event { values, .. }) = parse(&record(5, 0, 8, 5, 0, &raw), &sources) else { panic!() };
        assert_eq!(values[2], Value::U(4096));
    }
}
