//! Parsing perf records from bytes. Pure functions over byte slices, so
//! every record layout is tested on literal input.

use crate::sys::*;
use loupe_model::CpuMode;

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

/// One taken branch of a branch stack (`struct perf_branch_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchEntry {
    pub from: u64,
    pub to: u64,
    /// The branch's target was mispredicted.
    pub mispredicted: bool,
    /// The target was predicted (both false: the CPU does not say).
    pub predicted: bool,
    pub in_tx: bool,
    pub abort: bool,
    /// Core cycles since the previous branch record (0: not reported).
    pub cycles: u16,
}

impl BranchEntry {
    /// Decodes the flags word: bit 0 mispred, 1 predicted, 2 in_tx,
    /// 3 abort, bits 4-19 cycles (then type, spec, new_type, priv, which
    /// Loupe does not use), as the kernel's little-endian bitfield lays them out.
    pub fn from_raw(from: u64, to: u64, flags: u64) -> BranchEntry {
        BranchEntry {
            from,
            to,
            mispredicted: flags & 1 != 0,
            predicted: flags & 2 != 0,
            in_tx: flags & 4 != 0,
            abort: flags & 8 != 0,
            cycles: (flags >> 4) as u16,
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

/// How to read the variable parts: which fields the sample type holds, and
/// which event each sample id belongs to.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub callchain: bool,
    /// `REGS_USER` with [`USER_REGS_MASK`] and `STACK_USER` are in the sample.
    pub user_stack: bool,
    /// (kernel event id, event index)
    pub ids: Vec<(u64, usize)>,
    /// Indices of the events whose samples carry a branch stack (only
    /// hardware events can; the others of the same sampler do not).
    pub branch_events: Vec<usize>,
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

fn cpu_mode(misc: u16) -> CpuMode {
    match misc & MISC_CPUMODE_MASK {
        1 => CpuMode::Kernel,
        2 => CpuMode::User,
        3 => CpuMode::Hypervisor,
        4 => CpuMode::GuestKernel,
        5 => CpuMode::GuestUser,
        _ => CpuMode::Unknown,
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
    let body_end = rec.len().checked_sub(TRAILER)?;
    let time = trailer_time(rec);
    Some(match kind {
        RECORD_SAMPLE => Record::Sample(parse_sample(&mut c, misc, layout)?),
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

fn parse_sample(c: &mut Cursor, misc: u16, layout: &Layout) -> Option<Sample> {
    let id = c.u64()?;
    let ip = c.u64()?;
    let (pid, tid) = (c.u32()?, c.u32()?);
    let time = c.u64()?;
    let cpu = c.u32()?;
    let _res = c.u32()?;
    let period = c.u64()?;
    let mut callchain = Vec::new();
    if layout.callchain {
        let n = c.u64()? as usize;
        const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
        for _ in 0..n.min(4096) {
            let a = c.u64()?;
            if a < PERF_CONTEXT_MAX {
                callchain.push(a);
            }
        }
    }
    let event_index = layout.ids.iter().find(|(i, _)| *i == id).map_or(0, |(_, e)| *e);
    // BRANCH_STACK comes after CALLCHAIN (and RAW, never requested) and before REGS_USER.
    let branches = if layout.branch_events.contains(&event_index) { parse_branch_stack(c)? } else { Vec::new() };
    let (mut user_regs, mut user_stack) = (None, Vec::new());
    if layout.user_stack {
        (user_regs, user_stack) = parse_user_stack(c)?;
    }
    Some(Sample { event_index, pid, tid, ip, time, cpu, period, mode: cpu_mode(misc), callchain, user_regs, user_stack, branches })
}

/// `u64 nr`, then `nr` x `{from, to, flags}` (no `hw_idx`: Loupe never
/// asks for PERF_SAMPLE_BRANCH_HW_INDEX). The hardware holds at most 32
/// (Intel, AMD) or 64 (Arm BRBE) entries: a larger `nr` is a misread record.
fn parse_branch_stack(c: &mut Cursor) -> Option<Vec<BranchEntry>> {
    let n = c.u64()?;
    if n > 256 {
        return None;
    }
    (0..n).map(|_| Some(BranchEntry::from_raw(c.u64()?, c.u64()?, c.u64()?))).collect()
}

/// `REGS_USER` (abi, then BP, SP, IP when abi != 0) and `STACK_USER`
/// (size, bytes, and the dynamic size actually valid when size != 0).
fn parse_user_stack(c: &mut Cursor) -> Option<(Option<UserRegs>, Vec<u8>)> {
    let abi = c.u64()?;
    let regs = if abi != 0 {
        let (bp, sp, ip) = (c.u64()?, c.u64()?, c.u64()?);
        Some(UserRegs { ip, sp, bp })
    } else {
        None
    };
    let size = c.u64()? as usize;
    if size == 0 {
        return Some((regs, Vec::new()));
    }
    let bytes = c.bytes(size)?;
    let valid = (c.u64()? as usize).min(size);
    Some((regs, bytes[..valid].to_vec()))
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
        let layout = Layout { ids: vec![(5, 0), (9, 1)], ..Default::default() };
        let Some(Record::Sample(s)) = parse(&sample_bytes(9, 0x401000, 42, 1234, None), &layout) else { panic!() };
        assert_eq!((s.event_index, s.ip, s.pid, s.tid, s.time, s.cpu, s.period), (1, 0x401000, 42, 43, 1234, 1, 1_000_000));
        assert_eq!(s.mode, CpuMode::User);
    }

    #[test]
    fn callchain_drops_context_markers() {
        // Checks that PERF_CONTEXT_* entries are removed from call chains.
        let layout = Layout { callchain: true, ..Default::default() };
        let chain = [(-128i64) as u64, 0xffffffff81000010, (-512i64) as u64, 0x401000, 0x402000];
        let Some(Record::Sample(s)) = parse(&sample_bytes(1, 0x401000, 1, 1, Some(&chain)), &layout) else { panic!() };
        assert_eq!(s.callchain, vec![0xffffffff81000010, 0x401000, 0x402000]);
    }

    #[test]
    fn user_registers_and_stack_copy() {
        // Checks REGS_USER (BP, SP, IP order) and STACK_USER with a dynamic size shorter than the copy.
        let layout = Layout { callchain: true, user_stack: true, ..Default::default() };
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
        let layout = Layout { callchain: true, user_stack: true, ids: vec![(5, 0), (9, 1)], branch_events: vec![1] };
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
        let layout = Layout { branch_events: vec![0], ..Default::default() };
        let mut b = sample_bytes(1, 0x401000, 1, 1, None);
        b.extend(1_000_000u64.to_ne_bytes());
        assert!(parse(&b, &layout).is_none());
    }

    #[test]
    fn user_stack_size_near_u64_max_is_rejected_not_overflowed() {
        // Checks a STACK_USER size that overflows the read position (found by fuzz target perf_record): None, no panic.
        let layout = Layout { user_stack: true, ..Default::default() };
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
