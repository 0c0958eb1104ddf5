//! The OS layer as individual events: every page fault of the traced
//! process, sampled by perf (period 1, with the faulting address) on the
//! same clock as the application's events (`use_clockid` = CLOCK_MONOTONIC).
//! Each CPU's perf ring is time-ordered, so each becomes its own CTF stream
//! (`ctf/kcpu<N>`) of `OS::Memory::PageFault` records, packed into packets
//! of the same layout as the shared buffer's; records perf lost are counted
//! in the packets' events_discarded.

use crate::buffer::{PACKET_HEADER, PACKET_MAGIC};
use crate::record::{encode, Value};
use crate::spec::Event;
use loupe_perf::ring::Ring;
use loupe_perf::sys::{self, PerfEventAttr};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};

const SAMPLE_ADDR: u64 = 1 << 3;
const USE_CLOCKID: u64 = 1 << 25;
/// Stream instance ids of kernel streams start here (CPU buffers use the CPU number).
pub const KERNEL_STREAM_BASE: u32 = 1000;

struct CpuStream {
    cpu: u32,
    _fd: OwnedFd,
    ring: Ring,
    packet: Vec<u8>,
    seq: u64,
    lost: u64,
    out: std::io::BufWriter<std::fs::File>,
}

/// Page-fault sampling of one process tree, one perf ring per CPU.
pub struct PageFaults {
    streams: Vec<CpuStream>,
    sub_size: usize,
    ev: Event,
    pub events: u64,
}

impl PageFaults {
    /// Opens the events on `pid` (enabled when it execs) and creates
    /// `dir/kcpu<N>` for each online CPU.
    pub fn open(pid: i32, ev: &Event, dir: &std::path::Path, sub_size: usize) -> std::io::Result<PageFaults> {
        let mut streams = Vec::new();
        for cpu in loupe_perf::online_cpus() {
            let attr = PerfEventAttr {
                type_: sys::PERF_TYPE_SOFTWARE,
                size: sys::ATTR_SIZE,
                config: 2, // PERF_COUNT_SW_PAGE_FAULTS
                sample_period_or_freq: 1,
                sample_type: sys::SAMPLE_TID | sys::SAMPLE_TIME | SAMPLE_ADDR | sys::SAMPLE_IP,
                flags: sys::flag::DISABLED | sys::flag::INHERIT | sys::flag::ENABLE_ON_EXEC | USE_CLOCKID,
                clockid: libc::CLOCK_MONOTONIC,
                wakeup_events_or_watermark: 1,
                ..Default::default()
            };
            let fd = sys::perf_event_open(&attr, pid, cpu as i32, -1)?;
            let ring = Ring::map(fd.as_raw_fd(), 256)?;
            let out = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("kcpu{cpu}")))?);
            streams.push(CpuStream { cpu, _fd: fd, ring, packet: Vec::new(), seq: 0, lost: 0, out });
        }
        Ok(PageFaults { streams, sub_size, ev: ev.clone(), events: 0 })
    }

    /// Moves what the rings hold into packets; `last` also writes the open packets.
    pub fn drain(&mut self, last: bool) -> std::io::Result<()> {
        for s in &mut self.streams {
            let mut recs = Vec::new();
            let mut lost = 0;
            s.ring.read(|r| match parse(r) {
                Some(Parsed::Fault { ip, tid, time, addr }) => recs.push((time, tid, addr, ip)),
                Some(Parsed::Lost(n)) => lost += n,
                None => {}
            });
            s.lost += lost;
            for (time, tid, addr, ip) in recs {
                let rec = encode(&self.ev, time, &[Value::U(tid as u64), Value::U(addr), Value::U(ip)]);
                if s.packet.len().max(PACKET_HEADER) + rec.len() > self.sub_size {
                    finish(s, self.sub_size)?;
                }
                if s.packet.is_empty() {
                    s.packet.resize(PACKET_HEADER, 0);
                    s.packet[16..24].copy_from_slice(&time.to_le_bytes());
                }
                s.packet.extend_from_slice(&rec);
                self.events += 1;
            }
            if last && !s.packet.is_empty() {
                finish(s, self.sub_size)?;
            }
            if last {
                s.out.flush()?;
            }
        }
        Ok(())
    }

    pub fn lost(&self) -> u64 {
        self.streams.iter().map(|s| s.lost).sum()
    }
}

