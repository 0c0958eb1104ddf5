//! Parsing perf records from bytes. Pure functions over byte slices, so
//! every record layout is tested on literal input. Samples are read by
//! [`crate::sample::parse_sample`] and kept here in an owned form.

use crate::sample;
use crate::sys::*;
use loupe_model::CpuMode;

pub use crate::sample::{BranchEntry, Layout};

/// A sample: one interrupt of one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub event_index: usize,
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
    pub time: u64,
    pub cpu: u32,
    pub period: u64,
    pub mode: CpuMode,
    /// Return addresses with perf's context markers removed; empty unless
    /// call chains were requested.
    pub callchain: Vec<u64>,
    /// User registers at the sample (when requested and the sample hit a
    /// user thread): the unwinder's starting state.
    pub user_regs: Option<UserRegs>,
    /// A copy of the top of the user stack, from the stack pointer up
    /// (`PERF_SAMPLE_STACK_USER`); empty unless requested.
    pub user_stack: Vec<u8>,
    /// The CPU's last branch records (`PERF_SAMPLE_BRANCH_STACK`), newest
    /// first; empty unless the sample's event asked for them.
    pub branches: Vec<BranchEntry>,
}

impl From<&sample::Sample<'_>> for Sample {
    /// Keeps what the collector uses: the call chain without perf's context
    /// markers, the unwinder's registers, the filled part of the stack copy.
    fn from(s: &sample::Sample<'_>) -> Sample {
        const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
        let user_regs = s.regs_user.and_then(|r| Some(UserRegs { ip: r.get(REG_IP)?, sp: r.get(REG_SP)?, bp: r.get(REG_BP)? }));
        Sample {
            event_index: s.event_index,
            pid: s.pid.unwrap_or(0),
            tid: s.tid.unwrap_or(0),
            ip: s.ip.unwrap_or(0),
            time: s.time.unwrap_or(0),
            cpu: s.cpu.unwrap_or(0),
            period: s.period.unwrap_or(0),
            mode: s.mode(),
            callchain: s.callchain.map_or_else(Vec::new, |c| c.iter().filter(|&a| a < PERF_CONTEXT_MAX).collect()),
            user_regs,
            user_stack: s.stack_user.map_or_else(Vec::new, |u| u.valid().to_vec()),
            branches: s.branches.map_or_else(Vec::new, |b| b.iter().collect()),
        }
    }
}

/// The user registers DWARF unwinding starts from (x86-64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// A new mapping (PERF_RECORD_MMAP2, or MMAP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    /// PROT_* bits; 0 when the record did not say (plain MMAP: exec only).
    pub prot: u32,
    pub flags: u32,
    pub filename: String,
    /// Build-id of the mapped file as the kernel read it (kernel 5.12+).
    pub build_id: Option<Vec<u8>>,
    pub time: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Sample(Sample),
    Mmap(Mmap),
    Comm { pid: u32, tid: u32, comm: String, exec: bool, time: u64 },
    Fork { pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64 },
    Exit { pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64 },
    Lost { lost: u64, time: u64 },
    Throttle { time: u64, unthrottle: bool },
    Other { kind: u32 },
}

impl Record {
    /// Kernel timestamp, for ordering records across CPUs.
    pub fn time(&self) -> Option<u64> {
        match self {
            Record::Sample(s) => Some(s.time),
            Record::Mmap(m) => Some(m.time),
            Record::Comm { time, .. }
            | Record::Fork { time, .. }
            | Record::Exit { time, .. }
            | Record::Lost { time, .. }
            | Record::Throttle { time, .. } => Some(*time),
            Record::Other { .. } => None,
        }
    }
}

/// Size of the `sample_id_all` trailer: TID, TIME, CPU, IDENTIFIER.
const TRAILER: usize = 32;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_ne_bytes(self.b.get(self.at..self.at + 8)?.try_into().ok()?);
        self.at += 8;
        Some(v)
    }
    fn u32(&mut self) -> Option<u32> {
        let v = u32::from_ne_bytes(self.b.get(self.at..self.at + 4)?.try_into().ok()?);
        self.at += 4;
        Some(v)
    }
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        // A length read from the record (STACK_USER's size) may be anything: no overflow past the end.
        let v = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(v)
    }
}