/// Completes the open packet's CTF header and context, pads it and writes it.
/// (A PageFault record has no padding, 12 + 4 + 8 + 8 bytes, so the content
/// ends at the last record's end, as CTF readers need.)
fn finish(s: &mut CpuStream, sub_size: usize) -> std::io::Result<()> {
    if s.packet.is_empty() {
        return Ok(());
    }
    let content = s.packet.len();
    let last_ts = {
        let mut at = PACKET_HEADER;
        let mut ts = 0;
        while at < content {
            ts = u64::from_le_bytes(s.packet[at..at + 8].try_into().unwrap());
            at += u16::from_le_bytes([s.packet[at + 8], s.packet[at + 9]]) as usize;
        }
        ts
    };
    let p = &mut s.packet;
    p[0..4].copy_from_slice(&PACKET_MAGIC.to_le_bytes());
    p[8..12].copy_from_slice(&(KERNEL_STREAM_BASE + s.cpu).to_le_bytes());
    p[12..16].copy_from_slice(&s.cpu.to_le_bytes());
    p[24..32].copy_from_slice(&last_ts.to_le_bytes());
    p[32..40].copy_from_slice(&(8 * content as u64).to_le_bytes());
    p[40..48].copy_from_slice(&(8 * sub_size as u64).to_le_bytes());
    p[48..56].copy_from_slice(&s.seq.to_le_bytes());
    p[56..64].copy_from_slice(&s.lost.to_le_bytes());
    p.resize(sub_size, 0);
    s.out.write_all(p)?;
    s.seq += 1;
    p.clear();
    Ok(())
}

enum Parsed {
    Fault { ip: u64, tid: u32, time: u64, addr: u64 },
    Lost(u64),
}

/// A PERF_RECORD_SAMPLE with IP, TID, TIME, ADDR (in that ABI order), or a PERF_RECORD_LOST.
fn parse(r: &[u8]) -> Option<Parsed> {
    let u64_at = |o: usize| r.get(o..o + 8).map(|b| u64::from_ne_bytes(b.try_into().unwrap()));
    let kind = u32::from_ne_bytes(r.get(0..4)?.try_into().ok()?);
    match kind {
        sys::RECORD_SAMPLE => Some(Parsed::Fault {
            ip: u64_at(8)?,
            tid: u32::from_ne_bytes(r.get(20..24)?.try_into().ok()?),
            time: u64_at(24)?,
            addr: u64_at(32)?,
        }),
        sys::RECORD_LOST => Some(Parsed::Lost(u64_at(16)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A sample record laid out as the kernel writes it for IP|TID|TIME|ADDR.
    #[test]
    fn parse_sample() {
        let mut r = vec![0u8; 40];
        r[0..4].copy_from_slice(&sys::RECORD_SAMPLE.to_ne_bytes());
        r[6..8].copy_from_slice(&40u16.to_ne_bytes());
        r[8..16].copy_from_slice(&0x401000u64.to_ne_bytes());
        r[16..20].copy_from_slice(&7u32.to_ne_bytes());
        r[20..24].copy_from_slice(&8u32.to_ne_bytes());
        r[24..32].copy_from_slice(&123u64.to_ne_bytes());
        r[32..40].copy_from_slice(&0x7f00_0000_1000u64.to_ne_bytes());
        let Some(Parsed::Fault { ip, tid, time, addr }) = parse(&r) else { panic!() };
        assert_eq!((ip, tid, time, addr), (0x401000, 8, 123, 0x7f00_0000_1000));
    }
}