/// A NUL-terminated, padded string field.
fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// Time from the `sample_id_all` trailer of a non-sample record.
fn trailer_time(rec: &[u8]) -> u64 {
    let at = rec.len().saturating_sub(TRAILER) + 8;
    rec.get(at..at + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
}

/// Parses one whole record (header included). `None` for a record too short
/// for its type: the caller counts it and goes on.
pub fn parse(rec: &[u8], layout: &Layout) -> Option<Record> {
    let mut c = Cursor { b: rec, at: 0 };
    let kind = c.u32()?;
    let misc = u16::from_ne_bytes(c.bytes(2)?.try_into().ok()?);
    let _size = c.bytes(2)?;
    if kind == RECORD_SAMPLE {
        return Some(Record::Sample(Sample::from(&sample::parse_sample(layout, rec).ok()?)));
    }
    let body_end = rec.len().checked_sub(TRAILER)?;
    let time = trailer_time(rec);
    Some(match kind {
        RECORD_MMAP | RECORD_MMAP2 => Record::Mmap(parse_mmap(&mut c, kind, misc, body_end, time)?),
        RECORD_COMM => {
            let (pid, tid) = (c.u32()?, c.u32()?);
            let comm = c_string(rec.get(c.at..body_end)?);
            Record::Comm { pid, tid, comm, exec: misc & MISC_COMM_EXEC != 0, time }
        }
        RECORD_FORK | RECORD_EXIT => {
            let (pid, ppid, tid, ptid, time) = (c.u32()?, c.u32()?, c.u32()?, c.u32()?, c.u64()?);
            match kind {
                RECORD_FORK => Record::Fork { pid, ppid, tid, ptid, time },
                _ => Record::Exit { pid, ppid, tid, ptid, time },
            }
        }
        RECORD_LOST => {
            let _id = c.u64()?;
            Record::Lost { lost: c.u64()?, time }
        }
        RECORD_THROTTLE | RECORD_UNTHROTTLE => Record::Throttle { time: c.u64()?, unthrottle: kind == RECORD_UNTHROTTLE },
        other => Record::Other { kind: other },
    })
}

fn parse_mmap(c: &mut Cursor, kind: u32, misc: u16, body_end: usize, time: u64) -> Option<Mmap> {
    let (pid, tid) = (c.u32()?, c.u32()?);
    let (addr, len, pgoff) = (c.u64()?, c.u64()?, c.u64()?);
    let (prot, flags, mut build_id);
    if kind == RECORD_MMAP2 {
        let ids = c.bytes(24)?;
        build_id = None;
        if misc & MISC_MMAP_BUILD_ID != 0 {
            let n = (ids[0] as usize).min(20);
            build_id = Some(ids[4..4 + n].to_vec()).filter(|b| !b.is_empty());
        }
        prot = c.u32()?;
        flags = c.u32()?;
    } else {
        (prot, flags, build_id) = (libc::PROT_EXEC as u32, 0, None);
    }
    let filename = c_string(c.b.get(c.at..body_end)?);
    Some(Mmap { pid, tid, addr, len, pgoff, prot, flags, filename, build_id, time })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sample::Format;

    const BASE: u64 = SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_PERIOD;

    /// The sampler's format: BASE and `extra`, user registers BP, SP, IP.
    fn format(extra: u64) -> Format {
        Format { sample_type: BASE | extra, regs_user: USER_REGS_MASK, ..Format::default() }
    }

    pub fn header(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend(kind.to_ne_bytes());
        r.extend(misc.to_ne_bytes());
        r.extend(((8 + body.len()) as u16).to_ne_bytes());
        r.extend(body);
        r
    }

    fn trailer(pid: u32, tid: u32, time: u64) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend(pid.to_ne_bytes());
        t.extend(tid.to_ne_bytes());
        t.extend(time.to_ne_bytes());
        t.extend(0u64.to_ne_bytes());
        t.extend(77u64.to_ne_bytes());
        t
    }

    pub fn sample_bytes(id: u64, ip: u64, pid: u32, time: u64, chain: Option<&[u64]>) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [id, ip] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(pid.to_ne_bytes());
        b.extend((pid + 1).to_ne_bytes());
        b.extend(time.to_ne_bytes());
        b.extend(1u32.to_ne_bytes());
        b.extend(0u32.to_ne_bytes());
        b.extend(1_000_000u64.to_ne_bytes());
        if let Some(ch) = chain {
            b.extend((ch.len() as u64).to_ne_bytes());
            for a in ch {
                b.extend(a.to_ne_bytes());
            }
        }
        header(RECORD_SAMPLE, 2, &b)
    }

    #[test]
    fn sample_fields_in_abi_order() {
        // Checks the IDENTIFIER|IP|TID|TIME|CPU|PERIOD layout and id -> event index mapping.
        let layout = Layout { ids: vec![(5, 0), (9, 1)], ..Layout::new(format(0)) };
        let Some(Record::Sample(s)) = parse(&sample_bytes(9, 0x401000, 42, 1234, None), &layout) else { panic!() };
        assert_eq!((s.event_index, s.ip, s.pid, s.tid, s.time, s.cpu, s.period), (1, 0x401000, 42, 43, 1234, 1, 1_000_000));
        assert_eq!(s.mode, CpuMode::User);
    }

    #[test]
    fn callchain_drops_context_markers() {
        // Checks that PERF_CONTEXT_* entries are removed from call chains.
        let layout = Layout::new(format(SAMPLE_CALLCHAIN));
        let chain = [(-128i64) as u64, 0xffffffff81000010, (-512i64) as u64, 0x401000, 0x402000];
        let Some(Record::Sample(s)) = parse(&sample_bytes(1, 0x401000, 1, 1, Some(&chain)), &layout) else { panic!() };
        assert_eq!(s.callchain, vec![0xffffffff81000010, 0x401000, 0x402000]);
    }

    #[test]
    fn user_registers_and_stack_copy() {
        // Checks REGS_USER (BP, SP, IP order) and STACK_USER with a dynamic size shorter than the copy.
        let layout = Layout::new(format(SAMPLE_CALLCHAIN | SAMPLE_REGS_USER | SAMPLE_STACK_USER));
        let mut b = sample_bytes(1, 0x401000, 1, 1, Some(&[0x401000, 0x402000]));
        for v in [2u64, 0x7ffd_0010, 0x7ffd_0000, 0x401000, 16] {
            b.extend(v.to_ne_bytes());
        }
        b.extend((0u8..16).collect::<Vec<u8>>());
        b.extend(12u64.to_ne_bytes());
        let size = b.len() as u16;
        b[6..8].copy_from_slice(&size.to_ne_bytes());
        let Some(Record::Sample(s)) = parse(&b, &layout) else { panic!() };
        assert_eq!(s.user_regs, Some(UserRegs { ip: 0x401000, sp: 0x7ffd_0000, bp: 0x7ffd_0010 }));
        assert_eq!(s.user_stack, (0u8..12).collect::<Vec<u8>>());
        assert_eq!(s.callchain, vec![0x401000, 0x402000]);
    }

    #[test]
    fn branch_stack_between_callchain_and_user_regs() {
        // Checks the BRANCH_STACK layout (nr, then from/to/flags, newest first) and the flag bits, on bytes
        // written by hand per perf_event.h: a sample of event 1 (which asked for branches) with a call chain
        // and user registers around it, and one of event 0 (which did not).
        let plain = format(SAMPLE_CALLCHAIN | SAMPLE_REGS_USER | SAMPLE_STACK_USER);
        let branches = format(SAMPLE_CALLCHAIN | SAMPLE_BRANCH_STACK | SAMPLE_REGS_USER | SAMPLE_STACK_USER);
        let layout = Layout { format: plain, per_event: vec![(1, branches)], ids: vec![(5, 0), (9, 1)] };
        let mut b = sample_bytes(9, 0x401010, 7, 1, Some(&[0x401010]));
        let words: [u64; 7] = [
            2,        // nr
            0x401005, // [0].from
            0x401040, // [0].to
            // [0].flags: mispred (bit 0), cycles = 37 (bits 4-19), type = 5 (bits 20-23, ignored)
            1 | (37 << 4) | (5 << 20),
            0x402000,                  // [1].from
            0x401000,                  // [1].to
            2 | 4 | 8 | (0xffff << 4), // [1].flags: predicted, in_tx, abort, cycles = 65535
        ];
        for w in words {
            b.extend(w.to_ne_bytes());
        }
        for v in [2u64, 0x7ffd_0010, 0x7ffd_0000, 0x401010, 0] {
            b.extend(v.to_ne_bytes());
        }
        let size = b.len() as u16;
        b[6..8].copy_from_slice(&size.to_ne_bytes());
        let Some(Record::Sample(s)) = parse(&b, &layout) else { panic!() };
        let e0 = BranchEntry { from: 0x401005, to: 0x401040, mispredicted: true, predicted: false, in_tx: false, abort: false, cycles: 37 };
        let e1 =
            BranchEntry { from: 0x402000, to: 0x401000, mispredicted: false, predicted: true, in_tx: true, abort: true, cycles: 65535 };
        assert_eq!(s.branches, vec![e0, e1]);
        assert_eq!(s.callchain, vec![0x401010]);
        assert_eq!(s.user_regs, Some(UserRegs { ip: 0x401010, sp: 0x7ffd_0000, bp: 0x7ffd_0010 }));
        // Event 0 has no branch stack: the same position holds the user registers.
        let mut b = sample_bytes(5, 0x401010, 7, 1, Some(&[0x401010]));
        for v in [2u64, 0x7ffd_0010, 0x7ffd_0000, 0x401010, 0] {
            b.extend(v.to_ne_bytes());
        }
        let size = b.len() as u16;
        b[6..8].copy_from_slice(&size.to_ne_bytes());
        let Some(Record::Sample(s)) = parse(&b, &layout) else { panic!() };
        assert!(s.branches.is_empty());
        assert_eq!(s.user_regs.map(|r| r.sp), Some(0x7ffd_0000));
    }

    #[test]
    fn absurd_branch_count_is_rejected() {
        // Checks that an nr larger than any LBR makes the record malformed instead of a huge allocation.
        let layout = Layout::new(format(SAMPLE_BRANCH_STACK));
        let mut b = sample_bytes(1, 0x401000, 1, 1, None);
        b.extend(1_000_000u64.to_ne_bytes());
        assert!(parse(&b, &layout).is_none());
    }

    #[test]
    fn user_stack_size_near_u64_max_is_rejected_not_overflowed() {
        // Checks a STACK_USER size that overflows the read position (found by fuzz target perf_record): None, no panic.
        let layout = Layout::new(format(SAMPLE_REGS_USER | SAMPLE_STACK_USER));
        let mut b = sample_bytes(1, 0x401000, 1, 1, None);
        for v in [0u64, u64::MAX - 8] {
            b.extend(v.to_ne_bytes());
        }
        assert!(parse(&b, &layout).is_none());
    }

    fn mmap2(build_id: Option<&[u8]>, name: &str) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(7u32.to_ne_bytes());
        b.extend(8u32.to_ne_bytes());
        for v in [0x7f00_0000_0000u64, 0x2000, 0x1000] {
            b.extend(v.to_ne_bytes());
        }
        let mut ids = [0u8; 24];
        if let Some(bid) = build_id {
            ids[0] = bid.len() as u8;
            ids[4..4 + bid.len()].copy_from_slice(bid);
        }
        b.extend(ids);
        b.extend(5u32.to_ne_bytes());
        b.extend(2u32.to_ne_bytes());
        b.extend(name.as_bytes());
        b.push(0);
        b.resize((b.len() + 7) & !7, 0);
        b.extend(trailer(7, 8, 999));
        let misc = if build_id.is_some() { MISC_MMAP_BUILD_ID } else { 0 };
        header(RECORD_MMAP2, misc, &b)
    }

    #[test]
    fn mmap2_with_and_without_build_id() {
        // Checks MMAP2 fields, the build-id union, and the filename before the trailer.
        let Some(Record::Mmap(m)) = parse(&mmap2(Some(&[0xab; 20]), "/usr/lib/libc.so.6"), &Layout::default()) else { panic!() };
        assert_eq!((m.pid, m.addr, m.len, m.pgoff, m.prot, m.time), (7, 0x7f00_0000_0000, 0x2000, 0x1000, 5, 999));
        assert_eq!(m.filename, "/usr/lib/libc.so.6");
        assert_eq!(m.build_id, Some(vec![0xab; 20]));
        let Some(Record::Mmap(m)) = parse(&mmap2(None, "/bin/x"), &Layout::default()) else { panic!() };
        assert_eq!(m.build_id, None);
        assert_eq!(m.filename, "/bin/x");
    }

    #[test]
    fn comm_fork_exit_lost() {
        // Checks the side-band records the image maps depend on.
        let mut b = Vec::new();
        b.extend(3u32.to_ne_bytes());
        b.extend(3u32.to_ne_bytes());
        b.extend(b"selftime\0\0\0\0\0\0\0\0");
        b.extend(trailer(3, 3, 55));
        let r = parse(&header(RECORD_COMM, MISC_COMM_EXEC, &b), &Layout::default()).unwrap();
        assert_eq!(r, Record::Comm { pid: 3, tid: 3, comm: "selftime".into(), exec: true, time: 55 });
        let mut f = Vec::new();
        for v in [10u32, 9, 10, 9] {
            f.extend(v.to_ne_bytes());
        }
        f.extend(66u64.to_ne_bytes());
        f.extend(trailer(10, 10, 66));
        assert_eq!(
            parse(&header(RECORD_FORK, 0, &f), &Layout::default()).unwrap(),
            Record::Fork { pid: 10, ppid: 9, tid: 10, ptid: 9, time: 66 }
        );
        assert_eq!(
            parse(&header(RECORD_EXIT, 0, &f), &Layout::default()).unwrap(),
            Record::Exit { pid: 10, ppid: 9, tid: 10, ptid: 9, time: 66 }
        );
        let mut l = Vec::new();
        l.extend(1u64.to_ne_bytes());
        l.extend(12u64.to_ne_bytes());
        l.extend(trailer(0, 0, 70));
        assert_eq!(parse(&header(RECORD_LOST, 0, &l), &Layout::default()).unwrap(), Record::Lost { lost: 12, time: 70 });
    }

    #[test]
    fn truncated_records_are_rejected_not_misread() {
        // Checks that every prefix of a valid record parses to None or a record, never panics.
        let full = mmap2(Some(&[1; 20]), "/x");
        for n in 0..full.len() {
            let _ = parse(&full[..n], &Layout::default());
        }
        assert!(parse(&full[..20], &Layout::default()).is_none());
    }
}
